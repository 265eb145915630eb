//! Online AWM on the server: a finished run, as OpenAI chat messages, is imported,
//! judged by the evaluator unless the caller gave its outcome, and, when successful,
//! induced into memory by rules or by the inducer model ([`Induce`]). `report_run` (MCP)
//! and the gateway's queue both learn here.

use std::sync::Arc;

use serde_json::{Value, json};

use flowmem_llm::ChatModel;
use flowmem_memory::induce::{self, Induction, LmConfig, RuleConfig, SkipReason, SkippedCandidate};
use flowmem_memory::{AddOutcome, RunToJudge, UseOutcome, embed_workflows, judge_run, record_uses};
use flowmem_model::{ImportFormat, Item, Outcome, Scope, Trajectory, import_text};

use crate::state::AppState;

/// How the server induces workflows from a successful run (AWM's two modes).
#[derive(Clone, Default)]
pub enum Induce {
    /// Group the run's tool calls by rule: deterministic, no model call.
    #[default]
    Rules,
    /// Ask this model for workflows with the `induce` template, in structured output.
    Model(Arc<dyn ChatModel>),
}

impl Induce {
    /// `rules`, or `lm:` and the model's name: for logs and `status`.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Induce::Rules => "rules".to_owned(),
            Induce::Model(model) => format!("lm:{}", model.name()),
        }
    }
}

impl std::fmt::Debug for Induce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The largest reply the inducer model may give, in tokens (also bounds the reply
/// schema's workflows and steps).
const INDUCE_MAX_TOKENS: u32 = 1024;
/// Characters of each tool result the inducer model is shown.
const INDUCE_RESULT_CHARS: usize = 300;

/// One run to learn from.
pub(crate) struct RunToLearn<'a> {
    /// The run: OpenAI chat messages with tool calls and results.
    pub messages: &'a Value,
    /// The trajectory id to store it under.
    pub id: String,
    /// Where its workflows apply.
    pub scope: Scope,
    /// The caller's own verdict; `None` asks the evaluator.
    pub outcome: Option<bool>,
    /// Where the run came from, kept in the trajectory's `meta.source`.
    pub source: Option<String>,
    /// Workflows the agent was shown: each gets this run's outcome as a use.
    pub shown: &'a [String],
}

/// The run as a trajectory, or why the messages are not one.
pub(crate) fn trajectory_of(messages: &Value, file: &str) -> Result<Trajectory, String> {
    let imported = import_text(ImportFormat::OpenAi, file.as_ref(), &messages.to_string());
    match imported.items.into_iter().next() {
        Some(Item::Trajectory(trajectory)) => Ok(trajectory),
        _ => {
            let reasons: Vec<String> = imported.skipped.iter().map(|skipped| skipped.reason.clone()).collect();
            Err(format!("the messages are not a run: {}", reasons.join("; ")))
        }
    }
}

/// Learns from one run and returns what happened, as the JSON `report_run` gives:
/// `{trajectory_id, judgement, stored, merged, rejected}`; `Err` says why nothing was
/// learned (bad messages, no evaluator, the evaluator failed, the store failed).
pub(crate) async fn learn(state: &Arc<AppState>, run: RunToLearn<'_>) -> Result<Value, String> {
    let mut trajectory = trajectory_of(run.messages, "report_run.json")?;
    trajectory.id = run.id;
    trajectory.meta.site = run.scope.site;
    trajectory.meta.domain = run.scope.domain;
    trajectory.meta.source = run.source;
    learn_trajectory(state, trajectory, run.outcome, run.shown).await
}

