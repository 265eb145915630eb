//! Agents that use the memory: workflows in the system prompt (AWM) or as callable
//! high-level tools (AWM_AS), over exec's ReAct loop.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use flowmem_exec::{AgentConfig, ExecEvent, ExecObserver, RunInput, Runtime, ToolBox, run_agent};
use flowmem_llm::{PromptError, Prompts, ToolDefinition};
use flowmem_model::{JsonObject, NodeObservation, Scope, StepSource, ToolCall, Trace, Workflow, WorkflowStep};

use crate::error::{MemoryError, OnlineError};
use crate::retrieval::{Retrieval, Retriever};
use crate::store::{MemoryStore, UseOutcome};
use crate::templates::prompt_text;

/// Characters per token in the budget estimate: [`approx_tokens`] counts `⌈chars / 4⌉`,
/// the usual rule of thumb for English text under BPE tokenizers.
pub const CHARS_PER_TOKEN: usize = 4;

/// The approximate number of tokens of `text`: its Unicode scalar count divided by
/// [`CHARS_PER_TOKEN`], rounded up.
#[must_use]
pub fn approx_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(CHARS_PER_TOKEN)
}

/// Workflows rendered for the system prompt within a token budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[must_use]
pub struct PromptMemory {
    /// The rendered text (empty when nothing fits).
    pub text: String,
    /// Its size by [`approx_tokens`]; never above the budget.
    pub tokens: usize,
    /// Ids of the workflows included, in rank order.
    pub included: Vec<String>,
    /// Ids of the workflows left out because they did not fit.
    pub dropped: Vec<String>,
}

/// Renders `workflows` (best first) as AWM prompt text within `budget_tokens`.
///
/// Workflows are taken greedily in rank order: each one is kept when the text of all
/// kept workflows plus it still fits the budget, otherwise it is dropped and the next
/// (perhaps shorter) one is tried. When all of them fit, that is the answer, rendered
/// once.
///
/// # Errors
///
/// [`PromptError`] when the `workflow` template is missing from `prompts`.
pub fn prompt_memory(
    prompts: &Prompts,
    workflows: &[Workflow],
    budget_tokens: usize,
) -> Result<PromptMemory, PromptError> {
    // The common case: everything fits. A list renders no shorter than any of its
    // prefixes, so the greedy pass below would keep every workflow too.
    if !workflows.is_empty() {
        let text = prompt_text(prompts, workflows)?.text;
        let tokens = approx_tokens(&text);
        if tokens <= budget_tokens {
            let included = workflows.iter().map(|workflow| workflow.id.clone()).collect();
            return Ok(PromptMemory { text, tokens, included, dropped: Vec::new() });
        }
    }
    let mut kept: Vec<Workflow> = Vec::new();
    let mut memory = PromptMemory { text: String::new(), tokens: 0, included: Vec::new(), dropped: Vec::new() };
    for workflow in workflows {
        kept.push(workflow.clone());
        let text = prompt_text(prompts, &kept)?.text;
        let tokens = approx_tokens(&text);
        if tokens <= budget_tokens {
            memory.text = text;
            memory.tokens = tokens;
            memory.included.push(workflow.id.clone());
        } else {
            kept.pop();
            memory.dropped.push(workflow.id.clone());
        }
    }
    Ok(memory)
}

/// The `{variable}` names of a workflow's argument templates, in first-use order.
#[must_use]
pub fn workflow_variables(workflow: &Workflow) -> Vec<String> {
    let mut names = Vec::new();
    for step in &workflow.steps {
        for value in step.action.args.values() {
            collect_variables(value, &mut names);
        }
    }
    names
}

