//! Process mining for tool logs: event logs, directly-follows graphs, the Inductive
//! Miner (IM and IMf) with PM4Py 2.7.23.11 parity, Petri nets, and the skeleton
//! workflow graph that seeds FlowScout's search.
//!
//! # Brief overview
//!
//! - [`EventLog`] is a multiset of [`TraceVariant`]s over interned activities. Build it from
//!   [`Record`](flowmem_model::Record)s or [`Trajectory`](flowmem_model::Trajectory)s
//!   ([`EventLog::from_records`], with a [`Classifier`]), from names
//!   ([`EventLogBuilder`]), or from XES ([`read_xes`] then [`XesLog::to_event_log`]).
//! - [`discover_dfg`] gives the directly-follows graph ([`Dfg`]).
//! - [`discover`] runs the Inductive Miner ([`Variant::Im`] or [`Variant::ImF`]) and
//!   returns a [`ProcessTree`], printed in PM4Py's notation.
//! - [`tree_to_petri_net`] gives a [`PetriNet`] with the tree's language, exportable as
//!   PNML ([`PetriNet::to_pnml`]) and read back ([`read_pnml`]); [`tree_to_dot`] and
//!   [`tree_to_mermaid`] draw the tree.
//! - Conformance checking with PM4Py parity: [`fitness`] by token-based replay or
//!   alignments ([`FitnessVariant`]), [`precision`] by ETConformance
//!   ([`PrecisionVariant`]), the details per variant from [`token_replay`] and
//!   [`align_log`], and a [`Guard`] that checks a running trace one event at a time.
//! - [`tree_to_skeleton`] turns the tree into the skeleton
//!   [`WorkflowGraph`](flowmem_model::WorkflowGraph) that seeds FlowScout's search;
//!   [`order_routes`] first puts each choice's routes in the order the log takes them.
//! - [`mine_dataflow`] finds where every argument value of the records' calls comes from
//!   (the query, an earlier result at a JSON path, an earlier argument, a constant) and
//!   aggregates it per tool argument ([`Dataflow`]); [`tree_to_bound_skeleton`] builds the
//!   skeleton with those data bindings, ordering parallel blocks as the data requires.
//!
//! # Example
//!
//! ```
//! use flowmem_mining::{discover, EventLogBuilder, Variant};
//!
//! let mut builder = EventLogBuilder::new();
//! builder.push_trace(["find_user", "get_order", "cancel_order"]);
//! builder.push_trace(["find_user", "get_order", "get_order", "cancel_order"]);
//! let tree = discover(&builder.build(), Variant::Im);
//! assert_eq!(tree.to_string(), "->( 'find_user', *( 'get_order', tau ), 'cancel_order' )");
//! ```

#![deny(missing_docs)]

mod conformance;
pub mod dataflow;
mod dfg;
mod error;
mod log;
mod md5;
mod petri;
mod pnml;
mod render;
mod skeleton;
mod tree;
mod variants;
mod xes;

pub use crate::conformance::{
    AlignConfig, AlignmentReport, ConformanceError, DEFAULT_MAX_STATES, FitnessVariant, Guard, GuardStep, MOVE_COST,
    Move, PrecisionVariant, SILENT_COST, TokenReplayReport, VariantAlignment, VariantReplay, align_log, fitness,
    precision, token_replay,
};
pub use crate::dataflow::{
    ArgumentFlow, BindingConfig, CUE_MAX_SHARE, CUE_RECALL, DATAFLOW_VERSION, Dataflow, KindCounts, MAX_ANCHORS,
    MAX_CHANCE, MAX_CUE_CHANCE, MIN_ANCHOR_SUPPORT, MIN_CUE_RECORDS, MIN_PRECONDITION_SUPPORT, MIN_SAME_LENGTH_CALLS,
    MinedPairing, MinedPrecondition, RecordFlow, Source, SourceSupport, ValueFlow, mine_dataflow,
};
pub use crate::dfg::{Dfg, discover_dfg};
pub use crate::error::MiningError;
pub use crate::log::{ActivityId, Classifier, EventLog, EventLogBuilder, TraceVariant};
pub use crate::petri::{Arc, PetriNet, Transition, tree_to_petri_net};
pub use crate::pnml::{parse_pnml, read_pnml};
pub use crate::render::{tree_to_dot, tree_to_mermaid};
pub use crate::skeleton::{
    GraphShapeError, MIN_NEAREST_RECORDS, SKELETON_MAX_ITERATIONS, order_routes, skeleton_to_tree,
    tree_to_bound_skeleton, tree_to_skeleton,
};
pub use crate::tree::{Operator, ProcessTree, TreeParseError};
pub use crate::variants::{Variant, discover};
pub use crate::xes::{XesCase, XesEvent, XesLog, XesRemark, parse_xes, parse_xes_str, read_xes};
