//! Pictures of a workflow graph: Mermaid flowcharts and Graphviz DOT.
//!
//! Shapes tell the node kinds apart: LLM nodes are rectangles, tool nodes
//! parallelograms, branches diamonds, loops hexagons, `parallel` and `join` circles.
//! Data edges are solid, control edges dashed, `back` edges thick.
//!
//! A tool node's data bindings are drawn too: a binding that reads an upstream node's
//! result or argument is a dashed, coloured edge from that node, labelled with the
//! argument and the path (`product_id ← $.items[*].product_id`); bindings to the query
//! or a constant are extra lines of the node's label. A branch's routes with mined counts
//! say how many of the records that reached the branch took each (`lookup (7/10)`).

use std::collections::BTreeMap;
use std::fmt::Write;

use flowmem_model::{Condition, EdgeKind, GraphNode, LlmRole, NodeKind, ValueSource, WorkflowGraph};

/// The colour of data-binding edges.
const BINDING_COLOUR: &str = "#1f77b4";

/// Renders the graph as a Mermaid flowchart (`flowchart TD`).
///
/// Node ids are replaced by positional ids (`n0`, `n1`, …) so that any id renders; the
/// real id is the first line of each label.
#[must_use]
pub fn to_mermaid(graph: &WorkflowGraph) -> String {
    let mut res = String::from("flowchart TD\n");
    for (node_idx, node) in graph.nodes.iter().enumerate() {
        let label = mermaid_escape(&node_label(node));
        let shape = match node.kind {
            NodeKind::Llm { .. } => format!("n{node_idx}[\"{label}\"]"),
            NodeKind::Tool { .. } => format!("n{node_idx}[/\"{label}\"/]"),
            NodeKind::Branch { .. } => format!("n{node_idx}{{\"{label}\"}}"),
            NodeKind::Loop { .. } => format!("n{node_idx}{{{{\"{label}\"}}}}"),
            NodeKind::Parallel {} | NodeKind::Join {} => format!("n{node_idx}((\"{label}\"))"),
        };
        let _ = writeln!(res, "    {shape}");
    }
    for edge in &graph.edges {
        let (Some(from), Some(to)) = (position(graph, &edge.from), position(graph, &edge.to)) else {
            continue;
        };
        let arrow = match edge.kind {
            EdgeKind::Data => "-->",
            EdgeKind::Control => "-.->",
            EdgeKind::Back => "==>",
        };
        match edge_label(graph, edge) {
            Some(label) => {
                let _ = writeln!(res, "    n{from} {arrow}|\"{}\"| n{to}", mermaid_escape(&label));
            }
            None => {
                let _ = writeln!(res, "    n{from} {arrow} n{to}");
            }
        }
    }
    let mut n_links = graph
        .edges
        .iter()
        .filter(|edge| position(graph, &edge.from).is_some() && position(graph, &edge.to).is_some())
        .count();
    for ((from, to), label) in binding_edges(graph) {
        let (Some(from), Some(to)) = (position(graph, from), position(graph, to)) else {
            continue;
        };
        let _ = writeln!(res, "    n{from} -.->|\"{}\"| n{to}", mermaid_escape(&label));
        let _ = writeln!(res, "    linkStyle {n_links} stroke:{BINDING_COLOUR},stroke-dasharray:3");
        n_links += 1;
    }
    for (id, class) in [(&graph.entry, "entry"), (&graph.exit, "exit")] {
        if let Some(node_idx) = position(graph, id) {
            let _ = writeln!(res, "    class n{node_idx} {class}");
        }
    }
    res.push_str("    classDef entry stroke-width:3px\n    classDef exit stroke-width:3px,stroke-dasharray:4\n");
    res
}

/// An edge's label as drawn: a branch route with mined counts also says how many of the
/// records that reached the branch took it (`lookup (7/10)`), and with mined cues the
/// words its query needs (`return (14/32, needs “return”)`).
fn edge_label(graph: &WorkflowGraph, edge: &flowmem_model::Edge) -> Option<String> {
    let label = edge.label.as_ref()?;
    let Some(NodeKind::Branch { taken, cues, .. }) = graph.node(&edge.from).map(|node| &node.kind) else {
        return Some(label.clone());
    };
    if edge.kind == EdgeKind::Back {
        return Some(label.clone());
    }
    let total: u64 = taken.values().sum();
    let mut notes: Vec<String> = taken.get(label).map(|count| format!("{count}/{total}")).into_iter().collect();
    if let Some(words) = cues.get(label) {
        let words: Vec<String> = words.iter().map(|word| format!("“{word}”")).collect();
        notes.push(format!("needs {}", words.join(" or ")));
    }
    Some(if notes.is_empty() { label.clone() } else { format!("{label} ({})", notes.join(", ")) })
}

