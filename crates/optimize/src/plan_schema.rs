//! The JSON Schema of an edit plan, and its narrowing to one graph.
//!
//! The derived schema admits any string where a node id goes. Narrowed, it admits only
//! the plans that make sense on the graph at hand, so that constrained decoding keeps
//! even a small optimizer model from naming a node that does not exist, reusing an id,
//! or rewriting the prompt of a node that has none.

use serde_json::{Value, json};

use flowmem_model::{Condition, EdgeKind, GraphNode, NodeKind, WorkflowGraph};

use crate::edit::EditPlan;

/// The most edits [`edit_plan_schema_for`] admits, whatever the caller asks for.
pub(crate) const MAX_PLAN_EDITS: usize = 6;

/// The JSON Schema an edit plan must satisfy.
#[must_use]
pub fn edit_plan_schema() -> Value {
    // Invariant: a derived schema always serialises.
    serde_json::to_value(schemars::schema_for!(EditPlan)).unwrap_or(Value::Null)
}

/// Fields of an edit that name a node already in the graph.
const NODE_REFERENCES: [&str; 8] = ["id", "after", "before", "from", "to", "around", "new_from", "new_to"];
/// Definitions of data bindings: their `from` is a source kind, not an edge end, and
/// `rebind_argument` gets its own narrowed source schema.
const BINDING_DEFS: [&str; 4] = ["ArgBinding", "BindingSource", "ValueSource", "ValueShape"];
/// Free-text fields the optimizer writes, and the most characters each may take in a
/// narrowed schema: enough for a real instruction, and a bound on how long a small model
/// that starts repeating itself can go on.
const FREE_TEXT_LIMITS: [(&str, u64); 6] =
    [("instruction", 400), ("question", 200), ("rationale", 300), ("description", 200), ("model", 60), ("label", 40)];
/// The most tool hints a new tool node may carry.
const MAX_HINTS: u64 = 5;

