//! Typed graph edits: what the optimizer LLM may propose, and how each is applied.
//!
//! Applying a plan only changes the graph's shape; whether the result is executable
//! (`Valid(G, T)`) is decided by the executor's validator afterwards.
//!
//! Structural edits keep a valid graph valid by construction: a control-flow insertion
//! brings its labelled edges (a loop its `body`, `exit` and `back` edges, a branch its
//! routes), inserting a node on a loop's back edge keeps the back edge last, removing a
//! node reconnects its neighbours (closing the loop it ended, dropping the loop it was
//! the whole body of), and an edit that would leave a control node without its labels
//! (a node inserted after a branch alone, a condition whose routes a branch lacks) is
//! refused, naming the node, rather than applied.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use flowmem_exec::{LOOP_BODY, LOOP_EXIT};
use flowmem_model::{
    ArgBinding, BindingSource, Condition, Edge, EdgeKind, GraphNode, NodeKind, ValueSource, WorkflowGraph,
};

/// A refinement plan: the optimizer's reading of the feedback plus the edits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EditPlan {
    /// Why these edits should help, in one or two sentences.
    #[schemars(length(max = 300))]
    pub rationale: String,
    /// The edits, applied in order.
    #[schemars(length(min = 1, max = 6))]
    pub edits: Vec<GraphEdit>,
}

/// One graph edit (FlowScout's node-, edge-, control-flow- and prompt-level edits).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum GraphEdit {
    /// Inserts a new node on the edge `after → before`, or after `after` alone (then the
    /// node takes over `after`'s outgoing edges).
    AddNode {
        /// The new node; its id must not be in use.
        node: GraphNode,
        /// The node it follows.
        after: String,
        /// The node it precedes, when inserting on an existing edge.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before: Option<String>,
    },
    /// Removes a node and connects each of its predecessors to each of its successors.
    RemoveNode {
        /// The node to remove; never the entry or the exit.
        id: String,
    },
    /// Replaces what a node does, keeping its id and edges.
    ReplaceNode {
        /// The node to replace.
        id: String,
        /// The new node; its id is ignored and `id` is kept.
        node: GraphNode,
    },
    /// Adds a data edge.
    AddEdge {
        /// The source node.
        from: String,
        /// The target node.
        to: String,
        /// A route label, for an edge out of a branch or loop.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// Removes the edge `from → to`.
    RemoveEdge {
        /// The source node.
        from: String,
        /// The target node.
        to: String,
    },
    /// Moves one end (or both) of the edge `from → to`.
    ReconnectEdge {
        /// The current source.
        from: String,
        /// The current target.
        to: String,
        /// The new source, if it changes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_from: Option<String>,
        /// The new target, if it changes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        new_to: Option<String>,
    },
    /// Introduces a branch, a parallel block or a retry loop.
    InsertControl {
        /// Which control construct, and where.
        control: ControlInsert,
    },
    /// Changes a branch's condition or a loop's bound or stop condition.
    RefineControl {
        /// The branch or loop node.
        id: String,
        /// A new iteration bound, for a loop.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_iterations: Option<u32>,
        /// A new condition.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        condition: Option<Condition>,
    },
    /// Rewrites the instruction of an LLM or tool node.
    RewritePrompt {
        /// The node.
        id: String,
        /// The new instruction.
        #[schemars(length(max = 1200))]
        instruction: String,
    },
    /// Makes `source` the first source of a tool node's argument, so the executor tries
    /// it before the mined ones (which stay after it): the fix for an argument the
    /// feedback shows ungrounded or mismatched.
    RebindArgument {
        /// The tool node.
        node: String,
        /// The argument path, such as `order_id` or `item_ids[*]`.
        arg: String,
        /// Where the value should come from.
        source: ValueSource,
    },
}

/// A control construct to insert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "construct", rename_all = "snake_case")]
pub enum ControlInsert {
    /// Wraps one node in a retry loop: the node re-runs until `until` holds.
    RetryLoop {
        /// The node to retry.
        around: String,
        /// The largest number of attempts.
        max_iterations: u32,
        /// When to stop retrying.
        until: Condition,
    },
    /// Puts a judged choice before `before`: the judge takes the route to `before`
    /// (labelled `primary`) or to `alternative` (labelled `alternative`), which then
    /// continues to `before`'s successors.
    Branch {
        /// The node that becomes the primary route.
        before: String,
        /// The question the judge answers with `primary` or `alternative`.
        question: String,
        /// The node on the alternative route; its id must not be in use.
        alternative: GraphNode,
    },
    /// Runs a chain of nodes (each the only successor of the previous) concurrently.
    Parallel {
        /// The chain, in its current order.
        nodes: Vec<String>,
    },
}

/// Why an edit could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("edit {index} (`{op}`) cannot be applied: {reason}")]
pub struct EditError {
    /// The position of the edit in the plan, from 0.
    pub index: usize,
    /// The edit's operation name.
    pub op: &'static str,
    /// What is wrong, naming the node or edge.
    pub reason: EditProblem,
}

