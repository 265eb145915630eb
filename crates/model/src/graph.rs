//! FlowScout's executable workflow graph, as data.
//!
//! This is the serialised form a person edits and the miner and optimizer produce. The
//! executor (`flowmem-exec`) validates it (`Valid(G, T)`) before anything runs; this
//! crate only describes it.
//!
//! Execution semantics, which the executor implements:
//! - A node runs once every incoming non-`back` edge is resolved (its source ran or was
//!   skipped) and at least one of them is active; when all are skipped, it is skipped.
//!   A node with several active inputs therefore joins them.
//! - A `branch` activates exactly one outgoing edge: the one whose `label` its condition
//!   chose. The others are skipped.
//! - A `parallel` node activates all outgoing edges; its members run concurrently. A
//!   `join` node is a plain merge point that waits for every active input.
//! - A `loop` node has outgoing edges labelled `body` and `exit`. The body runs, returns
//!   to the loop over a `back` edge, and repeats until `until` holds or `max_iterations`
//!   is reached; then the `exit` edge activates.
//!
//! A tool node may carry data bindings (`bindings`): for each argument, the sources its
//! value came from in the mined logs (the query, an upstream node's result at a JSON path
//! or its argument, a constant), with their support. They are optional, so graph files
//! written before bindings existed still load.
//!
//! Unknown fields are errors (`deny_unknown_fields`), so a typo such as `hint` for
//! `hints` cannot quietly change what a graph does. The JSON Schema says so too, except
//! inside a node and a binding source: their variants are flattened into an object that
//! has further fields (`id`, `support`), which a closed variant schema would refuse.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An executable workflow: nodes, edges, and the entry and exit node ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowGraph {
    /// A human-readable name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The nodes; ids are unique.
    pub nodes: Vec<GraphNode>,
    /// The edges between node ids.
    #[serde(default)]
    pub edges: Vec<Edge>,
    /// The id of the node that runs first.
    pub entry: String,
    /// The id of the node whose output is the final result.
    pub exit: String,
    /// The [`decision_words`](crate::decision_words) of the mined queries, which
    /// branches decided by the nearest of them (`nearest`) name by index; empty when no
    /// branch is.
    // Left out of the JSON Schema, as a branch's `nearest` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(skip)]
    pub queries: Vec<Vec<String>>,
}

/// One node of a workflow graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphNode {
    /// A unique id, used in edges, traces and error messages.
    pub id: String,
    /// What the node does.
    #[serde(flatten)]
    pub kind: NodeKind,
    /// A note for people reading the graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The kinds of node: LLM, tool, and control.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[schemars(transform = open_flattened_variants)]