/// The prefix every new node id of a plan for `graph` carries: `e<g>_`, where `g` is one
/// more than the largest generation among the graph's ids of that form.
///
/// A plan's new ids then never collide with the graph's, which a JSON Schema pattern
/// cannot otherwise say (it has no "none of these strings"), and the id tells a reader
/// which generation of edits added the node.
#[must_use]
pub fn new_id_prefix(graph: &WorkflowGraph) -> String {
    let generation = graph
        .nodes
        .iter()
        .filter_map(|node| node.id.strip_prefix('e')?.split_once('_')?.0.parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    format!("e{}_", generation.saturating_add(1))
}

/// [`edit_plan_schema`] narrowed to one graph:
/// - every field that names an existing node is an enumeration of the graph's node ids;
/// - a new node's id is a short identifier starting with [`new_id_prefix`], so it is new;
/// - a tool hint is one of `tools` (when any are given);
/// - each operation names only nodes it can apply to: `remove_node` neither the entry
///   nor the exit, `rewrite_prompt` only LLM and tool nodes, `refine_control` only
///   branches and loops, `rebind_argument` only tool nodes, and as a source only tool
///   nodes upstream of the one it rebinds (an operation with no such node is left out);
/// - an edge is named by one of the graph's edges: `add_node` inserts on an existing
///   edge or after a node alone, and `remove_edge` and `reconnect_edge` name an edge
///   that is there;
/// - instructions, questions and the rationale have a length bound;
/// - a plan holds at most `max_edits` edits (and never more than six).
///
/// A plan that satisfies it can still fail to apply (a later edit may refer to what an
/// earlier one removed), but its first edit always names real nodes and edges in a way
/// that fits them: with constrained decoding, even a small model's plans refer to the
/// real graph.
#[must_use]
pub fn edit_plan_schema_for(graph: &WorkflowGraph, tools: &[String], max_edits: usize) -> Value {
    narrowed_schema(graph, tools, max_edits, &new_id_prefix(graph))
}

/// The schema of one turn's reply when a plan is decoded edit by edit, narrowed to
/// `graph` as the earlier edits left it (see [`edit_plan_schema_for`]):
/// - on the first turn, `{"rationale": …, "edit": {…}}`;
/// - later, `{"edit": {…}}`, where the edit may be `{"op": "done"}` when `can_finish`
///   (the plan has an edit already).
///
/// The root is an object, as OpenAI's strict structured outputs require.
///
/// # Example
///
/// ```
/// use flowmem_optimize::edit_step_schema;
/// # let graph: flowmem_model::WorkflowGraph = serde_json::from_str(r#"{"nodes": [
/// #   {"id": "plan", "kind": "llm", "role": "plan"}, {"id": "t", "kind": "tool"},
/// #   {"id": "synth", "kind": "llm", "role": "synthesize"}],
/// #   "edges": [{"from": "plan", "to": "t"}, {"from": "t", "to": "synth"}],
/// #   "entry": "plan", "exit": "synth"}"#)?;
/// let later = edit_step_schema(&graph, &[], false, true);
/// let validator = jsonschema::validator_for(&later)?;
/// assert!(validator.is_valid(&serde_json::json!({"edit": {"op": "done"}})));
/// assert!(validator.is_valid(&serde_json::json!({"edit": {"op": "remove_node", "id": "t"}})));
/// assert!(!validator.is_valid(&serde_json::json!({"edit": {"op": "remove_node", "id": "ghost"}})));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn edit_step_schema(graph: &WorkflowGraph, tools: &[String], first: bool, can_finish: bool) -> Value {
    let plan = narrowed_schema(graph, tools, 1, &new_id_prefix(graph));
    let defs = plan.get("$defs").cloned().unwrap_or_else(|| json!({}));
    let edit_ref = json!({"$ref": "#/$defs/GraphEdit"});
    let edit = if can_finish {
        let done = json!({"type": "object", "properties": {"op": {"type": "string", "const": DONE}},
                          "required": ["op"], "additionalProperties": false});
        // `anyOf`, not `oneOf`: the two are disjoint by their `op`, and llguidance compiles
        // `oneOf` only where it can prove that itself.
        json!({"anyOf": [edit_ref, done]})
    } else {
        edit_ref
    };
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    if first {
        let rationale = plan.pointer("/properties/rationale").cloned().unwrap_or_else(|| json!({"type": "string"}));
        properties.insert("rationale".to_owned(), rationale);
        required.push(Value::from("rationale"));
    }
    properties.insert("edit".to_owned(), edit);
    required.push(Value::from("edit"));
    json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false,
           "$defs": defs})
}

/// The `op` of the reply that ends a plan decoded edit by edit.
pub(crate) const DONE: &str = "done";

pub(crate) fn narrowed_schema(graph: &WorkflowGraph, tools: &[String], max_edits: usize, prefix: &str) -> Value {
    let mut schema = edit_plan_schema();
    let ids: Vec<Value> = graph.nodes.iter().map(|n| Value::String(n.id.clone())).collect();
    if let Some(Value::Object(defs)) = schema.get_mut("$defs") {
        for (name, def) in defs.iter_mut() {
            if name == "GraphNode" {
                narrow_new_node(def, tools, prefix);
            } else if !BINDING_DEFS.contains(&name.as_str()) {
                narrow_references(def, &ids);
            }
        }
    }
    let controls_fit = match schema.get_mut("$defs") {
        Some(Value::Object(defs)) => narrow_controls(defs, graph),
        _ => true,
    };
    let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
    if let Some(edit) = schema.pointer_mut("/$defs/GraphEdit") {
        narrow_operations(edit, graph, &defs);
        if !controls_fit && let Some(Value::Array(operations)) = edit.get_mut("oneOf") {
            operations.retain(|op| op.pointer("/properties/op/const") != Some(&json!("insert_control")));
        }
    }
    bound_sizes(&mut schema, graph.nodes.len());
    if let Some(edits) = schema.pointer_mut("/properties/edits") {
        edits["maxItems"] = Value::from(max_edits.clamp(1, MAX_PLAN_EDITS));
    }
    schema
}

