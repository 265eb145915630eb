//! Compilation: a [`ValidatedGraph`] plus a [`Runtime`] becomes an executable [`Plan`].
//!
//! Compiling resolves every prompt template (the role templates and each node's
//! instruction and question), binds tool nodes to the available tools (filtered by their
//! hints), resolves named models, and precomputes the dependency order, edge lists and
//! loop bodies, so that running a query does no graph analysis at all.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use flowmem_llm::{ChatModel, Prompts, ToolDefinition};
use flowmem_model::{ArgBinding, Condition, EdgeKind, LlmRole, NodeKind, WorkflowGraph};

use crate::grounding::Grounding;

use crate::render::role_name;
use crate::toolbox::ToolBox;
use crate::validate::{LOOP_BODY, UnboundTool, ValidatedGraph, node_templates, template_variables, tool_binding};

/// What a run needs from outside: models, tools and prompt templates.
#[derive(Clone)]
pub struct Runtime {
    /// The executor model: LLM nodes without a `model`, tool choice, judges.
    pub executor: Arc<dyn ChatModel>,
    /// Further models that LLM nodes name in their `model` field.
    pub models: HashMap<String, Arc<dyn ChatModel>>,
    /// The available tools `T`.
    pub tools: Arc<dyn ToolBox>,
    /// The prompt templates; must hold [`EXEC_PROMPTS`](crate::EXEC_PROMPTS).
    pub prompts: Arc<flowmem_llm::Prompts>,
    /// How tool nodes with mined data bindings fill their arguments.
    pub grounding: Grounding,
}

/// A graph that cannot be compiled against a runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
    /// A tool hint names a tool the runtime does not have.
    #[error("node `{node}`: tool hint `{tool}` names no available tool")]
    UnboundTool {
        /// The tool node.
        node: String,
        /// The hint.
        tool: String,
    },
    /// A tool node without hints, and the runtime has no tools.
    #[error("node `{node}`: no tool is available to bind this tool node to")]
    NoTools {
        /// The tool node.
        node: String,
    },
    /// An LLM node names a model the runtime does not have.
    #[error("node `{node}`: model `{model}` is not configured")]
    UnknownModel {
        /// The LLM node.
        node: String,
        /// The model's name.
        model: String,
    },
    /// A role template is missing from the prompt set.
    #[error("node `{node}`: prompt template `{template}` is missing")]
    MissingTemplate {
        /// The node.
        node: String,
        /// The template's file name.
        template: String,
    },
}

/// An executable plan: a validated graph bound to a runtime. Cheap to clone.
#[derive(Clone)]
pub struct Plan {
    pub(crate) inner: Arc<PlanInner>,
}

pub(crate) struct PlanInner {
    pub(crate) name: String,
    pub(crate) runtime: Runtime,
    pub(crate) nodes: Vec<PlanNode>,
    pub(crate) edges: Vec<PlanEdge>,
    pub(crate) entry: usize,
    pub(crate) exit: usize,
    /// Node positions in dependency order (ignoring `back` edges).
    pub(crate) order: Vec<usize>,
}

pub(crate) struct PlanNode {
    pub(crate) id: String,
    /// Such as `llm:plan`, `tool`, `branch`.
    pub(crate) kind_label: String,
    pub(crate) op: Op,
    /// Incoming non-`back` edges.
    pub(crate) incoming: Vec<usize>,
    /// Incoming `back` edges (loops only).
    pub(crate) back_incoming: Vec<usize>,
    pub(crate) outgoing: Vec<usize>,
    /// The innermost loop whose body holds this node.
    pub(crate) enclosing_loop: Option<usize>,
    /// The upstream node ids the node's templates may use.
    pub(crate) template_vars: Vec<String>,
}

