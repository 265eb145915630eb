//! `Valid(G, T)`: the checks a workflow graph must pass before it may run.
//!
//! [`check`] runs every rule and returns *all* violations, each naming the node (or edge)
//! it concerns, so a person or the optimizer can fix them in one pass. A graph that
//! passes becomes a [`ValidatedGraph`], the only thing the compiler accepts.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;

use flowmem_model::{Condition, Edge, EdgeKind, NodeKind, ValueSource, WorkflowGraph};

/// A workflow graph that passed [`check`]: the only kind of graph that can be compiled
/// and executed.
///
/// **Invariant:** the graph satisfies every rule of `Valid(G, T)` for the tool names it
/// was checked against (see [`ValidatedGraph::tool_names`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedGraph {
    graph: WorkflowGraph,
    // `None` when the graph was checked without a tool catalogue.
    tool_names: Option<BTreeSet<String>>,
}

impl ValidatedGraph {
    /// The checked graph.
    #[must_use]
    pub fn graph(&self) -> &WorkflowGraph {
        &self.graph
    }

    /// The tool names the graph was checked against, or `None` when the tool binding was
    /// not checked (structure only).
    #[must_use]
    pub fn tool_names(&self) -> Option<&BTreeSet<String>> {
        self.tool_names.as_ref()
    }

    /// Gives the graph back.
    #[must_use]
    pub fn into_inner(self) -> WorkflowGraph {
        self.graph
    }
}

