//! Process tree → skeleton [`WorkflowGraph`], FlowScout's initial workflow.
//!
//! The mapping (see `graph.rs` in `flowmem-model` for execution semantics):
//! - a `plan` LLM node is the entry and a `synthesize` LLM node the exit;
//! - an activity becomes a tool node hinted with the activity (use
//!   [`Classifier::ToolName`](crate::Classifier) so that activities are tool names);
//! - `->` chains its children with ordered edges;
//! - `X` becomes a `branch` node (an LLM judge picks the route) with one labelled route
//!   per child, all meeting at a `join`; a `tau` child is a direct route to the join;
//! - `+` becomes a `parallel` node whose children run concurrently and meet at a `join`;
//! - `*( do, redo )` means `do (redo do)*`. When `redo` is `tau` it is a `loop` node whose
//!   `body` is `do`, closed by a `back` edge: the body runs at least once and repeats
//!   until the judge says it is done. Otherwise `do` runs once, then a `branch` chooses
//!   between `done` and `retry`; `retry` enters a `loop` whose body is `redo` followed by
//!   a second copy of `do`. Both routes meet at a `join`. The language is exactly
//!   `do (redo do)*`, bounded by `max_iterations`.
//!
//! [`tree_to_bound_skeleton`] adds the mined data flow: data orders parallel blocks whose
//! members feed each other, and every tool node carries its arguments' bindings.

use std::collections::BTreeMap;

use flowmem_model::{Condition, Edge, EdgeKind, GraphNode, LlmRole, NodeKind, WorkflowGraph};

use crate::dataflow::{BindingConfig, Dataflow, fill_bindings, order_parallels};
use crate::tree::{Operator, ProcessTree};

/// The most body runs a mined loop allows.
pub const SKELETON_MAX_ITERATIONS: u32 = 5;

/// Builds the skeleton workflow graph of `tree`.
///
/// Node ids are `plan`, `synthesize`, `tool_<n>`, `branch_<n>`, `parallel_<n>`,
/// `loop_<n>` and `join_<n>`; they are unique.
///
/// # Example
///
/// ```
/// use flowmem_mining::{tree_to_skeleton, ProcessTree};
///
/// let tree = ProcessTree::parse("->( 'find_user', X( 'cancel_order', 'return_items' ) )")?;
/// let graph = tree_to_skeleton(&tree);
/// assert_eq!(graph.entry, "plan");
/// assert_eq!(graph.exit, "synthesize");
/// assert!(graph.node("branch_2").is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn tree_to_skeleton(tree: &ProcessTree) -> WorkflowGraph {
    let mut builder = Builder { nodes: Vec::new(), edges: Vec::new(), n_ids: 0 };
    builder.nodes.push(node("plan", llm(LlmRole::Plan), "Parse the query into sub-tasks"));
    let end = builder.build(tree, Open { node: "plan".into(), label: None });
    builder.nodes.push(node("synthesize", llm(LlmRole::Synthesize), "Write the final answer"));
    builder.connect(end, "synthesize");
    WorkflowGraph {
        name: Some("mined skeleton".into()),
        nodes: builder.nodes,
        edges: builder.edges,
        entry: "plan".into(),
        exit: "synthesize".into(),
    }
}

/// Builds the skeleton of `tree` with the data flow mined from the same logs.
///
/// A dependency found in the data overrides a concurrency found in the control flow:
/// members of a `+` block whose tools take values from each other's results (or
/// arguments) are ordered as the data requires, and members that are independent stay
/// parallel. Then each tool node gets the bindings of its tool's arguments (see
/// [`BindingConfig`]); a result or argument source names the nearest upstream node
/// hinted with the source's tool, and a source with no such node is left out.
///
/// # Example
///
/// ```
/// use flowmem_mining::{BindingConfig, ProcessTree, mine_dataflow, tree_to_bound_skeleton};
/// use flowmem_model::{NodeKind, Record, ToolCall, ValueSource};
/// use serde_json::json;
///
/// let mut order = ToolCall::new("get_order", json!({"order_id": "W1"}))?;
/// order.result = Some(json!({"items": [{"product_id": "p7"}]}));
/// let product = ToolCall::new("get_product", json!({"product_id": "p7"}))?;
/// let record: Record = serde_json::from_value(json!({"id": "0", "query": "Where is order W1?"}))?;
/// let flow = mine_dataflow(&[Record { orchestration: vec![order, product], ..record }]);
///
/// let tree = ProcessTree::parse("+( 'get_order', 'get_product' )")?;
/// let graph = tree_to_bound_skeleton(&tree, &flow, &BindingConfig::skeleton());
/// assert!(graph.node("parallel_1").is_none(), "the data orders the block");
/// let NodeKind::Tool { bindings, .. } = &graph.node("tool_2").unwrap().kind else { unreachable!() };
/// let source = &bindings["product_id"].sources[0].source;
/// assert_eq!(source, &ValueSource::Result { node: "tool_1".into(), path: "$.items[*].product_id".into() });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn tree_to_bound_skeleton(tree: &ProcessTree, dataflow: &Dataflow, cfg: &BindingConfig) -> WorkflowGraph {
    let ordered = order_parallels(tree, dataflow, cfg);
    let mut graph = tree_to_skeleton(&ordered);
    fill_bindings(&mut graph, dataflow, cfg);
    graph
}

/// The open end of a built fragment: the node to continue from and the label the next
/// edge out of it must carry (a branch route, or a loop's `body` / `exit`).
struct Open {
    node: String,
    label: Option<String>,
}

