//! One chat request, start to finish, on the model thread: render, tokenize, prefill,
//! pick a tool, decode (constrained when the reply must be JSON), and parse.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

use flowmem_llm::{ChatRequest, Role, ToolChoice, ToolDefinition};

use crate::constrain::prepare;
use crate::engine::{DecodeParams, Engine, Finish, Runner, Session};
use crate::error::LocalError;
use crate::llama::MAX_SEQ_LEN;
use crate::prompt::Templates;

/// Tokens generated when the request sets no limit, for free text.
pub const DEFAULT_MAX_TOKENS: u32 = 256;
/// Tokens generated when the request sets no limit, for JSON output.
pub const DEFAULT_MAX_JSON_TOKENS: u32 = 512;
/// At most this many tools are scored by likelihood; the others are dropped first by
/// word overlap with the conversation.
pub const MAX_SCORED_TOOLS: usize = 6;

/// What the model produced for one request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub(crate) content: Option<String>,
    pub(crate) tool_call: Option<(String, Map<String, Value>)>,
    pub(crate) finish: Finish,
    pub(crate) stop_token: Option<u32>,
    pub(crate) prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub(crate) cached_tokens: usize,
    pub(crate) completion_tokens: usize,
}

/// Serves `request` with exclusive use of the model.
/// The prompt tokens of `request` and the most tokens its reply may take.
fn prompt_and_budget(
    engine: &Engine,
    templates: &Templates,
    request: &ChatRequest,
) -> Result<(Vec<u32>, usize), LocalError> {
    let prompt = templates.render(request)?;
    // The parts are tokenized apart, so that the system message's tokens never depend
    // on what follows it.
    let mut tokens = engine.tokenizer.encode(&prompt.system)?;
    tokens.extend(engine.tokenizer.encode(&prompt.rest)?);
    let tools = request.tool_choice != ToolChoice::None && !request.tools.is_empty();
    let json_output = tools || request.response_format.is_some();
    let default_max = if json_output { DEFAULT_MAX_JSON_TOKENS } else { DEFAULT_MAX_TOKENS };
    Ok((tokens, request.max_tokens.unwrap_or(default_max) as usize))
}

/// The context tokens `request` leaves unused once its prompt and its reply's budget
/// are counted; negative when it cannot be answered within the context.
pub(crate) fn room(engine: &Engine, templates: &Templates, request: &ChatRequest) -> Result<i64, LocalError> {
    let (tokens, max_tokens) = prompt_and_budget(engine, templates, request)?;
    // The engine refuses a sequence that reaches the context's length.
    let needed = tokens.len() + max_tokens + 1;
    Ok(i64::try_from(MAX_SEQ_LEN).unwrap_or(i64::MAX) - i64::try_from(needed).unwrap_or(i64::MAX))
}

/// Answers `request`, or stops with [`LocalError::Cancelled`] once `cancel` is set:
/// before the prompt is prefilled (a request that waited for the model while its caller
/// went away costs nothing) and before each generated token.
pub(crate) fn respond(
    engine: &Engine,
    templates: &Templates,
    request: &ChatRequest,
    cancel: &AtomicBool,
) -> Result<Reply, LocalError> {
    if request.messages.is_empty() {
        return Err(LocalError::Request("the conversation has no messages".to_owned()));
    }
    let tools: Vec<&ToolDefinition> =
        if request.tool_choice == ToolChoice::None { Vec::new() } else { request.tools.iter().collect() };
    let (tokens, max_tokens) = prompt_and_budget(engine, templates, request)?;
    let params =
        DecodeParams { max_tokens, temperature: request.temperature.max(0.0), seed: request.seed.unwrap_or(0) };
    let prompt_tokens = tokens.len();

    engine.with_lock(|runner| {
        if cancel.load(Ordering::Relaxed) {
            return Err(LocalError::Cancelled);
        }
        let started = runner.start(&tokens)?;
        let (session, cached_tokens) = (started.session, started.reused);
        if !tools.is_empty() {
            let tool = choose_tool(engine, runner, &session, &tools, request)?;
            let schema = tool_call_schema(tool);
            let matcher = engine.constrainer.matcher(schema, &format!("tool `{}`", tool.name))?;
            let decoded = runner.decode(session, params, Some(matcher), cancel)?;
            let text = engine.tokenizer.decode(&decoded.tokens);
            let value = parse_json(&text, decoded.finish, params.max_tokens)?;
            let arguments = match value.get("arguments") {
                Some(Value::Object(args)) => args.clone(),
                _ => Map::new(),
            };
            return Ok(Reply {
                content: None,
                tool_call: Some((tool.name.clone(), arguments)),
                finish: decoded.finish,
                stop_token: decoded.stop_token,
                prompt_tokens,
                cached_tokens,
                completion_tokens: decoded.tokens.len(),
            });
        }
        let matcher = match &request.response_format {
            Some(format) => Some(
                engine.constrainer.matcher(prepare(&format.schema), &format!("response_format `{}`", format.name))?,
            ),
            None => None,
        };
        let constrained = matcher.is_some();
        let decoded = runner.decode(session, params, matcher, cancel)?;
        let text = engine.tokenizer.decode(&decoded.tokens);
        if constrained {
            parse_json(&text, decoded.finish, params.max_tokens)?;
        }
        Ok(Reply {
            content: Some(text),
            tool_call: None,
            finish: decoded.finish,
            stop_token: decoded.stop_token,
            prompt_tokens,
            cached_tokens,
            completion_tokens: decoded.tokens.len(),
        })
    })
}