pub(crate) enum Op {
    Llm {
        template: &'static str,
        instruction: Option<String>,
        model: Arc<dyn ChatModel>,
    },
    Tool {
        tools: Arc<[ToolDefinition]>,
        hints: Arc<[String]>,
        instruction: Option<String>,
        /// The node's mined data bindings, by argument path.
        bindings: Arc<[(String, ArgBinding)]>,
    },
    Branch {
        condition: Condition,
        routes: Vec<String>,
        /// Per route, in the order of `routes`: what the mined logs say about it.
        evidence: Vec<RouteEvidence>,
    },
    Parallel,
    Join,
    Loop {
        max_iterations: u32,
        until: Condition,
        body_nodes: Vec<usize>,
        body_edges: Vec<usize>,
    },
}

/// What the mined logs say about one route of a branch, for routing by data
/// (`node::route_by_data`).
#[derive(Default)]
pub(crate) struct RouteEvidence {
    /// The route's label.
    pub(crate) label: String,
    /// How many of the mined records that reached the branch took the route; `None` when
    /// the graph has no counts for it.
    pub(crate) taken: Option<u64>,
    /// The tool nodes the route may run first (through nested branches and into loop
    /// bodies).
    pub(crate) entries: Vec<usize>,
    /// Whether the route may run no tool at all before the routes meet again (a `skip`).
    pub(crate) passable: bool,
    /// The words one of which the query must hold for the route to be offered; empty
    /// when any query may take it.
    pub(crate) cues: Vec<String>,
    /// Of the mined queries that reached the branch holding one of `cues`: how many took
    /// the route, and how many there were; `None` when nothing was mined.
    pub(crate) cued: Option<(u64, u64)>,
    /// The words of each mined query that took the route, when the branch is decided by
    /// the nearest of them; empty otherwise.
    pub(crate) nearest: Vec<Vec<String>>,
}

pub(crate) struct PlanEdge {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) kind: EdgeKind,
    pub(crate) label: Option<String>,
}

impl Plan {
    /// The graph's name, or `workflow`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The node ids in dependency order (ignoring `back` edges).
    #[must_use]
    pub fn order(&self) -> Vec<&str> {
        self.inner.order.iter().map(|&node_idx| self.inner.nodes[node_idx].id.as_str()).collect()
    }

    /// The tools bound to tool node `node_id`, if it is one.
    #[must_use]
    pub fn bound_tools(&self, node_id: &str) -> Option<Vec<&str>> {
        let node = self.inner.nodes.iter().find(|node| node.id == node_id)?;
        match &node.op {
            Op::Tool { tools, .. } => Some(tools.iter().map(|tool| tool.name.as_str()).collect()),
            _ => None,
        }
    }
}

/// The template the tool-choosing step renders.
pub(crate) const TOOL_TEMPLATE: &str = "tool";
/// The template judges of branches and loops render.
pub(crate) const JUDGE_TEMPLATE: &str = "judge";

