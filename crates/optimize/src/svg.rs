//! Self-contained SVG pictures for the search report: the validation curve (FlowScout's
//! Fig. 5), the search tree with the best path highlighted (Fig. 4), and a workflow graph.
//!
//! Everything is drawn as plain SVG so a report opens offline with no scripts; the
//! chart frame, `<svg>` element and escape are `flowmem-report`'s.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use flowmem_model::{EdgeKind, GraphDiff, NodeKind, WorkflowGraph};
use flowmem_report::{ChartSpec, Margins, Point, Series, SeriesStyle, escape, line_chart, svg_open};

use crate::search::SearchState;
use crate::tree::TreeNodeId;

/// The validation score of each iteration and the best so far, as a line chart: the best
/// score is a line (`class="best"`), each evaluated candidate a dot (`class="candidate"`).
#[must_use]
pub fn validation_curve(state: &SearchState, root_val: f64) -> String {
    let n = state.history.len().max(1) as f64;
    let mut best = vec![Point::new(0.0, root_val)];
    let mut candidates = Vec::new();
    for record in &state.history {
        let iteration = f64::from(record.iteration);
        best.push(Point::new(iteration, record.best_val_score));
        if let Some(score) = record.val_score {
            candidates.push(Point {
                x: iteration,
                y: score,
                title: Some(format!("iteration {}: {score:.4}", record.iteration)),
            });
        }
    }
    let spec = ChartSpec {
        name: "validation-curve",
        title: "Validation score per iteration",
        width: 640.0,
        height: 260.0,
        margins: Margins { left: 40.0, right: 40.0, top: 30.0, bottom: 40.0 },
        x_range: (0.0, n),
        y_max: 1.0,
        x_label: "iteration",
        y_label: "validation score",
    };
    let series = [
        Series { label: "best so far", class: "best", colour: "#1f77b4", style: SeriesStyle::Line, points: best },
        Series {
            label: "candidate",
            class: "candidate",
            colour: "#ff7f0e",
            style: SeriesStyle::Markers,
            points: candidates,
        },
    ];
    line_chart(&spec, &series, true)
}

/// The search tree: one circle per candidate, labelled with its id, `Q` and `C`; the path
/// from the root to the best candidate drawn thick; failed expansions drawn hollow.
#[must_use]
pub fn search_tree(state: &SearchState) -> String {
    tree_picture(state, None)
}

/// [`search_tree`] with each candidate a link to `href(candidate)` (the web UI's run
/// page opens the candidate's graph and plan).
#[must_use]
pub fn search_tree_linked(state: &SearchState, href: &dyn Fn(TreeNodeId) -> String) -> String {
    tree_picture(state, Some(href))
}