/// One broken rule of `Valid(G, T)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// The graph has no nodes.
    #[error("the graph has no nodes")]
    Empty,
    /// Two nodes share an id.
    #[error("node `{node}`: the id is used by {count} nodes")]
    DuplicateId {
        /// The repeated id.
        node: String,
        /// How many nodes use it.
        count: usize,
    },
    /// `entry` or `exit` names no node.
    #[error("node `{node}`: the graph's {role} is not a node")]
    MissingEndpoint {
        /// The id named by `entry` or `exit`.
        node: String,
        /// `entry` or `exit`.
        role: &'static str,
    },
    /// An edge names a node that does not exist.
    #[error("edge `{from}` -> `{to}`: `{missing}` is not a node")]
    DanglingEdge {
        /// The edge's source.
        from: String,
        /// The edge's target.
        to: String,
        /// The id that names no node.
        missing: String,
    },
    /// An edge from a node to itself.
    #[error("node `{node}`: an edge leads from the node to itself")]
    SelfEdge {
        /// The node.
        node: String,
    },
    /// The entry node has incoming edges, so it could wait for itself.
    #[error("node `{node}`: the entry node has an incoming edge from `{from}`")]
    EntryHasInput {
        /// The entry node.
        node: String,
        /// The source of the incoming edge.
        from: String,
    },
    /// A tool hint names a tool that is not available.
    #[error("node `{node}`: tool hint `{tool}` names no available tool")]
    UnknownToolHint {
        /// The tool node.
        node: String,
        /// The hint.
        tool: String,
    },
    /// A tool node without hints, but no tool is available at all.
    #[error("node `{node}`: no tool is available to bind this tool node to")]
    NoToolAvailable {
        /// The tool node.
        node: String,
    },
    /// Non-`back` edges form a cycle.
    #[error("node `{node}`: it is on a cycle of non-`back` edges ({})", cycle.join(" -> "))]
    Cycle {
        /// The first node of the cycle.
        node: String,
        /// The nodes of the cycle, in order.
        cycle: Vec<String>,
    },
    /// A `back` edge that does not lead to a `loop` node.
    #[error("node `{node}`: the `back` edge to `{to}` must lead to a `loop` node")]
    BackEdgeNotToLoop {
        /// The edge's source.
        node: String,
        /// The edge's target, which is not a loop.
        to: String,
    },
    /// A `back` edge whose source is not inside the loop's body.
    #[error("node `{node}`: the `back` edge to loop `{loop_node}` leaves from outside its body")]
    BackEdgeOutsideBody {
        /// The edge's source.
        node: String,
        /// The loop.
        loop_node: String,
    },
    /// A node cannot be reached from the entry, so it would never run.
    #[error("node `{node}`: it cannot be reached from the entry `{entry}`")]
    Unreachable {
        /// The unreachable node.
        node: String,
        /// The entry node.
        entry: String,
    },
    /// No path leads from the entry to the exit.
    #[error("node `{exit}`: no complete path leads from the entry `{entry}` to this exit")]
    NoCompletePath {
        /// The entry node.
        entry: String,
        /// The exit node.
        exit: String,
    },
    /// An edge out of a `branch` has no label, so no route can choose it.
    #[error("node `{node}`: the branch edge to `{to}` has no route label")]
    UnlabelledRoute {
        /// The branch.
        node: String,
        /// The edge's target.
        to: String,
    },
    /// Two edges out of a `branch` share a label.
    #[error("node `{node}`: route label `{label}` is used by more than one edge")]
    DuplicateRoute {
        /// The branch.
        node: String,
        /// The repeated label.
        label: String,
    },
    /// A branch's mined evidence (`taken`, `cues`, `nearest` or `cued`) names a route it does not
    /// have.
    #[error("node `{node}`: `{field}` names route `{label}`, which no edge out of the branch is labelled")]
    MinedUnknownRoute {
        /// The branch.
        node: String,
        /// The field: `taken`, `cues`, `nearest` or `cued`.
        field: &'static str,
        /// The label no route has.
        label: String,
    },
    /// A branch's `cued` counts for a route are not `[took, held]` with `took` at most
    /// `held` and `held` at least 1.
    #[error(
        "node `{node}`: `cued` for route `{label}` says {took} of {held} mined queries took it; expected [took, held] with 0 ≤ took ≤ held and held ≥ 1"
    )]
    CuedCounts {
        /// The branch.
        node: String,
        /// The route.
        label: String,
        /// The queries holding a cue that took the route, as written.
        took: u64,
        /// The queries holding a cue, as written.
        held: u64,
    },
    /// A branch's `nearest` names a mined query the graph's `queries` do not hold.
    #[error("node `{node}`: `nearest` names query {index} for route `{label}`, but the graph holds {queries} queries")]
    NearestUnknownQuery {
        /// The branch.
        node: String,
        /// The route.
        label: String,
        /// The index out of range.
        index: usize,
        /// How many queries the graph holds.
        queries: usize,
    },
    /// A `branch` with no outgoing route.
    #[error("node `{node}`: the branch has no outgoing route")]
    NoRoutes {
        /// The branch.
        node: String,
    },
    /// A route the branch's condition can choose has no edge.
    #[error("node `{node}`: the condition can choose route `{label}`, but no edge has that label")]
    MissingRoute {
        /// The branch.
        node: String,
        /// The missing label.
        label: String,
    },
    /// An edge label that the condition can never choose.
    #[error("node `{node}`: route `{label}` can never be chosen by a `{condition}` condition")]
    UnreachableRoute {
        /// The branch.
        node: String,
        /// The label.
        label: String,
        /// The condition type.
        condition: &'static str,
    },
    /// A `loop` lacks its `body` or `exit` edge, or has one twice.
    #[error("node `{node}`: a loop needs exactly one outgoing edge labelled `{label}`, found {found}")]
    LoopEdge {
        /// The loop.
        node: String,
        /// `body` or `exit`.
        label: &'static str,
        /// How many were found.
        found: usize,
    },
    /// An edge out of a `loop` labelled something other than `body` or `exit`.
    #[error("node `{node}`: loop edge to `{to}` must be labelled `body` or `exit`")]
    LoopEdgeLabel {
        /// The loop.
        node: String,
        /// The edge's target.
        to: String,
    },
    /// A loop body with no `back` edge to its loop.
    #[error("node `{node}`: no `back` edge closes the loop body")]
    LoopNotClosed {
        /// The loop.
        node: String,
    },
    /// A loop whose bound is zero.
    #[error("node `{node}`: `max_iterations` must be at least 1")]
    LoopZeroBound {
        /// The loop.
        node: String,
    },
    /// An edge leaves a loop body other than through the `back` edge.
    #[error("node `{node}`: the edge to `{to}` leaves the body of loop `{loop_node}`; only `back` edges may")]
    LoopBodyEscape {
        /// The body node the edge leaves from.
        node: String,
        /// The edge's target, outside the body.
        to: String,
        /// The loop.
        loop_node: String,
    },
    /// An edge enters a loop body from outside other than through the loop.
    #[error("node `{node}`: the edge from `{from}` enters the body of loop `{loop_node}` from outside")]
    LoopBodyEntry {
        /// The body node the edge enters.
        node: String,
        /// The edge's source, outside the body.
        from: String,
        /// The loop.
        loop_node: String,
    },
    /// A label on an edge whose source is neither a branch nor a loop.
    #[error("node `{node}`: the edge to `{to}` has label `{label}`, but only branch and loop edges take labels")]
    StrayLabel {
        /// The edge's source.
        node: String,
        /// The edge's target.
        to: String,
        /// The label.
        label: String,
    },
    /// A template does not parse.
    #[error("node `{node}`: the {field} template does not parse: {message}")]
    TemplateSyntax {
        /// The node.
        node: String,
        /// `instruction` or `question`.
        field: &'static str,
        /// The parser's message.
        message: String,
    },
    /// A template refers to a variable that no upstream node provides.
    #[error("node `{node}`: the {field} template uses `{variable}`, which is neither `query` nor an upstream node")]
    UndefinedVariable {
        /// The node.
        node: String,
        /// `instruction` or `question`.
        field: &'static str,
        /// The unknown variable.
        variable: String,
    },
    /// A data binding (one of its sources, a precondition or a pairing) reads from a node
    /// that is not upstream of the bound node.
    #[error("node `{node}`: argument `{arg}` is bound to `{source_node}`, which is not an upstream node")]
    BindingNotUpstream {
        /// The tool node whose argument is bound.
        node: String,
        /// The bound argument's path.
        arg: String,
        /// The node the binding reads from.
        source_node: String,
    },
    /// `each` evidence on a source that is not an upstream result over a collection.
    #[error(
        "node `{node}`: argument `{arg}` has `each` on a {kind} source; only a result path over a collection (with `[*]`) can be gone through"
    )]
    EachNotACollection {
        /// The tool node whose argument is bound.
        node: String,
        /// The bound argument's path.
        arg: String,
        /// The kind of source: `query`, `argument`, `constant`, or `result` (without `[*]`).
        kind: &'static str,
    },
}

