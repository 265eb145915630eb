//! Graph files (JSON and YAML) and pictures (Mermaid and DOT).

use std::path::Path;

use flowmem_exec::{
    GraphFileError, GraphFormat, graph_to_string, load_graph, parse_graph, save_graph, to_dot, to_mermaid,
};

use crate::validate::full_graph;

#[test]
fn graphs_round_trip_through_json_and_yaml_files() {
    let dir = tempfile::tempdir().unwrap();
    let graph = full_graph();
    for name in ["g.json", "g.yaml", "g.yml"] {
        let path = dir.path().join(name);
        save_graph(&graph, &path).unwrap();
        assert_eq!(load_graph(&path).unwrap(), graph, "{name}");
    }
    let yaml = std::fs::read_to_string(dir.path().join("g.yaml")).unwrap();
    assert!(yaml.contains("kind: loop"), "{yaml}");
    assert!(yaml.contains("max_iterations: 3"), "{yaml}");
}

#[test]
fn parse_errors_name_the_file_line_and_field() {
    let yaml = "nodes:\n  - id: a\n    kind: llm\n    role: dreamer\nentry: a\nexit: a\n";
    let err = parse_graph(yaml, GraphFormat::Yaml, Path::new("flow.yaml")).unwrap_err();
    let GraphFileError::Parse { line, ref message, .. } = err else { panic!("{err:?}") };
    assert!(line >= 2, "{err}");
    assert!(message.contains("dreamer"), "{message}");
    assert!(err.to_string().starts_with("invalid workflow graph in `flow.yaml:"), "{err}");
    let err = parse_graph("{\"nodes\": [], \"entry\": 3}", GraphFormat::Json, Path::new("g.json")).unwrap_err();
    assert!(err.to_string().contains("g.json:1:"), "{err}");
    let missing = load_graph(Path::new("/nonexistent/g.json")).unwrap_err();
    assert!(matches!(missing, GraphFileError::Io { .. }));
}

#[test]
fn mermaid_and_dot_draw_every_node_and_edge() {
    let graph = full_graph();
    let mermaid = to_mermaid(&graph);
    assert!(mermaid.starts_with("flowchart TD\n"));
    for node in &graph.nodes {
        assert!(mermaid.contains(&format!("\"{}<br/>", node.id)), "{} missing in\n{mermaid}", node.id);
    }
    assert_eq!(mermaid.matches("-->").count() + mermaid.matches("==>").count(), graph.edges.len());
    assert!(mermaid.contains("==> n5"), "back edge drawn thick:\n{mermaid}");
    assert!(mermaid.contains("-->|\"body\"|"), "{mermaid}");
    assert!(mermaid.contains("n5{{\"retry<br/>loop ≤3 until tool succeeded\"}}"), "{mermaid}");
    let dot = to_dot(&graph);
    assert!(dot.starts_with("digraph workflow {"));
    assert!(dot.contains("\"route\" [shape=diamond"), "{dot}");
    assert!(dot.contains("\"attempt\" -> \"retry\" [style=bold, constraint=false];"), "{dot}");
    assert!(dot.contains("\"route\" -> \"answer\" [label=\"yes\"];"), "{dot}");
    assert_eq!(dot.matches(" -> ").count(), graph.edges.len());
    let json = graph_to_string(&graph, GraphFormat::Json).unwrap();
    assert!(json.ends_with("}\n"));
}
