//! Workflow graphs of any size, as JSON, for the tests and benches that measure how
//! checking and running scale (issue 27): loops in sequence, and chains of LLM nodes.

use serde_json::{Value, json};

/// `count` loops in sequence: `l{i}` (a loop) and `b{i}` (its body, an LLM node whose
/// instruction reads `b{i-1}`), then `end`, so `2·count + 1` nodes. With `closed`, every
/// body has its `back` edge (a valid graph); without, none has (every loop invalid).
///
/// # Example
///
/// ```
/// let graph = flowmem_testsupport::loops_in_sequence(3, true);
/// assert_eq!(graph["nodes"].as_array().unwrap().len(), 7);
/// ```
#[must_use]
pub fn loops_in_sequence(count: usize, closed: bool) -> Value {
    let mut nodes = Vec::with_capacity(2 * count + 1);
    let mut edges = Vec::with_capacity(3 * count);
    for i in 0..count {
        nodes.push(json!({"id": format!("l{i}"), "kind": "loop", "max_iterations": 2, "until": {"type": "always"}}));
        let instruction = if i == 0 { "first".to_owned() } else { format!("after {{{{ b{} }}}}", i - 1) };
        nodes.push(json!({"id": format!("b{i}"), "kind": "llm", "role": "reason", "instruction": instruction}));
        edges.push(json!({"from": format!("l{i}"), "to": format!("b{i}"), "label": "body"}));
        if closed {
            edges.push(json!({"from": format!("b{i}"), "to": format!("l{i}"), "kind": "back"}));
        }
        let next = if i + 1 == count { "end".to_owned() } else { format!("l{}", i + 1) };
        edges.push(json!({"from": format!("l{i}"), "to": next, "label": "exit"}));
    }
    nodes.push(json!({"id": "end", "kind": "llm", "role": "synthesize", "instruction": "{{ b0 }}"}));
    json!({"name": "loops", "nodes": nodes, "edges": edges, "entry": "l0", "exit": "end"})
}

/// A chain of `n` LLM nodes, `n0` → `n1` → … (`n` at least 1).
///
/// # Example
///
/// ```
/// let graph = flowmem_testsupport::llm_chain(3);
/// assert_eq!((graph["entry"].as_str(), graph["exit"].as_str()), (Some("n0"), Some("n2")));
/// ```
#[must_use]
pub fn llm_chain(n: usize) -> Value {
    let nodes: Vec<Value> = (0..n).map(|i| json!({"id": format!("n{i}"), "kind": "llm", "role": "reason"})).collect();
    let edges: Vec<Value> = (1..n).map(|i| json!({"from": format!("n{}", i - 1), "to": format!("n{i}")})).collect();
    json!({"name": "chain", "nodes": nodes, "edges": edges, "entry": "n0", "exit": format!("n{}", n.saturating_sub(1))})
}
