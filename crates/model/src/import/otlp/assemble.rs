//! Spans into trajectories.
//!
//! 1. Log events join their span (by trace and span id); spans are grouped into runs:
//!    every trace one of whose spans names a conversation (`gen_ai.conversation.id`,
//!    OpenInference's `session.id`) joins that conversation's run, and any other trace
//!    is a run of its own.
//! 2. A run's spans are put in time order: by start time, a parent before its children
//!    when they start together; an agent's answer counts at its end.
//! 3. Walking them builds one OpenAI chat transcript: each model call's input messages
//!    extend it where they continue it (a call's input repeats the conversation so far)
//!    and its answer is appended; a tool span fills in the call it answers (by call id,
//!    else the earliest unanswered call of that tool), or becomes a call of its own when
//!    no model call recorded it.
//! 4. The transcript becomes steps as an OpenAI log does (`openai.rs`), and each call
//!    takes its result, error and, when the model's side did not record them, its
//!    arguments from its tool span, as the tool recorded them.
//!
//! Whatever a span held that could not be used (a missing parent, truncated or
//! uncaptured content, an attribute of the wrong type, a call without a result) is a
//! gap naming the span; a run whose spans give no transcript at all is skipped.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};

use crate::import::Imported;
use crate::import::Skipped;
use crate::import::json::Node;
use crate::import::openai::conversation;
use crate::import::otlp::conventions::{self, Gap, SpanRole};
use crate::import::otlp::{OtlpLogEvent, OtlpSpan, shorten};
use crate::{Action, Item, Meta, Trajectory};

/// The deepest parent chain followed; deeper ones (or cycles) are cut here.
const MAX_DEPTH: usize = 256;

/// Assembles `spans` and the log `events` that belong to them into trajectories, one per
/// conversation or trace; `source` becomes each trajectory's `meta.source`. What could
/// not be reconstructed is in [`Imported::gaps`]; a run that gives no trajectory is in
/// [`Imported::skipped`].
///
/// # Example
///
/// ```
/// use flowmem_model::{Item, OtlpEncoding, assemble_otlp, decode_otlp};
///
/// let json = r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{
///     "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
///     "name": "chat m", "startTimeUnixNano": "1", "endTimeUnixNano": "2", "attributes": [
///       {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
///       {"key": "gen_ai.input.messages", "value": {"stringValue":
///         "[{\"role\":\"user\",\"parts\":[{\"type\":\"text\",\"content\":\"Hi\"}]}]"}},
///       {"key": "gen_ai.output.messages", "value": {"stringValue":
///         "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"Hello!\"}]}]"}}]}]}]}]}"#;
/// let batch = decode_otlp("spans.json".as_ref(), json.as_bytes(), OtlpEncoding::Json);
/// let imported = assemble_otlp(batch.spans, batch.events, "otlp:spans.json");
/// let Item::Trajectory(run) = &imported.items[0] else { panic!("a trajectory") };
/// assert_eq!((run.query.as_str(), run.final_answer.as_deref()), ("Hi", Some("Hello!")));
/// ```
pub fn assemble_otlp(spans: Vec<OtlpSpan>, events: Vec<OtlpLogEvent>, source: &str) -> Imported {
    let mut out = Imported::default();
    let mut spans = dedupe(spans, &mut out);
    join_events(&mut spans, events, &mut out);
    for run in runs(&spans, &mut out) {
        assemble_run(&spans, &run, source, &mut out);
    }
    out
}

/// A group of spans that becomes one trajectory.
struct Run {
    /// The conversation id, or the trace id.
    id: String,
    /// Indices into the spans, in no particular order.
    members: Vec<usize>,
}

fn gap_at(span: &OtlpSpan, gap: Gap) -> Skipped {
    let mut location = span.location.clone();
    if let (Some(idx), Some(path)) = (gap.attribute, &location.json_path) {
        location.json_path = Some(format!("{path}.attributes[{idx}].value"));
    }
    Skipped { location, reason: format!("span `{}` ({}): {}", span.span_id, shorten(&span.name, 60), gap.reason) }
}

