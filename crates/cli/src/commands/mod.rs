//! One module per command. Each `run` takes its arguments and the printer and returns an
//! [`ExitStatus`].

pub mod mine;
pub mod induce;
pub mod memory;
pub mod import;
pub mod graph;
pub mod llm;
pub mod schema;
pub mod scout;
pub mod score;
pub mod split;
pub mod stats;
pub mod tools;
pub mod serve_llm;
pub mod run;
pub mod common;
pub mod eval;
pub mod learn;

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