/// What is wrong with one edit, naming the node or edge concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EditProblem {
    /// The edit names a node the graph does not have.
    #[error("no node `{node}`")]
    NoNode {
        /// The missing node's id.
        node: String,
    },
    /// The edit names an edge the graph does not have.
    #[error("no edge `{from}` → `{to}`")]
    NoEdge {
        /// The edge's source.
        from: String,
        /// The edge's target.
        to: String,
    },
    /// A node is to be inserted on an edge the graph does not have.
    #[error("no edge `{from}` → `{to}` to insert `{node}` on")]
    NoEdgeToInsertOn {
        /// The edge's source.
        from: String,
        /// The edge's target.
        to: String,
        /// The node to insert.
        node: String,
    },
    /// The edge to add is there already.
    #[error("edge `{from}` → `{to}` already exists")]
    EdgeExists {
        /// The edge's source.
        from: String,
        /// The edge's target.
        to: String,
    },
    /// A new node's id is empty.
    #[error("a new node needs a non-empty id")]
    EmptyId,
    /// A new node's id is taken.
    #[error("node id `{node}` is already in use")]
    IdInUse {
        /// The id.
        node: String,
    },
    /// The edit would remove the graph's entry or exit.
    #[error("node `{node}` is the entry or exit and cannot be removed")]
    RemovesEndpoint {
        /// The entry or exit node.
        node: String,
    },
    /// A prompt rewrite names a control node.
    #[error("node `{node}` is a control node and has no prompt")]
    NoPrompt {
        /// The control node.
        node: String,
    },
    /// A parallel block of fewer than two nodes.
    #[error("a parallel block needs at least two nodes")]
    ParallelTooSmall,
    /// Two consecutive nodes of a parallel block are not a plain chain link.
    #[error("`{from}` → `{to}` is not a plain chain link")]
    NotAChainLink {
        /// The earlier node.
        from: String,
        /// The next node.
        to: String,
    },
    /// A node that cannot run as a member of a parallel block.
    #[error("`{node}` cannot be a member of a parallel block: it is a {reason} node")]
    ParallelMember {
        /// The node.
        node: String,
        /// What it is.
        reason: &'static str,
    },
    /// A parallel block would start at the entry or end at the exit.
    #[error("a parallel block cannot start at the entry or end at the exit")]
    ParallelAtEndpoint,
    /// A refinement gives a branch an iteration bound.
    #[error("node `{node}` is a branch and has no iteration bound")]
    BranchBound {
        /// The branch.
        node: String,
    },
    /// A refinement names a node that is neither a branch nor a loop.
    #[error("node `{node}` is not a branch or loop")]
    NotControl {
        /// The node.
        node: String,
    },
    /// A rebinding names a node that is not a tool node.
    #[error("node `{node}` is not a tool node and has no arguments to bind")]
    NotATool {
        /// The node.
        node: String,
    },
    /// A rebinding names no argument.
    #[error("the rebinding of node `{node}` names no argument")]
    NoArgument {
        /// The node.
        node: String,
    },
    /// A node is to be inserted after a control node alone; it must go on one of the
    /// control node's edges, which carry its route labels.
    #[error("node `{node}` is a {kind} node: insert on one of its edges (give `before`)")]
    AfterControl {
        /// The control node.
        node: String,
        /// Its kind.
        kind: &'static str,
    },
    /// `remove_node` names a control node, whose routes cannot simply be bridged.
    #[error("node `{node}` is a {kind} node; only LLM and tool nodes can be removed")]
    RemovesControl {
        /// The control node.
        node: String,
        /// Its kind.
        kind: &'static str,
    },
    /// A branch is given a condition whose routes it does not have.
    #[error("condition `{condition}` needs the routes {needs} out of branch `{node}`, which has {has}")]
    ConditionRoutes {
        /// The branch.
        node: String,
        /// The condition's name.
        condition: &'static str,
        /// The labels the condition chooses among.
        needs: String,
        /// The labels the branch's edges carry.
        has: String,
    },
    /// A new or replacing node of a control kind: control flow comes in with
    /// `insert_control`, which brings its edges and labels.
    #[error("node `{node}` is a control node; add control flow with `insert_control`")]
    ControlNode {
        /// The node's id.
        node: String,
    },
    /// A loop bound of zero: the loop would never run its body.
    #[error("a loop needs `max_iterations` of at least 1")]
    ZeroBound,
    /// Removing the node would end a labelled route in a loop's back edge.
    #[error("node `{node}` cannot be removed: the route `{route}` into it would end a loop body without its label")]
    RouteEndsLoop {
        /// The node.
        node: String,
        /// The route, as `from [label]`.
        route: String,
    },
    /// A retry loop cannot wrap this node.
    #[error("node `{node}` cannot be wrapped in a retry loop: {reason}")]
    CannotWrap {
        /// The node.
        node: String,
        /// Why.
        reason: &'static str,
    },
    /// A branch cannot be put before a control or join node.
    #[error("a branch cannot go before `{node}`, a {kind} node; put it before an LLM or tool node")]
    CannotBranch {
        /// The node.
        node: String,
        /// Its kind.
        kind: &'static str,
    },
    /// A branch's alternative must be an LLM or tool node.
    #[error("the alternative `{node}` of a branch must be an LLM or tool node")]
    ControlAlternative {
        /// The alternative node's id.
        node: String,
    },
    /// An edge out of a loop: a loop has exactly its `body` and `exit` edges.
    #[error("node `{node}` is a loop; it keeps exactly its `body` and `exit` edges")]
    EdgeFromLoop {
        /// The loop.
        node: String,
    },
    /// An edge out of a branch without a route label, or a label out of a plain node.
    #[error("an edge out of `{node}` {problem}")]
    EdgeLabel {
        /// The edge's source.
        node: String,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Applies every edit of `plan` to a copy of `graph`.
///
/// # Errors
///
/// The first edit that names a missing node or edge, reuses an id, or would remove the
/// entry or exit, as an [`EditError`] with its index. `graph` is never modified.
pub fn apply_plan(graph: &WorkflowGraph, plan: &EditPlan) -> Result<WorkflowGraph, EditError> {
    let mut res = graph.clone();
    for (index, edit) in plan.edits.iter().enumerate() {
        apply_in_place(&mut res, edit).map_err(|reason| EditError { index, op: edit.op_name(), reason })?;
    }
    Ok(res)
}

/// Applies one edit to a copy of `graph`: the step of edit-at-a-time planning.
///
/// # Errors
///
/// What is wrong with the edit on this graph, naming the node or edge. `graph` is never
/// modified.
///
/// # Example
///
/// ```
/// use flowmem_optimize::{GraphEdit, apply_edit};
/// # let graph: flowmem_model::WorkflowGraph = serde_json::from_str(r#"{"nodes": [
/// #   {"id": "plan", "kind": "llm", "role": "plan"}, {"id": "t", "kind": "tool"},
/// #   {"id": "synth", "kind": "llm", "role": "synthesize"}],
/// #   "edges": [{"from": "plan", "to": "t"}, {"from": "t", "to": "synth"}],
/// #   "entry": "plan", "exit": "synth"}"#)?;
/// let edited = apply_edit(&graph, &GraphEdit::RemoveNode { id: "t".into() })?;
/// assert!(edited.node("t").is_none());
/// assert!(apply_edit(&edited, &GraphEdit::RemoveNode { id: "t".into() }).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn apply_edit(graph: &WorkflowGraph, edit: &GraphEdit) -> Result<WorkflowGraph, EditProblem> {
    let mut res = graph.clone();
    apply_in_place(&mut res, edit)?;
    Ok(res)
}

impl GraphEdit {
    /// The edit's `op` tag, as serialised.
    #[must_use]
    pub fn op_name(&self) -> &'static str {
        match self {
            GraphEdit::AddNode { .. } => "add_node",
            GraphEdit::RemoveNode { .. } => "remove_node",
            GraphEdit::ReplaceNode { .. } => "replace_node",
            GraphEdit::AddEdge { .. } => "add_edge",
            GraphEdit::RemoveEdge { .. } => "remove_edge",
            GraphEdit::ReconnectEdge { .. } => "reconnect_edge",
            GraphEdit::InsertControl { .. } => "insert_control",
            GraphEdit::RefineControl { .. } => "refine_control",
            GraphEdit::RewritePrompt { .. } => "rewrite_prompt",
            GraphEdit::RebindArgument { .. } => "rebind_argument",
        }
    }
}

fn apply_in_place(graph: &mut WorkflowGraph, edit: &GraphEdit) -> Result<(), EditProblem> {
    apply_one(graph, edit)?;
    forget_lost_routes(graph);
    Ok(())
}

/// Drops the mined counts (`taken`, `cued`), cues and nearest queries' examples of routes an edit
/// removed from their branch: they describe no route any more.
fn forget_lost_routes(graph: &mut WorkflowGraph) {
    let routes: std::collections::HashSet<(String, String)> = graph
        .edges
        .iter()
        .filter(|edge| edge.kind != EdgeKind::Back)
        .filter_map(|edge| Some((edge.from.clone(), edge.label.clone()?)))
        .collect();
    for node in &mut graph.nodes {
        if let NodeKind::Branch { taken, cues, nearest, cued, .. } = &mut node.kind {
            taken.retain(|label, _| routes.contains(&(node.id.clone(), label.clone())));
            cues.retain(|label, _| routes.contains(&(node.id.clone(), label.clone())));
            nearest.retain(|label, _| routes.contains(&(node.id.clone(), label.clone())));
            cued.retain(|label, _| routes.contains(&(node.id.clone(), label.clone())));
        }
    }
}