/// Drops the second copy of a span exported twice.
fn dedupe(spans: Vec<OtlpSpan>, out: &mut Imported) -> Vec<OtlpSpan> {
    let mut seen = HashSet::new();
    let mut res = Vec::with_capacity(spans.len());
    for span in spans {
        if seen.insert((span.trace_id.clone(), span.span_id.clone())) {
            res.push(span);
        } else {
            out.gaps.push(gap_at(
                &span,
                Gap { attribute: None, reason: "the same span came twice; the later copy is ignored".to_owned() },
            ));
        }
    }
    res
}

fn join_events(spans: &mut [OtlpSpan], events: Vec<OtlpLogEvent>, out: &mut Imported) {
    let index: HashMap<(String, String), usize> =
        spans.iter().enumerate().map(|(idx, span)| ((span.trace_id.clone(), span.span_id.clone()), idx)).collect();
    for event in events {
        match index.get(&(event.trace_id.clone(), event.span_id.clone())) {
            Some(&idx) => spans[idx].events.push(event.event),
            None => out.gaps.push(Skipped {
                location: event.location,
                reason: format!(
                    "log event `{}` belongs to span `{}` of trace `{}`, which is not in the input; it is not used",
                    event.event.name, event.span_id, event.trace_id
                ),
            }),
        }
    }
    for span in spans.iter_mut() {
        span.events.sort_by_key(|event| event.time_ns);
    }
}

/// Groups spans into runs, in order of their first start.
fn runs(spans: &[OtlpSpan], out: &mut Imported) -> Vec<Run> {
    let mut traces: Vec<(String, Vec<usize>)> = Vec::new();
    let mut trace_index: HashMap<&str, usize> = HashMap::new();
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&idx| spans[idx].start_ns);
    for idx in order {
        let trace = spans[idx].trace_id.as_str();
        let slot = *trace_index.entry(trace).or_insert_with(|| {
            traces.push((trace.to_owned(), Vec::new()));
            traces.len() - 1
        });
        traces[slot].1.push(idx);
    }
    let mut runs: Vec<Run> = Vec::new();
    let mut conversation_run: HashMap<String, usize> = HashMap::new();
    for (trace_id, members) in traces {
        let mut conversation = None;
        for &idx in &members {
            let mut gaps = Vec::new();
            let found = conventions::conversation_id(&spans[idx], &mut gaps);
            out.gaps.extend(gaps.into_iter().map(|gap| gap_at(&spans[idx], gap)));
            match (&conversation, found) {
                (None, Some(found)) => conversation = Some(found),
                (Some(first), Some(found)) if *first != found => out.gaps.push(gap_at(
                    &spans[idx],
                    Gap {
                        attribute: None,
                        reason: format!("it names conversation `{found}`, but its trace belongs to `{first}` (named first); the trace stays in `{first}`"),
                    },
                )),
                _ => {}
            }
        }
        match conversation {
            Some(conversation) => match conversation_run.get(&conversation) {
                Some(&run) => runs[run].members.extend(members),
                None => {
                    conversation_run.insert(conversation.clone(), runs.len());
                    runs.push(Run { id: conversation, members });
                }
            },
            None => runs.push(Run { id: trace_id, members }),
        }
    }
    runs
}

/// One entry of a run's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A model call, at its start.
    Llm(usize),
    /// A tool call, at its start.
    Tool(usize),
    /// An agent's request, at its start.
    AgentInput(usize),
    /// An agent's answer, at its end.
    AgentOutput(usize),
}

/// A tool span's outcome, for the call it answers.
struct ToolOutcome {
    span: usize,
    args: Option<serde_json::Map<String, Value>>,
    result: Option<Value>,
    error: Option<String>,
}

/// The transcript being built, and what tool spans said about its calls.
#[derive(Default)]
struct Transcript {
    messages: Vec<Value>,
    /// Call id -> what its tool span recorded.
    outcomes: HashMap<String, ToolOutcome>,
    /// Ids made up for calls that only a tool span recorded; they are not kept.
    made_up: HashSet<String>,
    /// The answers of agent spans, appended at their end unless a model call said them.
    n_model_answers: usize,
}

