//! The run-time guard: each tool call an agent makes, checked as it is made against a
//! skeleton, a process model of the calls successful runs make.
//!
//! [`CallGuard`] is the skeleton (a Petri net) with its [`GuardPolicy`];
//! [`CallGuard::start`] gives a [`CallChecker`] for one run or one conversation. The
//! checker keeps mining's [`Guard`]: the set of markings the skeleton can be in after the
//! calls so far. Each call is one step on that set, never a replay of the prefix. A call
//! the skeleton cannot follow is a [`Deviation`] naming the tools it expected; the checker
//! then goes on as if the call had not been made (an alignment's log move), so one stray
//! call does not make every later one deviate. Under [`GuardPolicy::Block`] a deviating
//! call is not invoked: the agent gets [`blocked_result`] as the call's result and may
//! correct itself.
//!
//! This is the one home of call checking: the ReAct loop ([`run_agent`](crate::run_agent))
//! checks through it when [`AgentConfig::guard`](crate::AgentConfig::guard) is set (the
//! gateway's per-scope guard is not built yet; it would check through it too).
//! [`load_process_model`] reads a skeleton file (a workflow graph's tool positions, a
//! PNML net, or a process tree); `flowmem conform` reads its `--model` through it too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flowmem_mining::{GraphShapeError, Guard, MiningError, PetriNet, ProcessTree, TreeParseError};
use flowmem_model::Deviation;

use crate::file::{GraphFileError, load_graph};

/// What a guard does with a deviating call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardPolicy {
    /// Record it and let it run.
    Flag,
    /// Record it and do not invoke it; the agent is told which tools the skeleton expected.
    Block,
}

/// A skeleton tool calls are checked against, and what happens to a call off it.
///
/// Cloning is cheap: every run checked against one skeleton shares its net.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallGuard {
    net: Arc<PetriNet>,
    policy: GuardPolicy,
    name: String,
}

/// One run's (or conversation's) position in a [`CallGuard`]'s skeleton.
#[derive(Debug, Clone)]
pub struct CallChecker {
    guard: Guard,
    policy: GuardPolicy,
    // Every call checked, deviating or not, in order.
    checked: Vec<String>,
}

/// What kind of file a process model came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessModelKind {
    /// A process tree in PM4Py's notation.
    Tree,
    /// A PNML Petri net.
    Pnml,
    /// A workflow graph's tool positions.
    Graph,
}

/// A process model read from a file, as a Petri net.
#[derive(Debug, Clone)]
pub struct ProcessModel {
    /// The net conformance is checked on.
    pub net: PetriNet,
    /// What the file held.
    pub kind: ProcessModelKind,
    /// The process tree, when the model was one (a tree, or a graph read as a tree).
    pub tree: Option<ProcessTree>,
}

/// A process model file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessModelError {
    /// The file cannot be read.
    #[error("cannot read `{}`", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A `.pnml` file that is not a usable PNML net.
    #[error(transparent)]
    Pnml(#[from] MiningError),
    /// A `.json`, `.yaml` or `.yml` file that is not a workflow graph.
    #[error(transparent)]
    Graph(#[from] GraphFileError),
    /// A workflow graph that is not valid (its structure, without its tools).
    #[error("the workflow graph `{}` is not valid", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every violation, each naming its node or edge.
        #[source]
        source: crate::validate::InvalidGraph,
    },
    /// A workflow graph that is not block-structured enough to read as a process.
    #[error("cannot read the workflow graph `{}` as a process", path.display())]
    Shape {
        /// The file.
        path: PathBuf,
        /// The node where reading stopped.
        #[source]
        source: GraphShapeError,
    },
    /// Any other file, whose text is not a process tree.
    #[error("`{}` is neither PNML, a workflow graph nor a process tree", path.display())]
    Tree {
        /// The file.
        path: PathBuf,
        /// Where parsing stopped.
        #[source]
        source: TreeParseError,
    },
}

impl ProcessModelKind {
    /// The kind's name in reports: `tree`, `pnml` or `graph`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ProcessModelKind::Tree => "tree",
            ProcessModelKind::Pnml => "pnml",
            ProcessModelKind::Graph => "graph",
        }
    }
}