fn collect_variables(value: &Value, names: &mut Vec<String>) {
    match value {
        Value::String(text) => {
            let mut rest = text.as_str();
            while let Some(open) = rest.find('{') {
                let after = &rest[open + 1..];
                let Some(close) = after.find('}') else { break };
                let name = &after[..close];
                if is_variable_name(name) && !names.iter().any(|known| known == name) {
                    names.push(name.to_owned());
                }
                rest = &after[close + 1..];
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_variables(item, names)),
        Value::Object(map) => map.values().for_each(|item| collect_variables(item, names)),
        _ => {}
    }
}

fn is_variable_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Substitutes `{variable}`s of `template` from `values`. A string that is exactly one
/// variable takes the value as given (a number stays a number); inside longer text the
/// value's text is spliced in. Returns the first variable without a value as the error.
fn substitute(template: &Value, values: &JsonObject) -> Result<Value, String> {
    match template {
        Value::String(text) => {
            if let Some(name) = text.strip_prefix('{').and_then(|rest| rest.strip_suffix('}'))
                && is_variable_name(name)
            {
                return values.get(name).cloned().ok_or_else(|| name.to_owned());
            }
            let mut out = String::new();
            let mut rest = text.as_str();
            while let Some(open) = rest.find('{') {
                let after = &rest[open + 1..];
                match after.find('}') {
                    Some(close) if is_variable_name(&after[..close]) => {
                        let name = &after[..close];
                        let value = values.get(name).ok_or_else(|| name.to_owned())?;
                        out.push_str(&rest[..open]);
                        match value {
                            Value::String(text) => out.push_str(text),
                            other => out.push_str(&other.to_string()),
                        }
                        rest = &after[close + 1..];
                    }
                    _ => {
                        out.push_str(&rest[..=open]);
                        rest = after;
                    }
                }
            }
            out.push_str(rest);
            Ok(Value::String(out))
        }
        Value::Array(items) => {
            items.iter().map(|item| substitute(item, values)).collect::<Result<_, _>>().map(Value::Array)
        }
        Value::Object(map) => map
            .iter()
            .map(|(key, item)| substitute(item, values).map(|value| (key.clone(), value)))
            .collect::<Result<Map<_, _>, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// The tool name under which a workflow is offered: `workflow_` and the first 16
/// characters of its id that are letters, digits, `_` or `-`.
#[must_use]
pub fn workflow_tool_name(workflow: &Workflow) -> String {
    let id: String =
        workflow.id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').take(16).collect();
    format!("workflow_{id}")
}

/// One call of a workflow tool: which steps ran and where one failed (AWM Fig. 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowUse {
    /// The workflow's id.
    pub workflow_id: String,
    /// The arguments the agent gave.
    pub args: JsonObject,
    /// The real tool calls made for the steps that ran, in order.
    pub steps: Vec<ToolCall>,
    /// The 0-based index of the step that failed, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<usize>,
    /// Why it failed: a missing variable or the step's tool error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A [`ToolBox`] that offers workflows as high-level tools in front of the real ones.
///
/// Calling a workflow tool substitutes its arguments into each step's argument
/// templates and calls the steps' tools in order through the inner tool box, stopping
/// at the first failed step. Every call is recorded as a [`WorkflowUse`].
pub struct WorkflowTools {
    inner: Arc<dyn ToolBox>,
    workflows: Vec<(String, Workflow)>,
    uses: Mutex<Vec<WorkflowUse>>,
}

impl WorkflowTools {
    /// Offers `workflows` in front of `inner`'s tools.
    #[must_use]
    pub fn new(inner: Arc<dyn ToolBox>, workflows: &[Workflow]) -> WorkflowTools {
        let workflows = workflows.iter().map(|workflow| (workflow_tool_name(workflow), workflow.clone())).collect();
        WorkflowTools { inner, workflows, uses: Mutex::new(Vec::new()) }
    }

    /// Offers each workflow of `named` in front of `inner`'s tools under the name paired
    /// with it, for callers with their own naming (`flowmem serve` derives names from
    /// descriptions). Names must be unique and must not clash with `inner`'s tools.
    #[must_use]
    pub fn with_names(inner: Arc<dyn ToolBox>, named: Vec<(String, Workflow)>) -> WorkflowTools {
        WorkflowTools { inner, workflows: named, uses: Mutex::new(Vec::new()) }
    }

    /// The workflow calls made so far, in order.
    #[must_use]
    pub fn uses(&self) -> Vec<WorkflowUse> {
        self.uses.lock().map(|uses| uses.clone()).unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// Whether `tool` is one of the offered workflow tools.
    #[must_use]
    pub fn is_workflow_tool(&self, tool: &str) -> bool {
        self.workflows.iter().any(|(name, _)| name == tool)
    }

    async fn run_workflow(&self, workflow: &Workflow, args: JsonObject) -> WorkflowUse {
        let mut done = WorkflowUse {
            workflow_id: workflow.id.clone(),
            args: args.clone(),
            steps: Vec::new(),
            failed_step: None,
            error: None,
        };
        let mut values = args;
        for (index, step) in workflow.steps.iter().enumerate() {
            let unfilled = fill_from_results(step, &done.steps, &mut values);
            let call_args = match substitute(&Value::Object(step.action.args.clone()), &values) {
                Ok(Value::Object(map)) => map,
                Ok(_) => JsonObject::new(),
                Err(name) => {
                    done.failed_step = Some(index);
                    let why = unfilled
                        .iter()
                        .find(|(variable, _)| *variable == name)
                        .map_or_else(|| "which was not given".to_owned(), |(_, why)| why.clone());
                    done.error =
                        Some(format!("step {index} (`{}`) needs the argument `{name}`, {why}", step.action.tool));
                    return done;
                }
            };
            let call = self.inner.call(&step.action.tool, call_args).await;
            let failed = call.error.clone();
            done.steps.push(call);
            if let Some(error) = failed {
                done.failed_step = Some(index);
                done.error = Some(format!("step {index} (`{}`) failed: {error}", step.action.tool));
                return done;
            }
        }
        done
    }
}

/// Fills the variables of `step` that the caller did not give and that induction saw
/// come from an earlier step's result ([`StepSource::Result`]), from that step's result
/// in `done`. A path holding one value fills its variable; the variables left unfilled
/// are returned with the reason, for the error.
fn fill_from_results(step: &WorkflowStep, done: &[ToolCall], values: &mut JsonObject) -> Vec<(String, String)> {
    let mut unfilled = Vec::new();
    for (arg, source) in &step.action.sources {
        let StepSource::Result { step: from, path } = source else { continue };
        let Some(variable) = step.action.args.get(arg).and_then(Value::as_str).and_then(whole_variable) else {
            continue;
        };
        if values.contains_key(variable) {
            continue;
        }
        let result = done.get(*from).and_then(|call| call.result.as_ref());
        let parsed = match result {
            Some(Value::String(text)) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone())),
            Some(other) => other.clone(),
            None => Value::Null,
        };
        let mut found: Vec<Value> = Vec::new();
        for value in flowmem_model::values_at(&parsed, path) {
            if !value.is_null() && !found.contains(&value) {
                found.push(value);
            }
        }
        match found.len() {
            1 => {
                values.insert(variable.to_owned(), found.swap_remove(0));
            }
            0 => unfilled.push((
                variable.to_owned(),
                format!("which was not given and step {from}'s result holds none at {path}"),
            )),
            n => unfilled.push((
                variable.to_owned(),
                format!("which was not given; step {from}'s result holds {n} values at {path}, so pass the one meant"),
            )),
        }
    }
    unfilled
}

/// `{name}` → `name`, for a template that is one variable and nothing else.
fn whole_variable(text: &str) -> Option<&str> {
    text.strip_prefix('{').and_then(|rest| rest.strip_suffix('}')).filter(|name| is_variable_name(name))
}

/// The variables of `workflow` its runs took from an earlier step's result: a workflow
/// run as an action fills them itself, so its caller need not.
fn result_sourced(workflow: &Workflow) -> Vec<String> {
    let mut res: Vec<String> = Vec::new();
    for step in &workflow.steps {
        for (arg, source) in &step.action.sources {
            if let (StepSource::Result { .. }, Some(variable)) =
                (source, step.action.args.get(arg).and_then(Value::as_str).and_then(whole_variable))
                && !res.iter().any(|known| known == variable)
            {
                res.push(variable.to_owned());
            }
        }
    }
    res
}

#[async_trait::async_trait]
impl ToolBox for WorkflowTools {
    fn definitions(&self) -> Vec<ToolDefinition> {
        let mut definitions: Vec<ToolDefinition> = self
            .workflows
            .iter()
            .map(|(name, workflow)| {
                let variables = workflow_variables(workflow);
                let filled = result_sourced(workflow);
                let properties: Map<String, Value> = variables
                    .iter()
                    .map(|variable| {
                        let description = if filled.contains(variable) {
                            format!("the value of {{{variable}}}; filled from an earlier step's result when not given")
                        } else {
                            format!("the value of {{{variable}}}")
                        };
                        (variable.clone(), json!({"description": description}))
                    })
                    .collect();
                let required: Vec<&String> = variables.iter().filter(|variable| !filled.contains(variable)).collect();
                let tools: Vec<&str> = workflow.steps.iter().map(|step| step.action.tool.as_str()).collect();
                ToolDefinition {
                    name: name.clone(),
                    description: format!("Workflow: {} (runs {} in order)", workflow.description, tools.join(" -> ")),
                    parameters: json!({"type": "object", "properties": properties, "required": required}),
                }
            })
            .collect();
        definitions.extend(self.inner.definitions());
        definitions
    }

    async fn call(&self, name: &str, args: JsonObject) -> ToolCall {
        let Some((_, workflow)) = self.workflows.iter().find(|(tool, _)| tool == name) else {
            return self.inner.call(name, args).await;
        };
        let done = self.run_workflow(workflow, args.clone()).await;
        let steps: Vec<Value> = done
            .steps
            .iter()
            .map(|call| json!({"tool": call.tool, "args": call.args, "result": call.result, "error": call.error}))
            .collect();
        let call = ToolCall {
            result: Some(json!({"workflow": workflow.id, "steps": steps, "completed": done.failed_step.is_none()})),
            error: done.error.clone(),
            ..ToolCall::with_args(name, args)
        };
        if let Ok(mut uses) = self.uses.lock() {
            uses.push(done);
        }
        call
    }
}

/// How memory is given to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryMode {
    /// Workflows rendered into the system prompt (AWM).
    Prompt,
    /// Workflows offered as callable tools (AWM_AS).
    Actions,
}

/// Options of [`run_with_memory`].
#[derive(Debug, Clone)]
pub struct MemoryAgentConfig {
    /// The ReAct loop's options; its instruction is extended with the memory.
    pub agent: AgentConfig,
    /// How the memory is used.
    pub mode: MemoryMode,
    /// How many workflows to retrieve.
    pub top_k: usize,
    /// The token budget of prompt memory ([`approx_tokens`]).
    pub budget_tokens: usize,
    /// The scope workflows are retrieved from.
    pub scope: Scope,
    /// How workflows are retrieved (BM25, vector or hybrid).
    pub retriever: Retriever,
}

/// The node id of the retrieval step in a memory run's trace.
pub const RETRIEVAL_NODE_ID: &str = "memory";

/// A memory-augmented run.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct MemoryRun {
    /// The agent's trace; in actions mode a workflow call is one entry of `tool_calls`.
    pub trace: Trace,
    /// Ids of the workflows retrieved for the query.
    pub retrieved: Vec<String>,
    /// Ids of the workflows given to the agent (in the prompt, or as tools).
    pub offered: Vec<String>,
    /// The workflow-tool calls, in order (actions mode).
    pub uses: Vec<WorkflowUse>,
    /// The real tool calls, with each workflow call expanded into its steps.
    pub calls: Vec<ToolCall>,
}

