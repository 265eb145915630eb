//! LM-based induction: a model extracts common sub-routines, and we check each one.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use flowmem_llm::{ChatModel, ChatRequest, LlmError, Message, Prompts, Purpose, ResponseFormat};
use flowmem_model::{Provenance, Scope, Trajectory, Workflow, WorkflowStats, WorkflowStep, canonical_json};

use crate::error::InduceError;
use crate::induce::rule::one_line;
use crate::induce::{Induction, SkipReason, SkippedCandidate, scope_of};
use crate::render::{TextError, parse_text};

/// The name of the induction prompt template (`prompts/induce.j2`).
pub const PROMPT_NAME: &str = "induce";
/// The version in the induction template's header.
pub const PROMPT_VERSION: u32 = 1;

/// Options of [`lm()`].
pub struct LmConfig<'a> {
    /// The inducer model.
    pub model: &'a dyn ChatModel,
    /// A registry holding the `induce` template ([`crate::render::prompts`]).
    pub prompts: &'a Prompts,
    /// The fewest steps a workflow may have (AWM: 2).
    pub min_steps: usize,
    /// The scope given to every workflow; `None` takes the trajectories' common site
    /// and domain (a field on which they disagree is left unset).
    pub scope: Option<Scope>,
    /// Ask for structured output against [`reply_schema`]; otherwise ask for AWM's text
    /// form. Either reply form is parsed whatever was asked.
    pub structured: bool,
    /// The largest reply, in tokens. For structured output it also bounds how many
    /// workflows and steps the reply schema allows ([`reply_schema`]).
    pub max_tokens: Option<u32>,
    /// Characters of each tool result shown to the model.
    pub max_result_chars: usize,
}

impl std::fmt::Debug for LmConfig<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmConfig")
            .field("model", &self.model.name())
            .field("min_steps", &self.min_steps)
            .field("scope", &self.scope)
            .field("structured", &self.structured)
            .field("max_tokens", &self.max_tokens)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct InduceContext {
    min_steps: usize,
    tools: Vec<String>,
    structured: bool,
    trajectories: Vec<TrajectoryView>,
}

#[derive(Serialize)]
struct TrajectoryView {
    id: String,
    query: String,
    steps: Vec<StepView>,
}

#[derive(Serialize)]
struct StepView {
    reasoning: Option<String>,
    tool: String,
    args: String,
    result: Option<String>,
    error: Option<String>,
}

/// The structured reply: `{"workflows": [{description, steps: [{state, reasoning, action}]}]}`.
#[derive(Debug, Deserialize)]
struct Reply {
    workflows: Vec<ProposedWorkflow>,
}

#[derive(Debug, Deserialize)]
struct ProposedWorkflow {
    #[serde(default)]
    description: String,
    steps: Vec<WorkflowStep>,
}

/// The longest string value the structured reply may hold in an argument.
const MAX_ARG_CHARS: u64 = 60;
/// The most workflows and steps per workflow a structured reply may hold.
const MAX_WORKFLOWS: usize = 6;
const MAX_STEPS: usize = 10;
/// A typical structured step's size in tokens (state, reasoning, action, punctuation),
/// used to fit the reply into `max_tokens`.
const TOKENS_PER_STEP: u32 = 60;