impl Violation {
    /// The node this violation concerns (for an edge, its source), if any.
    #[must_use]
    pub fn node(&self) -> Option<&str> {
        match self {
            Violation::Empty => None,
            Violation::DanglingEdge { from, .. } => Some(from),
            Violation::NoCompletePath { exit, .. } => Some(exit),
            Violation::DuplicateId { node, .. }
            | Violation::MissingEndpoint { node, .. }
            | Violation::SelfEdge { node }
            | Violation::EntryHasInput { node, .. }
            | Violation::UnknownToolHint { node, .. }
            | Violation::NoToolAvailable { node }
            | Violation::Cycle { node, .. }
            | Violation::BackEdgeNotToLoop { node, .. }
            | Violation::BackEdgeOutsideBody { node, .. }
            | Violation::Unreachable { node, .. }
            | Violation::UnlabelledRoute { node, .. }
            | Violation::DuplicateRoute { node, .. }
            | Violation::MinedUnknownRoute { node, .. }
            | Violation::NearestUnknownQuery { node, .. }
            | Violation::CuedCounts { node, .. }
            | Violation::NoRoutes { node }
            | Violation::MissingRoute { node, .. }
            | Violation::UnreachableRoute { node, .. }
            | Violation::LoopEdge { node, .. }
            | Violation::LoopEdgeLabel { node, .. }
            | Violation::LoopNotClosed { node }
            | Violation::LoopZeroBound { node }
            | Violation::LoopBodyEscape { node, .. }
            | Violation::LoopBodyEntry { node, .. }
            | Violation::StrayLabel { node, .. }
            | Violation::TemplateSyntax { node, .. }
            | Violation::UndefinedVariable { node, .. }
            | Violation::BindingNotUpstream { node, .. }
            | Violation::EachNotACollection { node, .. } => Some(node),
        }
    }
}

/// Every violation found in a graph; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidGraph {
    /// The violations, in the order the rules were checked.
    pub violations: Vec<Violation>,
}

impl fmt::Display for InvalidGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the workflow graph is invalid ({} violations)", self.violations.len())?;
        for violation in &self.violations {
            write!(f, "\n  - {violation}")?;
        }
        Ok(())
    }
}

/// The tool names a graph is checked against: `T` in `Valid(G, T)`.
#[derive(Debug, Clone, Copy)]
pub enum ToolCatalog<'a> {
    /// The tools that will be available at run time.
    Known(&'a [String]),
    /// Tools unknown: check the structure only, not the tool binding.
    Unchecked,
}

/// The route labels a `ToolSucceeded` branch uses.
pub const ROUTE_OK: &str = "ok";
/// The route label for a failed tool call in a `ToolSucceeded` branch.
pub const ROUTE_ERROR: &str = "error";
/// The route label an `Always` branch takes.
pub const ROUTE_DEFAULT: &str = "default";
/// The label of a loop's body edge.
pub const LOOP_BODY: &str = "body";
/// The label of a loop's exit edge.
pub const LOOP_EXIT: &str = "exit";
/// The variable every template may use: the query text.
pub const VAR_QUERY: &str = "query";

/// The route labels a branch with `condition` can take, with the condition's name, when
/// they are fixed: `ok` and `error` for `tool_succeeded`, `default` for `always`. A
/// judge chooses among whatever labels the branch's edges carry, so it has none.
///
/// # Example
///
/// ```
/// use flowmem_exec::condition_routes;
/// use flowmem_model::Condition;
///
/// assert_eq!(condition_routes(&Condition::ToolSucceeded {}), Some((&["ok", "error"][..], "tool_succeeded")));
/// assert_eq!(condition_routes(&Condition::Judge { question: "?".into() }), None);
/// ```
#[must_use]
pub fn condition_routes(condition: &Condition) -> Option<(&'static [&'static str], &'static str)> {
    match condition {
        Condition::Judge { .. } => None,
        Condition::ToolSucceeded {} => Some((&[ROUTE_OK, ROUTE_ERROR], "tool_succeeded")),
        Condition::Always {} => Some((&[ROUTE_DEFAULT], "always")),
    }
}

// Globals minijinja provides; templates may call them without an upstream node.
const TEMPLATE_GLOBALS: &[&str] = &["range", "dict", "namespace", "debug", "loop", "iteration"];