/// Compiles a validated graph against a runtime into an executable [`Plan`].
///
/// What [`check`](crate::check) decided is not checked again; only what depends on the
/// runtime is: the models LLM nodes name, the role templates, and the tool binding (the
/// graph may have been checked against another tool catalogue, or none).
///
/// # Errors
///
/// Every [`CompileError`] variant: a hint or model the runtime lacks, a missing role
/// template. The first one found is returned.
pub fn compile(graph: &ValidatedGraph, runtime: Runtime) -> Result<Plan, CompileError> {
    let graph = graph.graph();
    let index: HashMap<&str, usize> =
        graph.nodes.iter().enumerate().map(|(node_idx, node)| (node.id.as_str(), node_idx)).collect();
    let edges = plan_edges(graph, &index);
    let bodies = graph.loop_bodies();
    let enclosing = innermost_loops(&bodies, graph.nodes.len());
    let available = runtime.tools.definitions();
    let mut nodes = Vec::with_capacity(graph.nodes.len());
    for (node_idx, node) in graph.nodes.iter().enumerate() {
        let (kind_label, op) = match &node.kind {
            NodeKind::Llm { role, instruction, model } => {
                compile_llm(&node.id, *role, instruction.as_ref(), model.as_deref(), &runtime)?
            }
            NodeKind::Tool { hints, instruction, bindings } => {
                compile_tool(&node.id, hints, instruction.as_ref(), bindings, &available, &runtime.prompts)?
            }
            NodeKind::Branch { condition, .. } => compile_branch(graph, &node.id, condition, &runtime.prompts)?,
            NodeKind::Parallel {} => ("parallel".to_owned(), Op::Parallel),
            NodeKind::Join {} => ("join".to_owned(), Op::Join),
            NodeKind::Loop { max_iterations, until } => {
                let body_nodes = bodies.get(&node_idx).cloned().unwrap_or_default();
                compile_loop(node_idx, *max_iterations, until, body_nodes, &edges)
            }
        };
        nodes.push(PlanNode {
            id: node.id.clone(),
            kind_label,
            op,
            incoming: Vec::new(),
            back_incoming: Vec::new(),
            outgoing: Vec::new(),
            enclosing_loop: enclosing[node_idx],
            template_vars: node_template_vars(&node.kind),
        });
    }
    link_edges(&mut nodes, &edges);
    for (node_idx, node) in graph.nodes.iter().enumerate() {
        if matches!(node.kind, NodeKind::Branch { .. }) {
            let found = route_evidence(&nodes, &edges, node_idx, &node.kind, &graph.queries);
            if let Op::Branch { evidence, .. } = &mut nodes[node_idx].op {
                *evidence = found;
            }
        }
    }
    let order = dependency_order(nodes.len(), &edges);
    Ok(Plan {
        inner: Arc::new(PlanInner {
            name: graph.name.clone().unwrap_or_else(|| "workflow".to_owned()),
            runtime,
            nodes,
            edges,
            entry: index[graph.entry.as_str()],
            exit: index[graph.exit.as_str()],
            order,
        }),
    })
}

/// The graph's edges over node positions. Validation guarantees every edge end exists.
fn plan_edges(graph: &WorkflowGraph, index: &HashMap<&str, usize>) -> Vec<PlanEdge> {
    graph
        .edges
        .iter()
        .filter_map(|edge| {
            Some(PlanEdge {
                from: *index.get(edge.from.as_str())?,
                to: *index.get(edge.to.as_str())?,
                kind: edge.kind,
                label: edge.label.clone(),
            })
        })
        .collect()
}

/// Records each edge on its two nodes: outgoing, and incoming or `back` incoming.
fn link_edges(nodes: &mut [PlanNode], edges: &[PlanEdge]) {
    for (edge_idx, edge) in edges.iter().enumerate() {
        nodes[edge.from].outgoing.push(edge_idx);
        if edge.kind == EdgeKind::Back {
            nodes[edge.to].back_incoming.push(edge_idx);
        } else {
            nodes[edge.to].incoming.push(edge_idx);
        }
    }
}

/// Fails with [`CompileError::MissingTemplate`] when the runtime's prompts lack `template`.
fn require_template(prompts: &Prompts, node: &str, template: &str) -> Result<(), CompileError> {
    if prompts.id(template).is_none() {
        return Err(CompileError::MissingTemplate { node: node.to_owned(), template: template.to_owned() });
    }
    Ok(())
}

/// An LLM node: its role's template and the model it names (the executor by default).
fn compile_llm(
    id: &str,
    role: LlmRole,
    instruction: Option<&String>,
    model: Option<&str>,
    runtime: &Runtime,
) -> Result<(String, Op), CompileError> {
    // Each role's template file is named after the role.
    let template = role_name(role);
    require_template(&runtime.prompts, id, template)?;
    let model = match model {
        None => runtime.executor.clone(),
        Some(name) if name == runtime.executor.name() => runtime.executor.clone(),
        Some(name) => match runtime.models.get(name) {
            Some(model) => model.clone(),
            None => return Err(CompileError::UnknownModel { node: id.to_owned(), model: name.to_owned() }),
        },
    };
    Ok((format!("llm:{}", role_name(role)), Op::Llm { template, instruction: instruction.cloned(), model }))
}

