//! Compilation: a [`ValidatedGraph`] plus a [`Runtime`] becomes an executable [`Plan`].
//!
//! Compiling resolves every prompt template (the role templates and each node's
//! instruction and question), binds tool nodes to the available tools (filtered by their
//! hints), resolves named models, and precomputes the dependency order, edge lists and
//! loop bodies, so that running a query does no graph analysis at all.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use flowmem_llm::{ChatModel, ToolDefinition};
use flowmem_model::{Condition, EdgeKind, LlmRole, NodeKind};

use crate::render::role_name;
use crate::toolbox::ToolBox;
use crate::validate::{LOOP_BODY, ValidatedGraph, loop_bodies, node_templates, template_variables};

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
    /// A node's instruction or question does not parse.
    #[error("node `{node}`: the {field} template does not parse: {message}")]
    Template {
        /// The node.
        node: String,
        /// `instruction` or `question`.
        field: &'static str,
        /// The parser's message.
        message: String,
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
    Llm { template: &'static str, instruction: Option<String>, model: Arc<dyn ChatModel> },
    Tool { tools: Arc<[ToolDefinition]>, hints: Arc<[String]>, instruction: Option<String> },
    Branch { condition: Condition, routes: Vec<String> },
    Parallel,
    Join,
    Loop { max_iterations: u32, until: Condition, body_nodes: Vec<usize>, body_edges: Vec<usize> },
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

/// The template file of each LLM role.
#[must_use]
pub(crate) fn role_template(role: LlmRole) -> &'static str {
    match role {
        LlmRole::Plan => "plan",
        LlmRole::Extract => "extract",
        LlmRole::Reason => "reason",
        LlmRole::Verify => "verify",
        LlmRole::Judge => "judge",
        LlmRole::Synthesize => "synthesize",
    }
}

/// The template the tool-choosing step renders.
pub(crate) const TOOL_TEMPLATE: &str = "tool";
/// The template judges of branches and loops render.
pub(crate) const JUDGE_TEMPLATE: &str = "judge";

/// Compiles a validated graph against a runtime into an executable [`Plan`].
///
/// # Errors
///
/// Every [`CompileError`] variant: a hint or model the runtime lacks, a missing role
/// template, an instruction that does not parse. The first one found is returned.
pub fn compile(graph: &ValidatedGraph, runtime: Runtime) -> Result<Plan, CompileError> {
    let graph = graph.graph();
    let index: HashMap<&str, usize> =
        graph.nodes.iter().enumerate().map(|(node_idx, node)| (node.id.as_str(), node_idx)).collect();
    // Validation guarantees every edge end exists.
    let edges: Vec<PlanEdge> = graph
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
        .collect();
    let bodies = loop_bodies(graph, &index);
    let available = runtime.tools.definitions();
    let mut nodes = Vec::with_capacity(graph.nodes.len());
    for (node_idx, node) in graph.nodes.iter().enumerate() {
        let id = node.id.clone();
        for (field, source) in node_templates(&node.kind) {
            if let Err(message) = template_variables(source) {
                return Err(CompileError::Template { node: id, field, message });
            }
        }
        let (kind_label, op) = match &node.kind {
            NodeKind::Llm { role, instruction, model } => {
                let template = role_template(*role);
                if runtime.prompts.id(template).is_none() {
                    return Err(CompileError::MissingTemplate { node: id, template: template.to_owned() });
                }
                let model = match model {
                    None => runtime.executor.clone(),
                    Some(name) if name == runtime.executor.name() => runtime.executor.clone(),
                    Some(name) => match runtime.models.get(name) {
                        Some(model) => model.clone(),
                        None => {
                            return Err(CompileError::UnknownModel { node: id, model: name.clone() });
                        }
                    },
                };
                (format!("llm:{}", role_name(*role)), Op::Llm { template, instruction: instruction.clone(), model })
            }
            NodeKind::Tool { hints, instruction } => {
                if runtime.prompts.id(TOOL_TEMPLATE).is_none() {
                    return Err(CompileError::MissingTemplate { node: id, template: TOOL_TEMPLATE.to_owned() });
                }
                for hint in hints {
                    if !available.iter().any(|tool| &tool.name == hint) {
                        return Err(CompileError::UnboundTool { node: id, tool: hint.clone() });
                    }
                }
                let tools: Vec<ToolDefinition> =
                    available.iter().filter(|tool| hints.is_empty() || hints.contains(&tool.name)).cloned().collect();
                if tools.is_empty() {
                    return Err(CompileError::NoTools { node: id });
                }
                let op =
                    Op::Tool { tools: tools.into(), hints: hints.clone().into(), instruction: instruction.clone() };
                ("tool".to_owned(), op)
            }
            NodeKind::Branch { condition } => {
                if matches!(condition, Condition::Judge { .. }) && runtime.prompts.id(JUDGE_TEMPLATE).is_none() {
                    return Err(CompileError::MissingTemplate { node: id, template: JUDGE_TEMPLATE.to_owned() });
                }
                let routes = graph
                    .outgoing(&node.id)
                    .filter(|edge| edge.kind != EdgeKind::Back)
                    .filter_map(|edge| edge.label.clone())
                    .collect();
                ("branch".to_owned(), Op::Branch { condition: condition.clone(), routes })
            }
            NodeKind::Parallel => ("parallel".to_owned(), Op::Parallel),
            NodeKind::Join => ("join".to_owned(), Op::Join),
            NodeKind::Loop { max_iterations, until } => {
                let body_nodes = bodies.get(&node_idx).cloned().unwrap_or_default();
                let body_edges = edges
                    .iter()
                    .enumerate()
                    .filter(|(_, edge)| {
                        let inside = |idx: usize| body_nodes.contains(&idx);
                        (edge.from == node_idx && edge.label.as_deref() == Some(LOOP_BODY))
                            || (inside(edge.from) && inside(edge.to))
                            || (edge.to == node_idx && edge.kind == EdgeKind::Back)
                    })
                    .map(|(edge_idx, _)| edge_idx)
                    .collect();
                let op = Op::Loop { max_iterations: *max_iterations, until: until.clone(), body_nodes, body_edges };
                ("loop".to_owned(), op)
            }
        };
        let mut template_vars = BTreeSet::new();
        for (_, source) in node_templates(&node.kind) {
            template_vars.extend(template_variables(source).unwrap_or_default());
        }
        nodes.push(PlanNode {
            id,
            kind_label,
            op,
            incoming: Vec::new(),
            back_incoming: Vec::new(),
            outgoing: Vec::new(),
            enclosing_loop: None,
            template_vars: template_vars.into_iter().collect(),
        });
    }
    for (edge_idx, edge) in edges.iter().enumerate() {
        nodes[edge.from].outgoing.push(edge_idx);
        if edge.kind == EdgeKind::Back {
            nodes[edge.to].back_incoming.push(edge_idx);
        } else {
            nodes[edge.to].incoming.push(edge_idx);
        }
    }
    // The innermost enclosing loop is the one with the smallest body holding the node.
    for (node_idx, node) in nodes.iter_mut().enumerate() {
        node.enclosing_loop = bodies
            .iter()
            .filter(|(_, body)| body.contains(&node_idx))
            .min_by_key(|(_, body)| body.len())
            .map(|(loop_idx, _)| *loop_idx);
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
