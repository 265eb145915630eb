//! flowmem's scores: every claim that one workflow beats another comes from here.
//!
//! # Brief overview
//!
//! - [`tool_correctness`] computes FlowScout's TC, `LCS(π, π̂) / max(K, K̂)`, with the
//!   [`Alignment`] that says which calls matched, which are missing and which are extra.
//!   [`score_runs`] applies it to logged runs matched to records by id (`flowmem score`).
//! - [`judge_es`] asks an LLM judge for the execution score ES on four dimensions, with
//!   structured output and the `judge_es` prompt template.
//! - [`TaskChecker`] is the deterministic check of τ-bench-style records: it replays the
//!   reference calls and the run's calls through the real MCP server into two state keys
//!   and compares the resulting databases; [`required_outputs_found`] checks the answer.
//! - [`score_trace`] is the one scoring of a run: TC, ES with the judge and task success
//!   from a trace, as a [`TraceScore`]; [`ScoreMeans`] aggregates scored runs (ES over
//!   judged runs only) and [`reward_of_means`] gives their reward. `flowmem eval`, the
//!   scout's final test and the optimizer's simulator all score through them.
//! - [`reward`] combines TC and ES into the optimizer's scalar `R = α·TC + (1−α)·ES`.
//! - [`split`] cuts a record set into `opt : val : test = 5 : 2 : 3`, reproducibly for a
//!   seed.
//! - [`evaluate`] runs [`System`]s (a workflow, the ReAct baseline) on records with
//!   repeats and measures every run; [`summarize`] aggregates [`RunMeasurement`]s into an
//!   [`EvalReport`] with per-system figures and FlowScout-style relative improvements;
//!   [`render_markdown`] and [`render_html`] present it. [`EvalJournal`] keeps each
//!   finished run on disk, and [`evaluate_resumed`] continues an interrupted evaluation
//!   from it.
//! - [`score_web_tasks`] computes AWM's Mind2Web step metrics.
//!
//! Scoring is deterministic given a trace: TC, the task check and the report involve no
//! randomness, and ES is replayable through the LLM response cache (greedy requests).
//!
//! # Example
//!
//! ```
//! use flowmem_eval::{Alpha, TcConfig, reward, tool_correctness};
//! use flowmem_model::ToolCall;
//! use serde_json::json;
//!
//! let reference = vec![ToolCall::new("get_order", json!({"id": "#W1"}))?];
//! let run = vec![ToolCall::new("get_order", json!({"id": "#W1"}))?];
//! let tc = tool_correctness(&reference, &run, &TcConfig::exact()).tc;
//! assert_eq!(reward(tc, 0.6, Alpha::HALF), 0.8);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod error;
mod es;
mod journal;
mod mind2web;
mod outputs;
mod render;
mod report;
mod reward;
mod run;
mod score;
mod scoring;
mod split;
mod systems;
mod task_check;
mod tc;

pub use crate::error::EvalError;
pub use crate::es::{EsJudgement, JUDGE_ES_PROMPT, JudgeInput, judge_es};
pub use crate::journal::{EvalJournal, PROGRESS_FILE};
pub use crate::mind2web::{
    StepMetrics, WebStepPrediction, WebStepReference, WebTask, WebTaskMetrics, score_step, score_web_tasks,
    token_set_f1,
};
pub use crate::outputs::required_outputs_found;
pub use crate::render::{ReportFiles, cv_boxplot_svg, render_html, render_markdown, write_report};
pub use crate::report::{
    Comparison, EvalReport, RecordCv, RunMeasurement, SystemRole, SystemSummary, ToolTraceConformance,
    coefficient_of_variation, compare, relative_change, summarize, tool_trace_conformance,
};
pub use crate::reward::{Alpha, reward, reward_of_means};
pub use crate::run::{EvalConfig, Progress, System, SystemRun, evaluate, evaluate_concurrently, evaluate_resumed};
pub use crate::score::{LoggedCall, MatchedCall, RunScore, ScoreReport, score_run, score_runs};
pub use crate::scoring::{ScoreConfig, ScoreMeans, TraceScore, score_trace};
pub use crate::split::{Split, SplitRatios, split};
pub use crate::systems::{ReactSystem, WorkflowSystem};
pub use crate::task_check::{StateServer, TaskCheck, TaskChecker};
pub use crate::tc::{Alignment, MatchedPair, TcConfig, TcScore, mean_tc, tool_correctness};