/// Checks `Valid(G, T)` and returns the graph as a [`ValidatedGraph`].
///
/// The rules:
/// - ids are unique, `entry` and `exit` name nodes, edges name existing nodes;
/// - every tool node can bind to a tool in `T`: each hint names an available tool, and a
///   node without hints needs at least one tool;
/// - edges form an executable graph: cycles only through `loop` nodes via `back` edges,
///   the entry has no input, every node is reachable from the entry;
/// - at least one complete path leads from entry to exit;
/// - branch routes are labelled, unique and match what the condition can choose; loops
///   have one `body` and one `exit` edge, a bound of at least 1, and a body closed by a
///   `back` edge that no other edge leaves or enters;
/// - `instruction` and judge `question` templates parse and use only `query`,
///   `iteration`, and the ids of upstream nodes;
/// - every data binding of a tool node reads from an upstream node.
///
/// # Errors
///
/// [`InvalidGraph`] holding every violation found, each naming its node.
///
/// # Example
///
/// ```
/// use flowmem_exec::{check, ToolCatalog};
/// use flowmem_model::WorkflowGraph;
///
/// let graph: WorkflowGraph = serde_json::from_value(serde_json::json!({
///     "nodes": [
///         {"id": "plan", "kind": "llm", "role": "plan"},
///         {"id": "lookup", "kind": "tool", "hints": ["get_order"]},
///         {"id": "answer", "kind": "llm", "role": "synthesize"}
///     ],
///     "edges": [{"from": "plan", "to": "lookup"}, {"from": "lookup", "to": "answer"}],
///     "entry": "plan",
///     "exit": "answer"
/// }))?;
/// let tools = vec!["get_order".to_owned()];
/// assert!(check(graph.clone(), ToolCatalog::Known(&tools)).is_ok());
/// let err = check(graph, ToolCatalog::Known(&[])).unwrap_err();
/// assert_eq!(err.violations[0].node(), Some("lookup"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check(graph: WorkflowGraph, tools: ToolCatalog<'_>) -> Result<ValidatedGraph, InvalidGraph> {
    let violations = violations(&graph, tools);
    if !violations.is_empty() {
        return Err(InvalidGraph { violations });
    }
    let tool_names = match tools {
        ToolCatalog::Known(names) => Some(names.iter().cloned().collect()),
        ToolCatalog::Unchecked => None,
    };
    Ok(ValidatedGraph { graph, tool_names })
}

/// Every violation of `Valid(G, T)` in `graph`; empty when it is valid.
#[must_use]
pub fn violations(graph: &WorkflowGraph, tools: ToolCatalog<'_>) -> Vec<Violation> {
    let mut res = Vec::new();
    if graph.nodes.is_empty() {
        res.push(Violation::Empty);
        return res;
    }
    let index = check_ids(graph, &mut res);
    let edges = EdgesByNode::new(graph, &index);
    check_edges(graph, &index, &mut res);
    check_tools(graph, tools, &mut res);
    check_labels(graph, &index, &edges, &mut res);
    let acyclic = check_cycles(graph, &index, &mut res);
    check_reachability(graph, &index, &mut res);
    check_loops(graph, &edges, &mut res);
    check_each(graph, &mut res);
    if acyclic {
        check_data_reads(graph, &index, &mut res);
    }
    res
}

/// `each` evidence ([`flowmem_model::EachUse`]) only on result paths over a collection.
fn check_each(graph: &WorkflowGraph, res: &mut Vec<Violation>) {
    for node in &graph.nodes {
        let NodeKind::Tool { bindings, .. } = &node.kind else { continue };
        for (arg, binding) in bindings {
            for source in binding.sources.iter().filter(|source| source.each.is_some()) {
                let kind = match &source.source {
                    ValueSource::Result { path, .. } if path.contains("[*]") => continue,
                    ValueSource::Result { .. } => "result",
                    ValueSource::Query { .. } => "query",
                    ValueSource::Argument { .. } => "argument",
                    ValueSource::Constant { .. } => "constant",
                };
                res.push(Violation::EachNotACollection { node: node.id.clone(), arg: arg.clone(), kind });
            }
        }
    }
}

/// Each node's edges by position, so that no rule scans every edge per node.
struct EdgesByNode {
    outgoing: Vec<Vec<usize>>,
    incoming: Vec<Vec<usize>>,
    // Per edge, the positions of the nodes it leaves and enters, when they exist.
    ends: Vec<(Option<usize>, Option<usize>)>,
}

impl EdgesByNode {
    fn new(graph: &WorkflowGraph, index: &Index<'_>) -> EdgesByNode {
        let n = graph.nodes.len();
        let mut res = EdgesByNode {
            outgoing: vec![Vec::new(); n],
            incoming: vec![Vec::new(); n],
            ends: Vec::with_capacity(graph.edges.len()),
        };
        for (edge_idx, edge) in graph.edges.iter().enumerate() {
            let from = index.get(edge.from.as_str()).copied();
            let to = index.get(edge.to.as_str()).copied();
            if let Some(from) = from {
                res.outgoing[from].push(edge_idx);
            }
            if let Some(to) = to {
                res.incoming[to].push(edge_idx);
            }
            res.ends.push((from, to));
        }
        res
    }