pub enum NodeKind {
    /// An LLM call with a role.
    Llm {
        /// What the call is for; selects the role's prompt template.
        role: LlmRole,
        /// Extra instructions rendered into the role's prompt (the optimizer rewrites this).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instruction: Option<String>,
        /// A named model; the executor's model when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    /// A position where a tool is invoked: the executor model picks the tool (within
    /// `hints`, when given) and writes its arguments from the context.
    Tool {
        /// Tool names this position may use; any available tool when empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        hints: Vec<String>,
        /// Extra instructions for choosing the tool and its arguments.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instruction: Option<String>,
        /// Where each argument's value comes from, keyed by argument path (`order_id`,
        /// `item_ids[*]`, `passengers[*].first_name`); empty when nothing was mined.
        // Left out of the JSON Schema: the schema is also the optimizer's edit grammar,
        // whose node shape this field must not change.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        #[schemars(skip)]
        bindings: BTreeMap<String, ArgBinding>,
    },
    /// Takes exactly one outgoing edge, the one whose label the condition picks.
    Branch {
        /// How the route is chosen.
        condition: Condition,
        /// How many of the mined records that reached this branch took each route, by
        /// route label (`skip` included); empty when nothing was mined. With a judge, the
        /// executor takes a route more than half of them took without asking, when it runs
        /// no tool or its first tool can be grounded, and no other route offered has cues;
        /// it never offers a route whose first tool has a bound argument with no candidate.
        // Left out of the JSON Schema, as `bindings` are: the edit grammar's node shape
        // must not change.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        #[schemars(skip)]
        taken: BTreeMap<String, u64>,
        /// Per route label, the words one of which the queries of the mined records that
        /// took the route nearly always held ([`query_words`](crate::query_words)): `return`
        /// for a route that returns items. Under bindings grounding a judged branch does
        /// not offer a route whose query holds none of its cues. A route without cues is
        /// always offered.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        #[schemars(skip)]
        cues: BTreeMap<String, Vec<String>>,
        /// Per route label with `cues`: of the mined records that reached this branch with
        /// a query holding one of the route's cues, how many took the route, and how many
        /// there were (`[took, held]`). Under bindings grounding a judged branch whose query
        /// holds the cues of one route offered, and of no other, takes that route with no
        /// judge when more than half took it (`exchange` held by 25 of τ²-bench retail's
        /// mined queries, 16 of which exchanged).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        #[schemars(skip)]
        cued: BTreeMap<String, [u64; 2]>,
        /// Per route label, the mined queries that took the route, as indices into the
        /// graph's `queries`; present only where mining found, leaving each record out in
        /// turn, that the route most of its [`NEAREST_VOTES`](crate::NEAREST_VOTES) nearest
        /// took was right for more than half of the records and more often than the most
        /// taken route. Under bindings grounding the executor then takes the route of the
        /// nearest ([`nearest_route`](crate::nearest_route)) among those it may offer, with
        /// no judge.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        #[schemars(skip)]
        nearest: BTreeMap<String, Vec<usize>>,
    },
    /// Fans out: every outgoing edge is taken, and the members run concurrently.
    // Braces, not a unit variant: serde ignores the fields of a tagged unit variant, and
    // unknown fields must be errors.
    Parallel {},
    /// Waits for every active incoming edge.
    Join {},
    /// Repeats its `body` until `until` holds or `max_iterations` runs have happened.
    Loop {
        /// The largest number of body runs.
        max_iterations: u32,
        /// When to stop repeating.
        until: Condition,
    },
}

/// The mined sources of one argument of a tool node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArgBinding {
    /// How many values of this argument the mined logs hold (each array element counts).
    pub observed: u64,
    /// The sources, most supported first.
    pub sources: Vec<BindingSource>,
    /// What every mined value of the argument was, as an upstream result describing it
    /// showed: a candidate such a result describes otherwise is not offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<Precondition>,
    /// For an array argument (`new_item_ids[*]`): the other array argument of the call
    /// that had as many elements in every mined call (`item_ids`). A reply that breaks
    /// this is asked again once with both arrays held to one length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_length_as: Option<String>,
    /// For an array argument whose elements come from a collection in `node`'s results
    /// (`new_item_ids[*]`, a product's variants): the mined calls always sent element `i`
    /// beside element `i` of another array argument, in one result of that node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired_with: Option<Pairing>,
}

/// Two array arguments whose elements went in pairs through one upstream result, in every
/// mined call: τ² retail exchanges an item only for a variant of the same product, so
/// `item_ids[i]` and `new_item_ids[i]` stand in one `get_product_details` result at
/// `$.variants[*].item_id`.
///
/// At run time the elements are offered from the results of `node` that hold one of the
/// other array's candidates at `path`, and a call whose element `i` does not stand beside
/// the other array's element `i` in one such result is asked again once.
///
/// ```
/// use flowmem_model::Pairing;
/// use serde_json::json;
///
/// let pairing = Pairing {
///     arg: "item_ids".into(),
///     node: "product".into(),
///     path: "$.variants[*].item_id".into(),
///     support: 9,
/// };
/// let lamp = json!({"variants": [{"item_id": "1"}, {"item_id": "2"}]});
/// let desk = json!({"variants": [{"item_id": "7"}, {"item_id": "8"}]});
/// let results = [lamp, desk];
/// assert_eq!(pairing.partners(&results, &json!("1")), vec![json!("1"), json!("2")]);
/// assert!(pairing.partners(&results, &json!("5")).is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pairing {
    /// The other array argument (`item_ids`).
    pub arg: String,
    /// The upstream node whose results held both elements.
    pub node: String,
    /// Where both stood in such a result; it has a `[*]`.
    pub path: String,
    /// How many mined calls paired every element so.
    pub support: u64,
}