/// A tool node, bound to its hints or, without hints, to every tool the runtime has.
///
/// The binding rule is validation's ([`tool_binding`]), applied here to the runtime's
/// tools: the graph was checked against a catalogue that need not be this runtime's.
fn compile_tool(
    id: &str,
    hints: &[String],
    instruction: Option<&String>,
    bindings: &std::collections::BTreeMap<String, ArgBinding>,
    available: &[ToolDefinition],
    prompts: &Prompts,
) -> Result<(String, Op), CompileError> {
    require_template(prompts, id, TOOL_TEMPLATE)?;
    let names: Vec<&str> = available.iter().map(|tool| tool.name.as_str()).collect();
    if let Some(problem) = tool_binding(hints, &names).into_iter().next() {
        return Err(match problem {
            UnboundTool::NoTools => CompileError::NoTools { node: id.to_owned() },
            UnboundTool::UnknownHint(tool) => CompileError::UnboundTool { node: id.to_owned(), tool: tool.to_owned() },
        });
    }
    let tools: Vec<ToolDefinition> =
        available.iter().filter(|tool| hints.is_empty() || hints.contains(&tool.name)).cloned().collect();
    let bindings: Vec<(String, ArgBinding)> =
        bindings.iter().map(|(arg, binding)| (arg.clone(), binding.clone())).collect();
    let op = Op::Tool {
        tools: tools.into(),
        hints: hints.to_vec().into(),
        instruction: instruction.cloned(),
        bindings: bindings.into(),
    };
    Ok(("tool".to_owned(), op))
}

/// A branch: its condition and the route labels of its outgoing edges.
fn compile_branch(
    graph: &WorkflowGraph,
    id: &str,
    condition: &Condition,
    prompts: &Prompts,
) -> Result<(String, Op), CompileError> {
    if matches!(condition, Condition::Judge { .. }) {
        require_template(prompts, id, JUDGE_TEMPLATE)?;
    }
    let routes =
        graph.outgoing(id).filter(|edge| edge.kind != EdgeKind::Back).filter_map(|edge| edge.label.clone()).collect();
    Ok(("branch".to_owned(), Op::Branch { condition: condition.clone(), routes, evidence: Vec::new() }))
}

/// The evidence of each route of branch `branch_idx`, in the order of its routes.
///
/// A route's first tools are found by walking forward from its target over edges that
/// are not `back` edges, into nested branches' routes and loops' bodies, stopping at tool
/// nodes. A node that another route reaches too is past the point where the routes meet:
/// a walk that gets there makes the route passable without a tool.
fn route_evidence(
    nodes: &[PlanNode],
    edges: &[PlanEdge],
    branch_idx: usize,
    kind: &NodeKind,
    queries: &[Vec<String>],
) -> Vec<RouteEvidence> {
    let NodeKind::Branch { taken, cues, nearest, cued, .. } = kind else { return Vec::new() };
    let forward = |node_idx: usize| {
        let loop_body = matches!(nodes[node_idx].op, Op::Loop { .. });
        nodes[node_idx].outgoing.iter().map(|&edge_idx| &edges[edge_idx]).filter(move |edge| {
            edge.kind != EdgeKind::Back && (!loop_body || edge.label.as_deref() == Some(crate::validate::LOOP_BODY))
        })
    };
    let reach = |start: usize| {
        let mut seen = HashSet::new();
        let mut stack = vec![start];
        while let Some(node_idx) = stack.pop() {
            if seen.insert(node_idx) {
                stack.extend(
                    nodes[node_idx]
                        .outgoing
                        .iter()
                        .map(|&edge_idx| &edges[edge_idx])
                        .filter_map(|edge| (edge.kind != EdgeKind::Back).then_some(edge.to)),
                );
            }
        }
        seen
    };
    let routes: Vec<&PlanEdge> = nodes[branch_idx]
        .outgoing
        .iter()
        .map(|&edge_idx| &edges[edge_idx])
        .filter(|edge| edge.kind != EdgeKind::Back && edge.label.is_some())
        .collect();
    routes
        .iter()
        .enumerate()
        .map(|(route_idx, route)| {
            let elsewhere: HashSet<usize> = routes
                .iter()
                .enumerate()
                .filter(|&(other_idx, _)| other_idx != route_idx)
                .flat_map(|(_, other)| reach(other.to))
                .collect();
            let label = route.label.clone().unwrap_or_default();
            let mut found = RouteEvidence {
                taken: taken.get(&label).copied(),
                cues: cues.get(&label).cloned().unwrap_or_default(),
                cued: cued.get(&label).map(|&[took, held]| (took, held)),
                // Validation refused indices out of range; `get` keeps a plan safe anyway.
                nearest: nearest
                    .get(&label)
                    .into_iter()
                    .flatten()
                    .filter_map(|&idx| queries.get(idx).cloned())
                    .collect(),
                label,
                ..RouteEvidence::default()
            };
            let mut seen = HashSet::new();
            let mut stack = vec![route.to];
            while let Some(node_idx) = stack.pop() {
                if !seen.insert(node_idx) {
                    continue;
                }
                if elsewhere.contains(&node_idx) || node_idx == branch_idx {
                    found.passable = true;
                } else if matches!(nodes[node_idx].op, Op::Tool { .. }) {
                    found.entries.push(node_idx);
                } else {
                    stack.extend(forward(node_idx).map(|edge| edge.to));
                }
            }
            found.entries.sort_unstable();
            found
        })
        .collect()
}

