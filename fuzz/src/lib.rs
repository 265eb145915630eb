//! What the fuzz targets share: one importer run, and one graph put through every check.

use flowmem_exec::{ToolCatalog, violations};
use flowmem_model::{DuplicateIds, ImportFormat, WorkflowGraph, import_bytes};

/// Imports `data` as a file `name` in `format`, then resolves duplicate ids both ways:
/// nothing may panic, and every item read is imported or skipped.
pub fn import(format: ImportFormat, name: &str, data: &[u8]) {
    let mut imported = import_bytes(format, name.as_ref(), data);
    assert!(imported.locations.is_empty() || imported.locations.len() == imported.items.len());
    let mut renamed = imported.clone();
    let _ = imported.resolve_duplicate_ids(DuplicateIds::Keep);
    let duplicates = renamed.resolve_duplicate_ids(DuplicateIds::Rename);
    if !duplicates.is_empty() {
        // `ItemKind` has no order, so the ids are counted in a set.
        let ids: std::collections::HashSet<(flowmem_model::ItemKind, &str)> =
            renamed.items.iter().map(|item| (item.kind(), item.id())).collect();
        // Renaming makes ids unique unless attempts tell items apart.
        let attempts =
            renamed.items.iter().any(|item| matches!(item, flowmem_model::Item::Trajectory(t) if t.attempt.is_some()));
        assert!(attempts || ids.len() == renamed.items.len(), "renamed ids still repeat");
    }
}

/// Checks `graph` every way `flowmem graph check` and the executor do, and checks the
/// upstream relation against itself: no panics, a node is never its own upstream, and
/// the batch answers equal the matrix.
pub fn check_graph(graph: &WorkflowGraph) {
    let tools = ["echo".to_owned(), "add".to_owned()];
    let _ = violations(graph, ToolCatalog::Unchecked);
    let _ = violations(graph, ToolCatalog::Known(&tools));
    let bodies = graph.loop_bodies();
    for body in bodies.values() {
        assert!(body.windows(2).all(|pair| pair[0] < pair[1]), "a body is sorted and without repeats");
    }
    let n = graph.nodes.len();
    if n > 200 {
        return;
    }
    let matrix = graph.upstream();
    let pairs: Vec<(usize, usize)> = (0..n).flat_map(|node| (0..n).map(move |of| (node, of))).collect();
    let answers = graph.upstream_index().contains_all(&pairs);
    for (&(node, of), answer) in pairs.iter().zip(answers) {
        assert_eq!(matrix[node][of], answer, "upstream({node}, {of})");
        assert!(!(node == of && answer), "a node is upstream of itself");
    }
}
