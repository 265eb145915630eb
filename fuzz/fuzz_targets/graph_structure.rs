//! The validator and the upstream relation on graphs built from the fuzzer's bytes:
//! nodes of every kind, and edges of every kind and label between them (or to ids that
//! name no node), so that loops, branches and cycles come up often.

#![no_main]

use arbitrary::Arbitrary;
use flowmem_model::WorkflowGraph;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

#[derive(Debug, Arbitrary)]
struct Shape {
    nodes: Vec<NodeShape>,
    edges: Vec<(u8, u8, u8, u8)>,
    entry: u8,
    exit: u8,
}

#[derive(Debug, Arbitrary)]
struct NodeShape {
    id: u8,
    kind: u8,
    reads: Option<u8>,
}

const LABELS: [Option<&str>; 6] = [None, Some("body"), Some("exit"), Some("ok"), Some("error"), Some("default")];

fn id(byte: u8) -> String {
    format!("n{}", byte % 48)
}

fn node(shape: &NodeShape) -> Value {
    let id = id(shape.id);
    let instruction = shape.reads.map(|read| format!("use {{{{ {} }}}}", self::id(read)));
    match shape.kind % 7 {
        0 => json!({"id": id, "kind": "llm", "role": "reason", "instruction": instruction}),
        1 => json!({"id": id, "kind": "tool", "hints": ["echo"], "instruction": instruction}),
        2 => json!({"id": id, "kind": "branch", "condition": {"type": "tool_succeeded"}}),
        3 => json!({"id": id, "kind": "parallel"}),
        4 => json!({"id": id, "kind": "join"}),
        5 => json!({"id": id, "kind": "loop", "max_iterations": 2, "until": {"type": "always"}}),
        _ => {
            let binding = shape.reads.map(|read| {
                json!({"x": {"observed": 1, "sources": [{"from": "result", "node": self::id(read), "path": "$", "support": 1}]}})
            });
            json!({"id": id, "kind": "tool", "bindings": binding.unwrap_or_else(|| json!({}))})
        }
    }
}

fuzz_target!(|shape: Shape| {
    let nodes: Vec<Value> = shape.nodes.iter().take(64).map(node).collect();
    let edges: Vec<Value> = shape
        .edges
        .iter()
        .take(160)
        .map(|&(from, to, kind, label)| {
            let kind = ["data", "control", "back"][usize::from(kind % 3)];
            json!({"from": id(from), "to": id(to), "kind": kind, "label": LABELS[usize::from(label) % LABELS.len()]})
        })
        .collect();
    let value = json!({"nodes": nodes, "edges": edges, "entry": id(shape.entry), "exit": id(shape.exit)});
    // Labels of `null` and bindings of `{}` are what a person could write too.
    let Ok(graph) = serde_json::from_value::<WorkflowGraph>(value) else { return };
    flowmem_fuzz::check_graph(&graph);
});