impl MemoryRun {
    /// Whether the run used a workflow: called one (actions mode) or had one in its
    /// prompt (prompt mode, where use cannot be told apart from seeing).
    #[must_use]
    pub fn used_workflows(&self, mode: MemoryMode) -> Vec<String> {
        match mode {
            MemoryMode::Prompt => self.offered.clone(),
            MemoryMode::Actions => {
                let ids: BTreeSet<&str> = self.uses.iter().map(|used| used.workflow_id.as_str()).collect();
                ids.into_iter().map(str::to_owned).collect()
            }
        }
    }
}

impl MemoryRun {
    /// The outcome of each used workflow when no evaluator judges the run (`flowmem
    /// agent --memory`): a use fails when the run ended with an error or without an
    /// answer, and, in actions mode, when one of the workflow's calls stopped at a failed
    /// step; otherwise it succeeds. One entry per workflow, in [`Self::used_workflows`]
    /// order.
    #[must_use]
    pub fn unjudged_outcomes(&self, mode: MemoryMode) -> Vec<(String, UseOutcome)> {
        let answered = self.trace.error.is_none() && self.trace.result.is_some();
        self.used_workflows(mode)
            .into_iter()
            .map(|id| {
                let step_failed = self.uses.iter().any(|used| used.workflow_id == id && used.failed_step.is_some());
                let outcome = if answered && !step_failed { UseOutcome::Success } else { UseOutcome::Failure };
                (id, outcome)
            })
            .collect()
    }
}