fn apply_one(graph: &mut WorkflowGraph, edit: &GraphEdit) -> Result<(), EditProblem> {
    match edit {
        GraphEdit::AddNode { node, after, before } => add_node(graph, node, after, before.as_deref()),
        GraphEdit::RemoveNode { id } => remove_node(graph, id),
        GraphEdit::ReplaceNode { id, node } => {
            if let Some(kind) = control_kind(graph, id).or_else(|| join_kind(graph, id)) {
                return Err(EditProblem::RemovesControl { node: id.clone(), kind });
            }
            require_step(node)?;
            let target = node_mut(graph, id)?;
            target.kind = node.kind.clone();
            target.description = node.description.clone();
            Ok(())
        }
        GraphEdit::AddEdge { from, to, label } => {
            require_node(graph, from)?;
            require_node(graph, to)?;
            if edge_index(graph, from, to).is_some() {
                return Err(EditProblem::EdgeExists { from: from.clone(), to: to.clone() });
            }
            check_new_edge_label(graph, from, label.as_deref())?;
            graph.edges.push(Edge { from: from.clone(), to: to.clone(), kind: EdgeKind::Data, label: label.clone() });
            Ok(())
        }
        GraphEdit::RemoveEdge { from, to } => {
            let idx = edge_index(graph, from, to).ok_or_else(|| no_edge(from, to))?;
            graph.edges.remove(idx);
            Ok(())
        }
        GraphEdit::ReconnectEdge { from, to, new_from, new_to } => {
            let idx = edge_index(graph, from, to).ok_or_else(|| no_edge(from, to))?;
            if let Some(new_from) = new_from {
                require_node(graph, new_from)?;
                graph.edges[idx].from = new_from.clone();
            }
            if let Some(new_to) = new_to {
                require_node(graph, new_to)?;
                graph.edges[idx].to = new_to.clone();
            }
            Ok(())
        }
        GraphEdit::InsertControl { control } => insert_control(graph, control),
        GraphEdit::RefineControl { id, max_iterations, condition } => {
            if let Some(condition) = condition {
                check_condition_routes(graph, id, condition)?;
            }
            refine_control(node_mut(graph, id)?, id, *max_iterations, condition.as_ref())
        }
        GraphEdit::RewritePrompt { id, instruction } => match &mut node_mut(graph, id)?.kind {
            NodeKind::Llm { instruction: slot, .. } | NodeKind::Tool { instruction: slot, .. } => {
                *slot = Some(instruction.clone());
                Ok(())
            }
            _ => Err(EditProblem::NoPrompt { node: id.clone() }),
        },
        GraphEdit::RebindArgument { node, arg, source } => rebind_argument(graph, node, arg, source),
    }
}

fn rebind_argument(graph: &mut WorkflowGraph, node: &str, arg: &str, source: &ValueSource) -> Result<(), EditProblem> {
    if let Some(from) = source.node() {
        require_node(graph, from)?;
    }
    if arg.trim().is_empty() {
        return Err(EditProblem::NoArgument { node: node.to_owned() });
    }
    let NodeKind::Tool { bindings, .. } = &mut node_mut(graph, node)?.kind else {
        return Err(EditProblem::NotATool { node: node.to_owned() });
    };
    let binding = bindings.entry(arg.to_owned()).or_insert_with(|| ArgBinding {
        observed: 0,
        sources: Vec::new(),
        requires: Vec::new(),
        same_length_as: None,
        paired_with: None,
    });
    binding.sources.retain(|kept| kept.source != *source);
    // Support counts what the logs showed; a source the optimizer chose has none of its own.
    binding.sources.insert(0, BindingSource { source: source.clone(), support: 0, each: None });
    Ok(())
}

fn add_node(graph: &mut WorkflowGraph, node: &GraphNode, after: &str, before: Option<&str>) -> Result<(), EditProblem> {
    require_free_id(graph, &node.id)?;
    require_step(node)?;
    require_node(graph, after)?;
    match before {
        Some(before) => {
            let idx = edge_index(graph, after, before).ok_or_else(|| EditProblem::NoEdgeToInsertOn {
                from: after.to_owned(),
                to: before.to_owned(),
                node: node.id.clone(),
            })?;
            let old = graph.edges.remove(idx);
            // The first half keeps the route label (a branch's choice, a loop's `body`);
            // on a loop's back edge the new node joins the body, so the back edge stays
            // the last one.
            let (first_kind, second_kind) = match old.kind {
                EdgeKind::Back => (EdgeKind::Data, EdgeKind::Back),
                kind => (kind, EdgeKind::Data),
            };
            graph.edges.push(Edge { from: old.from, to: node.id.clone(), kind: first_kind, label: old.label });
            graph.edges.push(Edge { from: node.id.clone(), to: before.to_owned(), kind: second_kind, label: None });
        }
        None => {
            if let Some(kind) = control_kind(graph, after) {
                return Err(EditProblem::AfterControl { node: after.to_owned(), kind });
            }
            for edge in graph.edges.iter_mut().filter(|e| e.from == after) {
                // A back edge moves too: the new node becomes the body's last node.
                edge.from = node.id.clone();
            }
            graph.edges.push(Edge { from: after.to_owned(), to: node.id.clone(), kind: EdgeKind::Data, label: None });
            if graph.exit == after {
                graph.exit = node.id.clone();
            }
        }
    }
    graph.nodes.push(node.clone());
    Ok(())
}

fn remove_node(graph: &mut WorkflowGraph, id: &str) -> Result<(), EditProblem> {
    require_node(graph, id)?;
    if graph.entry == id || graph.exit == id {
        return Err(EditProblem::RemovesEndpoint { node: id.to_owned() });
    }
    if let Some(kind) = control_kind(graph, id).or_else(|| join_kind(graph, id)) {
        return Err(EditProblem::RemovesControl { node: id.to_owned(), kind });
    }
    if let Some(route) = route_into_back_edge(graph, id) {
        return Err(EditProblem::RouteEndsLoop { node: id.to_owned(), route });
    }
    // A self-edge is neither a way in nor a way out: bridging it would point the
    // predecessors back at the removed node.
    let incoming: Vec<Edge> =
        graph.edges.iter().filter(|e| e.to == id && e.from != id && e.kind != EdgeKind::Back).cloned().collect();
    let outgoing: Vec<Edge> = graph.edges.iter().filter(|e| e.from == id && e.to != id).cloned().collect();
    graph.edges.retain(|e| e.from != id && e.to != id);
    graph.nodes.retain(|n| n.id != id);
    for pred in &incoming {
        for succ in &outgoing {
            if pred.from == succ.to {
                // The loop whose whole body this was; it goes below.
                continue;
            }
            let bridge = if succ.kind == EdgeKind::Back {
                // The body's last node: its predecessor closes the loop now.
                Edge { from: pred.from.clone(), to: succ.to.clone(), kind: EdgeKind::Back, label: None }
            } else {
                // The predecessor's label keeps a branch route or loop body pointing at the bypass.
                Edge { from: pred.from.clone(), to: succ.to.clone(), kind: pred.kind, label: pred.label.clone() }
            };
            // A removed member of a parallel block leaves the others; a direct fork → join
            // edge would only add an empty member.
            let empty_member = bridge.kind != EdgeKind::Back
                && matches!(graph.node(&pred.from).map(|n| &n.kind), Some(NodeKind::Parallel {}))
                && matches!(graph.node(&succ.to).map(|n| &n.kind), Some(NodeKind::Join {}))
                && graph.edges.iter().any(|e| e.from == pred.from);
            let exists =
                graph.edges.iter().any(|e| e.from == bridge.from && e.to == bridge.to && e.label == bridge.label);
            if !empty_member && !exists {
                graph.edges.push(bridge);
            }
        }
    }
    drop_bodyless_loops(graph);
    Ok(())
}