/// Bounds everything the optimizer could write without end: the [`FREE_TEXT_LIMITS`] as
/// `maxLength`, at most [`MAX_HINTS`] hints, and a parallel block of at most the graph's
/// `node_count` nodes. With those a plan has a largest size, and a model that starts
/// repeating itself is stopped by the grammar rather than by the token limit.
fn bound_sizes(schema: &mut Value, node_count: usize) {
    for_each_properties(schema, &mut |properties| {
        for (name, limit) in FREE_TEXT_LIMITS {
            if let Some(Value::Object(property)) = properties.get_mut(name) {
                property.insert("maxLength".to_owned(), Value::from(limit));
            }
        }
        if let Some(Value::Object(property)) = properties.get_mut("max_iterations") {
            property.insert("minimum".to_owned(), Value::from(1));
        }
        for (name, limit) in [("hints", MAX_HINTS), ("nodes", node_count as u64)] {
            if let Some(Value::Object(property)) = properties.get_mut(name) {
                property.insert("maxItems".to_owned(), Value::from(limit));
            }
        }
    });
}

/// Sets an enumeration of `ids` on every property in [`NODE_REFERENCES`] (and on the
/// items of `nodes`) anywhere under `schema`.
fn narrow_references(schema: &mut Value, ids: &[Value]) {
    for_each_properties(schema, &mut |properties| {
        for (name, property) in properties.iter_mut() {
            if NODE_REFERENCES.contains(&name.as_str()) {
                restrict_to(property, ids);
            } else if name == "nodes"
                && let Some(items) = property.get_mut("items")
            {
                restrict_to(items, ids);
            }
        }
    });
}

/// Calls `f` on every `properties` map anywhere under `schema`, outermost first.
fn for_each_properties(schema: &mut Value, f: &mut impl FnMut(&mut serde_json::Map<String, Value>)) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get_mut("properties") {
                f(properties);
            }
            map.values_mut().for_each(|child| for_each_properties(child, f));
        }
        Value::Array(items) => items.iter_mut().for_each(|child| for_each_properties(child, f)),
        _ => {}
    }
}

/// Restricts a string (or nullable string) schema to `values`.
fn restrict_to(schema: &mut Value, values: &[Value]) {
    let nullable = match schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        _ => false,
    };
    let mut allowed = values.to_vec();
    if nullable {
        allowed.push(Value::Null);
    }
    if let Value::Object(map) = schema {
        map.insert("enum".to_owned(), Value::Array(allowed));
    }
}

/// A new node's id becomes a short identifier after `prefix`, and its tool hints the
/// known tools.
fn narrow_new_node(schema: &mut Value, tools: &[String], prefix: &str) {
    let names: Vec<Value> = tools.iter().cloned().map(Value::String).collect();
    let pattern = format!("^{prefix}[a-z][a-z0-9_]{{0,19}}$");
    for_each_properties(schema, &mut |properties| {
        if let Some(id) = properties.get_mut("id") {
            id["pattern"] = Value::from(pattern.as_str());
        }
        if let Some(items) = properties.get_mut("hints").and_then(|h| h.get_mut("items"))
            && !names.is_empty()
        {
            restrict_to(items, &names);
        }
    });
}

