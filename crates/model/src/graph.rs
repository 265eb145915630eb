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

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An executable workflow: nodes, edges, and the entry and exit node ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[serde(tag = "kind", rename_all = "snake_case")]
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
    },
    /// Fans out: every outgoing edge is taken, and the members run concurrently.
    Parallel,
    /// Waits for every active incoming edge.
    Join,
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
pub struct ArgBinding {
    /// How many values of this argument the mined logs hold (each array element counts).
    pub observed: u64,
    /// The sources, most supported first.
    pub sources: Vec<BindingSource>,
}

/// One source of an argument's value and how many observed values it explained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BindingSource {
    /// Where the value comes from.
    #[serde(flatten)]
    pub source: ValueSource,
    /// How many observed values this source explained.
    pub support: u64,
}

/// Where an argument's value comes from at run time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum ValueSource {
    /// A span of the query. With a shape, the query's spans of that shape are the
    /// candidates ([`ValueShape::spans`](crate::ValueShape::spans)); without one, the
    /// model finds the value in the query.
    Query {
        /// The shape of the mined values, if they had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shape: Option<crate::ValueShape>,
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
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Condition {
    /// An LLM judge answers `question` from the context. For a branch it picks one of the
    /// outgoing edge labels; for a loop it answers whether to stop.
    Judge {
        /// The question put to the judge.
        question: String,
    },
    /// Holds when the most recent tool call in the context succeeded. For a branch, the
    /// routes are labelled `ok` and `error`.
    ToolSucceeded,
    /// Always holds: a loop runs once, a branch takes the edge labelled `default`.
    Always,
}

/// A directed edge between two nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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

impl WorkflowGraph {
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

    /// Per node (in node order), which nodes are upstream of it: the nodes whose output
    /// it can read, so the ones a template or a data binding may name.
    ///
    /// Upstream means an ancestor over `data` edges, where a loop's body counts as
    /// upstream of everything after the loop (the loop leaves with the body's last
    /// results), but not of the body itself: a body node never reads a later body node,
    /// which would be the previous iteration's output. Edges naming unknown nodes are
    /// ignored; a node is not upstream of itself.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_model::WorkflowGraph;
    /// use serde_json::json;
    ///
    /// let graph: WorkflowGraph = serde_json::from_value(json!({
    ///     "name": "g", "entry": "loop", "exit": "after",
    ///     "nodes": [
    ///         {"id": "loop", "kind": "loop", "max_iterations": 3, "until": {"type": "always"}},
    ///         {"id": "first", "kind": "tool"}, {"id": "second", "kind": "tool"},
    ///         {"id": "after", "kind": "tool"}
    ///     ],
    ///     "edges": [
    ///         {"from": "loop", "to": "first", "label": "body"}, {"from": "first", "to": "second"},
    ///         {"from": "second", "to": "loop", "kind": "back"},
    ///         {"from": "loop", "to": "after", "label": "exit"}
    ///     ]
    /// }))?;
    /// let upstream = graph.upstream();
    /// assert_eq!(upstream[3], [true, true, true, false], "the body is upstream of `after`");
    /// assert_eq!(upstream[1], [true, false, false, false], "`second` is not upstream of `first`");
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    #[must_use]
    pub fn upstream(&self) -> Vec<Vec<bool>> {
        let n = self.nodes.len();
        let index: std::collections::HashMap<&str, usize> =
            self.nodes.iter().enumerate().map(|(idx, node)| (node.id.as_str(), idx)).collect();
        let mut data_preds = vec![Vec::new(); n];
        // Per loop node: the sources of the back edges that close it.
        let mut back_preds = vec![Vec::new(); n];
        for edge in &self.edges {
            if let (Some(&from), Some(&to)) = (index.get(edge.from.as_str()), index.get(edge.to.as_str())) {
                match edge.kind {
                    EdgeKind::Back => back_preds[to].push(from),
                    _ => data_preds[to].push(from),
                }
            }
        }
        // A loop's body: what reaches a back edge into it backwards over data edges,
        // without passing through the loop itself.
        let bodies: Vec<Vec<bool>> = (0..n)
            .map(|loop_idx| {
                let mut body = vec![false; n];
                let mut stack: Vec<usize> = back_preds[loop_idx].clone();
                while let Some(idx) = stack.pop() {
                    if idx != loop_idx && !std::mem::replace(&mut body[idx], true) {
                        stack.extend(data_preds[idx].iter().copied());
                    }
                }
                body
            })
            .collect();
        (0..n)
            .map(|node_idx| {
                let mut seen = vec![false; n];
                let mut stack = vec![node_idx];
                while let Some(idx) = stack.pop() {
                    let preds = data_preds[idx].iter();
                    // Through a loop the node is not inside of, its body is upstream too.
                    let body = if bodies[idx][node_idx] { &[][..] } else { &back_preds[idx][..] };
                    for &pred in preds.chain(body) {
                        if !std::mem::replace(&mut seen[pred], true) {
                            stack.push(pred);
                        }
                    }
                }
                seen[node_idx] = false;
                seen
            })
            .collect()
    }
}