/// Learns from one run already read as a trajectory (its id, scope and source set):
/// judged unless `outcome` is given, induced when successful, and counted as a use of
/// each `shown` workflow. Returns what [`learn`] returns.
pub(crate) async fn learn_trajectory(
    state: &Arc<AppState>,
    mut trajectory: Trajectory,
    outcome: Option<bool>,
    shown: &[String],
) -> Result<Value, String> {
    // Learning the same run twice (a queue replayed after a crash) must not count it
    // twice: skip the judge when it was induced from already, and check again in the
    // writer, which is the one that decides.
    let id = trajectory.id.clone();
    if state.read(move |store| store.learned_from(&id)).await.unwrap_or(false) {
        return Ok(already_learned(&trajectory.id));
    }
    let judgement = match outcome {
        Some(success) => json!({"success": success, "by": "client"}),
        None => {
            let Some(evaluator) = &state.parts.evaluator else {
                return Err("`outcome` is required: this server has no evaluator model to judge the run".to_owned());
            };
            let calls: Vec<_> = trajectory.tool_calls().cloned().collect();
            let to_judge = RunToJudge {
                query: &trajectory.query,
                calls: &calls,
                answer: trajectory.final_answer.as_deref(),
                error: None,
            };
            match judge_run(evaluator.as_ref(), &state.prompts, &to_judge).await {
                Ok(judgement) => {
                    json!({"success": judgement.success, "reason": judgement.reason, "by": evaluator.name()})
                }
                Err(err) => return Err(format!("the evaluator could not judge the run: {err}")),
            }
        }
    };
    let success = judgement["success"].as_bool().unwrap_or(false);
    trajectory.success = Some(Outcome::Bool(success));
    // Induction runs before the writer is taken: the model's answer may take minutes,
    // and every other write waits for the writer.
    let induction = if success {
        let scope = Scope { site: trajectory.meta.site.clone(), domain: trajectory.meta.domain.clone() };
        induce_from(state, &trajectory, scope).await?
    } else {
        Induction {
            skipped: vec![SkippedCandidate {
                trajectory_ids: vec![trajectory.id.clone()],
                description: None,
                reason: SkipReason::Unsuccessful,
            }],
            ..Induction::default()
        }
    };
    let trajectory_id = trajectory.id.clone();
    let shown = shown.to_vec();
    let workflows = induction.workflows.clone();
    // The vectors too are made before the writer is taken, and written with their
    // workflows in one transaction.
    let vectors = match &state.parts.embedder {
        Some(embedder) if !workflows.is_empty() => Some(
            embed_workflows(embedder.as_ref(), &workflows)
                .await
                .map_err(|err| format!("embedding the run's workflows failed: {err}"))?,
        ),
        _ => None,
    };
    let added = state
        .write(move |store| {
            if store.learned_from(&trajectory.id)? {
                return Ok(None);
            }
            let added = store.add_all_with_vectors(&workflows, vectors.as_ref())?;
            let outcome = if success { UseOutcome::Success } else { UseOutcome::Failure };
            // A workflow deleted since it was shown has no use to count.
            let alive: Vec<String> = shown.into_iter().filter(|id| store.get(id).is_ok()).collect();
            record_uses(store, &alive, outcome)?;
            Ok(Some(added))
        })
        .await
        .map_err(|err| format!("storing the run's workflows failed: {err}"))?;
    let Some(added) = added else { return Ok(already_learned(&trajectory_id)) };
    let mut stored = Vec::new();
    let mut merged = Vec::new();
    for (workflow, outcome) in induction.workflows.iter().zip(&added) {
        let description = &workflow.description;
        match outcome {
            AddOutcome::Inserted { id, evicted } => {
                stored.push(json!({"id": id, "description": description, "evicted": evicted}));
            }
            AddOutcome::Merged { id, similarity } => {
                merged.push(json!({"id": id, "description": description, "similarity": similarity}));
            }
        }
    }
    let rejected: Vec<Value> = induction
        .skipped
        .iter()
        .map(|skipped| json!({"reason": skipped.reason, "message": skipped.reason.to_string(), "description": skipped.description}))
        .collect();
    if !stored.is_empty()
        && let Err(err) = state.refresh_catalog().await
    {
        tracing::warn!(error = %err, "refreshing the workflow tools failed");
    }
    Ok(json!({
        "trajectory_id": trajectory_id,
        "judgement": judgement,
        "stored": stored,
        "merged": merged,
        "rejected": rejected,
    }))
}

/// The workflows `state`'s inducer draws from one successful run, scoped to `scope`.
async fn induce_from(state: &AppState, trajectory: &Trajectory, scope: Scope) -> Result<Induction, String> {
    let runs = std::slice::from_ref(trajectory);
    match &state.parts.induce {
        Induce::Rules => Ok(induce::rule(runs, &RuleConfig { scope: Some(scope), ..RuleConfig::standard() })),
        Induce::Model(model) => {
            let cfg = LmConfig {
                model: model.as_ref(),
                prompts: &state.prompts,
                min_steps: RuleConfig::standard().min_steps,
                scope: Some(scope),
                structured: true,
                max_tokens: Some(INDUCE_MAX_TOKENS),
                max_result_chars: INDUCE_RESULT_CHARS,
            };
            induce::lm(runs, &cfg).await.map_err(|err| format!("the inducer model failed: {err}"))
        }
    }
}

fn already_learned(id: &str) -> Value {
    json!({"trajectory_id": id, "already_learned": true, "stored": [], "merged": [], "rejected": []})
}