/// Runs the ReAct agent on `input` with workflows retrieved from `store`.
///
/// Retrieval goes through [`Retriever::retrieve`] and counts as a retrieval in the
/// store's statistics; the caller records the outcome of the use with [`record_uses`]
/// once the run is judged. The retrieval is the trace's first observation (node
/// [`RETRIEVAL_NODE_ID`], kind `retrieval:<mode>`, its output the
/// [`Retrieval::record`](crate::Retrieval::record) with the mode and each hit's scores),
/// and the observer sees it as a finished node before the agent starts.
///
/// # Errors
///
/// [`OnlineError::Memory`] when retrieval fails and [`OnlineError::Prompt`] when the
/// workflow template does not render.
pub async fn run_with_memory(
    runtime: &Runtime,
    cfg: &MemoryAgentConfig,
    store: &mut MemoryStore,
    input: &RunInput,
    observer: &dyn ExecObserver,
) -> Result<MemoryRun, OnlineError> {
    let started_at_ms = now_ms();
    let retrieval = if cfg.top_k == 0 {
        Retrieval { mode: cfg.retriever.mode(), embed_ms: 0.0, search_ms: 0.0, hits: Vec::new() }
    } else {
        cfg.retriever.retrieve(store, &input.query, &cfg.scope, cfg.top_k).await?
    };
    let observation = NodeObservation {
        node_id: RETRIEVAL_NODE_ID.to_owned(),
        node_kind: format!("retrieval:{}", retrieval.mode),
        output: Some(retrieval.record().to_string()),
        started_at_ms,
        latency_ms: retrieval.embed_ms + retrieval.search_ms,
        ..NodeObservation::default()
    };
    let model =
        cfg.retriever.embedder().filter(|_| retrieval.mode.needs_vectors()).map(|model| model.name().to_owned());
    observer.on_event(&ExecEvent::NodeFinished { query_id: input.id.clone(), model, observation: observation.clone() });
    let workflows: Vec<Workflow> = retrieval.hits.into_iter().map(|hit| hit.workflow).collect();
    let retrieved: Vec<String> = workflows.iter().map(|workflow| workflow.id.clone()).collect();
    let mut run = run_modes(runtime, cfg, input, observer, workflows, retrieved).await?;
    run.trace.observations.insert(0, observation);
    Ok(run)
}