/// Whether `id` may be removed (the narrowed plan schema offers only these).
pub(crate) fn can_remove(graph: &WorkflowGraph, id: &str) -> bool {
    graph.node(id).is_some()
        && graph.entry != id
        && graph.exit != id
        && control_kind(graph, id).or_else(|| join_kind(graph, id)).is_none()
        && route_into_back_edge(graph, id).is_none()
}

/// The labelled route into `id` (a branch's choice, a loop's `exit`) when `id` also ends
/// a loop body: removing `id` would turn that route into a back edge, which carries no
/// label, and leave its branch or loop without it.
fn route_into_back_edge(graph: &WorkflowGraph, id: &str) -> Option<String> {
    let back_to: Vec<&str> = graph.outgoing(id).filter(|e| e.kind == EdgeKind::Back).map(|e| e.to.as_str()).collect();
    if back_to.is_empty() {
        return None;
    }
    // The loop's own `body` edge is no such route: a whole body removed takes its loop
    // along.
    let route = graph
        .incoming(id)
        .find(|e| e.kind != EdgeKind::Back && e.label.is_some() && !back_to.contains(&e.from.as_str()))?;
    Some(format!("{} [{}]", route.from, route.label.as_deref().unwrap_or_default()))
}

/// Removes every loop that has lost its body (its body was one node, now removed),
/// connecting what led into it to what followed it.
fn drop_bodyless_loops(graph: &mut WorkflowGraph) {
    let bodyless: Vec<String> = graph
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Loop { .. }))
        .filter(|n| !graph.edges.iter().any(|e| e.from == n.id && e.label.as_deref() == Some(LOOP_BODY)))
        .map(|n| n.id.clone())
        .collect();
    for id in bodyless {
        let incoming: Vec<Edge> =
            graph.edges.iter().filter(|e| e.to == id && e.kind != EdgeKind::Back).cloned().collect();
        let exits: Vec<String> = graph
            .edges
            .iter()
            .filter(|e| e.from == id && e.label.as_deref() == Some(LOOP_EXIT))
            .map(|e| e.to.clone())
            .collect();
        graph.edges.retain(|e| e.from != id && e.to != id);
        graph.nodes.retain(|n| n.id != id);
        for pred in &incoming {
            for exit in &exits {
                if !graph.edges.iter().any(|e| e.from == pred.from && e.to == *exit && e.label == pred.label) {
                    graph.edges.push(Edge { to: exit.clone(), ..pred.clone() });
                }
            }
        }
        if graph.entry == id
            && let [exit] = exits.as_slice()
        {
            graph.entry = exit.clone();
        }
    }
}

/// The kind of `id` when it is a control node whose edges carry meaning of their own
/// (a branch's routes, a loop's body and exit, a parallel block's members).
fn control_kind(graph: &WorkflowGraph, id: &str) -> Option<&'static str> {
    match graph.node(id).map(|n| &n.kind) {
        Some(NodeKind::Branch { .. }) => Some("branch"),
        Some(NodeKind::Loop { .. }) => Some("loop"),
        Some(NodeKind::Parallel {}) => Some("parallel"),
        _ => None,
    }
}

/// New nodes are LLM or tool nodes: control flow comes in with `insert_control`, which
/// brings its edges.
fn require_step(node: &GraphNode) -> Result<(), EditProblem> {
    match node.kind {
        NodeKind::Llm { .. } | NodeKind::Tool { .. } => Ok(()),
        _ => Err(EditProblem::ControlNode { node: node.id.clone() }),
    }
}

/// `join` when `id` is a join node: a branch before it would split a parallel block.
fn join_kind(graph: &WorkflowGraph, id: &str) -> Option<&'static str> {
    matches!(graph.node(id).map(|n| &n.kind), Some(NodeKind::Join {})).then_some("join")
}

/// Whether a retry loop may wrap `id` (the narrowed plan schema offers only these).
pub(crate) fn can_retry(graph: &WorkflowGraph, id: &str) -> bool {
    retry_obstacle(graph, id).is_none()
}

/// Why `id` cannot be wrapped in a retry loop, if it cannot: a loop re-runs one LLM or
/// tool node that has one way on and does not itself end a loop's body.
fn retry_obstacle(graph: &WorkflowGraph, id: &str) -> Option<&'static str> {
    if control_kind(graph, id).or_else(|| join_kind(graph, id)).is_some() {
        return Some("only an LLM or tool node can be retried");
    }
    if graph.exit == id {
        return Some("it is the exit");
    }
    if graph.entry == id {
        return Some("it is the entry");
    }
    let forward = graph.outgoing(id).filter(|e| e.kind != EdgeKind::Back).count();
    let back = graph.outgoing(id).any(|e| e.kind == EdgeKind::Back);
    match (forward, back) {
        (1, false) => None,
        (_, true) => Some("it ends another loop's body"),
        _ => Some("a retried node needs exactly one successor"),
    }
}

/// A new edge out of `from` must carry a route label exactly when `from` is a branch; a
/// loop takes no new edge.
fn check_new_edge_label(graph: &WorkflowGraph, from: &str, label: Option<&str>) -> Result<(), EditProblem> {
    let problem = match (control_kind(graph, from), label) {
        (Some("loop"), _) => return Err(EditProblem::EdgeFromLoop { node: from.to_owned() }),
        (Some("branch"), None) => "needs a route label, because it leaves a branch",
        (Some("branch"), Some(label)) if graph.outgoing(from).any(|e| e.label.as_deref() == Some(label)) => {
            "repeats a route label of the branch"
        }
        (Some("branch"), Some(label)) if label.trim().is_empty() => "needs a non-empty route label",
        (Some(_), _) | (None, None) => return Ok(()),
        (None, Some(_)) => "takes no route label, because only branches and loops have routes",
    };
    Err(EditProblem::EdgeLabel { node: from.to_owned(), problem })
}

/// A branch's new condition must choose among the routes the branch has.
fn check_condition_routes(graph: &WorkflowGraph, id: &str, condition: &Condition) -> Result<(), EditProblem> {
    if !matches!(graph.node(id).map(|n| &n.kind), Some(NodeKind::Branch { .. })) {
        return Ok(());
    }
    let Some((needs, name)) = flowmem_exec::condition_routes(condition) else { return Ok(()) };
    let mut has: Vec<&str> =
        graph.outgoing(id).filter(|e| e.kind != EdgeKind::Back).filter_map(|e| e.label.as_deref()).collect();
    has.sort_unstable();
    let mut wanted = needs.to_vec();
    wanted.sort_unstable();
    if has == wanted {
        return Ok(());
    }
    Err(EditProblem::ConditionRoutes {
        node: id.to_owned(),
        condition: name,
        needs: needs.join(", "),
        has: if has.is_empty() { "none".to_owned() } else { has.join(", ") },
    })
}