    /// The edges leaving the node with `id` (of any node with that id), in edge order.
    fn outgoing<'g>(&self, graph: &'g WorkflowGraph, index: &Index<'_>, id: &str) -> impl Iterator<Item = &'g Edge> {
        let edge_ids = index.get(id).map_or(&[][..], |&idx| &self.outgoing[idx][..]);
        edge_ids.iter().map(|&edge_idx| &graph.edges[edge_idx]).collect::<Vec<_>>().into_iter()
    }

    /// The edges entering the node with `id`, in edge order.
    fn incoming<'g>(&self, graph: &'g WorkflowGraph, index: &Index<'_>, id: &str) -> impl Iterator<Item = &'g Edge> {
        let edge_ids = index.get(id).map_or(&[][..], |&idx| &self.incoming[idx][..]);
        edge_ids.iter().map(|&edge_idx| &graph.edges[edge_idx]).collect::<Vec<_>>().into_iter()
    }
}

// Node id -> position of its first occurrence.
type Index<'g> = HashMap<&'g str, usize>;

fn check_ids<'g>(graph: &'g WorkflowGraph, res: &mut Vec<Violation>) -> Index<'g> {
    let mut index = Index::new();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (node_idx, node) in graph.nodes.iter().enumerate() {
        index.entry(node.id.as_str()).or_insert(node_idx);
        *counts.entry(node.id.as_str()).or_default() += 1;
    }
    let mut reported = HashSet::new();
    for node in &graph.nodes {
        let count = counts[node.id.as_str()];
        if count > 1 && reported.insert(node.id.as_str()) {
            res.push(Violation::DuplicateId { node: node.id.clone(), count });
        }
    }
    for (id, role) in [(&graph.entry, "entry"), (&graph.exit, "exit")] {
        if !index.contains_key(id.as_str()) {
            res.push(Violation::MissingEndpoint { node: id.clone(), role });
        }
    }
    index
}

fn check_edges(graph: &WorkflowGraph, index: &Index<'_>, res: &mut Vec<Violation>) {
    for edge in &graph.edges {
        for end in [&edge.from, &edge.to] {
            if !index.contains_key(end.as_str()) {
                res.push(Violation::DanglingEdge {
                    from: edge.from.clone(),
                    to: edge.to.clone(),
                    missing: end.clone(),
                });
            }
        }
        if edge.from == edge.to {
            res.push(Violation::SelfEdge { node: edge.from.clone() });
        }
        if edge.to == graph.entry && edge.kind != EdgeKind::Back {
            res.push(Violation::EntryHasInput { node: edge.to.clone(), from: edge.from.clone() });
        }
        if edge.kind == EdgeKind::Back {
            let target_is_loop = index
                .get(edge.to.as_str())
                .is_some_and(|&node_idx| matches!(graph.nodes[node_idx].kind, NodeKind::Loop { .. }));
            if index.contains_key(edge.to.as_str()) && !target_is_loop {
                res.push(Violation::BackEdgeNotToLoop { node: edge.from.clone(), to: edge.to.clone() });
            }
        }
    }
}

fn check_tools(graph: &WorkflowGraph, tools: ToolCatalog<'_>, res: &mut Vec<Violation>) {
    let ToolCatalog::Known(available) = tools else {
        return;
    };
    let available: Vec<&str> = available.iter().map(String::as_str).collect();
    for node in &graph.nodes {
        let NodeKind::Tool { hints, .. } = &node.kind else {
            continue;
        };
        for problem in tool_binding(hints, &available) {
            res.push(match problem {
                UnboundTool::NoTools => Violation::NoToolAvailable { node: node.id.clone() },
                UnboundTool::UnknownHint(tool) => {
                    Violation::UnknownToolHint { node: node.id.clone(), tool: tool.to_owned() }
                }
            });
        }
    }
}

/// Moves `graph` onto another tool set whose tools may carry other names: a tool node
/// keeps the hints that name an available tool; a node none of whose hints is available
/// loses them (it may then call any tool), and its instruction says which tool the step
/// used before, so the executor can pick the equivalent one by its description.
///
/// Returns the graph and the ids of the nodes that lost their hints. Data bindings are
/// kept: they are keyed by argument, which a renamed tool keeps.
///
/// # Example
///
/// ```
/// use flowmem_exec::unbind_unknown_tools;
/// use flowmem_model::{NodeKind, WorkflowGraph};
///
/// let graph: WorkflowGraph = serde_json::from_value(serde_json::json!({
///     "nodes": [{"id": "t", "kind": "tool", "hints": ["get_order"]}],
///     "edges": [], "entry": "t", "exit": "t"
/// }))?;
/// let (moved, unbound) = unbind_unknown_tools(graph, &["lookup_purchase"]);
/// assert_eq!(unbound, ["t"]);
/// let NodeKind::Tool { hints, instruction, .. } = &moved.nodes[0].kind else { unreachable!() };
/// assert!(hints.is_empty());
/// assert!(instruction.as_deref().unwrap().contains("get_order"));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[must_use]
pub fn unbind_unknown_tools(mut graph: WorkflowGraph, available: &[&str]) -> (WorkflowGraph, Vec<String>) {
    let mut unbound = Vec::new();
    for node in &mut graph.nodes {
        let NodeKind::Tool { hints, instruction, .. } = &mut node.kind else { continue };
        if hints.is_empty() {
            continue;
        }
        let known: Vec<String> = hints.iter().filter(|hint| available.contains(&hint.as_str())).cloned().collect();
        if !known.is_empty() {
            *hints = known;
            continue;
        }
        let before = hints.iter().map(|hint| format!("`{hint}`")).collect::<Vec<_>>().join(" or ");
        let note = format!(
            "This step used the tool {before}, which is not available under that name: use the available tool that does the same."
        );
        *instruction = Some(match instruction.take() {
            Some(text) if !text.trim().is_empty() => format!("{text}\n{note}"),
            _ => note,
        });
        hints.clear();
        unbound.push(node.id.clone());
    }
    (graph, unbound)
}