/// Milliseconds since the Unix epoch, as traces count time.
fn now_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

async fn run_modes(
    runtime: &Runtime,
    cfg: &MemoryAgentConfig,
    input: &RunInput,
    observer: &dyn ExecObserver,
    workflows: Vec<Workflow>,
    retrieved: Vec<String>,
) -> Result<MemoryRun, OnlineError> {
    match cfg.mode {
        MemoryMode::Prompt => {
            let prompt_error = |source| OnlineError::Prompt { template: "workflow", source };
            let prompts = crate::templates::prompts().map_err(prompt_error)?;
            let memory = prompt_memory(&prompts, &workflows, cfg.budget_tokens).map_err(prompt_error)?;
            let mut agent = cfg.agent.clone();
            if !memory.text.is_empty() {
                agent.instruction = Some(match agent.instruction {
                    Some(own) => format!("{own}\n\n{}", memory.text),
                    None => memory.text.clone(),
                });
            }
            let trace = run_agent(runtime, &agent, input, observer).await;
            let calls = trace.tool_calls.clone();
            Ok(MemoryRun { trace, retrieved, offered: memory.included, uses: Vec::new(), calls })
        }
        MemoryMode::Actions => {
            let tools = Arc::new(WorkflowTools::new(runtime.tools.clone(), &workflows));
            let wrapped = Runtime { tools: tools.clone(), ..runtime.clone() };
            let trace = run_agent(&wrapped, &cfg.agent, input, observer).await;
            let uses = tools.uses();
            let calls = expand_calls(&trace.tool_calls, &uses, |tool| tools.is_workflow_tool(tool));
            Ok(MemoryRun { trace, retrieved: retrieved.clone(), offered: retrieved, uses, calls })
        }
    }
}