impl Pairing {
    /// The values at `path` of those `results` (of `node`) that hold `partner` there
    /// (compared by [`value_key`](crate::value_key)), without repeats, in order: what an
    /// element may be beside `partner`.
    #[must_use]
    pub fn partners(&self, results: &[Value], partner: &Value) -> Vec<Value> {
        let Some(wanted) = crate::value_key(partner) else { return Vec::new() };
        let mut res: Vec<Value> = Vec::new();
        for result in results {
            let values = crate::values_at(result, &self.path);
            if values.iter().any(|value| crate::value_key(value).as_ref() == Some(&wanted)) {
                for value in values {
                    if !res.contains(&value) {
                        res.push(value);
                    }
                }
            }
        }
        res
    }
}

/// A condition every mined value of an argument met, read from an upstream result that
/// describes the value (decision mining, on the argument's values): the order an item
/// return names was, each time, one whose `get_order_details` result said
/// `$.status` = `"delivered"`.
///
/// At run time a candidate that a result of `node` describes (its value stands at `key`)
/// is kept only when that result's `field` holds `value`. A candidate no result
/// describes is kept: nothing is known of it. A route whose first tool then has no
/// candidate left for the argument is not offered.
///
/// ```
/// use flowmem_model::Precondition;
/// use serde_json::json;
///
/// let delivered = Precondition {
///     node: "get_order".into(),
///     key: "$.order_id".into(),
///     field: "$.status".into(),
///     value: json!("delivered"),
///     support: 14,
/// };
/// let result = json!({"order_id": "#W1", "status": "pending"});
/// assert_eq!(delivered.check(&result, &json!("#W1")), Some(false));
/// assert_eq!(delivered.check(&result, &json!("#W2")), None);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Precondition {
    /// The upstream node whose results describe the value.
    pub node: String,
    /// The JSON path in such a result where the described value stands
    /// (`$.order_id`); it has no `[*]`.
    pub key: String,
    /// The JSON path of the field the condition reads (`$.status`); it has no `[*]`.
    pub field: String,
    /// The value the field held every time.
    pub value: Value,
    /// How many distinct mined values it was read for.
    pub support: u64,
}

impl Precondition {
    /// Whether `result` (one of `node`'s results) says `candidate` meets the condition:
    /// `None` when the result does not describe `candidate` (nothing at `key` with the
    /// same [`value_key`](crate::value_key)), otherwise whether `field` holds `value`
    /// (compared by their keys, so `"Delivered"` meets `"delivered"`).
    #[must_use]
    pub fn check(&self, result: &Value, candidate: &Value) -> Option<bool> {
        let described = crate::values_at(result, &self.key);
        let key = crate::value_key(candidate)?;
        if !described.iter().any(|value| crate::value_key(value).as_ref() == Some(&key)) {
            return None;
        }
        let wanted = crate::value_key(&self.value);
        let meets = |held: &Value| match &wanted {
            Some(wanted) => crate::value_key(held).as_ref() == Some(wanted),
            None => *held == self.value,
        };
        Some(crate::values_at(result, &self.field).iter().any(meets))
    }
}

/// One source of an argument's value and how many observed values it explained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BindingSource {
    /// Where the value comes from.
    #[serde(flatten)]
    pub source: ValueSource,
    /// How many observed values this source explained.
    pub support: u64,
    /// For a result path over a collection (one with `[*]`): how the logs used it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each: Option<EachUse>,
}

