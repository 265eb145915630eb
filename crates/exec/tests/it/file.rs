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

#[test]
fn data_bindings_are_drawn_as_dashed_edges_and_label_lines() {
    let graph: flowmem_model::WorkflowGraph = serde_json::from_value(serde_json::json!({
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan"},
            {"id": "order", "kind": "tool", "hints": ["get_order_details"],
             "bindings": {"order_id": {"observed": 3, "sources": [{"from": "query", "support": 3}]}}},
            {"id": "product", "kind": "tool", "hints": ["get_product_details"],
             "bindings": {"product_id": {"observed": 3, "sources": [
                 {"from": "result", "node": "order", "path": "$.items[*].product_id", "support": 3}
             ]}, "mode": {"observed": 3, "sources": [{"from": "constant", "value": "full", "support": 3}]}}},
            {"id": "answer", "kind": "llm", "role": "synthesize"}
        ],
        "edges": [{"from": "plan", "to": "order"}, {"from": "order", "to": "product"}, {"from": "product", "to": "answer"}],
        "entry": "plan",
        "exit": "answer"
    }))
    .unwrap();
    let mermaid = to_mermaid(&graph);
    assert!(mermaid.contains("    n1 -.->|\"product_id ← $.items[*].product_id\"| n2\n"), "{mermaid}");
    // Three control-flow links come first, so the data link is link 3.
    assert!(mermaid.contains("    linkStyle 3 stroke:#1f77b4,stroke-dasharray:3\n"), "{mermaid}");
    assert!(mermaid.contains("order_id ← query"), "{mermaid}");
    assert!(mermaid.contains("mode = #quot;full#quot;"), "{mermaid}");
    let dot = to_dot(&graph);
    assert!(
        dot.contains("\"order\" -> \"product\" [style=dashed, color=\"#1f77b4\", fontcolor=\"#1f77b4\", constraint=false, label=\"product_id ← $.items[*].product_id\"];"),
        "{dot}"
    );
    assert_eq!(dot.matches(" -> ").count(), graph.edges.len() + 1);
    // Without bindings nothing changes: the full graph draws exactly its edges.
    assert!(!to_mermaid(&full_graph()).contains("linkStyle"));
}

#[test]
fn mined_route_counts_are_drawn_on_the_routes() {
    let graph: flowmem_model::WorkflowGraph = serde_json::from_value(serde_json::json!({
        "nodes": [
            {"id": "pick", "kind": "branch", "condition": {"type": "judge", "question": "Look up?"},
             "taken": {"lookup": 7, "skip": 3}},
            {"id": "user", "kind": "tool", "hints": ["get_user_details"]},
            {"id": "end", "kind": "join"}
        ],
        "edges": [
            {"from": "pick", "to": "user", "label": "lookup"},
            {"from": "pick", "to": "end", "label": "skip"},
            {"from": "user", "to": "end"}
        ],
        "entry": "pick",
        "exit": "end"
    }))
    .unwrap();
    let mermaid = to_mermaid(&graph);
    assert!(mermaid.contains("    n0 -->|\"lookup (7/10)\"| n1\n"), "{mermaid}");
    assert!(mermaid.contains("    n0 -->|\"skip (3/10)\"| n2\n"), "{mermaid}");
    let dot = to_dot(&graph);
    assert!(dot.contains("\"pick\" -> \"user\" [label=\"lookup (7/10)\"];"), "{dot}");
}