/// Replaces each operation of the `GraphEdit` schema by the variants that fit `graph`
/// (see [`edit_plan_schema_for`]). `defs` are the schema's definitions, for the
/// conditions a branch may take.
fn narrow_operations(edit: &mut Value, graph: &WorkflowGraph, defs: &Value) {
    let Some(Value::Array(operations)) = edit.get_mut("oneOf") else { return };
    let edges = distinct_edges(graph);
    let nodes_where = |keep: &dyn Fn(&GraphNode) -> bool| -> Vec<&str> {
        graph.nodes.iter().filter(|n| keep(n)).map(|n| n.id.as_str()).collect()
    };
    let is_step = |n: &GraphNode| matches!(n.kind, NodeKind::Llm { .. } | NodeKind::Tool { .. });
    // Only LLM and tool nodes are removed: a control node's routes cannot be bridged.
    let removable = nodes_where(&|n| crate::edit::can_remove(graph, &n.id));
    let prompted = nodes_where(&is_step);
    // A node goes after a node alone only where that node's edges carry no labels.
    let followable = nodes_where(&|n| is_step(n) || matches!(n.kind, NodeKind::Join {}));
    let plain_sources = nodes_where(&|n| !matches!(n.kind, NodeKind::Branch { .. } | NodeKind::Loop { .. }));
    let branches = nodes_where(&|n| matches!(n.kind, NodeKind::Branch { .. }));
    let loops = nodes_where(&|n| matches!(n.kind, NodeKind::Loop { .. }));
    let all = nodes_where(&|_| true);
    let upstream = graph.upstream();
    for operation in std::mem::take(operations) {
        let op = operation.pointer("/properties/op/const").and_then(Value::as_str).unwrap_or_default().to_owned();
        match op.as_str() {
            "remove_node" => operations.extend(with_choices(operation, "id", &removable)),
            "rewrite_prompt" => operations.extend(with_choices(operation, "id", &prompted)),
            "replace_node" => {
                let mut operation = operation;
                set_property(&mut operation, "node", json!({"$ref": "#/$defs/StepNode"}));
                operations.extend(with_choices(operation, "id", &prompted));
            }
            "refine_control" => {
                let mut on_loop = operation.clone();
                set_property(&mut on_loop, "condition", nullable(conditions(defs, |_| true)));
                operations.extend(with_choices(on_loop, "id", &loops));
                for branch in &branches {
                    let mut variant = pinned(&operation, &[("id", branch)]);
                    set_property(&mut variant, "max_iterations", json!({"type": "null"}));
                    let fits = |condition: &Condition| condition_fits(graph, branch, condition);
                    set_property(&mut variant, "condition", nullable(conditions(defs, fits)));
                    operations.push(variant);
                }
            }
            "add_node" => {
                let mut operation = operation;
                set_property(&mut operation, "node", json!({"$ref": "#/$defs/StepNode"}));
                // After a node alone (`before` absent or null), or on one of its edges.
                let mut alone = operation.clone();
                set_property(&mut alone, "before", json!({"type": "null"}));
                operations.extend(with_choices(alone, "after", &followable));
                operations
                    .extend(edges.iter().map(|(from, to)| pinned(&operation, &[("after", from), ("before", to)])));
            }
            "add_edge" => {
                // From each source, only to the nodes it has no edge to yet (a second
                // edge between two nodes is refused).
                let new_edges = |template: &Value, from: &&str| -> Option<Value> {
                    let targets: Vec<&str> = all
                        .iter()
                        .copied()
                        .filter(|to| !graph.edges.iter().any(|e| e.from == *from && e.to == *to))
                        .collect();
                    let variant = pinned(template, &[("from", from)]);
                    with_choices(variant, "to", &targets)
                };
                let mut plain = operation.clone();
                set_property(&mut plain, "label", json!({"type": "null"}));
                operations.extend(plain_sources.iter().filter_map(|from| new_edges(&plain, from)));
                let mut routed = operation.clone();
                set_property(&mut routed, "label", json!({"type": "string", "minLength": 1, "maxLength": 40}));
                require(&mut routed, "label");
                operations.extend(branches.iter().filter_map(|from| new_edges(&routed, from)));
            }
            "remove_edge" | "reconnect_edge" => {
                operations.extend(edges.iter().map(|(from, to)| pinned(&operation, &[("from", from), ("to", to)])));
            }
            "rebind_argument" => operations.extend(rebindings(&operation, graph, &upstream)),
            _ => operations.push(operation),
        }
    }
}