/// Reads a process model by its file name: PNML (`.pnml`), a workflow graph (`.json`,
/// `.yaml`, `.yml`: its tool positions, each the choice of the tools it hints, or of
/// `all_tools` when it hints none), or else a text file holding a process tree in PM4Py's
/// notation.
///
/// # Errors
///
/// [`ProcessModelError`] naming the file: it cannot be read, is not PNML, not a workflow
/// graph, a graph not block-structured enough ([`ProcessModelError::Shape`], naming the
/// node), or not a process tree.
///
/// # Example
///
/// ```
/// use flowmem_exec::{ProcessModelKind, load_process_model};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("retail.tree");
/// std::fs::write(&path, "->( 'find_user', X( 'cancel', 'refund' ) )")?;
/// let model = load_process_model(&path, &[])?;
/// assert_eq!(model.kind, ProcessModelKind::Tree);
/// assert_eq!(model.net.transitions.iter().filter(|t| t.label.is_some()).count(), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load_process_model(path: &Path, all_tools: &[String]) -> Result<ProcessModel, ProcessModelError> {
    let name = path.to_string_lossy().to_lowercase();
    if name.ends_with(".pnml") {
        let net = flowmem_mining::read_pnml(path)?;
        return Ok(ProcessModel { net, kind: ProcessModelKind::Pnml, tree: None });
    }
    if name.ends_with(".json") || name.ends_with(".yaml") || name.ends_with(".yml") {
        let graph = load_graph(path)?;
        // A graph whose exit is no node reads as a silent process; refuse it instead.
        crate::validate::check(graph.clone(), crate::validate::ToolCatalog::Unchecked)
            .map_err(|source| ProcessModelError::Invalid { path: path.to_owned(), source })?;
        let tree = flowmem_mining::skeleton_to_tree(&graph, all_tools)
            .map_err(|source| ProcessModelError::Shape { path: path.to_owned(), source })?;
        let net = flowmem_mining::tree_to_petri_net(&tree);
        return Ok(ProcessModel { net, kind: ProcessModelKind::Graph, tree: Some(tree) });
    }
    let text =
        std::fs::read_to_string(path).map_err(|source| ProcessModelError::Io { path: path.to_owned(), source })?;
    let tree =
        ProcessTree::parse(text.trim()).map_err(|source| ProcessModelError::Tree { path: path.to_owned(), source })?;
    Ok(ProcessModel { net: flowmem_mining::tree_to_petri_net(&tree), kind: ProcessModelKind::Tree, tree: Some(tree) })
}

impl CallGuard {
    /// A guard over `net`; `name` says which skeleton it is in messages (a file name).
    #[must_use]
    pub fn new(net: PetriNet, policy: GuardPolicy, name: impl Into<String>) -> CallGuard {
        CallGuard { net: Arc::new(net), policy, name: name.into() }
    }

    /// A guard over the skeleton in `path` (see [`load_process_model`]), named after the
    /// file.
    ///
    /// # Errors
    ///
    /// As [`load_process_model`].
    pub fn load(path: &Path, all_tools: &[String], policy: GuardPolicy) -> Result<CallGuard, ProcessModelError> {
        let model = load_process_model(path, all_tools)?;
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        Ok(CallGuard::new(model.net, policy, name))
    }

    /// The skeleton's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What happens to a deviating call.
    #[must_use]
    pub fn policy(&self) -> GuardPolicy {
        self.policy
    }

    /// A checker at the start of a run.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_exec::{CallGuard, GuardPolicy};
    /// use flowmem_mining::{ProcessTree, tree_to_petri_net};
    ///
    /// let net = tree_to_petri_net(&ProcessTree::parse("->( 'find_user', X( 'cancel', 'refund' ) )")?);
    /// let guard = CallGuard::new(net, GuardPolicy::Flag, "retail");
    /// let mut checker = guard.start();
    /// assert_eq!(checker.check("find_user"), None);
    /// let deviation = checker.check("delete_account").expect("off the skeleton");
    /// assert_eq!((deviation.index, deviation.expected.as_slice()), (1, &["cancel".to_owned(), "refund".to_owned()][..]));
    /// assert!(!deviation.blocked);
    /// assert_eq!(checker.check("refund"), None);
    /// assert_eq!(checker.end(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn start(&self) -> CallChecker {
        CallChecker { guard: Guard::new(self.net.clone()), policy: self.policy, checked: Vec::new() }
    }
}