/// A loop: its bound, its condition, and the nodes and edges of its body.
fn compile_loop(
    loop_idx: usize,
    max_iterations: u32,
    until: &Condition,
    body_nodes: Vec<usize>,
    edges: &[PlanEdge],
) -> (String, Op) {
    let inside = |idx: usize| body_nodes.contains(&idx);
    let body_edges = edges
        .iter()
        .enumerate()
        .filter(|(_, edge)| {
            (edge.from == loop_idx && edge.label.as_deref() == Some(LOOP_BODY))
                || (inside(edge.from) && inside(edge.to))
                || (edge.to == loop_idx && edge.kind == EdgeKind::Back)
        })
        .map(|(edge_idx, _)| edge_idx)
        .collect();
    let op = Op::Loop { max_iterations, until: until.clone(), body_nodes, body_edges };
    ("loop".to_owned(), op)
}

/// The innermost loop whose body holds the node: the one with the smallest body.
/// Per node, the innermost loop whose body holds it: the smallest such body (the first
/// loop among equals), in one pass over the bodies.
fn innermost_loops(bodies: &BTreeMap<usize, Vec<usize>>, n_nodes: usize) -> Vec<Option<usize>> {
    let mut res: Vec<Option<(usize, usize)>> = vec![None; n_nodes];
    for (&loop_idx, body) in bodies {
        for &node_idx in body {
            if res[node_idx].is_none_or(|(_, size)| body.len() < size) {
                res[node_idx] = Some((loop_idx, body.len()));
            }
        }
    }
    res.into_iter().map(|found| found.map(|(loop_idx, _)| loop_idx)).collect()
}

/// The upstream node ids (and `query`) the node's templates use, sorted.
fn node_template_vars(kind: &NodeKind) -> Vec<String> {
    let mut vars = BTreeSet::new();
    for (_, source) in node_templates(kind) {
        // Validation guarantees that every template parses.
        vars.extend(template_variables(source).unwrap_or_default());
    }
    vars.into_iter().collect()
}

/// Kahn's algorithm over non-`back` edges, ties broken by node position.
fn dependency_order(n_nodes: usize, edges: &[PlanEdge]) -> Vec<usize> {
    let mut in_degree = vec![0usize; n_nodes];
    let mut successors = vec![Vec::new(); n_nodes];
    for edge in edges.iter().filter(|edge| edge.kind != EdgeKind::Back) {
        in_degree[edge.to] += 1;
        successors[edge.from].push(edge.to);
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..n_nodes).filter(|&idx| in_degree[idx] == 0).collect();
    let mut res = Vec::with_capacity(n_nodes);
    while let Some(node_idx) = ready.pop_first() {
        res.push(node_idx);
        for &succ in &successors[node_idx] {
            in_degree[succ] -= 1;
            if in_degree[succ] == 0 {
                ready.insert(succ);
            }
        }
    }
    res
}