/// Narrows the control constructs to where they keep the graph valid: a retry loop
/// around an LLM or tool node with one way on, a branch before an LLM or tool node with
/// an LLM or tool node as its alternative, a parallel block of LLM and tool nodes.
/// Returns false when no construct fits anywhere.
fn narrow_controls(defs: &mut serde_json::Map<String, Value>, graph: &WorkflowGraph) -> bool {
    let retryable: Vec<&str> =
        graph.nodes.iter().filter(|n| crate::edit::can_retry(graph, &n.id)).map(|n| n.id.as_str()).collect();
    let steps: Vec<&str> = graph
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Llm { .. } | NodeKind::Tool { .. }))
        .map(|n| n.id.as_str())
        .collect();
    if let Some(node) = defs.get("GraphNode").cloned() {
        defs.insert("StepNode".to_owned(), only_kinds(node, &["llm", "tool"]));
    }
    let Some(Value::Array(constructs)) = defs.get_mut("ControlInsert").and_then(|c| c.get_mut("oneOf")) else {
        return true;
    };
    for construct in std::mem::take(constructs) {
        let name =
            construct.pointer("/properties/construct/const").and_then(Value::as_str).unwrap_or_default().to_owned();
        match name.as_str() {
            "retry_loop" => constructs.extend(with_choices(construct, "around", &retryable)),
            "branch" => {
                let mut construct = construct;
                set_property(&mut construct, "alternative", json!({"$ref": "#/$defs/StepNode"}));
                constructs.extend(with_choices(construct, "before", &steps));
            }
            "parallel" if steps.len() >= 2 => {
                let mut construct = construct;
                if let Some(items) = construct.pointer_mut("/properties/nodes/items") {
                    restrict_to(items, &steps.iter().map(|s| Value::from(*s)).collect::<Vec<_>>());
                }
                constructs.push(construct);
            }
            "parallel" => {}
            _ => constructs.push(construct),
        }
    }
    !constructs.is_empty()
}

/// `node`'s schema (a [`GraphNode`]) with only the node kinds in `kinds`.
fn only_kinds(mut node: Value, kinds: &[&str]) -> Value {
    fn keep(variant: &Value, kinds: &[&str]) -> bool {
        variant.pointer("/properties/kind/const").and_then(Value::as_str).is_none_or(|kind| kinds.contains(&kind))
    }
    fn filter(schema: &mut Value, kinds: &[&str]) {
        if let Some(Value::Array(variants)) = schema.get_mut("oneOf") {
            variants.retain(|variant| keep(variant, kinds));
        }
        if let Some(Value::Array(parts)) = schema.get_mut("allOf") {
            parts.iter_mut().for_each(|part| filter(part, kinds));
        }
    }
    filter(&mut node, kinds);
    node
}

/// The variants of the `Condition` definition whose sample `keep` accepts.
fn conditions(defs: &Value, keep: impl Fn(&Condition) -> bool) -> Vec<Value> {
    let variants = defs.pointer("/Condition/oneOf").and_then(Value::as_array).cloned().unwrap_or_default();
    variants
        .into_iter()
        .filter(|variant| {
            let kind = variant.pointer("/properties/type/const").and_then(Value::as_str).unwrap_or_default();
            // Conditions take no unknown fields, so a judge's sample has its question and
            // the others none.
            let sample = serde_json::from_value::<Condition>(json!({"type": kind}))
                .or_else(|_| serde_json::from_value::<Condition>(json!({"type": kind, "question": "?"})));
            sample.is_ok_and(|condition| keep(&condition))
        })
        .collect()
}

/// Whether branch `id` has exactly the routes `condition` chooses among.
fn condition_fits(graph: &WorkflowGraph, id: &str, condition: &Condition) -> bool {
    let Some((needs, _)) = flowmem_exec::condition_routes(condition) else { return true };
    let mut has: Vec<&str> =
        graph.outgoing(id).filter(|e| e.kind != EdgeKind::Back).filter_map(|e| e.label.as_deref()).collect();
    has.sort_unstable();
    let mut needs = needs.to_vec();
    needs.sort_unstable();
    has == needs
}

/// One of the `variants`, or null (as `anyOf`: they are disjoint by their tag).
fn nullable(variants: Vec<Value>) -> Value {
    let mut variants = variants;
    variants.push(json!({"type": "null"}));
    json!({"anyOf": variants})
}