fn parse_json(text: &str, finish: Finish, max_tokens: usize) -> Result<Value, LocalError> {
    serde_json::from_str(text).map_err(|e| {
        if finish == Finish::Length {
            LocalError::Truncated { max_tokens, text: text.to_owned() }
        } else {
            LocalError::Grammar { what: "the output".to_owned(), problem: format!("incomplete JSON ({e}): {text}") }
        }
    })
}

/// The schema of a call to `tool`: `{"name": <const>, "arguments": <its schema>}`.
pub(crate) fn tool_call_schema(tool: &ToolDefinition) -> Value {
    let arguments = match &tool.parameters {
        Value::Object(map) if !map.is_empty() => tool.parameters.clone(),
        _ => json!({"type": "object", "properties": {}}),
    };
    prepare(&json!({
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": false
    }))
}

/// Picks the tool to call.
///
/// The masked greedy model tends to pick the same tool whatever the query, because
/// the grammar lets it commit after a token or two of the name. Instead we rank: at
/// most [`MAX_SCORED_TOOLS`] tools by word overlap between the conversation and each
/// tool's name and description, then those by the teacher-forced log-likelihood of
/// the whole name after `{"name":`, as the model would write it.
fn choose_tool<'t>(
    engine: &Engine,
    runner: &Runner<'_>,
    session: &Session,
    tools: &[&'t ToolDefinition],
    request: &ChatRequest,
) -> Result<&'t ToolDefinition, LocalError> {
    if tools.len() == 1 {
        return Ok(tools[0]);
    }
    let query = words(
        &request
            .messages
            .iter()
            .filter(|m| m.role == Role::User)
            .filter_map(|m| m.content.as_deref())
            .collect::<Vec<_>>()
            .join(" "),
    );
    let mut ranked: Vec<(usize, &ToolDefinition)> = tools
        .iter()
        .map(|t| {
            let own = words(&format!("{} {}", t.name.replace(['_', '-', '.'], " "), t.description));
            (query.iter().filter(|w| own.contains(*w)).count(), *t)
        })
        .collect();
    ranked.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
    ranked.truncate(MAX_SCORED_TOOLS);

    let mut base = session.clone();
    runner.feed(&mut base, &engine.tokenizer.encode("{\"name\":")?)?;
    let mut best: Option<(f32, &ToolDefinition)> = None;
    for (_, tool) in ranked {
        let name = engine.tokenizer.encode(&format!(" \"{}\"", tool.name))?;
        let score = runner.log_likelihood(&base, &name)?;
        if best.is_none_or(|(b, _)| score > b) {
            best = Some((score, tool));
        }
    }
    // `tools` has at least two entries here, so `best` is set.
    Ok(best.map_or(tools[0], |(_, t)| t))
}

/// Lower-case words of three letters or more, without duplicates.
fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> =
        text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.chars().count() >= 3).map(str::to_lowercase).collect();
    out.sort();
    out.dedup();
    out
}
