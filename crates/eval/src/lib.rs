//! flowmem's scores: every claim that one workflow beats another comes from here.
//!
//! # Brief overview
//!
//! - [`tool_correctness`] computes FlowScout's TC, `LCS(π, π̂) / max(K, K̂)`, with the
//!   [`Alignment`] that says which calls matched, which are missing and which are extra.
//! - [`reward`] combines TC and ES into the optimizer's scalar `R = α·TC + (1−α)·ES`.
//! - [`split`] cuts a record set into `opt : val : test = 5 : 2 : 3`, reproducibly for a
//!   seed.
//! - [`score_web_tasks`] computes AWM's Mind2Web step metrics.
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
mod mind2web;
mod reward;
mod split;
mod tc;

pub use crate::error::EvalError;
pub use crate::mind2web::{
    StepMetrics, WebStepPrediction, WebStepReference, WebTask, WebTaskMetrics, score_step,
    score_web_tasks, token_set_f1,
};
pub use crate::reward::{Alpha, reward};
pub use crate::split::{Split, SplitRatios, split};
pub use crate::tc::{Alignment, MatchedPair, TcConfig, TcScore, mean_tc, tool_correctness};