/// The JSON Schema of the structured reply for workflows induced from `trajectories`.
///
/// Each step's action is one of the tools the trajectories called (`anyOf`, one branch
/// per tool, the tool name a `const`), with that tool's argument names as the only,
/// optional, properties and short strings as values (`{variables}` or fixed values).
/// Every workflow has at least `min_steps` steps. Strings and arrays are bounded, so a
/// constrained decoder cannot run away, and an unconstrained model that names another
/// tool or argument fails validation (and is re-asked by the client).
///
/// With a `max_tokens` budget the arrays shrink so that a typical reply fits (about
/// 60 tokens a step; room for two workflows when the budget is small): a constrained
/// reply cut at the token limit would not parse at all.
#[must_use]
pub fn reply_schema(trajectories: &[Trajectory], min_steps: usize, max_tokens: Option<u32>) -> Value {
    let (max_workflows, max_steps) = match max_tokens {
        Some(budget) => {
            let steps = (budget.saturating_sub(20) / TOKENS_PER_STEP) as usize;
            let max_steps = (steps / 2).clamp(min_steps, MAX_STEPS.max(min_steps));
            (steps.checked_div(max_steps).unwrap_or(1).clamp(1, MAX_WORKFLOWS), max_steps)
        }
        None => (MAX_WORKFLOWS, MAX_STEPS.max(min_steps)),
    };
    let mut arg_names: std::collections::BTreeMap<&str, BTreeSet<&str>> = std::collections::BTreeMap::new();
    for call in trajectories.iter().flat_map(Trajectory::tool_calls) {
        arg_names.entry(call.tool.as_str()).or_default().extend(call.args.keys().map(String::as_str));
    }
    let actions: Vec<Value> = arg_names
        .iter()
        .map(|(tool, names)| {
            let properties: serde_json::Map<String, Value> = names
                .iter()
                .map(|name| ((*name).to_owned(), json!({"type": "string", "maxLength": MAX_ARG_CHARS})))
                .collect();
            json!({
                "type": "object",
                "properties": {
                    "tool": {"const": tool},
                    "args": {"type": "object", "properties": properties, "additionalProperties": false}
                },
                "required": ["tool", "args"],
                "additionalProperties": false
            })
        })
        .collect();
    json!({
        "type": "object",
        "properties": {
            "workflows": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_workflows,
                "items": {
                    "type": "object",
                    "properties": {
                        "description": {"type": "string", "maxLength": 100},
                        "steps": {
                            "type": "array",
                            "minItems": min_steps,
                            "maxItems": max_steps,
                            "items": {
                                "type": "object",
                                "properties": {
                                    "state": {"type": "string", "maxLength": 80},
                                    "reasoning": {"type": "string", "maxLength": 100},
                                    "action": {"anyOf": actions}
                                },
                                "required": ["state", "reasoning", "action"],
                                "additionalProperties": false
                            }
                        }
                    },
                    "required": ["description", "steps"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["workflows"],
        "additionalProperties": false
    })
}

/// Induces workflows with a language model, as AWM does.
///
/// The `induce` template shows the model the trajectories (queries and tool calls) and
/// AWM's instructions: common sub-routines finer than whole tasks, at least
/// [`LmConfig::min_steps`] steps, non-fixed values as descriptive `{variables}`, no
/// overlapping workflows. With [`LmConfig::structured`] the request carries
/// [`reply_schema`] as its response format (an OpenAI-compatible client re-asks once when
/// the reply does not match it; the embedded model decodes under it).
///
/// The reply is parsed by [`parse_reply`]: structured JSON first, then AWM's text form
/// split on blank lines. A reply the client refused ([`LlmError::InvalidReply`]: not
/// matching the schema even when re-asked, or cut at the token limit) is parsed from its
/// raw text. Each workflow is then checked by [`validate`]. Every proposal ends up in
/// [`Induction::workflows`] or, with its description and reason, in
/// [`Induction::skipped`] (unreadable text blocks as [`SkipReason::Unparseable`]); a
/// reply that yields no workflow at all is one [`SkipReason::Unparseable`] skip naming
/// what the parsers (and the client) found wrong.
///
/// # Errors
///
/// [`InduceError::Prompt`] when the prompt does not render, and [`InduceError::Llm`] when
/// the model cannot be reached.
pub async fn lm(trajectories: &[Trajectory], cfg: &LmConfig<'_>) -> Result<Induction, InduceError> {
    let trajectory_ids: Vec<String> = trajectories.iter().map(|t| t.id.clone()).collect();
    let tools = called_tools(trajectories);
    let ctx = InduceContext {
        min_steps: cfg.min_steps,
        tools,
        structured: cfg.structured,
        trajectories: trajectories.iter().map(|t| view(t, cfg.max_result_chars)).collect(),
    };
    let rendered = cfg.prompts.render(PROMPT_NAME, &ctx).map_err(InduceError::Prompt)?;
    let mut request = ChatRequest::new(vec![Message::user(rendered.text)], Purpose::Inducer);
    request.max_tokens = cfg.max_tokens;
    if cfg.structured {
        request.response_format = Some(ResponseFormat {
            name: "workflows".to_owned(),
            schema: reply_schema(trajectories, cfg.min_steps, cfg.max_tokens),
        });
    }
    let (content, client_problem) = match cfg.model.chat(&request).await {
        Ok(response) => (response.content.unwrap_or_default(), None),
        // The model ignored the schema (even when re-asked) or its output was cut: its
        // raw text may still be AWM's text form, which the parser below reads.
        Err(LlmError::InvalidReply { raw, problem, .. }) => (raw, Some(problem)),
        Err(err) => return Err(InduceError::Llm(err)),
    };

    let mut res = Induction::default();
    let parsed = match parse_reply(&content) {
        Ok(parsed) => parsed,
        Err(err) => {
            let message = err.to_string();
            let message = match client_problem {
                Some(problem) => format!("{problem}; {message}"),
                None => message,
            };
            res.skipped.push(SkippedCandidate {
                trajectory_ids,
                description: None,
                reason: SkipReason::Unparseable { message },
            });
            return Ok(res);
        }
    };
    let scope = match &cfg.scope {
        Some(scope) => scope.clone(),
        None => common_scope(trajectories),
    };
    let provenance = Provenance {
        trajectory_ids: trajectory_ids.clone(),
        inducer: "lm".to_owned(),
        model: Some(cfg.model.name().to_owned()),
        prompt_version: Some(rendered.id.to_string()),
        created_at: None,
    };
    res.proposed = parsed.workflows.len() + parsed.broken.len();
    for (description, message) in parsed.broken {
        res.skipped.push(SkippedCandidate {
            trajectory_ids: trajectory_ids.clone(),
            description: Some(description),
            reason: SkipReason::Unparseable { message },
        });
    }
    for workflow in parsed.workflows {
        let mut workflow = Workflow { scope: scope.clone(), provenance: provenance.clone(), ..workflow };
        // Where variables come from is measured on the runs, never taken from the model.
        crate::induce::rule::sources_from_runs(&mut workflow, trajectories);
        match validate(&workflow, trajectories, cfg.min_steps) {
            Ok(()) => res.workflows.push(workflow),
            Err(reason) => res.skipped.push(SkippedCandidate {
                trajectory_ids: trajectory_ids.clone(),
                description: Some(workflow.description),
                reason,
            }),
        }
    }
    Ok(res)
}

/// An induction reply, parsed.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct ParsedReply {
    /// The workflows read, in reply order, before any validation.
    pub workflows: Vec<Workflow>,
    /// AWM text blocks with an unreadable line, left out: the block's description and
    /// the problem (`line N: ...`).
    pub broken: Vec<(String, String)>,
}

/// Parses an induction reply: the structured JSON form (`{"workflows": [...]}`, a bare
/// array, or either inside a code fence), else AWM's text form, where a block with an
/// unreadable `Action:` line is left out and listed in [`ParsedReply::broken`].
///
/// # Errors
///
/// [`UnreadableReply`], naming what both parsers found wrong, when neither yields a
/// workflow.
pub fn parse_reply(content: &str) -> Result<ParsedReply, UnreadableReply> {
    let json_err = match parse_json_reply(content) {
        Ok(workflows) => return Ok(ParsedReply { workflows, broken: Vec::new() }),
        Err(err) => err,
    };
    let (text_workflows, text_errors) = parse_text(content);
    let starts: Vec<usize> = text_workflows.iter().map(|tw| tw.line).collect();
    let mut parsed = ParsedReply { workflows: Vec::new(), broken: Vec::new() };
    for (idx, tw) in text_workflows.into_iter().enumerate() {
        let end = starts.get(idx + 1).copied().unwrap_or(usize::MAX);
        if let Some(err) = text_errors.iter().find(|err| (tw.line..end).contains(&err.line)) {
            parsed.broken.push((tw.description, err.to_string()));
            continue;
        }
        parsed.workflows.push(Workflow {
            id: String::new(),
            description: tw.description,
            steps: tw.steps,
            scope: Scope::default(),
            provenance: Provenance::default(),
            stats: WorkflowStats::default(),
            composed_of: Vec::new(),
            retired: None,
        });
    }
    if !parsed.workflows.is_empty() {
        return Ok(parsed);
    }
    Err(UnreadableReply { json: json_err, text: text_errors.into_iter().next() })
}

/// An induction reply that neither the JSON parser nor the AWM text parser can read.
#[derive(Debug, thiserror::Error)]
#[error("as JSON: {json}; as AWM text: {}", text_problem(text.as_ref()))]
pub struct UnreadableReply {
    /// Why the reply is not the structured JSON form.
    pub json: JsonReplyError,
    /// The first unreadable line of the AWM text form; `None` when no block has an
    /// `Action:` line at all.
    pub text: Option<TextError>,
}

/// Why an induction reply is not the structured JSON form.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonReplyError {
    /// The reply (without a code fence) does not start like a JSON object or array.
    #[error("the reply is not a JSON object or array")]
    NotJson,
    /// The JSON does not parse, or does not have the reply's shape; the message names the
    /// line, column and field.
    #[error(transparent)]
    Invalid(serde_json::Error),
    /// The reply parsed but lists no workflow.
    #[error("the reply holds no workflows")]
    NoWorkflows,
}

fn text_problem(error: Option<&TextError>) -> String {
    error.map_or_else(|| "no block has an `Action:` line".to_owned(), ToString::to_string)
}

fn parse_json_reply(content: &str) -> Result<Vec<Workflow>, JsonReplyError> {
    let trimmed = strip_fence(content.trim());
    if !(trimmed.starts_with('{') || trimmed.starts_with('[')) {
        return Err(JsonReplyError::NotJson);
    }
    let value: Value = serde_json::from_str(trimmed).map_err(JsonReplyError::Invalid)?;
    let proposed: Vec<ProposedWorkflow> = match value {
        Value::Array(_) => serde_json::from_value(value),
        other => serde_json::from_value::<Reply>(other).map(|reply| reply.workflows),
    }
    .map_err(JsonReplyError::Invalid)?;
    if proposed.is_empty() {
        return Err(JsonReplyError::NoWorkflows);
    }
    Ok(proposed
        .into_iter()
        .map(|p| Workflow {
            id: String::new(),
            description: p.description,
            steps: p.steps,
            scope: Scope::default(),
            provenance: Provenance::default(),
            stats: WorkflowStats::default(),
            composed_of: Vec::new(),
            retired: None,
        })
        .collect())
}

fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let rest = rest.trim_start_matches(|ch: char| ch.is_ascii_alphanumeric());
    rest.strip_suffix("```").unwrap_or(rest).trim()
}