/// Renders the graph as a Graphviz DOT `digraph`.
#[must_use]
pub fn to_dot(graph: &WorkflowGraph) -> String {
    let mut res = String::from("digraph workflow {\n    rankdir=TB;\n    node [fontname=\"Helvetica\"];\n");
    if let Some(name) = &graph.name {
        let _ = writeln!(res, "    label=\"{}\";", dot_escape(name));
    }
    for node in &graph.nodes {
        let shape = match node.kind {
            NodeKind::Llm { .. } => "box",
            NodeKind::Tool { .. } => "parallelogram",
            NodeKind::Branch { .. } => "diamond",
            NodeKind::Loop { .. } => "hexagon",
            NodeKind::Parallel {} | NodeKind::Join {} => "circle",
        };
        let peripheries = if node.id == graph.entry || node.id == graph.exit { 2 } else { 1 };
        let _ = writeln!(
            res,
            "    \"{}\" [shape={shape}, peripheries={peripheries}, label=\"{}\"];",
            dot_escape(&node.id),
            dot_escape(&node_label(node)),
        );
    }
    for edge in &graph.edges {
        let mut attrs = Vec::new();
        match edge.kind {
            EdgeKind::Data => {}
            EdgeKind::Control => attrs.push("style=dashed".to_owned()),
            EdgeKind::Back => {
                attrs.push("style=bold".to_owned());
                attrs.push("constraint=false".to_owned());
            }
        }
        if let Some(label) = edge_label(graph, edge) {
            attrs.push(format!("label=\"{}\"", dot_escape(&label)));
        }
        let attrs = if attrs.is_empty() { String::new() } else { format!(" [{}]", attrs.join(", ")) };
        let _ = writeln!(res, "    \"{}\" -> \"{}\"{attrs};", dot_escape(&edge.from), dot_escape(&edge.to));
    }
    for ((from, to), label) in binding_edges(graph) {
        let _ = writeln!(
            res,
            "    \"{}\" -> \"{}\" [style=dashed, color=\"{BINDING_COLOUR}\", fontcolor=\"{BINDING_COLOUR}\", constraint=false, label=\"{}\"];",
            dot_escape(from),
            dot_escape(to),
            dot_escape(&label),
        );
    }
    res.push_str("}\n");
    res
}

/// One data edge per (source node, bound node), labelled with a line per binding it
/// carries, in node and argument order.
fn binding_edges(graph: &WorkflowGraph) -> BTreeMap<(&str, &str), String> {
    let mut res: BTreeMap<(&str, &str), String> = BTreeMap::new();
    for node in &graph.nodes {
        let NodeKind::Tool { bindings, .. } = &node.kind else {
            continue;
        };
        for (arg, binding) in bindings {
            for source in &binding.sources {
                let (from, what) = match &source.source {
                    ValueSource::Result { node, path } => (node.as_str(), path.as_str()),
                    ValueSource::Argument { node, arg } => (node.as_str(), arg.as_str()),
                    ValueSource::Query { .. } | ValueSource::Constant { .. } => continue,
                };
                let label = res.entry((from, node.id.as_str())).or_default();
                if !label.is_empty() {
                    label.push('\n');
                }
                let _ = write!(label, "{arg} ← {what}");
            }
        }
    }
    res
}

fn position(graph: &WorkflowGraph, id: &str) -> Option<usize> {
    graph.nodes.iter().position(|node| node.id == id)
}

/// The node's id and a one-line summary of what it does.
fn node_label(node: &GraphNode) -> String {
    let summary = match &node.kind {
        NodeKind::Llm { role, .. } => format!("llm: {}", role_name(*role)),
        NodeKind::Tool { hints, bindings, .. } => {
            let mut summary =
                if hints.is_empty() { "tool: any".to_owned() } else { format!("tool: {}", hints.join(" | ")) };
            for (arg, binding) in bindings {
                for source in &binding.sources {
                    match &source.source {
                        ValueSource::Query { shape, anchors, lengths } => {
                            let _ = write!(summary, "\n{arg} ← query");
                            let shape = shape.map(|shape| shape.to_string());
                            // A length every mined value had narrows the spans.
                            let length = lengths
                                .filter(|[shortest, longest]| shortest == longest)
                                .map(|[length, _]| format!("{length} characters"));
                            // The strongest anchor says where in the query the value sits.
                            let after = anchors.first().map(|anchor| format!("after “{}”", anchor.words.join(" ")));
                            let notes: Vec<String> = shape.into_iter().chain(length).chain(after).collect();
                            if !notes.is_empty() {
                                let _ = write!(summary, " ({})", notes.join(", "));
                            }
                        }
                        ValueSource::Constant { value } => {
                            let _ = write!(summary, "\n{arg} = {value}");
                        }
                        ValueSource::Result { .. } | ValueSource::Argument { .. } => {}
                    }
                }
                for required in &binding.requires {
                    let _ =
                        write!(summary, "\n{arg} only if {} {} = {}", required.node, required.field, required.value);
                }
                if let Some(pairing) = &binding.paired_with {
                    let _ = write!(summary, "\n{arg} beside `{}` in one {} result", pairing.arg, pairing.node);
                }
            }
            summary
        }
        NodeKind::Branch { condition, .. } => format!("branch: {}", condition_summary(condition)),
        NodeKind::Parallel {} => "parallel".to_owned(),
        NodeKind::Join {} => "join".to_owned(),
        NodeKind::Loop { max_iterations, until } => {
            format!("loop ≤{max_iterations} until {}", condition_summary(until))
        }
    };
    format!("{}\n{summary}", node.id)
}

/// The role's name as written in graph files; it also names the role's prompt template.
#[must_use]
pub(crate) fn role_name(role: LlmRole) -> &'static str {
    match role {
        LlmRole::Plan => "plan",
        LlmRole::Extract => "extract",
        LlmRole::Reason => "reason",
        LlmRole::Verify => "verify",
        LlmRole::Judge => "judge",
        LlmRole::Synthesize => "synthesize",
    }
}

fn condition_summary(condition: &Condition) -> String {
    match condition {
        Condition::Judge { question } => format!("judge: {question}"),
        Condition::ToolSucceeded {} => "tool succeeded".to_owned(),
        Condition::Always {} => "always".to_owned(),
    }
}

fn mermaid_escape(text: &str) -> String {
    text.replace('"', "#quot;").replace('\n', "<br/>")
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