/// How the mined logs used a collection an argument's values come from (a result path
/// with `[*]`, such as a user's `$.reservations[*]`): in how many records, and in how
/// many of those they called the tool with every one of its values.
///
/// When most did ([`EachUse::is_usual`]), the executor treats the tool's loop as "for
/// each": every iteration takes a value not used yet (those the query names first), and
/// the loop ends when none is left, with no judge.
///
/// ```
/// use flowmem_model::EachUse;
/// assert!(EachUse { records: 30, all: 19 }.is_usual());
/// assert!(!EachUse { records: 6, all: 3 }.is_usual());
/// assert!(!EachUse { records: 1, all: 1 }.is_usual());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EachUse {
    /// Records in which the collection held at least two values and gave the argument
    /// one.
    pub records: u64,
    /// Of those, the records in which the tool's calls took every value of the
    /// collection.
    pub all: u64,
}

impl EachUse {
    /// Whether more than half of the records took every value, in at least two records
    /// (one is no habit, as for mined constants).
    #[must_use]
    pub fn is_usual(&self) -> bool {
        self.all >= 2 && 2 * self.all > self.records
    }
}

/// Where an argument's value comes from at run time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "from", rename_all = "snake_case", deny_unknown_fields)]
#[schemars(transform = open_flattened_variants)]
pub enum ValueSource {
    /// A span of the query. With a shape, the query's spans of that shape are the
    /// candidates ([`ValueShape::spans`](crate::ValueShape::spans)); without one, the
    /// model finds the value in the query. With anchors, the spans they precede are
    /// preferred ([`anchor_score`](crate::anchor_score)); with one mined length, the spans
    /// of that length.
    Query {
        /// The shape of the mined values, if they had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shape: Option<crate::ValueShape>,
        /// The words the mined values followed in their queries, most supported first.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        anchors: Vec<crate::Anchor>,
        /// The shortest and the longest mined value, in characters of its
        /// [`value_key`](crate::value_key). When they are equal (a zip code: `[5, 5]`),
        /// spans of another length are offered only when no span has that length.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lengths: Option<[usize; 2]>,
    },
    /// An upstream node's result, at a JSON path whose array indices are `[*]`
    /// (`$.items[*].product_id`; `$` is the whole result).
    Result {
        /// The upstream node's id.
        node: String,
        /// The JSON path into its result.
        path: String,
    },
    /// An argument an upstream node was called with.
    Argument {
        /// The upstream node's id.
        node: String,
        /// The argument path in that node's call.
        arg: String,
    },
    /// The same value in every mined record.
    Constant {
        /// The value.
        value: Value,
    },
}

impl ValueSource {
    /// The upstream node this source reads from, if any.
    #[must_use]
    pub fn node(&self) -> Option<&str> {
        match self {
            ValueSource::Result { node, .. } | ValueSource::Argument { node, .. } => Some(node),
            ValueSource::Query { .. } | ValueSource::Constant { .. } => None,
        }
    }
}

/// The role of an LLM node; each role has its own prompt template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LlmRole {
    /// Parses the query into sub-tasks.
    Plan,
    /// Pulls specific facts out of the context.
    Extract,
    /// Reasons over the context.
    Reason,
    /// Checks intermediate results.
    Verify,
    /// Decides a branch or a loop condition.
    Judge,
    /// Writes the final answer.
    Synthesize,
}

/// How a branch picks its route or a loop decides to stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Condition {
    /// An LLM judge answers `question` from the context. For a branch it picks one of the
    /// outgoing edge labels; for a loop it answers whether to stop.
    Judge {
        /// The question put to the judge.
        question: String,
    },
    /// Holds when the most recent tool call in the context succeeded. For a branch, the
    /// routes are labelled `ok` and `error`.
    // Braces, as for `NodeKind::Parallel`: so that unknown fields are errors.
    ToolSucceeded {},
    /// Always holds: a loop runs once, a branch takes the edge labelled `default`.
    Always {},
}

/// A directed edge between two nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    /// The source node id.
    pub from: String,
    /// The target node id.
    pub to: String,
    /// What the edge carries.
    #[serde(default)]
    pub kind: EdgeKind,
    /// A route name: a branch's choice, or `body` / `exit` out of a loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// What an edge carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EdgeKind {
    /// Orders the nodes and passes the source's output into the target's context.
    #[default]
    Data,
    /// Orders the nodes only.
    Control,
    /// Closes a loop body: from the body's last node back to its `loop` node. The only
    /// edges allowed to form a cycle.
    Back,
}

