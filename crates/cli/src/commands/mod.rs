//! One module per command. Each `run` takes its arguments and the printer and returns an
//! [`ExitStatus`].

pub mod common;
pub mod conform;
pub mod eval;
pub mod graph;
pub mod import;
pub mod induce;
pub mod learn;
pub mod llm;
pub mod memory;
pub mod mine;
pub mod run;
pub mod schema;
pub mod score;
pub mod scout;
pub mod serve;
pub mod serve_llm;
pub mod split;
pub mod stats;
pub mod study;
pub mod tools;

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It did what was asked.
    Success,
    /// It ran, but the outcome is negative (nothing imported, a check failed).
    Failure,
    /// It could not run.
    Error,
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        match status {
            ExitStatus::Success => ExitCode::from(0),
            ExitStatus::Failure => ExitCode::from(1),
            ExitStatus::Error => ExitCode::from(2),
        }
    }
}