fn assemble_run(spans: &[OtlpSpan], run: &Run, source: &str, out: &mut Imported) {
    let depth = depths(spans, &run.members, out);
    let mut timeline: Vec<(u64, usize, usize, Entry)> = Vec::new();
    for (seq, &idx) in run.members.iter().enumerate() {
        let span = &spans[idx];
        let is_root = span.parent_span_id.is_none();
        let entry = |entry| (span.start_ns, depth[&idx], seq, entry);
        match conventions::role(span, is_root) {
            SpanRole::Llm => timeline.push(entry(Entry::Llm(idx))),
            SpanRole::Tool => timeline.push(entry(Entry::Tool(idx))),
            SpanRole::Agent => {
                timeline.push(entry(Entry::AgentInput(idx)));
                // Its answer comes after everything it did: at its end, after its children.
                timeline.push((span.end_ns, 0, seq, Entry::AgentOutput(idx)));
            }
            SpanRole::Other => {}
        }
        if span.dropped_attributes > 0 {
            let reason = format!(
                "the SDK dropped {} of its attributes (its attribute count limit); what they held is not in the trajectory",
                span.dropped_attributes
            );
            out.gaps.push(gap_at(span, Gap { attribute: None, reason }));
        }
        if span.dropped_events > 0 {
            let reason = format!(
                "the SDK dropped {} of its events (its event count limit); what they held is not in the trajectory",
                span.dropped_events
            );
            out.gaps.push(gap_at(span, Gap { attribute: None, reason }));
        }
    }
    timeline.sort_by_key(|&(time, depth, seq, _)| (time, depth, seq));
    let mut transcript = Transcript::default();
    for &(_, _, _, entry) in &timeline {
        let mut gaps = Vec::new();
        let idx = match entry {
            Entry::Llm(idx) => {
                let messages = conventions::llm_messages(&spans[idx], &mut gaps);
                if messages.input.is_none() && messages.output.is_none() {
                    gaps.push(Gap {
                        attribute: None,
                        reason: "the model call recorded no messages: content capture was off (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT), or the instrumentation records none; its turn is not in the trajectory".to_owned(),
                    });
                }
                if let Some(input) = messages.input {
                    merge(&mut transcript.messages, input);
                }
                if let Some(output) = messages.output {
                    transcript.n_model_answers += 1;
                    for message in output {
                        transcript.messages.push(message);
                    }
                }
                idx
            }
            Entry::Tool(idx) => {
                let call = conventions::tool_call(&spans[idx], &mut gaps);
                attach_tool(&mut transcript, idx, call);
                idx
            }
            Entry::AgentInput(idx) => {
                if let Some(input) = conventions::agent_messages(&spans[idx], &mut gaps).input {
                    merge(&mut transcript.messages, input);
                }
                idx
            }
            Entry::AgentOutput(idx) => {
                // Its gaps were reported with its input.
                let mut ignored = Vec::new();
                for message in conventions::agent_messages(&spans[idx], &mut ignored).output.unwrap_or_default() {
                    if !said_already(&transcript.messages, &message) {
                        transcript.messages.push(message);
                    }
                }
                idx
            }
        };
        out.gaps.extend(gaps.into_iter().map(|gap| gap_at(&spans[idx], gap)));
    }
    let first = run.members.iter().copied().min_by_key(|&idx| spans[idx].start_ns);
    let Some(first) = first else { return };
    let first = &spans[first];
    let mut gaps = Vec::new();
    let messages = sanitize(transcript.messages, &mut gaps);
    let messages = if messages.iter().any(|message| message["role"] == "user") {
        messages
    } else {
        gaps.push(Gap {
            attribute: None,
            reason: format!("no span of run `{}` recorded the user's request: its query is empty", run.id),
        });
        std::iter::once(json!({"role": "user", "content": ""})).chain(messages).collect()
    };
    out.gaps.extend(gaps.into_iter().map(|gap| gap_at(first, gap)));
    let value = Value::Array(messages);
    let transcript_outcomes = transcript.outcomes;
    let converted = match conversation(&Node::root(&value)) {
        Ok(converted) => converted,
        Err(problem) => {
            out.skipped.push(Skipped {
                location: first.location.clone(),
                reason: format!("run `{}` cannot be reconstructed from its spans: {}", run.id, problem.message),
            });
            return;
        }
    };
    let mut steps = converted.steps;
    for step in &mut steps {
        let Action::ToolCall(call) = &mut step.action else { continue };
        let Some(id) = call.call_id.clone() else { continue };
        if let Some(outcome) = transcript_outcomes.get(&id) {
            if outcome.result.is_some() {
                call.result.clone_from(&outcome.result);
            }
            if outcome.error.is_some() {
                call.error.clone_from(&outcome.error);
            }
            if call.args.is_empty()
                && let Some(args) = &outcome.args
            {
                call.args.clone_from(args);
            }
            if call.result.is_none() && call.error.is_none() {
                let reason = format!("the call of `{}` has no recorded result (content capture off?)", call.tool);
                out.gaps.push(gap_at(&spans[outcome.span], Gap { attribute: None, reason }));
            }
        } else if call.result.is_none() && call.error.is_none() {
            let reason =
                format!("no tool span or tool message gives the result of the call of `{}` (`{id}`)", call.tool);
            out.gaps.push(gap_at(first, Gap { attribute: None, reason }));
        }
        if transcript.made_up.contains(&id) {
            call.call_id = None;
        }
    }
    out.items.push(Item::Trajectory(Trajectory {
        id: run.id.clone(),
        attempt: None,
        query: converted.query,
        steps,
        final_answer: converted.final_answer,
        reference: None,
        success: None,
        meta: Meta { site: None, domain: None, source: Some(source.to_owned()) },
    }));
}