/// Drops `additionalProperties` from the variants of an enum whose schema is flattened
/// into an object with fields of its own: serde checks the fields of the whole object,
/// but a closed variant schema would refuse the outer object's fields.
fn open_flattened_variants(schema: &mut schemars::Schema) {
    for key in ["oneOf", "anyOf"] {
        if let Some(variants) = schema.get_mut(key).and_then(Value::as_array_mut) {
            for variant in variants {
                if let Some(variant) = variant.as_object_mut() {
                    variant.remove("additionalProperties");
                }
            }
        }
    }
}

/// How one workflow graph differs from another ([`WorkflowGraph::diff`]): node ids and
/// edges, each list in the order of the graph it comes from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct GraphDiff {
    /// Nodes only the new graph has.
    pub added_nodes: Vec<String>,
    /// Nodes only the old graph has.
    pub removed_nodes: Vec<String>,
    /// Nodes both have, with a different kind, prompt, tool or binding.
    pub changed_nodes: Vec<String>,
    /// Edges only the new graph has.
    pub added_edges: Vec<Edge>,
    /// Edges only the old graph has.
    pub removed_edges: Vec<Edge>,
    /// Whether the entry or the exit moved.
    pub ends_moved: bool,
}

impl GraphDiff {
    /// Whether the graphs are the same.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.added_nodes.is_empty()
            && self.removed_nodes.is_empty()
            && self.changed_nodes.is_empty()
            && self.added_edges.is_empty()
            && self.removed_edges.is_empty()
            && !self.ends_moved
    }
}

impl WorkflowGraph {
    /// What changed from `self` (the old graph) to `new`. The name is ignored.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_model::WorkflowGraph;
    ///
    /// let old: WorkflowGraph = serde_json::from_value(serde_json::json!({
    ///     "nodes": [{"id": "a", "kind": "tool"}, {"id": "b", "kind": "llm", "role": "synthesize", "instruction": "Answer."}],
    ///     "edges": [{"from": "a", "to": "b"}], "entry": "a", "exit": "b"}))?;
    /// let mut new = old.clone();
    /// new.edges.clear();
    /// new.nodes[1] = serde_json::from_value(serde_json::json!({"id": "b", "kind": "llm", "role": "synthesize", "instruction": "State it."}))?;
    /// let diff = old.diff(&new);
    /// assert_eq!(diff.changed_nodes, ["b"]);
    /// assert_eq!(diff.removed_edges.len(), 1);
    /// assert!(diff.added_nodes.is_empty() && !diff.is_empty());
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    #[must_use]
    pub fn diff(&self, new: &WorkflowGraph) -> GraphDiff {
        let mut diff = GraphDiff::default();
        for node in &new.nodes {
            match self.node(&node.id) {
                None => diff.added_nodes.push(node.id.clone()),
                Some(old) if old != node => diff.changed_nodes.push(node.id.clone()),
                Some(_) => {}
            }
        }
        diff.removed_nodes =
            self.nodes.iter().filter(|node| new.node(&node.id).is_none()).map(|n| n.id.clone()).collect();
        diff.added_edges = new.edges.iter().filter(|edge| !self.edges.contains(edge)).cloned().collect();
        diff.removed_edges = self.edges.iter().filter(|edge| !new.edges.contains(edge)).cloned().collect();
        diff.ends_moved = self.entry != new.entry || self.exit != new.exit;
        diff
    }

    /// The node with `id`, if any.
    #[must_use]
    pub fn node(&self, id: &str) -> Option<&GraphNode> {
        self.nodes.iter().find(|node| node.id == id)
    }

    /// Edges leaving `id`.
    pub fn outgoing<'g>(&'g self, id: &'g str) -> impl Iterator<Item = &'g Edge> + 'g {
        self.edges.iter().filter(move |edge| edge.from == id)
    }

    /// Edges entering `id`.
    pub fn incoming<'g>(&'g self, id: &'g str) -> impl Iterator<Item = &'g Edge> + 'g {
        self.edges.iter().filter(move |edge| edge.to == id)
    }
}