fn require(operation: &mut Value, field: &str) {
    if let Some(Value::Array(required)) = operation.get_mut("required")
        && !required.iter().any(|r| r == field)
    {
        required.push(Value::from(field));
    }
}

/// One `rebind_argument` variant per tool node: the node pinned, the argument one it
/// binds already (or any, when it binds none), and the source a query span, a constant,
/// or the result or arguments of a tool node upstream of it.
fn rebindings(operation: &Value, graph: &WorkflowGraph, upstream: &[Vec<bool>]) -> Vec<Value> {
    let mut res = Vec::new();
    for (idx, node) in graph.nodes.iter().enumerate() {
        let NodeKind::Tool { bindings, .. } = &node.kind else { continue };
        let mut variant = pinned(operation, &[("node", &node.id.as_str())]);
        let bound: Vec<&str> = bindings.keys().map(String::as_str).collect();
        let arg = if bound.is_empty() {
            json!({"type": "string", "minLength": 1, "maxLength": 60})
        } else {
            json!({"type": "string", "enum": bound})
        };
        set_property(&mut variant, "arg", arg);
        let sources: Vec<&str> = graph
            .nodes
            .iter()
            .enumerate()
            .filter(|&(other, n)| upstream[idx][other] && matches!(n.kind, NodeKind::Tool { .. }))
            .map(|(_, n)| n.id.as_str())
            .collect();
        let shapes = ["email", "number", "id", "name", "text"];
        let mut kinds = vec![
            json!({"type": "object", "properties": {"from": {"const": "query"}, "shape": {"enum": shapes}},
                   "required": ["from"], "additionalProperties": false}),
            json!({"type": "object", "properties": {"from": {"const": "constant"}, "value": {}},
                   "required": ["from", "value"], "additionalProperties": false}),
        ];
        if !sources.is_empty() {
            kinds.push(json!({"type": "object", "properties": {"from": {"const": "result"},
                "node": {"type": "string", "enum": sources}, "path": {"type": "string", "pattern": "^\\$", "maxLength": 120}},
                "required": ["from", "node", "path"], "additionalProperties": false}));
            kinds.push(json!({"type": "object", "properties": {"from": {"const": "argument"},
                "node": {"type": "string", "enum": sources}, "arg": {"type": "string", "minLength": 1, "maxLength": 60}},
                "required": ["from", "node", "arg"], "additionalProperties": false}));
        }
        set_property(&mut variant, "source", json!({"oneOf": kinds}));
        res.push(variant);
    }
    res
}

/// The graph's edges as distinct `(from, to)` pairs, back edges last.
fn distinct_edges(graph: &WorkflowGraph) -> Vec<(&str, &str)> {
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    let forward = graph.edges.iter().filter(|e| e.kind != EdgeKind::Back);
    for edge in forward.chain(graph.edges.iter().filter(|e| e.kind == EdgeKind::Back)) {
        let pair = (edge.from.as_str(), edge.to.as_str());
        if !pairs.contains(&pair) {
            pairs.push(pair);
        }
    }
    pairs
}

/// `operation` with `field` restricted to `ids`, or nothing when `ids` is empty.
fn with_choices(mut operation: Value, field: &str, ids: &[&str]) -> Option<Value> {
    if ids.is_empty() {
        return None;
    }
    set_property(&mut operation, field, json!({"type": "string", "enum": ids}));
    Some(operation)
}

/// A copy of `operation` with each field fixed to one value, and required.
fn pinned(operation: &Value, fields: &[(&str, &&str)]) -> Value {
    let mut variant = operation.clone();
    for (field, value) in fields {
        set_property(&mut variant, field, json!({"type": "string", "const": value}));
        if let Some(Value::Array(required)) = variant.get_mut("required")
            && !required.iter().any(|r| r == field)
        {
            required.push(Value::from(*field));
        }
    }
    variant
}

fn set_property(operation: &mut Value, field: &str, schema: Value) {
    if let Some(Value::Object(properties)) = operation.get_mut("properties") {
        properties.insert(field.to_owned(), schema);
    }
}