/// Each member's depth below its trace's root; a span whose parent is not in the run is
/// a gap, and counts as a root.
fn depths(spans: &[OtlpSpan], members: &[usize], out: &mut Imported) -> HashMap<usize, usize> {
    let by_id: HashMap<(&str, &str), usize> =
        members.iter().map(|&idx| ((spans[idx].trace_id.as_str(), spans[idx].span_id.as_str()), idx)).collect();
    let mut res = HashMap::with_capacity(members.len());
    for &idx in members {
        let mut depth = 0;
        let mut current = idx;
        while let Some(parent) = &spans[current].parent_span_id {
            match by_id.get(&(spans[current].trace_id.as_str(), parent.as_str())) {
                Some(&next) if depth < MAX_DEPTH => {
                    depth += 1;
                    current = next;
                }
                Some(_) => break,
                None => {
                    if current == idx {
                        let reason = format!(
                            "its parent span `{parent}` is not in the input: it is placed by its start time alone"
                        );
                        out.gaps.push(gap_at(&spans[idx], Gap { attribute: None, reason }));
                    }
                    break;
                }
            }
        }
        res.insert(idx, depth);
    }
    res
}

/// What makes two messages the same message: role, text, tool call ids and names, and
/// the id a tool message answers.
fn message_key(message: &Value) -> String {
    let text = match message.get("content") {
        Some(Value::String(text)) => text.trim().to_owned(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        _ => String::new(),
    };
    let calls: Vec<String> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|call| {
            format!(
                "{}:{}",
                call.get("id").map_or(String::new(), Value::to_string),
                call.pointer("/function/name").map_or(String::new(), Value::to_string)
            )
        })
        .collect();
    let answers = message.get("tool_call_id").map_or(String::new(), Value::to_string);
    format!(
        "{}\u{0}{text}\u{0}{}\u{0}{answers}",
        message.get("role").map_or(String::new(), Value::to_string),
        calls.join(",")
    )
}

fn is_system(message: &Value) -> bool {
    matches!(message.get("role").and_then(Value::as_str), Some("system" | "developer"))
}

/// Extends `transcript` with what `input` adds: the rest of it when it continues the
/// transcript (or the transcript's end), else the messages not already in it.
fn merge(transcript: &mut Vec<Value>, input: Vec<Value>) {
    let input: Vec<Value> = input.into_iter().filter(|message| !is_system(message)).collect();
    let have: Vec<String> = transcript.iter().map(message_key).collect();
    let want: Vec<String> = input.iter().map(message_key).collect();
    let overlap = (0..=have.len().min(want.len())).rev().find(|&k| have[have.len() - k..] == want[..k]).unwrap_or(0);
    let continues = overlap > 0 || have.is_empty();
    let known: HashSet<&String> = have.iter().collect();
    for (message, key) in input.into_iter().zip(&want).skip(overlap) {
        if continues || !known.contains(key) {
            transcript.push(message);
        }
    }
}