/// Why a tool node cannot bind to the available tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnboundTool<'a> {
    /// The node has no hints and no tool is available at all.
    NoTools,
    /// A hint names no available tool.
    UnknownHint(&'a str),
}

/// The tool-binding rule of `Valid(G, T)` for one tool node: each hint names an
/// available tool, and a node without hints needs at least one tool. Empty when the node
/// binds.
///
/// It is the one home of the rule: [`check`] applies it to the catalogue it is given,
/// `compile` to the runtime's tools.
pub(crate) fn tool_binding<'a>(hints: &'a [String], available: &[&str]) -> Vec<UnboundTool<'a>> {
    if hints.is_empty() && available.is_empty() {
        return vec![UnboundTool::NoTools];
    }
    hints
        .iter()
        .filter(|hint| !available.contains(&hint.as_str()))
        .map(|hint| UnboundTool::UnknownHint(hint.as_str()))
        .collect()
}

fn check_labels(graph: &WorkflowGraph, index: &Index<'_>, edges: &EdgesByNode, res: &mut Vec<Violation>) {
    for node in &graph.nodes {
        let outgoing: Vec<_> =
            edges.outgoing(graph, index, &node.id).filter(|edge| edge.kind != EdgeKind::Back).collect();
        match &node.kind {
            NodeKind::Branch { condition, taken, cues, nearest, cued } => {
                if outgoing.is_empty() {
                    res.push(Violation::NoRoutes { node: node.id.clone() });
                    continue;
                }
                let mut seen = HashSet::new();
                for edge in &outgoing {
                    match &edge.label {
                        None => res.push(Violation::UnlabelledRoute { node: node.id.clone(), to: edge.to.clone() }),
                        Some(label) if !seen.insert(label.as_str()) => {
                            res.push(Violation::DuplicateRoute { node: node.id.clone(), label: label.clone() });
                        }
                        Some(_) => {}
                    }
                }
                let mined = [
                    ("taken", taken.keys().collect::<Vec<_>>()),
                    ("cues", cues.keys().collect()),
                    ("nearest", nearest.keys().collect()),
                    ("cued", cued.keys().collect()),
                ];
                for (field, labels) in mined {
                    for label in labels.into_iter().filter(|label| !seen.contains(label.as_str())) {
                        res.push(Violation::MinedUnknownRoute { node: node.id.clone(), field, label: label.clone() });
                    }
                }
                for (label, &[took, held]) in cued {
                    if took > held || held == 0 {
                        res.push(Violation::CuedCounts { node: node.id.clone(), label: label.clone(), took, held });
                    }
                }
                for (label, indices) in nearest {
                    for &index in indices.iter().filter(|&&index| index >= graph.queries.len()) {
                        res.push(Violation::NearestUnknownQuery {
                            node: node.id.clone(),
                            label: label.clone(),
                            index,
                            queries: graph.queries.len(),
                        });
                    }
                }
                if let Some((labels, condition)) = condition_routes(condition) {
                    for label in labels {
                        if !seen.contains(label) {
                            res.push(Violation::MissingRoute { node: node.id.clone(), label: (*label).to_owned() });
                        }
                    }
                    for label in seen.iter().filter(|label| !labels.contains(label)) {
                        res.push(Violation::UnreachableRoute {
                            node: node.id.clone(),
                            label: (*label).to_owned(),
                            condition,
                        });
                    }
                }
            }
            NodeKind::Loop { max_iterations, .. } => {
                if *max_iterations == 0 {
                    res.push(Violation::LoopZeroBound { node: node.id.clone() });
                }
                for label in [LOOP_BODY, LOOP_EXIT] {
                    let found = outgoing.iter().filter(|edge| edge.label.as_deref() == Some(label)).count();
                    if found != 1 {
                        res.push(Violation::LoopEdge { node: node.id.clone(), label, found });
                    }
                }
                for edge in &outgoing {
                    if !matches!(edge.label.as_deref(), Some(LOOP_BODY | LOOP_EXIT)) {
                        res.push(Violation::LoopEdgeLabel { node: node.id.clone(), to: edge.to.clone() });
                    }
                }
                let closed = edges.incoming(graph, index, &node.id).any(|edge| edge.kind == EdgeKind::Back);
                if !closed {
                    res.push(Violation::LoopNotClosed { node: node.id.clone() });
                }
            }
            _ => {
                for edge in edges.outgoing(graph, index, &node.id) {
                    if let Some(label) = &edge.label {
                        res.push(Violation::StrayLabel {
                            node: node.id.clone(),
                            to: edge.to.clone(),
                            label: label.clone(),
                        });
                    }
                }
            }
        }
    }
}

