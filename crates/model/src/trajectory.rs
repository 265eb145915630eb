//! Agent runs: AWM's experiences `e = (q, P_e)`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ToolCall;

/// One agent run: the query, the steps it took and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Trajectory {
    /// The source's id, kept verbatim as a string (a τ-bench task index, a run's `id`).
    pub id: String,
    /// The trial or attempt number, when the source runs a task more than once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The user's query: the first user message of the run.
    pub query: String,
    /// What the agent did, in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// The agent's final answer: its last message without tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_answer: Option<String>,
    /// A reference answer, when the source has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// How the run ended, when the source says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<Outcome>,
    /// Where the run came from.
    #[serde(default)]
    pub meta: Meta,
}

/// One step of an agent run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Step {
    /// What the agent saw before acting, when logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<String>,
    /// The agent's reasoning for this step, when logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// What the agent did.
    pub action: Action,
}

/// What an agent did in one step: call a tool or say something.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant, reason = "most steps are tool calls; a box would cost each one an allocation")]
pub enum Action {
    /// A tool call, with its result or error when known.
    ToolCall(ToolCall),
    /// A message to the user.
    Message {
        /// The message text.
        content: String,
    },
}

/// How a run ended: a pass/fail label or a score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Outcome {
    /// Succeeded or failed.
    Bool(bool),
    /// A score, read as success when it is at least 1.0 (τ-bench's reward convention).
    Score(f64),
}

impl Outcome {
    /// Whether the outcome counts as a success.
    #[must_use]
    pub fn is_success(self) -> bool {
        match self {
            Outcome::Bool(ok) => ok,
            Outcome::Score(score) => score >= 1.0,
        }
    }
}

/// Where an item came from; AWM scopes workflows by site or domain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Meta {
    /// The website, for web agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// The domain, such as `retail` or `airline`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// The source format and file, such as `tau-bench:retail/tasks_test.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl Trajectory {
    /// The tool calls of the run, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.steps.iter().filter_map(|step| match &step.action {
            Action::ToolCall(call) => Some(call),
            Action::Message { .. } => None,
        })
    }

    /// Whether the source labelled the run a success; `None` when it did not say.
    #[must_use]
    pub fn succeeded(&self) -> Option<bool> {
        self.success.map(Outcome::is_success)
    }
}