/// Checks one proposed workflow against the trajectories it was induced from.
///
/// In order:
/// 1. at least `min_steps` steps, else [`SkipReason::TooFewSteps`];
/// 2. every step's tool was called in some trajectory, else [`SkipReason::UnknownTool`];
/// 3. no argument is an unabstracted literal copied from a single trajectory, else
///    [`SkipReason::CopiedLiteral`]. A literal is a string or number (anywhere inside
///    the argument) without a `{variable}`; it counts as copied when it equals an argument
///    value of calls in exactly one of the trajectories. A value that recurs in two or
///    more trajectories is a fixed value and may stay; booleans and null always may. With a
///    single input trajectory, every value taken from it counts as copied.
///
/// # Errors
///
/// The first failed check, as the reason to report.
pub fn validate(workflow: &Workflow, trajectories: &[Trajectory], min_steps: usize) -> Result<(), SkipReason> {
    if workflow.steps.len() < min_steps {
        return Err(SkipReason::TooFewSteps {
            tools: workflow.tool_sequence().map(str::to_owned).collect(),
            min_steps,
        });
    }
    let tools: BTreeSet<&str> = trajectories.iter().flat_map(|t| t.tool_calls().map(|c| c.tool.as_str())).collect();
    for (step_idx, step) in workflow.steps.iter().enumerate() {
        if !tools.contains(step.action.tool.as_str()) {
            return Err(SkipReason::UnknownTool { step: step_idx, tool: step.action.tool.clone() });
        }
    }
    // For each literal value (canonical JSON), the trajectories whose arguments hold it.
    let mut sources: HashMap<String, BTreeSet<usize>> = HashMap::new();
    for (traj_idx, trajectory) in trajectories.iter().enumerate() {
        for call in trajectory.tool_calls() {
            for value in call.args.values() {
                each_literal(value, &mut |literal| {
                    sources.entry(canonical_json(literal)).or_default().insert(traj_idx);
                });
            }
        }
    }
    for (step_idx, step) in workflow.steps.iter().enumerate() {
        for (name, value) in &step.action.args {
            let mut copied: Option<(String, usize)> = None;
            each_literal(value, &mut |literal| {
                if copied.is_some() || is_template(literal) {
                    return;
                }
                let key = canonical_json(literal);
                if let Some(owners) = sources.get(&key)
                    && owners.len() == 1
                {
                    // The set has exactly one element.
                    copied = owners.iter().next().map(|&idx| (key, idx));
                }
            });
            if let Some((value, traj_idx)) = copied {
                return Err(SkipReason::CopiedLiteral {
                    step: step_idx,
                    arg: name.clone(),
                    value,
                    trajectory_id: trajectories[traj_idx].id.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Calls `f` on every string and number inside `value`.
fn each_literal<'v>(value: &'v Value, f: &mut dyn FnMut(&'v Value)) {
    match value {
        Value::String(_) | Value::Number(_) => f(value),
        Value::Array(items) => items.iter().for_each(|item| each_literal(item, f)),
        Value::Object(map) => map.values().for_each(|item| each_literal(item, f)),
        Value::Bool(_) | Value::Null => {}
    }
}

/// Whether a string holds a `{variable}` placeholder.
fn is_template(value: &Value) -> bool {
    let Value::String(text) = value else {
        return false;
    };
    let Some(open) = text.find('{') else {
        return false;
    };
    text[open + 1..].find('}').is_some_and(|close| close > 0)
}

fn called_tools(trajectories: &[Trajectory]) -> Vec<String> {
    let set: BTreeSet<&str> = trajectories.iter().flat_map(|t| t.tool_calls().map(|c| c.tool.as_str())).collect();
    set.into_iter().map(str::to_owned).collect()
}

fn common_scope(trajectories: &[Trajectory]) -> Scope {
    let mut scopes = trajectories.iter().map(|t| scope_of(t, None));
    let Some(mut scope) = scopes.next() else {
        return Scope::default();
    };
    for other in scopes {
        if scope.site != other.site {
            scope.site = None;
        }
        if scope.domain != other.domain {
            scope.domain = None;
        }
    }
    scope
}

fn view(trajectory: &Trajectory, max_result_chars: usize) -> TrajectoryView {
    let steps = trajectory
        .steps
        .iter()
        .filter_map(|step| match &step.action {
            flowmem_model::Action::ToolCall(call) => Some(StepView {
                reasoning: step.reasoning.as_deref().map(|text| one_line(text, 300)).filter(|text| !text.is_empty()),
                tool: call.tool.clone(),
                args: canonical_json(&Value::Object(call.args.clone())),
                result: call.result.as_ref().map(|result| match result {
                    Value::String(text) => one_line(text, max_result_chars),
                    other => one_line(&canonical_json(other), max_result_chars),
                }),
                error: call.error.as_deref().map(|text| one_line(text, max_result_chars)),
            }),
            flowmem_model::Action::Message { .. } => None,
        })
        .collect();
    TrajectoryView { id: trajectory.id.clone(), query: one_line(&trajectory.query, 1000), steps }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use flowmem_model::{Trajectory, Workflow};

    use crate::induce::{JsonReplyError, SkipReason, parse_reply, validate};

    fn trajectory(id: &str, email: &str, order: &str) -> Trajectory {
        serde_json::from_value(json!({"id": id, "query": "q", "steps": [
            {"action": {"kind": "tool_call", "tool": "find_user", "args": {"email": email, "status": "active"}}},
            {"action": {"kind": "tool_call", "tool": "get_order", "args": {"order_id": order, "status": "active"}}}]}))
        .unwrap()
    }

    fn workflow(args: serde_json::Value, tool: &str) -> Workflow {
        serde_json::from_value(json!({"description": "d", "steps": [
            {"action": {"tool": "find_user", "args": args}},
            {"action": {"tool": tool, "args": {"order_id": "{order_id}"}}}]}))
        .unwrap()
    }

    #[test]
    fn validation_rejects_unknown_tools_short_and_copied_values() {
        let inputs = [trajectory("a", "x@y.z", "#1"), trajectory("b", "p@q.r", "#2")];
        assert_eq!(validate(&workflow(json!({"email": "{email}"}), "get_order"), &inputs, 2), Ok(()));
        // A value shared by both runs is fixed, not copied.
        assert_eq!(validate(&workflow(json!({"status": "active"}), "get_order"), &inputs, 2), Ok(()));
        assert!(matches!(
            validate(&workflow(json!({"email": "{email}"}), "delete_all"), &inputs, 2),
            Err(SkipReason::UnknownTool { step: 1, .. })
        ));
        assert!(matches!(
            validate(&workflow(json!({"email": {"nested": "p@q.r"}}), "get_order"), &inputs, 2),
            Err(SkipReason::CopiedLiteral { step: 0, ref trajectory_id, .. }) if trajectory_id == "b"
        ));
        assert!(matches!(
            validate(&workflow(json!({}), "get_order"), &inputs, 3),
            Err(SkipReason::TooFewSteps { min_steps: 3, .. })
        ));
    }

    #[test]
    fn the_reply_schema_fits_the_token_budget() {
        let inputs = [trajectory("a", "x@y.z", "#1")];
        let sizes = |max_tokens| {
            let schema = super::reply_schema(&inputs, 2, max_tokens);
            let workflows = &schema["properties"]["workflows"];
            (
                workflows["maxItems"].as_u64().unwrap(),
                workflows["items"]["properties"]["steps"]["maxItems"].as_u64().unwrap(),
            )
        };
        assert_eq!(sizes(None), (6, 10));
        assert_eq!(sizes(Some(400)), (2, 3));
        assert_eq!(sizes(Some(100)), (1, 2), "at least one workflow of min_steps");
        assert_eq!(sizes(Some(100_000)), (6, 10));
        let schema = super::reply_schema(&inputs, 2, None);
        let action =
            &schema["properties"]["workflows"]["items"]["properties"]["steps"]["items"]["properties"]["action"];
        let args = &action["anyOf"][0]["properties"]["args"]["properties"];
        assert_eq!(action["anyOf"][0]["properties"]["tool"]["const"], "find_user");
        assert!(args["email"].is_object() && args["status"].is_object() && args.get("order_id").is_none());
    }

    #[test]
    fn replies_parse_as_fenced_json_bare_arrays_and_text() {
        let fenced =
            "```json\n{\"workflows\": [{\"description\": \"d\", \"steps\": [{\"action\": {\"tool\": \"f\"}}]}]}\n```";
        assert_eq!(parse_reply(fenced).unwrap().workflows.len(), 1);
        let array = "[{\"description\": \"d\", \"steps\": []}]";
        assert_eq!(parse_reply(array).unwrap().workflows.len(), 1);
        let text = "Workflow: d\nAction: f()\nAction: g()\n\nWorkflow: e\nAction: g()\nAction: f()";
        assert_eq!(parse_reply(text).unwrap().workflows.len(), 2);
        // A block with an unreadable action is left out and named; the others are kept.
        let text = "Workflow: d\nAction: f()\nAction: g()\n\nWorkflow: e\nAction: g(oops\nAction: f()";
        let parsed = parse_reply(text).unwrap();
        assert_eq!(parsed.workflows.len(), 1);
        assert_eq!(parsed.broken.len(), 1);
        assert_eq!(parsed.broken[0].0, "e");
        assert!(parsed.broken[0].1.starts_with("line 6"), "{:?}", parsed.broken);
        let err = parse_reply("Workflow: e\nAction: g(oops").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert_eq!(err.text.as_ref().map(|text| text.line), Some(2));
        let err = parse_reply("I cannot help with that.").unwrap_err();
        assert!(matches!(err.json, JsonReplyError::NotJson), "{err:?}");
        assert!(err.text.is_none(), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("as JSON") && message.contains("as AWM text"), "{message}");
        let err = parse_reply("{\"workflows\": []}").unwrap_err();
        assert!(matches!(err.json, JsonReplyError::NoWorkflows), "{err:?}");
    }
}