/// Forward adjacency (non-`back` edges) over node positions, skipping dangling edges.
fn forward_adjacency(graph: &WorkflowGraph, index: &Index<'_>) -> Vec<Vec<usize>> {
    let mut adjacency = vec![Vec::new(); graph.nodes.len()];
    for edge in graph.edges.iter().filter(|edge| edge.kind != EdgeKind::Back) {
        if let (Some(&from), Some(&to)) = (index.get(edge.from.as_str()), index.get(edge.to.as_str()))
            && from != to
        {
            adjacency[from].push(to);
        }
    }
    adjacency
}

// Returns whether the forward graph is acyclic.
fn check_cycles(graph: &WorkflowGraph, index: &Index<'_>, res: &mut Vec<Violation>) -> bool {
    let adjacency = forward_adjacency(graph, index);
    // Iterative DFS with colours; every back edge found reports its cycle once.
    let n_nodes = graph.nodes.len();
    let mut colour = vec![0u8; n_nodes]; // 0 new, 1 on stack, 2 done
    let mut reported: HashSet<Vec<usize>> = HashSet::new();
    let mut acyclic = true;
    for start in 0..n_nodes {
        if colour[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        colour[start] = 1;
        while let Some(&mut (node_idx, ref mut next)) = stack.last_mut() {
            if *next < adjacency[node_idx].len() {
                let succ = adjacency[node_idx][*next];
                *next += 1;
                match colour[succ] {
                    0 => {
                        colour[succ] = 1;
                        stack.push((succ, 0));
                    }
                    1 => {
                        acyclic = false;
                        let from = stack.iter().position(|&(idx, _)| idx == succ).unwrap_or(0);
                        let mut cycle: Vec<usize> = stack[from..].iter().map(|&(idx, _)| idx).collect();
                        let mut key = cycle.clone();
                        key.sort_unstable();
                        if reported.insert(key) {
                            cycle.push(succ);
                            res.push(Violation::Cycle {
                                node: graph.nodes[succ].id.clone(),
                                cycle: cycle.iter().map(|&idx| graph.nodes[idx].id.clone()).collect(),
                            });
                        }
                    }
                    _ => {}
                }
            } else {
                colour[node_idx] = 2;
                stack.pop();
            }
        }
    }
    acyclic
}

fn reachable_from(adjacency: &[Vec<usize>], start: usize) -> Vec<bool> {
    let mut seen = vec![false; adjacency.len()];
    let mut queue = VecDeque::from([start]);
    seen[start] = true;
    while let Some(node_idx) = queue.pop_front() {
        for &succ in &adjacency[node_idx] {
            if !seen[succ] {
                seen[succ] = true;
                queue.push_back(succ);
            }
        }
    }
    seen
}

fn check_reachability(graph: &WorkflowGraph, index: &Index<'_>, res: &mut Vec<Violation>) {
    let Some(&entry) = index.get(graph.entry.as_str()) else {
        return;
    };
    let adjacency = forward_adjacency(graph, index);
    let seen = reachable_from(&adjacency, entry);
    if index.get(graph.exit.as_str()).is_some_and(|&exit| !seen[exit]) {
        res.push(Violation::NoCompletePath { entry: graph.entry.clone(), exit: graph.exit.clone() });
    }
    let mut reported = HashSet::new();
    for (node_idx, node) in graph.nodes.iter().enumerate() {
        if !seen[node_idx] && index[node.id.as_str()] == node_idx && reported.insert(node_idx) {
            res.push(Violation::Unreachable { node: node.id.clone(), entry: graph.entry.clone() });
        }
    }
}

/// Edges that cross a loop body's boundary other than through the loop and its `back`
/// edges; each loop's check looks only at the edges of its body nodes and its own.
fn check_loops(graph: &WorkflowGraph, edges: &EdgesByNode, res: &mut Vec<Violation>) {
    let bodies = graph.loop_bodies();
    // Marks stamped with the loop being checked: no per-loop allocation of n.
    let mut in_body = vec![usize::MAX; graph.nodes.len()];
    for (&loop_idx, body) in &bodies {
        for &node_idx in body {
            in_body[node_idx] = loop_idx;
        }
        let is_in = |node_idx: Option<usize>| node_idx.is_some_and(|idx| in_body[idx] == loop_idx);
        let mut candidates: Vec<usize> = body
            .iter()
            .flat_map(|&node_idx| edges.outgoing[node_idx].iter().chain(&edges.incoming[node_idx]))
            .chain(&edges.incoming[loop_idx])
            .copied()
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        let loop_id = &graph.nodes[loop_idx].id;
        for edge_idx in candidates {
            let edge = &graph.edges[edge_idx];
            let (from, to) = edges.ends[edge_idx];
            let (from_in, to_in) = (is_in(from), is_in(to));
            match edge.kind {
                EdgeKind::Back => {
                    if edge.to == *loop_id && !from_in {
                        res.push(Violation::BackEdgeOutsideBody {
                            node: edge.from.clone(),
                            loop_node: loop_id.clone(),
                        });
                    }
                }
                EdgeKind::Data | EdgeKind::Control => {
                    if from_in && !to_in {
                        res.push(Violation::LoopBodyEscape {
                            node: edge.from.clone(),
                            to: edge.to.clone(),
                            loop_node: loop_id.clone(),
                        });
                    }
                    if to_in && !from_in && edge.from != *loop_id {
                        res.push(Violation::LoopBodyEntry {
                            node: edge.to.clone(),
                            from: edge.from.clone(),
                            loop_node: loop_id.clone(),
                        });
                    }
                }
            }
        }
    }
}

/// The templates a node carries: `(field, source)`.
pub(crate) fn node_templates(kind: &NodeKind) -> Vec<(&'static str, &str)> {
    let mut res = Vec::new();
    match kind {
        NodeKind::Llm { instruction, .. } | NodeKind::Tool { instruction, .. } => {
            if let Some(text) = instruction {
                res.push(("instruction", text.as_str()));
            }
        }
        NodeKind::Branch { condition, .. } | NodeKind::Loop { until: condition, .. } => {
            if let Condition::Judge { question } = condition {
                res.push(("question", question.as_str()));
            }
        }
        NodeKind::Parallel {} | NodeKind::Join {} => {}
    }
    res
}

/// The top-level variables a template source uses.
///
/// # Errors
///
/// The parser's message when the template does not parse.
pub(crate) fn template_variables(source: &str) -> Result<BTreeSet<String>, String> {
    let env = minijinja::Environment::new();
    let template = env.template_from_str(source).map_err(|err| err.to_string())?;
    Ok(template
        .undeclared_variables(false)
        .into_iter()
        .filter(|name| !TEMPLATE_GLOBALS.contains(&name.as_str()))
        .collect())
}

/// What nodes read from other nodes, checked against [`WorkflowGraph::upstream_index`]
/// in one batch: `instruction` and judge `question` templates parse and use only
/// `query` and upstream nodes, and every data binding reads from an upstream node.
fn check_data_reads(graph: &WorkflowGraph, index: &Index<'_>, res: &mut Vec<Violation>) {
    // Everything a node reads, in node order: a template (that may not parse), its
    // variables, a binding's source; each with the upstream question it raises, if any.
    enum Read {
        Syntax { node_idx: usize, field: &'static str, message: String },
        Variable { node_idx: usize, field: &'static str, variable: String },
        Binding { node_idx: usize, arg: String, source_node: String },
    }
    let mut reads = Vec::new();
    let mut pairs = Vec::new();
    for (node_idx, node) in graph.nodes.iter().enumerate() {
        for (field, source) in node_templates(&node.kind) {
            match template_variables(source) {
                Err(message) => {
                    pairs.push(None);
                    reads.push(Read::Syntax { node_idx, field, message });
                }
                Ok(variables) => {
                    for variable in variables.into_iter().filter(|variable| variable != VAR_QUERY) {
                        pairs.push(index.get(variable.as_str()).map(|&of| (node_idx, of)));
                        reads.push(Read::Variable { node_idx, field, variable });
                    }
                }
            }
        }
    }
    for (node_idx, node) in graph.nodes.iter().enumerate() {
        let NodeKind::Tool { bindings, .. } = &node.kind else {
            continue;
        };
        for (arg, binding) in bindings {
            let preconditions = binding.requires.iter().map(|precondition| precondition.node.as_str());
            let pairing = binding.paired_with.iter().map(|pairing| pairing.node.as_str());
            let sources = binding.sources.iter().filter_map(|source| source.source.node());
            for source_node in sources.chain(preconditions).chain(pairing) {
                pairs.push(index.get(source_node).map(|&of| (node_idx, of)));
                reads.push(Read::Binding { node_idx, arg: arg.clone(), source_node: source_node.to_owned() });
            }
        }
    }
    if reads.is_empty() {
        return;
    }
    let asked: Vec<(usize, usize)> = pairs.iter().flatten().copied().collect();
    let mut answers = graph.upstream_index().contains_all(&asked).into_iter();
    // Templates are reported before bindings, each in node order, as the rules read.
    for (read, pair) in reads.into_iter().zip(pairs) {
        let upstream = pair.is_some() && answers.next().unwrap_or(false);
        if upstream {
            continue;
        }
        res.push(match read {
            Read::Syntax { node_idx, field, message } => {
                Violation::TemplateSyntax { node: graph.nodes[node_idx].id.clone(), field, message }
            }
            Read::Variable { node_idx, field, variable } => {
                Violation::UndefinedVariable { node: graph.nodes[node_idx].id.clone(), field, variable }
            }
            Read::Binding { node_idx, arg, source_node } => {
                Violation::BindingNotUpstream { node: graph.nodes[node_idx].id.clone(), arg, source_node }
            }
        });
    }
}