impl CallChecker {
    /// Checks the next call, to `tool`: `None` when the skeleton can follow it, else the
    /// deviation (blocked under [`GuardPolicy::Block`]). One step on the current markings.
    pub fn check(&mut self, tool: &str) -> Option<Deviation> {
        let index = self.checked.len();
        self.checked.push(tool.to_owned());
        let step = self.guard.step(tool);
        (!step.conforms).then(|| Deviation {
            index,
            tool: Some(tool.to_owned()),
            expected: step.expected,
            blocked: self.policy == GuardPolicy::Block,
            call_id: None,
        })
    }

    /// The run ends here: `None` when the skeleton may end, else a deviation without a
    /// tool, naming the tools the skeleton still expected.
    #[must_use]
    pub fn end(&self) -> Option<Deviation> {
        (!self.guard.can_finish()).then(|| Deviation {
            index: self.checked.len(),
            tool: None,
            expected: self.guard.expected(),
            blocked: false,
            call_id: None,
        })
    }

    /// The tools of the calls checked so far, in order, deviating ones included.
    #[must_use]
    pub fn checked(&self) -> &[String] {
        &self.checked
    }
}

/// The tool result a blocked call gets instead of running: what was blocked and which
/// tools the skeleton `guard_name` expected, so the agent can correct itself.
#[must_use]
pub fn blocked_result(deviation: &Deviation, guard_name: &str) -> String {
    let tool = deviation.tool.as_deref().unwrap_or("");
    let expected = if deviation.expected.is_empty() {
        "no further tool call (the workflow is complete: answer now)".to_owned()
    } else {
        format!("one of: {}", deviation.expected.join(", "))
    };
    format!(
        "error: the call to `{tool}` was blocked: it deviates from the workflow `{guard_name}`, which expects {expected}"
    )
}

#[cfg(test)]
mod tests {
    use flowmem_mining::{ProcessTree, tree_to_petri_net};

    use crate::guard::{CallGuard, GuardPolicy, blocked_result};

    fn guard(policy: GuardPolicy) -> CallGuard {
        let tree = ProcessTree::parse("->( 'find_user', *( 'get_order', tau ), X( 'cancel', 'refund' ) )").unwrap();
        CallGuard::new(tree_to_petri_net(&tree), policy, "retail.json")
    }

    #[test]
    fn a_stray_call_deviates_once_and_the_run_goes_on_from_where_it_was() {
        let mut checker = guard(GuardPolicy::Flag).start();
        assert_eq!(checker.check("find_user"), None);
        let stray = checker.check("refund_everything").unwrap();
        assert_eq!(stray.index, 1);
        assert_eq!(stray.expected, ["get_order"]);
        assert!(!stray.blocked);
        for tool in ["get_order", "get_order", "cancel"] {
            assert_eq!(checker.check(tool), None, "{tool}");
        }
        assert_eq!(checker.end(), None);
        assert_eq!(checker.checked().len(), 5);
    }

    #[test]
    fn an_early_end_names_what_the_skeleton_still_expected() {
        let mut checker = guard(GuardPolicy::Block).start();
        assert_eq!(checker.check("find_user"), None);
        assert_eq!(checker.check("get_order"), None);
        let end = checker.end().unwrap();
        assert_eq!((end.index, end.tool.as_deref()), (2, None));
        assert_eq!(end.expected, ["cancel", "get_order", "refund"]);
        let blocked = checker.check("find_user").unwrap();
        assert!(blocked.blocked);
        let text = blocked_result(&blocked, "retail.json");
        assert!(text.contains("`find_user` was blocked"), "{text}");
        assert!(text.contains("one of: cancel, get_order, refund"), "{text}");
    }
}