fn insert_control(graph: &mut WorkflowGraph, control: &ControlInsert) -> Result<(), EditProblem> {
    match control {
        ControlInsert::RetryLoop { around, max_iterations, until } => {
            require_node(graph, around)?;
            if *max_iterations == 0 {
                return Err(EditProblem::ZeroBound);
            }
            if let Some(reason) = retry_obstacle(graph, around) {
                return Err(EditProblem::CannotWrap { node: around.clone(), reason });
            }
            let loop_id = fresh_id(graph, &format!("retry_{around}"));
            redirect_incoming(graph, around, &loop_id);
            for edge in graph.edges.iter_mut().filter(|e| e.from == *around && e.kind != EdgeKind::Back) {
                edge.from = loop_id.clone();
                edge.label = Some("exit".to_owned());
            }
            graph.edges.push(labelled(&loop_id, around, EdgeKind::Data, "body"));
            graph.edges.push(Edge { from: around.clone(), to: loop_id.clone(), kind: EdgeKind::Back, label: None });
            let node = GraphNode {
                id: loop_id.clone(),
                kind: NodeKind::Loop { max_iterations: *max_iterations, until: until.clone() },
                description: Some(format!("retries `{around}`")),
            };
            replace_endpoint(graph, around, &loop_id);
            graph.nodes.push(node);
            Ok(())
        }
        ControlInsert::Branch { before, question, alternative } => {
            require_node(graph, before)?;
            require_free_id(graph, &alternative.id)?;
            if let Some(kind) = control_kind(graph, before).or_else(|| join_kind(graph, before)) {
                return Err(EditProblem::CannotBranch { node: before.clone(), kind });
            }
            if !matches!(alternative.kind, NodeKind::Llm { .. } | NodeKind::Tool { .. }) {
                return Err(EditProblem::ControlAlternative { node: alternative.id.clone() });
            }
            let branch_id = fresh_id(graph, &format!("branch_{before}"));
            redirect_incoming(graph, before, &branch_id);
            // The alternative continues where `before` would have, closing the loop
            // `before` ends, if any.
            let successors: Vec<Edge> = graph.edges.iter().filter(|e| e.from == *before).cloned().collect();
            for succ in successors {
                graph.edges.push(Edge { from: alternative.id.clone(), to: succ.to, kind: succ.kind, label: None });
            }
            graph.edges.push(labelled(&branch_id, before, EdgeKind::Data, "primary"));
            graph.edges.push(labelled(&branch_id, &alternative.id, EdgeKind::Data, "alternative"));
            if graph.entry == *before {
                graph.entry = branch_id.clone();
            }
            graph.nodes.push(GraphNode {
                id: branch_id,
                kind: NodeKind::Branch {
                    condition: Condition::Judge { question: question.clone() },
                    taken: std::collections::BTreeMap::new(),
                    cues: std::collections::BTreeMap::new(),
                    nearest: std::collections::BTreeMap::new(),
                    cued: std::collections::BTreeMap::new(),
                },
                description: None,
            });
            graph.nodes.push(alternative.clone());
            Ok(())
        }
        ControlInsert::Parallel { nodes } => insert_parallel(graph, nodes),
    }
}

fn insert_parallel(graph: &mut WorkflowGraph, chain: &[String]) -> Result<(), EditProblem> {
    if chain.len() < 2 {
        return Err(EditProblem::ParallelTooSmall);
    }
    for id in chain {
        require_node(graph, id)?;
        if let Some(kind) = control_kind(graph, id).or_else(|| join_kind(graph, id)) {
            return Err(EditProblem::ParallelMember { node: id.clone(), reason: kind });
        }
    }
    for pair in chain.windows(2) {
        let outgoing: Vec<&Edge> = graph.outgoing(&pair[0]).collect();
        if outgoing.len() != 1 || outgoing[0].to != pair[1] {
            return Err(EditProblem::NotAChainLink { from: pair[0].clone(), to: pair[1].clone() });
        }
    }
    let (first, last) = (&chain[0], &chain[chain.len() - 1]);
    if graph.entry == *first || graph.exit == *last {
        return Err(EditProblem::ParallelAtEndpoint);
    }
    let fork = fresh_id(graph, &format!("parallel_{first}"));
    let join = fresh_id(graph, &format!("join_{last}"));
    graph.edges.retain(|e| !chain.windows(2).any(|pair| e.from == pair[0] && e.to == pair[1]));
    redirect_incoming(graph, first, &fork);
    // Whatever followed the chain follows the join, a loop's back edge included when the
    // chain ended a loop body.
    for edge in graph.edges.iter_mut().filter(|e| e.from == *last) {
        edge.from = join.clone();
    }
    for id in chain {
        graph.edges.push(Edge { from: fork.clone(), to: id.clone(), kind: EdgeKind::Data, label: None });
        graph.edges.push(Edge { from: id.clone(), to: join.clone(), kind: EdgeKind::Data, label: None });
    }
    graph.nodes.push(GraphNode { id: fork, kind: NodeKind::Parallel {}, description: None });
    graph.nodes.push(GraphNode { id: join, kind: NodeKind::Join {}, description: None });
    Ok(())
}

fn refine_control(
    node: &mut GraphNode,
    id: &str,
    new_bound: Option<u32>,
    new_condition: Option<&Condition>,
) -> Result<(), EditProblem> {
    match &mut node.kind {
        NodeKind::Loop { max_iterations, until } => {
            if new_bound == Some(0) {
                return Err(EditProblem::ZeroBound);
            }
            if let Some(bound) = new_bound {
                *max_iterations = bound;
            }
            if let Some(condition) = new_condition {
                *until = condition.clone();
            }
            Ok(())
        }
        NodeKind::Branch { condition, .. } => {
            if new_bound.is_some() {
                return Err(EditProblem::BranchBound { node: id.to_owned() });
            }
            if let Some(new) = new_condition {
                *condition = new.clone();
            }
            Ok(())
        }
        _ => Err(EditProblem::NotControl { node: id.to_owned() }),
    }
}

fn labelled(from: &str, to: &str, kind: EdgeKind, label: &str) -> Edge {
    Edge { from: from.to_owned(), to: to.to_owned(), kind, label: Some(label.to_owned()) }
}

/// Points every non-back edge entering `old` at `new` instead.
fn redirect_incoming(graph: &mut WorkflowGraph, old: &str, new: &str) {
    for edge in graph.edges.iter_mut().filter(|e| e.to == old && e.kind != EdgeKind::Back) {
        edge.to = new.to_owned();
    }
}

/// Keeps the entry pointing at the construct that now wraps `old`.
fn replace_endpoint(graph: &mut WorkflowGraph, old: &str, new: &str) {
    if graph.entry == old {
        graph.entry = new.to_owned();
    }
}

fn node_mut<'g>(graph: &'g mut WorkflowGraph, id: &str) -> Result<&'g mut GraphNode, EditProblem> {
    graph.nodes.iter_mut().find(|n| n.id == id).ok_or_else(|| EditProblem::NoNode { node: id.to_owned() })
}

fn require_node(graph: &WorkflowGraph, id: &str) -> Result<(), EditProblem> {
    match graph.node(id) {
        Some(_) => Ok(()),
        None => Err(EditProblem::NoNode { node: id.to_owned() }),
    }
}

fn require_free_id(graph: &WorkflowGraph, id: &str) -> Result<(), EditProblem> {
    if id.is_empty() {
        return Err(EditProblem::EmptyId);
    }
    match graph.node(id) {
        Some(_) => Err(EditProblem::IdInUse { node: id.to_owned() }),
        None => Ok(()),
    }
}

fn no_edge(from: &str, to: &str) -> EditProblem {
    EditProblem::NoEdge { from: from.to_owned(), to: to.to_owned() }
}

fn edge_index(graph: &WorkflowGraph, from: &str, to: &str) -> Option<usize> {
    graph.edges.iter().position(|e| e.from == from && e.to == to)
}

