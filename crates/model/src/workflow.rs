//! AWM workflows: reusable routines with `{variable}` placeholders.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::JsonObject;

/// A workflow `w = (d, P_w)`: a goal description plus steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Workflow {
    /// A stable id, assigned by the memory store.
    #[serde(default)]
    pub id: String,
    /// What the workflow achieves, in natural language.
    pub description: String,
    /// The steps, in order.
    pub steps: Vec<WorkflowStep>,
    /// Where the workflow applies.
    #[serde(default)]
    pub scope: Scope,
    /// Where the workflow came from.
    #[serde(default)]
    pub provenance: Provenance,
    /// How the workflow has been used.
    #[serde(default)]
    pub stats: WorkflowStats,
    /// Ids of stored workflows this one is composed of (AWM's snowballing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub composed_of: Vec<String>,
    /// Set when someone retired the workflow: it stays stored, with its provenance and
    /// statistics, but is no longer searched, retrieved or offered to agents, and a
    /// twin induced later merges into it instead of coming back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired: Option<Retirement>,
}

/// When and why a workflow was retired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Retirement {
    /// When, RFC 3339.
    pub at: String,
    /// Why, in the curator's words (may be empty).
    #[serde(default)]
    pub reason: String,
}

/// One step of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowStep {
    /// The environment state the step expects.
    #[serde(default)]
    pub state: String,
    /// Why the step is taken.
    #[serde(default)]
    pub reasoning: String,
    /// The action, with `{variable}` placeholders in its argument values.
    pub action: WorkflowAction,
}

/// A tool call template: string argument values may hold `{variable}` placeholders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowAction {
    /// The tool to call.
    pub tool: String,
    /// The argument templates.
    #[serde(default)]
    pub args: JsonObject,
    /// Where the values of its `{variable}` arguments came from in the runs it was
    /// induced from, per argument, when every run agreed: the task's query, or an
    /// earlier step's result at a JSON path. A workflow run as an action fills a
    /// result-sourced argument itself when its caller gives no value.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sources: std::collections::BTreeMap<String, StepSource>,
}

/// Where a workflow step's argument value comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum StepSource {
    /// The task's query (the caller of the workflow gives it).
    Query {
        /// The shape of the values seen, if they had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        shape: Option<crate::ValueShape>,
    },
    /// The result of an earlier step.
    Result {
        /// The step, from 0.
        step: usize,
        /// The JSON path in its result ([`values_at`](crate::values_at)).
        path: String,
    },
}

/// Where a workflow applies: AWM groups workflows per website or domain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Scope {
    /// The website, for web agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// The domain, such as `retail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

impl Scope {
    /// The scope a header or flag names: `domain`, or `site/domain`.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_model::Scope;
    ///
    /// assert_eq!(Scope::parse("retail").domain.as_deref(), Some("retail"));
    /// let scope = Scope::parse("shop.example/retail");
    /// assert_eq!((scope.site.as_deref(), scope.domain.as_deref()), (Some("shop.example"), Some("retail")));
    /// ```
    #[must_use]
    pub fn parse(text: &str) -> Scope {
        let text = text.trim();
        match text.split_once('/') {
            Some((site, domain)) => Scope { site: Some(site.to_owned()), domain: Some(domain.to_owned()) },
            None => Scope { site: None, domain: Some(text.to_owned()) },
        }
    }
}

/// What produced a workflow.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Provenance {
    /// Ids of the trajectories it was induced from.
    #[serde(default)]
    pub trajectory_ids: Vec<String>,
    /// `rule` or `lm`.
    #[serde(default)]
    pub inducer: String,
    /// The inducer model, for LM induction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The prompt template name and version, for LM induction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_version: Option<String>,
    /// When it was created, as RFC 3339 text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

/// Usage statistics kept by the memory store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowStats {
    /// Times the workflow was retrieved for a query.
    #[serde(default)]
    pub retrieved: u64,
    /// Times it was used in a run that succeeded.
    #[serde(default)]
    pub used_success: u64,
    /// Times it was used in a run that failed.
    #[serde(default)]
    pub used_failure: u64,
}

impl Workflow {
    /// The tool names of the steps, in order: the workflow's action sequence.
    pub fn tool_sequence(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|step| step.action.tool.as_str())
    }
}
