//! Workflow induction: from agent runs to reusable workflows.
//!
//! Two variants, as in AWM:
//! - [`rule`]: deterministic, no model. Trajectories with the same tool-name sequence
//!   (failed calls dropped) form one workflow whose differing argument values become
//!   `{argument_name}` variables.
//! - [`lm`]: a language model extracts common sub-routines; every proposed workflow is
//!   validated before it is kept.
//!
//! Both return an [`Induction`]: the workflows plus a report of everything skipped or
//! rejected, with the reason.

mod lm;
mod rule;

use std::fmt;

use serde::Serialize;

use flowmem_model::{Scope, Workflow};

pub use crate::induce::lm::{
    JsonReplyError, LmConfig, PROMPT_NAME, PROMPT_VERSION, ParsedReply, UnreadableReply, lm, parse_reply, reply_schema,
    validate,
};
pub use crate::induce::rule::{RuleConfig, rule};

/// Workflows induced from a batch, and what was left out and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[must_use]
pub struct Induction {
    /// The workflows that passed every check, in a deterministic order.
    pub workflows: Vec<Workflow>,
    /// Groups, trajectories or proposed workflows that were left out.
    pub skipped: Vec<SkippedCandidate>,
    /// How many candidate workflows the inducer considered before its checks: for LM
    /// induction the workflows of the reply plus its unreadable text blocks, for rule
    /// induction the tool-sequence groups. Each one ends up in `workflows` or, with its
    /// reason, in `skipped`.
    pub proposed: usize,
}

/// One thing an inducer left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkippedCandidate {
    /// The trajectories concerned.
    pub trajectory_ids: Vec<String>,
    /// The proposed workflow's description, for LM induction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Why it was left out.
    pub reason: SkipReason,
}

/// Why an inducer left something out.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SkipReason {
    /// The run is labelled unsuccessful; offline induction learns from successes only.
    Unsuccessful,
    /// The (successful-call) tool sequence is shorter than a workflow may be.
    TooFewSteps {
        /// The tool names, in order.
        tools: Vec<String>,
        /// The smallest number of steps allowed.
        min_steps: usize,
    },
    /// A proposed workflow calls a tool that none of the input trajectories called.
    UnknownTool {
        /// The 0-based step index.
        step: usize,
        /// The tool name.
        tool: String,
    },
    /// A proposed workflow's argument is a literal value copied from exactly one input
    /// trajectory instead of a `{variable}`.
    CopiedLiteral {
        /// The 0-based step index.
        step: usize,
        /// The argument name (a JSON path below `args` for nested values).
        arg: String,
        /// The literal, as canonical JSON.
        value: String,
        /// The trajectory it was copied from.
        trajectory_id: String,
    },
    /// The model's reply was neither valid structured output nor AWM's text form.
    Unparseable {
        /// What the parsers said.
        message: String,
    },
    /// A stored workflow was already induced from the run (an earlier, maybe
    /// interrupted, induction of the same input), so it is not induced again.
    AlreadyLearned,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::Unsuccessful => write!(f, "the run is labelled unsuccessful"),
            SkipReason::TooFewSteps { tools, min_steps } => write!(
                f,
                "{} step(s) [{}], fewer than the {min_steps} a workflow needs",
                tools.len(),
                tools.join(" -> ")
            ),
            SkipReason::UnknownTool { step, tool } => {
                write!(f, "step {step} calls `{tool}`, which no input trajectory called")
            }
            SkipReason::CopiedLiteral { step, arg, value, trajectory_id } => write!(
                f,
                "step {step} argument `{arg}` is the literal {value} copied from trajectory `{trajectory_id}`; it should be a {{variable}}"
            ),
            SkipReason::Unparseable { message } => write!(f, "the reply does not parse: {message}"),
            SkipReason::AlreadyLearned => write!(f, "the memory already holds a workflow induced from it"),
        }
    }
}

/// Which inducer to run, for callers that pick one at run time.
#[derive(Clone, Copy)]
pub enum Inducer<'a> {
    /// Deterministic rule-based induction.
    Rule(&'a RuleConfig),
    /// LM-based induction.
    Lm(&'a LmConfig<'a>),
}

/// Runs the chosen inducer over `trajectories`.
///
/// # Errors
///
/// Only LM induction fails, when its prompt does not render or the model cannot be
/// reached (see [`lm()`]).
pub async fn induce(
    trajectories: &[flowmem_model::Trajectory],
    inducer: Inducer<'_>,
) -> Result<Induction, crate::InduceError> {
    match inducer {
        Inducer::Rule(cfg) => Ok(rule(trajectories, cfg)),
        Inducer::Lm(cfg) => lm(trajectories, cfg).await,
    }
}

/// The scope for a trajectory: the override when given, otherwise its site and domain.
pub(crate) fn scope_of(trajectory: &flowmem_model::Trajectory, scope: Option<&Scope>) -> Scope {
    match scope {
        Some(scope) => scope.clone(),
        None => Scope { site: trajectory.meta.site.clone(), domain: trajectory.meta.domain.clone() },
    }
}