fn fresh_id(graph: &WorkflowGraph, base: &str) -> String {
    if graph.node(base).is_none() {
        return base.to_owned();
    }
    (2..).map(|n| format!("{base}_{n}")).find(|id| graph.node(id).is_none()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use flowmem_model::{
        ArgBinding, BindingSource, Condition, EdgeKind, GraphNode, LlmRole, NodeKind, ValueSource, WorkflowGraph,
    };

    use crate::edit::{ControlInsert, EditPlan, EditProblem, GraphEdit, apply_plan};

    fn tool(id: &str) -> GraphNode {
        GraphNode {
            id: id.into(),
            kind: NodeKind::Tool { hints: vec![], instruction: None, bindings: Default::default() },
            description: None,
        }
    }

    fn llm(id: &str, role: LlmRole) -> GraphNode {
        GraphNode { id: id.into(), kind: NodeKind::Llm { role, instruction: None, model: None }, description: None }
    }

    /// plan → t1 → t2 → synth
    fn chain() -> WorkflowGraph {
        let ids = ["plan", "t1", "t2", "synth"];
        WorkflowGraph {
            name: None,
            nodes: vec![llm("plan", LlmRole::Plan), tool("t1"), tool("t2"), llm("synth", LlmRole::Synthesize)],
            edges: ids
                .windows(2)
                .map(|w| flowmem_model::Edge { from: w[0].into(), to: w[1].into(), kind: EdgeKind::Data, label: None })
                .collect(),
            entry: "plan".into(),
            exit: "synth".into(),
            queries: Vec::new(),
        }
    }

    fn apply(edits: Vec<GraphEdit>) -> Result<WorkflowGraph, crate::EditError> {
        apply_plan(&chain(), &EditPlan { rationale: String::new(), edits })
    }

    fn edges(graph: &WorkflowGraph) -> Vec<String> {
        let mut res: Vec<String> = graph
            .edges
            .iter()
            .map(|e| {
                let kind = if e.kind == EdgeKind::Back { " (back)" } else { "" };
                match &e.label {
                    Some(label) => format!("{}-[{label}]->{}{kind}", e.from, e.to),
                    None => format!("{}->{}{kind}", e.from, e.to),
                }
            })
            .collect();
        res.sort();
        res
    }

    #[test]
    fn add_node_on_an_edge() {
        let graph = apply(vec![GraphEdit::AddNode {
            node: llm("v", LlmRole::Verify),
            after: "t1".into(),
            before: Some("t2".into()),
        }])
        .unwrap();
        assert_eq!(edges(&graph), ["plan->t1", "t1->v", "t2->synth", "v->t2"]);
    }

    #[test]
    fn add_node_after_the_exit_moves_the_exit() {
        let graph =
            apply(vec![GraphEdit::AddNode { node: llm("v", LlmRole::Verify), after: "synth".into(), before: None }])
                .unwrap();
        assert_eq!(graph.exit, "v");
        assert!(edges(&graph).contains(&"synth->v".to_owned()));
    }

    #[test]
    fn remove_node_bypasses_it() {
        let graph = apply(vec![GraphEdit::RemoveNode { id: "t1".into() }]).unwrap();
        assert_eq!(edges(&graph), ["plan->t2", "t2->synth"]);
        assert!(graph.node("t1").is_none());
    }

    #[test]
    fn entry_and_exit_cannot_be_removed() {
        let err = apply(vec![GraphEdit::RemoveNode { id: "plan".into() }]).unwrap_err();
        assert_eq!(err.index, 0);
        assert!(err.to_string().contains("`plan`"), "{err}");
        assert_eq!(err.reason, EditProblem::RemovesEndpoint { node: "plan".into() });
    }

    #[test]
    fn retry_loop_wraps_a_node() {
        let control =
            ControlInsert::RetryLoop { around: "t1".into(), max_iterations: 3, until: Condition::ToolSucceeded {} };
        let graph = apply(vec![GraphEdit::InsertControl { control }]).unwrap();
        assert_eq!(
            edges(&graph),
            ["plan->retry_t1", "retry_t1-[body]->t1", "retry_t1-[exit]->t2", "t1->retry_t1 (back)", "t2->synth"]
        );
    }

    #[test]
    fn branch_adds_an_alternative_route() {
        let control = ControlInsert::Branch {
            before: "t2".into(),
            question: "Is the order id known?".into(),
            alternative: tool("lookup"),
        };
        let graph = apply(vec![GraphEdit::InsertControl { control }]).unwrap();
        assert_eq!(
            edges(&graph),
            [
                "branch_t2-[alternative]->lookup",
                "branch_t2-[primary]->t2",
                "lookup->synth",
                "plan->t1",
                "t1->branch_t2",
                "t2->synth"
            ]
        );
    }

    #[test]
    fn an_edit_that_takes_a_route_away_drops_its_mined_count() {
        let control = ControlInsert::Branch {
            before: "t2".into(),
            question: "Is the order id known?".into(),
            alternative: tool("lookup"),
        };
        let mut graph = apply(vec![GraphEdit::InsertControl { control }]).unwrap();
        let counts = |graph: &WorkflowGraph| match &graph.node("branch_t2").unwrap().kind {
            NodeKind::Branch { taken, .. } => taken.clone(),
            _ => unreachable!(),
        };
        if let Some(GraphNode { kind: NodeKind::Branch { taken, .. }, .. }) =
            graph.nodes.iter_mut().find(|node| node.id == "branch_t2")
        {
            taken.extend([("primary".to_owned(), 3), ("alternative".to_owned(), 1)]);
        }
        let kept =
            crate::edit::apply_edit(&graph, &GraphEdit::RewritePrompt { id: "t2".into(), instruction: "x".into() })
                .unwrap();
        assert_eq!(counts(&kept), counts(&graph), "an edit that keeps the routes keeps the counts");
        let edit = GraphEdit::RemoveEdge { from: "branch_t2".into(), to: "lookup".into() };
        let removed = crate::edit::apply_edit(&graph, &edit).unwrap();
        assert_eq!(counts(&removed), [("primary".to_owned(), 3)].into_iter().collect());
    }

    #[test]
    fn parallel_block_over_a_chain() {
        let control = ControlInsert::Parallel { nodes: vec!["t1".into(), "t2".into()] };
        let graph = apply(vec![GraphEdit::InsertControl { control }]).unwrap();
        assert_eq!(
            edges(&graph),
            ["join_t2->synth", "parallel_t1->t1", "parallel_t1->t2", "plan->parallel_t1", "t1->join_t2", "t2->join_t2"]
        );
    }

    #[test]
    fn a_later_bad_edit_is_reported_by_index_and_nothing_changes() {
        let original = chain();
        let plan = EditPlan {
            rationale: String::new(),
            edits: vec![
                GraphEdit::RewritePrompt { id: "synth".into(), instruction: "Quote the order id.".into() },
                GraphEdit::RemoveEdge { from: "t2".into(), to: "plan".into() },
            ],
        };
        let err = apply_plan(&original, &plan).unwrap_err();
        assert_eq!((err.index, err.op), (1, "remove_edge"));
        assert!(err.to_string().contains("`t2` → `plan`"), "{err}");
        assert_eq!(err.reason, EditProblem::NoEdge { from: "t2".into(), to: "plan".into() });
        assert_eq!(original, chain());
    }

    #[test]
    fn rebind_argument_puts_the_source_first_and_keeps_the_mined_ones() {
        let result = |node: &str, path: &str| ValueSource::Result { node: node.into(), path: path.into() };
        let mut graph = chain();
        let NodeKind::Tool { bindings, .. } = &mut graph.nodes.iter_mut().find(|n| n.id == "t1").unwrap().kind else {
            panic!("t1 is a tool node")
        };
        bindings.insert(
            "order_id".into(),
            ArgBinding {
                observed: 4,
                sources: vec![
                    BindingSource {
                        source: ValueSource::Query { shape: None, anchors: Vec::new(), lengths: None },
                        support: 3,
                        each: None,
                    },
                    BindingSource { source: result("plan", "$.order"), support: 1, each: None },
                ],
                requires: Vec::new(),
                same_length_as: None,
                paired_with: None,
            },
        );
        let plan = EditPlan {
            rationale: "the order id comes from the plan".into(),
            edits: vec![GraphEdit::RebindArgument {
                node: "t1".into(),
                arg: "order_id".into(),
                source: result("plan", "$.order"),
            }],
        };
        let edited = apply_plan(&graph, &plan).unwrap();
        let NodeKind::Tool { bindings, .. } = &edited.node("t1").unwrap().kind else { unreachable!() };
        let sources: Vec<&ValueSource> = bindings["order_id"].sources.iter().map(|s| &s.source).collect();
        assert_eq!(
            sources,
            [&result("plan", "$.order"), &ValueSource::Query { shape: None, anchors: Vec::new(), lengths: None }]
        );
        assert_eq!(bindings["order_id"].observed, 4);

        let rebind = |node: &str, source: ValueSource| EditPlan {
            rationale: "x".into(),
            edits: vec![GraphEdit::RebindArgument { node: node.into(), arg: "order_id".into(), source }],
        };
        let err =
            apply_plan(&graph, &rebind("plan", ValueSource::Query { shape: None, anchors: Vec::new(), lengths: None }))
                .unwrap_err();
        assert_eq!(err.reason, EditProblem::NotATool { node: "plan".into() });
        let err = apply_plan(&graph, &rebind("t1", result("ghost", "$"))).unwrap_err();
        assert_eq!(err.to_string(), "edit 0 (`rebind_argument`) cannot be applied: no node `ghost`");
    }

    #[test]
    fn rewrite_prompt_sets_the_instruction() {
        let graph =
            apply(vec![GraphEdit::RewritePrompt { id: "t1".into(), instruction: "Use the user id.".into() }]).unwrap();
        assert!(
            matches!(&graph.node("t1").unwrap().kind, NodeKind::Tool { instruction: Some(i), .. } if i == "Use the user id.")
        );
    }

    #[test]
    fn plans_parse_from_the_documented_json() {
        let plan: EditPlan = serde_json::from_str(
            r#"{"rationale":"retry lookups","edits":[
                {"op":"insert_control","control":{"construct":"retry_loop","around":"t1","max_iterations":2,"until":{"type":"tool_succeeded"}}},
                {"op":"add_node","node":{"id":"x","kind":"llm","role":"extract"},"after":"t2","before":"synth"}]}"#,
        )
        .unwrap();
        assert_eq!(plan.edits.len(), 2);
        assert!(apply_plan(&chain(), &plan).is_ok());
    }

    #[test]
    fn removing_a_node_with_a_self_edge_leaves_no_edge_to_it() {
        let plan = EditPlan {
            rationale: String::new(),
            edits: vec![
                GraphEdit::AddEdge { from: "t2".into(), to: "t2".into(), label: None },
                GraphEdit::RemoveNode { id: "t2".into() },
            ],
        };
        let graph = apply_plan(&chain(), &plan).expect("both edits apply");
        assert!(graph.node("t2").is_none());
        assert!(graph.edges.iter().all(|edge| edge.from != "t2" && edge.to != "t2"), "{:?}", graph.edges);
        assert!(graph.edges.iter().any(|edge| edge.from == "t1" && edge.to == "synth"), "{:?}", graph.edges);
    }

    /// The graph's violations, tools unchecked: empty means `Valid(G, T)` up to tools.
    fn violations(graph: &WorkflowGraph) -> Vec<String> {
        flowmem_exec::violations(graph, flowmem_exec::ToolCatalog::Unchecked).iter().map(ToString::to_string).collect()
    }

    /// plan → t1 → loop(t2 → t3) → t4 → synth: a chain with a two-node loop body.
    fn with_loop() -> WorkflowGraph {
        serde_json::from_value(serde_json::json!({
            "nodes": [
                {"id": "plan", "kind": "llm", "role": "plan"}, {"id": "t1", "kind": "tool"},
                {"id": "again", "kind": "loop", "max_iterations": 3, "until": {"type": "tool_succeeded"}},
                {"id": "t2", "kind": "tool"}, {"id": "t3", "kind": "tool"}, {"id": "t4", "kind": "tool"},
                {"id": "synth", "kind": "llm", "role": "synthesize"}
            ],
            "edges": [
                {"from": "plan", "to": "t1"}, {"from": "t1", "to": "again"},
                {"from": "again", "to": "t2", "label": "body"}, {"from": "t2", "to": "t3"},
                {"from": "t3", "to": "again", "kind": "back"}, {"from": "again", "to": "t4", "label": "exit"},
                {"from": "t4", "to": "synth"}
            ],
            "entry": "plan", "exit": "synth"
        }))
        .unwrap()
    }

    /// Control-flow insertions bring their edges and labels: each result is valid as it
    /// is, with no further edit.
    #[test]
    fn inserted_loops_branches_and_parallel_blocks_validate_without_further_edits() {
        assert_eq!(violations(&with_loop()), Vec::<String>::new());
        let inserts = [
            ControlInsert::RetryLoop { around: "t1".into(), max_iterations: 2, until: Condition::ToolSucceeded {} },
            ControlInsert::RetryLoop { around: "t2".into(), max_iterations: 2, until: Condition::Always {} },
            ControlInsert::RetryLoop { around: "t4".into(), max_iterations: 2, until: Condition::ToolSucceeded {} },
            ControlInsert::Branch { before: "t1".into(), question: "Known?".into(), alternative: tool("alt") },
            ControlInsert::Branch { before: "t2".into(), question: "Known?".into(), alternative: tool("alt") },
            ControlInsert::Branch { before: "t3".into(), question: "Known?".into(), alternative: tool("alt") },
            ControlInsert::Branch {
                before: "synth".into(),
                question: "Enough?".into(),
                alternative: llm("alt", LlmRole::Reason),
            },
            ControlInsert::Parallel { nodes: vec!["t2".into(), "t3".into()] },
        ];
        for control in inserts {
            let edit = GraphEdit::InsertControl { control: control.clone() };
            let graph = super::apply_edit(&with_loop(), &edit).unwrap_or_else(|err| panic!("{control:?}: {err}"));
            assert_eq!(violations(&graph), Vec::<String>::new(), "{control:?} gave {:?}", graph.edges);
        }
    }

    /// The edits the issue saw break graphs now keep them valid, or are refused naming
    /// the node.
    #[test]
    fn structural_edits_keep_loops_and_branches_whole() {
        let g = with_loop();
        let apply = |graph: &WorkflowGraph, edit: GraphEdit| super::apply_edit(graph, &edit);
        // Removing a loop's last body node closes the loop at its predecessor.
        let graph = apply(&g, GraphEdit::RemoveNode { id: "t3".into() }).unwrap();
        assert_eq!(violations(&graph), Vec::<String>::new(), "{:?}", graph.edges);
        assert!(edges(&graph).contains(&"t2->again (back)".to_owned()), "{:?}", edges(&graph));
        // Removing the whole body drops the loop.
        let graph = apply(&graph, GraphEdit::RemoveNode { id: "t2".into() }).unwrap();
        assert!(graph.node("again").is_none());
        assert_eq!(violations(&graph), Vec::<String>::new(), "{:?}", graph.edges);
        assert!(edges(&graph).contains(&"t1->t4".to_owned()), "{:?}", edges(&graph));
        // A node on a loop's back edge joins the body; the back edge stays last.
        let on_back = GraphEdit::AddNode { node: tool("check"), after: "t3".into(), before: Some("again".into()) };
        let graph = apply(&g, on_back).unwrap();
        assert_eq!(violations(&graph), Vec::<String>::new(), "{:?}", graph.edges);
        assert!(edges(&graph).contains(&"check->again (back)".to_owned()));
        // After the body's last node alone, likewise.
        let graph = apply(&g, GraphEdit::AddNode { node: tool("check"), after: "t3".into(), before: None }).unwrap();
        assert_eq!(violations(&graph), Vec::<String>::new(), "{:?}", graph.edges);
        // After a loop alone would strip its labels: refused, naming it.
        let err = apply(&g, GraphEdit::AddNode { node: tool("x"), after: "again".into(), before: None }).unwrap_err();
        assert_eq!(err, EditProblem::AfterControl { node: "again".into(), kind: "loop" });
        // A branch route needs its label; a plain edge has none.
        let branch = GraphEdit::InsertControl {
            control: ControlInsert::Branch { before: "t4".into(), question: "q".into(), alternative: tool("alt") },
        };
        let graph = apply(&g, branch).unwrap();
        let err = apply(&graph, GraphEdit::AddEdge { from: "branch_t4".into(), to: "synth".into(), label: None })
            .unwrap_err();
        assert!(matches!(err, EditProblem::EdgeLabel { .. }), "{err}");
        let routed = GraphEdit::AddEdge { from: "branch_t4".into(), to: "synth".into(), label: Some("skip".into()) };
        assert_eq!(violations(&apply(&graph, routed).unwrap()), Vec::<String>::new());
        // A condition whose routes the branch lacks is refused, naming both.
        let refine = GraphEdit::RefineControl {
            id: "branch_t4".into(),
            max_iterations: None,
            condition: Some(Condition::ToolSucceeded {}),
        };
        let err = apply(&graph, refine).unwrap_err();
        assert_eq!(
            err.to_string(),
            "condition `tool_succeeded` needs the routes ok, error out of branch `branch_t4`, which has alternative, primary"
        );
        // Control nodes are neither removed nor added as plain nodes.
        assert!(matches!(
            apply(&g, GraphEdit::RemoveNode { id: "again".into() }),
            Err(EditProblem::RemovesControl { .. })
        ));
        let join = GraphNode { id: "j".into(), kind: NodeKind::Join {}, description: None };
        let err = apply(&g, GraphEdit::AddNode { node: join, after: "t1".into(), before: Some("again".into()) });
        assert_eq!(err.unwrap_err(), EditProblem::ControlNode { node: "j".into() });
    }

    fn arb_edit() -> impl Strategy<Value = GraphEdit> {
        let id = prop::sample::select(vec!["plan", "t1", "t2", "synth", "zz"]).prop_map(str::to_owned);
        prop_oneof![
            (id.clone(), id.clone()).prop_map(|(a, b)| GraphEdit::AddNode {
                node: tool("n"),
                after: a,
                before: Some(b)
            }),
            id.clone().prop_map(|id| GraphEdit::RemoveNode { id }),
            (id.clone(), id.clone()).prop_map(|(from, to)| GraphEdit::AddEdge { from, to, label: None }),
            (id.clone(), id.clone()).prop_map(|(from, to)| GraphEdit::RemoveEdge { from, to }),
            id.clone().prop_map(|around| GraphEdit::InsertControl {
                control: ControlInsert::RetryLoop { around, max_iterations: 2, until: Condition::ToolSucceeded {} }
            }),
            (id.clone(), id)
                .prop_map(|(a, b)| GraphEdit::InsertControl { control: ControlInsert::Parallel { nodes: vec![a, b] } }),
        ]
    }

    /// A structural edit on [`with_loop`]'s nodes, targets drawn from its ids and a few
    /// new ones, so many edits are refused and the rest must keep the graph valid.
    fn arb_structural_edit() -> impl Strategy<Value = GraphEdit> {
        let ids = vec!["plan", "t1", "again", "t2", "t3", "t4", "synth", "n0", "n1", "n2"];
        let id = prop::sample::select(ids).prop_map(str::to_owned);
        let fresh = (0..1000u32).prop_map(|n| format!("x{n}"));
        prop_oneof![
            (fresh.clone(), id.clone(), prop::option::of(id.clone()))
                .prop_map(|(new, after, before)| { GraphEdit::AddNode { node: tool(&new), after, before } }),
            id.clone().prop_map(|id| GraphEdit::RemoveNode { id }),
            (id.clone(), 0..3u32).prop_map(|(around, bound)| GraphEdit::InsertControl {
                control: ControlInsert::RetryLoop { around, max_iterations: bound, until: Condition::ToolSucceeded {} }
            }),
            (id.clone(), fresh).prop_map(|(before, alt)| GraphEdit::InsertControl {
                control: ControlInsert::Branch {
                    before,
                    question: "q".into(),
                    alternative: llm(&alt, LlmRole::Reason)
                }
            }),
            (id.clone(), id.clone())
                .prop_map(|(a, b)| GraphEdit::InsertControl { control: ControlInsert::Parallel { nodes: vec![a, b] } }),
            (id, prop::sample::select(vec![Condition::ToolSucceeded {}, Condition::Always {}])).prop_map(
                |(id, condition)| GraphEdit::RefineControl { id, max_iterations: None, condition: Some(condition) }
            ),
        ]
    }

    proptest! {
        /// Every plan either fails with an error or yields a graph whose edges, entry and
        /// exit all name existing nodes and whose ids stay unique.
        #[test]
        fn edits_keep_the_graph_well_formed(edits in prop::collection::vec(arb_edit(), 1..5)) {
            if let Ok(graph) = apply(edits) {
                let mut ids: Vec<&str> = graph.nodes.iter().map(|n| n.id.as_str()).collect();
                let n_ids = ids.len();
                ids.sort_unstable();
                ids.dedup();
                prop_assert_eq!(ids.len(), n_ids);
                prop_assert!(graph.node(&graph.entry).is_some());
                prop_assert!(graph.node(&graph.exit).is_some());
                for edge in &graph.edges {
                    prop_assert!(graph.node(&edge.from).is_some() && graph.node(&edge.to).is_some(), "{:?}", edge);
                }
            }
        }

        /// Structural edits keep a valid graph valid, one after another, or are refused:
        /// what lets a plan be built edit by edit with every prefix executable.
        #[test]
        fn structural_edits_keep_a_valid_graph_valid(edits in prop::collection::vec(arb_structural_edit(), 1..8)) {
            let mut graph = with_loop();
            for edit in edits {
                if let Ok(next) = super::apply_edit(&graph, &edit) {
                    let problems = violations(&next);
                    prop_assert!(problems.is_empty(), "{edit:?} on {:?} gave {problems:?}", graph.edges);
                    graph = next;
                }
            }
        }
    }
}
