//! FlowScout's workflow optimizer.
//!
//! # Brief overview
//!
//! - [`GraphEdit`] is one typed edit of a [`WorkflowGraph`](flowmem_model::WorkflowGraph):
//!   node add/remove/replace, edge add/remove/reconnect, control-flow insert/refine,
//!   prompt rewrite. An optimizer LLM proposes a [`EditPlan`] (a list of edits) under the
//!   JSON Schema that [`EditPlan`] derives. Plans are built edit by edit
//!   ([`Proposer`], [`ProposedEdits`], [`PlanTurn`]): each edit is decoded under the
//!   schema narrowed to the graph the earlier edits left, applied with [`apply_edit`] and
//!   validated; a refused edit is dropped and the optimizer is asked again from there, so
//!   a plan keeps its longest valid prefix. [`expansion_stats`] counts how expansions went.
//! - [`SearchTree`] holds the MCTS statistics `C`, `W`, `Q` per candidate, and
//!   implements selection (Eq. 6, with the 3-children rule and a cosine-annealed `λ`) and
//!   backpropagation (Eq. 8).
//! - [`ExecSimulator`] and [`ExecValidator`] are the real seams: candidates run through
//!   `flowmem-exec` on every record of a split (concurrently, each under its own tool
//!   state via `flowmem_exec::IsolatedTools`) and are scored by `flowmem_eval::score_trace`.
//! - [`scout`] is FlowScout end to end: split, `G⁰`, search, final test, `report.html`.
//! - [`study`] is the paper's evaluation protocol (RQ1–RQ4) as one resumable run of
//!   cells: baselines, stability, search cost, ablations, tool-set and backbone swaps.
//!
//! # Example
//!
//! ```
//! use flowmem_optimize::{SearchConfig, SearchTree};
//!
//! let cfg = SearchConfig::paper_defaults();
//! let mut tree = SearchTree::new(0.4);
//! let root = tree.root();
//! let child = tree.add_child(root, 0.6);
//! assert_eq!(tree.node(root).visits, 2);
//! assert_eq!(tree.select(0, &cfg), Some(root)); // the root has fewer than 3 children
//! # let _ = child;
//! ```

mod edit;
mod plan_schema;
mod propose;
mod scout;
mod search;
mod simulate;
mod study;
mod svg;
mod tree;

pub use crate::edit::{ControlInsert, EditError, EditPlan, EditProblem, GraphEdit, apply_edit, apply_plan};
pub use crate::plan_schema::{edit_plan_schema, edit_plan_schema_for, edit_step_schema, new_id_prefix};
pub use crate::propose::{FEEDBACK_CHARS, LlmProposer, PROPOSE_EDITS, PROPOSE_NEXT_EDIT, PlanDecoding};
pub use crate::scout::{
    DEFAULT_MAX_EDITS, ScoutError, ScoutOutcome, ScoutParts, ScoutSettings, ScoutTestRow, alpha_of, chain_workflow,
    initial_workflow, prepare_run, render_report, scout, test_rows,
};
pub use crate::search::{
    CandidatePlan, Checkpoint, DroppedEdit, EditCounts, Evaluation, ExpansionStats, IterationRecord, PLAN_REPAIRS,
    PlanTurn, ProposalInput, ProposedEdits, Proposer, SearchError, SearchParts, SearchState, Simulator, StopReason,
    Strategy, Validator, candidate_path, expansion_stats, read_json as read_run_json, run_search,
};
pub use crate::simulate::{ExecSimulator, ExecValidator, SplitProgress};
pub use crate::study::{
    CellRecord, CurvePoint, Difference, SearchFigures, StudyCell, StudyCheckpoint, StudyEstimate, StudyParts,
    StudyResults, StudySettings, StudyVariant, SwapFigures, SystemFigures, ToolSwap, assemble as assemble_study,
    estimate as estimate_study, prepare_study, render_study_html, render_study_markdown, retention, study, study_cells,
};
pub use crate::svg::{
    search_tree as search_tree_svg, search_tree_linked as search_tree_linked_svg,
    validation_curve as validation_curve_svg, workflow_graph as workflow_graph_svg,
    workflow_graph_marked as workflow_graph_marked_svg,
};
pub use crate::tree::{SearchConfig, SearchTree, TreeNode, TreeNodeId, cosine_lambda};