fn tree_picture(state: &SearchState, href: Option<&dyn Fn(TreeNodeId) -> String>) -> String {
    let tree = &state.tree;
    let best_path: Vec<TreeNodeId> = tree.path_to(state.best);
    let mut depth = vec![0usize; tree.len()];
    let mut order: Vec<TreeNodeId> = Vec::new();
    visit(tree, tree.root(), 0, &mut depth, &mut order);
    let leaf_x = leaf_positions(tree, &order);
    let max_depth = depth.iter().copied().max().unwrap_or(0);
    let (dx, dy, pad) = (56.0, 70.0, 30.0);
    let width = pad * 2.0 + dx * leaf_x.values().copied().fold(0.0, f64::max).max(1.0);
    let height = pad * 2.0 + dy * max_depth as f64 + 20.0;
    let pos = |id: TreeNodeId| (pad + dx * leaf_x[&id], pad + dy * depth[id] as f64);
    let mut svg = svg_open("search-tree", width, height, "The search tree, best path highlighted");
    for id in 1..tree.len() {
        let Some(parent) = tree.node(id).parent else { continue };
        let on_best = best_path.contains(&id);
        let ((x1, y1), (x2, y2)) = (pos(parent), pos(id));
        let stroke =
            if on_best { r##"stroke="#d62728" stroke-width="3""## } else { r##"stroke="#999" stroke-width="1""## };
        let _ = write!(svg, r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" {stroke}/>"#);
    }
    for id in 0..tree.len() {
        let node = tree.node(id);
        let (cx, cy) = pos(id);
        let class = if id == state.best {
            "best"
        } else if node.failed {
            "failed"
        } else {
            "candidate"
        };
        let fill = match class {
            "best" => "#d62728",
            "failed" => "white",
            _ => {
                if best_path.contains(&id) {
                    "#ff9896"
                } else {
                    "#aec7e8"
                }
            }
        };
        if let Some(href) = href {
            let _ = write!(svg, r#"<a class="tree-link" data-node="{id}" href="{}">"#, escape(&href(id)));
        }
        let _ = write!(
            svg,
            r##"<g class="tree-node {class}"><circle cx="{cx:.1}" cy="{cy:.1}" r="14" fill="{fill}" stroke="#333"/><text x="{cx:.1}" y="{:.1}" font-size="10" text-anchor="middle">{id}</text><text x="{cx:.1}" y="{:.1}" font-size="9" text-anchor="middle">Q={:.2} C={}</text><title>candidate {id}: Q = {:.4}, C = {}</title></g>"##,
            cy + 3.0,
            cy + 26.0,
            node.mean_reward(),
            node.visits,
            node.mean_reward(),
            node.visits,
        );
        if href.is_some() {
            svg.push_str("</a>");
        }
    }
    svg.push_str("</svg>");
    svg
}

fn visit(tree: &crate::tree::SearchTree, id: TreeNodeId, d: usize, depth: &mut [usize], order: &mut Vec<TreeNodeId>) {
    depth[id] = d;
    order.push(id);
    for &child in &tree.node(id).children {
        visit(tree, child, d + 1, depth, order);
    }
}

/// Leaves get consecutive x slots in depth-first order; inner nodes sit over the middle of
/// their children.
fn leaf_positions(tree: &crate::tree::SearchTree, order: &[TreeNodeId]) -> HashMap<TreeNodeId, f64> {
    let mut x = HashMap::new();
    let mut next_leaf = 0.0;
    for &id in order {
        if tree.node(id).children.is_empty() {
            x.insert(id, next_leaf);
            next_leaf += 1.0;
        }
    }
    for &id in order.iter().rev() {
        let children = &tree.node(id).children;
        if !children.is_empty() {
            let sum: f64 = children.iter().map(|c| x[c]).sum();
            x.insert(id, sum / children.len() as f64);
        }
    }
    x
}

/// A workflow graph in layers: each node sits one layer below its deepest non-back
/// predecessor. Back edges are drawn dashed.
#[must_use]
pub fn workflow_graph(graph: &WorkflowGraph) -> String {
    workflow_graph_marked(graph, None)
}

/// [`workflow_graph`] with what changed from `diff`'s old graph marked: added nodes
/// outlined green, changed nodes orange (class `added` or `changed`), added edges drawn
/// green. The web UI draws a candidate against its parent this way.
#[must_use]
pub fn workflow_graph_marked(graph: &WorkflowGraph, diff: Option<&GraphDiff>) -> String {
    let added = |id: &str| diff.is_some_and(|d| d.added_nodes.iter().any(|n| n == id));
    let changed = |id: &str| diff.is_some_and(|d| d.changed_nodes.iter().any(|n| n == id));
    let new_edge = |edge: &flowmem_model::Edge| diff.is_some_and(|d| d.added_edges.contains(edge));
    let layer = layers(graph);
    let mut rows: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
    for node in &graph.nodes {
        rows.entry(layer.get(node.id.as_str()).copied().unwrap_or(0)).or_default().push(&node.id);
    }
    let (box_w, box_h, dx, dy, pad) = (150.0, 40.0, 170.0, 80.0, 20.0);
    let widest = rows.values().map(Vec::len).max().unwrap_or(1) as f64;
    let width = pad * 2.0 + dx * widest;
    let height = pad * 2.0 + dy * rows.len() as f64;
    let mut pos: HashMap<&str, (f64, f64)> = HashMap::new();
    for (row, ids) in &rows {
        let offset = (widest - ids.len() as f64) * dx / 2.0;
        for (col, id) in ids.iter().enumerate() {
            pos.insert(id, (pad + offset + dx * col as f64, pad + dy * *row as f64));
        }
    }
    let mut svg = svg_open("workflow-graph", width, height, "The best workflow");
    svg.push_str(r##"<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#555"/></marker></defs>"##);
    for edge in &graph.edges {
        let (Some(&(x1, y1)), Some(&(x2, y2))) = (pos.get(edge.from.as_str()), pos.get(edge.to.as_str())) else {
            continue;
        };
        let dash = if edge.kind == EdgeKind::Back { r#" stroke-dasharray="5,4""# } else { "" };
        let (class, stroke) = if new_edge(edge) { ("edge added", "#2ca02c") } else { ("edge", "#555") };
        let _ = write!(
            svg,
            r##"<line class="{class}" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{stroke}"{dash} marker-end="url(#arrow)"/>"##,
            x1 + box_w / 2.0,
            y1 + box_h,
            x2 + box_w / 2.0,
            y2
        );
        if let Some(label) = &edge.label {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" font-size="9">{}</text>"#,
                (x1 + x2) / 2.0 + box_w / 2.0 + 3.0,
                (y1 + box_h + y2) / 2.0,
                escape(label)
            );
        }
    }
    for node in &graph.nodes {
        let Some(&(x, y)) = pos.get(node.id.as_str()) else { continue };
        let (kind, fill) = match &node.kind {
            NodeKind::Llm { role, .. } => (
                format!(
                    "llm: {}",
                    serde_json::to_value(role).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
                ),
                "#c5e1a5",
            ),
            NodeKind::Tool { hints, .. } => {
                (if hints.is_empty() { "tool".to_owned() } else { format!("tool: {}", hints.join(" | ")) }, "#90caf9")
            }
            NodeKind::Branch { .. } => ("branch".to_owned(), "#ffe082"),
            NodeKind::Parallel {} => ("parallel".to_owned(), "#ffe082"),
            NodeKind::Join {} => ("join".to_owned(), "#ffe082"),
            NodeKind::Loop { max_iterations, .. } => (format!("loop ≤{max_iterations}"), "#ffe082"),
        };
        let (mark, outline) = if added(&node.id) {
            (" added", r##"stroke="#2ca02c" stroke-width="3""##)
        } else if changed(&node.id) {
            (" changed", r##"stroke="#ff7f0e" stroke-width="3""##)
        } else {
            ("", r##"stroke="#333""##)
        };
        let _ = write!(
            svg,
            r##"<g class="graph-node{mark}"><rect x="{x:.1}" y="{y:.1}" width="{box_w}" height="{box_h}" rx="6" fill="{fill}" {outline}/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle" font-weight="bold">{}</text><text x="{:.1}" y="{:.1}" font-size="9" text-anchor="middle">{}</text></g>"##,
            x + box_w / 2.0,
            y + 16.0,
            escape(&node.id),
            x + box_w / 2.0,
            y + 31.0,
            escape(&truncate(&kind, 28)),
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Longest-path layering over the non-back edges, from the entry.
fn layers(graph: &WorkflowGraph) -> HashMap<&str, usize> {
    let mut layer: HashMap<&str, usize> = HashMap::new();
    layer.insert(graph.entry.as_str(), 0);
    // Relax edges repeatedly; the forward graph is acyclic, so |V| rounds suffice.
    for _ in 0..graph.nodes.len() {
        let mut changed = false;
        for edge in graph.edges.iter().filter(|e| e.kind != EdgeKind::Back) {
            if let Some(&from) = layer.get(edge.from.as_str()) {
                let slot = layer.entry(edge.to.as_str()).or_insert(0);
                if *slot < from + 1 {
                    *slot = from + 1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    layer
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max - 1).collect();
    format!("{cut}…")
}