struct Builder {
    nodes: Vec<GraphNode>,
    edges: Vec<Edge>,
    n_ids: usize,
}

impl Builder {
    fn id(&mut self, kind: &str) -> String {
        self.n_ids += 1;
        format!("{kind}_{}", self.n_ids)
    }

    fn connect(&mut self, from: Open, to: &str) {
        self.edges.push(Edge { from: from.node, to: to.to_owned(), kind: EdgeKind::Data, label: from.label });
    }

    fn add(&mut self, from: Open, node: GraphNode) -> String {
        let id = node.id.clone();
        self.nodes.push(node);
        self.connect(from, &id);
        id
    }

    fn build(&mut self, tree: &ProcessTree, from: Open) -> Open {
        match tree {
            ProcessTree::Tau => from,
            ProcessTree::Activity { label } => {
                let id = self.id("tool");
                let kind = NodeKind::Tool { hints: vec![label.clone()], instruction: None, bindings: BTreeMap::new() };
                let id = self.add(from, node(&id, kind, &format!("Call `{label}`")));
                Open { node: id, label: None }
            }
            ProcessTree::Operator { operator: Operator::Sequence, children } => {
                children.iter().fold(from, |open, child| self.build(child, open))
            }
            ProcessTree::Operator { operator: Operator::Xor, children } => {
                let routes = route_labels(children);
                let question = format!("Which route fits the query: {}?", routes.join(" | "));
                let branch = self.id("branch");
                let kind = NodeKind::Branch { condition: Condition::Judge { question } };
                let branch = self.add(from, node(&branch, kind, "Choose one alternative"));
                let join = self.id("join");
                let mut ends = Vec::new();
                for (child, route) in children.iter().zip(routes) {
                    ends.push(self.build(child, Open { node: branch.clone(), label: Some(route) }));
                }
                self.nodes.push(node(&join, NodeKind::Join {}, "Alternatives meet"));
                for end in ends {
                    self.connect(end, &join);
                }
                Open { node: join, label: None }
            }
            ProcessTree::Operator { operator: Operator::Parallel, children } => {
                let parallel = self.id("parallel");
                let parallel = self.add(from, node(&parallel, NodeKind::Parallel {}, "Run the members concurrently"));
                let join = self.id("join");
                let mut ends = Vec::new();
                for child in children {
                    ends.push(self.build(child, Open { node: parallel.clone(), label: None }));
                }
                self.nodes.push(node(&join, NodeKind::Join {}, "Wait for every member"));
                for end in ends {
                    self.connect(end, &join);
                }
                Open { node: join, label: None }
            }
            ProcessTree::Operator { operator: Operator::Loop, children } => {
                let tau = ProcessTree::Tau;
                let body = children.first().unwrap_or(&tau);
                let redo = children.get(1).unwrap_or(&tau);
                if *redo == ProcessTree::Tau {
                    return self.build_repeat(body, None, from);
                }
                let after_first = self.build(body, from);
                let question = format!("Must {} be retried?", describe(redo));
                let branch = self.id("branch");
                let kind = NodeKind::Branch { condition: Condition::Judge { question } };
                let branch = self.add(after_first, node(&branch, kind, "Decide whether to retry"));
                let join = self.id("join");
                let retried =
                    self.build_repeat(redo, Some(body), Open { node: branch.clone(), label: Some("retry".into()) });
                self.nodes.push(node(&join, NodeKind::Join {}, "Done or retried"));
                self.connect(Open { node: branch, label: Some("done".into()) }, &join);
                self.connect(retried, &join);
                Open { node: join, label: None }
            }
        }
    }

    /// A `loop` node whose body is `first` then `then` (when given), closed by a back edge.
    fn build_repeat(&mut self, first: &ProcessTree, then: Option<&ProcessTree>, from: Open) -> Open {
        let id = self.id("loop");
        let question = format!("Is {} done, with no further repetition needed?", describe(first));
        let kind = NodeKind::Loop { max_iterations: SKELETON_MAX_ITERATIONS, until: Condition::Judge { question } };
        let id = self.add(from, node(&id, kind, "Repeat until done"));
        let mut end = self.build(first, Open { node: id.clone(), label: Some("body".into()) });
        if let Some(then) = then {
            end = self.build(then, end);
        }
        self.edges.push(Edge { from: end.node, to: id.clone(), kind: EdgeKind::Back, label: end.label });
        Open { node: id, label: Some("exit".into()) }
    }
}

/// One unique route label per child: the first activity's name, `skip` for `tau`.
fn route_labels(children: &[ProcessTree]) -> Vec<String> {
    let mut labels: Vec<String> = Vec::with_capacity(children.len());
    for (idx, child) in children.iter().enumerate() {
        let base = match child.labels().first() {
            None => "skip".to_owned(),
            Some(first) => (*first).to_owned(),
        };
        let label = if labels.contains(&base) { format!("{base}#{idx}") } else { base };
        labels.push(label);
    }
    labels
}

fn describe(tree: &ProcessTree) -> String {
    match tree.labels().as_slice() {
        [] => "the step".to_owned(),
        [only] => format!("`{only}`"),
        [first, ..] => format!("the steps starting with `{first}`"),
    }
}

fn llm(role: LlmRole) -> NodeKind {
    NodeKind::Llm { role, instruction: None, model: None }
}

fn node(id: &str, kind: NodeKind, description: &str) -> GraphNode {
    GraphNode { id: id.to_owned(), kind, description: Some(description.to_owned()) }
}