/// Whether the transcript already holds `answer`, an agent's final message, after the
/// last user message.
fn said_already(transcript: &[Value], answer: &Value) -> bool {
    let key = message_key(answer);
    transcript.iter().rev().take_while(|message| message["role"] != "user").any(|message| message_key(message) == key)
}

/// Records a tool span's call: as the outcome of the model's call it answers, or as a
/// call of its own.
fn attach_tool(transcript: &mut Transcript, span: usize, call: conventions::ToolSpan) {
    let target = transcript
        .messages
        .iter()
        .filter(|message| message["role"] == "assistant")
        .flat_map(|message| message.get("tool_calls").and_then(Value::as_array).into_iter().flatten())
        .filter_map(|model_call| {
            let id = model_call.get("id").and_then(Value::as_str)?;
            Some((id, model_call.pointer("/function/name").and_then(Value::as_str).unwrap_or("")))
        })
        .find(|(id, name)| match &call.call_id {
            Some(call_id) => call_id == id,
            None => *name == call.name && !transcript.outcomes.contains_key(*id),
        })
        .map(|(id, _)| id.to_owned());
    let id = match target {
        Some(id) => id,
        None => {
            let id = call.call_id.clone().unwrap_or_else(|| format!("span:{span}"));
            if call.call_id.is_none() {
                transcript.made_up.insert(id.clone());
            }
            let arguments = call.args.clone().map_or_else(|| json!({}), Value::Object);
            transcript.messages.push(json!({"role": "assistant", "tool_calls": [
                {"id": id, "type": "function", "function": {"name": call.name, "arguments": arguments}}]}));
            // Without a recorded result the call stays unanswered (a gap, below).
            let content = match &call.result {
                Some(Value::String(text)) => Some(text.clone()),
                Some(other) => Some(other.to_string()),
                None => None,
            };
            if let Some(content) = content {
                transcript.messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            id
        }
    };
    transcript.outcomes.insert(id, ToolOutcome { span, args: call.args, result: call.result, error: call.error });
}

/// Makes the transcript one `openai.rs` reads: drops what it would refuse (an unknown
/// role, a tool result answering no call, a call without a name) and empties arguments
/// that are not a JSON object, each as a gap.
fn sanitize(messages: Vec<Value>, gaps: &mut Vec<Gap>) -> Vec<Value> {
    let mut calls: HashSet<String> = HashSet::new();
    let mut res = Vec::with_capacity(messages.len());
    for mut message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("").to_owned();
        if !matches!(role.as_str(), "system" | "developer" | "user" | "assistant" | "tool") {
            gaps.push(Gap {
                attribute: None,
                reason: format!("a message with role `{role}` is not a chat message; it is left out"),
            });
            continue;
        }
        match message.get("content") {
            None | Some(Value::Null | Value::String(_) | Value::Array(_)) => {}
            Some(other) => {
                let text = other.to_string();
                message["content"] = Value::String(text);
            }
        }
        if let Some(list) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
            list.retain(|call| {
                call.pointer("/function/name").and_then(Value::as_str).is_some_and(|name| !name.is_empty())
            });
            for call in list.iter_mut() {
                let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or("").to_owned();
                let arguments = call.pointer("/function/arguments").cloned().unwrap_or(Value::Null);
                let readable = match &arguments {
                    Value::Null | Value::Object(_) => true,
                    Value::String(text) => crate::wire_arguments(text).is_ok(),
                    _ => false,
                };
                if !readable {
                    gaps.push(Gap {
                        attribute: None,
                        reason: format!("the arguments of a call of `{name}` are not a JSON object (truncated?): {}; they are left empty", shorten(&arguments.to_string(), 80)),
                    });
                    call["function"]["arguments"] = json!({});
                }
                match call.get("id").and_then(Value::as_str) {
                    Some(id) => {
                        calls.insert(id.to_owned());
                    }
                    None => call["id"] = Value::Null,
                }
            }
        }
        if role == "tool" {
            let answers = message.get("tool_call_id").and_then(Value::as_str).map(str::to_owned);
            if !answers.as_ref().is_some_and(|id| calls.contains(id)) {
                gaps.push(Gap {
                    attribute: None,
                    reason: format!(
                        "a tool result answers no recorded call (`{}`); it is left out",
                        answers.unwrap_or_default()
                    ),
                });
                continue;
            }
        }
        res.push(message);
    }
    res
}