/// Replaces each workflow-tool call of `calls` by the real calls of its steps, taking
/// the recorded `uses` in order.
#[must_use]
pub fn expand_calls(calls: &[ToolCall], uses: &[WorkflowUse], is_workflow: impl Fn(&str) -> bool) -> Vec<ToolCall> {
    let mut uses = uses.iter();
    let mut expanded = Vec::new();
    for call in calls {
        if is_workflow(&call.tool)
            && let Some(used) = uses.next()
        {
            expanded.extend(used.steps.iter().cloned());
        } else {
            expanded.push(call.clone());
        }
    }
    expanded
}

/// Records in `store` that each of `ids` was used in a run that ended with `outcome`.
///
/// # Errors
///
/// [`MemoryError`] when a workflow is gone or the update fails.
pub fn record_uses(store: &mut MemoryStore, ids: &[String], outcome: UseOutcome) -> Result<(), MemoryError> {
    for id in ids {
        store.record_use(id, outcome)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{approx_tokens, substitute};

    #[test]
    fn tokens_are_chars_over_four_rounded_up() {
        assert_eq!(approx_tokens(""), 0);
        assert_eq!(approx_tokens("abcd"), 1);
        assert_eq!(approx_tokens("abcde"), 2);
        assert_eq!(approx_tokens("éééé"), 1, "characters, not bytes");
    }

    #[test]
    fn whole_variables_keep_their_type_and_inner_ones_are_spliced() {
        let values = json!({"n": 7, "name": "Ann"}).as_object().unwrap().clone();
        assert_eq!(substitute(&json!("{n}"), &values), Ok(json!(7)));
        assert_eq!(substitute(&json!("hi {name}, {n}!"), &values), Ok(json!("hi Ann, 7!")));
        assert_eq!(
            substitute(&json!({"a": ["{name}"], "b": "{x y}"}), &values),
            Ok(json!({"a": ["Ann"], "b": "{x y}"}))
        );
        assert_eq!(substitute(&json!("{missing}"), &values), Err("missing".to_owned()));
    }
}
