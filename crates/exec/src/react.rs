//! The ReAct baseline: a reason-act loop over the same models and tools as workflows.
//!
//! Each step asks the executor model, with every available tool offered, what to do
//! next. Tool calls are invoked and their results appended to the conversation; a reply
//! without tool calls is the final answer. The run stops there or at the step limit, and
//! yields the same [`Trace`] shape as a workflow run, so every metric applies unchanged.
//! Under [`Grounding::Context`] a step whose calls hold values found in neither the query
//! nor an earlier result is asked once more, and each call's observation says which
//! arguments were off the context.
//!
//! With a [`CallGuard`] in the config, every call the model asks for is checked against
//! the guard's skeleton before it runs (one step of a [`CallChecker`], see
//! [`crate::guard`]); a deviation goes into [`Trace::deviations`] and the event stream,
//! and a blocked call is answered with [`blocked_result`] instead of running. A final
//! answer where the skeleton cannot end is a deviation too.

use std::sync::Arc;
use std::time::Instant;

use flowmem_llm::{ChatModel, ChatRequest, Message, Prompts, Purpose, Role, ToolChoice};
use flowmem_model::{ContextInput, Deviation, NodeObservation, Trace, error_chain};

use crate::engine::RunInput;
use crate::event::{ExecEvent, ExecObserver, now_ms};
use crate::grounding::{self, Grounding};
use crate::guard::{CallChecker, CallGuard, blocked_result};
use crate::node::value_text;
use crate::plan::Runtime;
use crate::prompts::{CONTEXT_ITEM_CHARS, PromptContext, newest_that_fit};
use crate::reask::chat_or_reask;

/// The template of the agent's system prompt.
const REACT_TEMPLATE: &str = "react";

/// How the ReAct agent runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// The largest number of model calls before giving up.
    pub max_steps: u32,
    /// Extra instructions for the system prompt (AWM puts workflow memory here).
    pub instruction: Option<String>,
    /// The skeleton each tool call is checked against as it is made, if any.
    pub guard: Option<CallGuard>,
}

/// Runs the ReAct agent on `input` and returns its trace.
///
/// Each model call is one observation with node id `step-N` (kind `agent:step`); each
/// tool invocation is a [`ExecEvent::ToolCalled`] and an entry of `π̂`. A model failure
/// ends the run with [`Trace::error`] set and everything before it kept; reaching
/// `max_steps` without a final answer sets the error too. With [`AgentConfig::guard`],
/// deviating calls are recorded in [`Trace::deviations`] (and as
/// [`ExecEvent::ToolDeviated`]) and, when the guard blocks, answered with
/// [`blocked_result`] instead of running.
pub async fn run_agent(runtime: &Runtime, cfg: &AgentConfig, input: &RunInput, observer: &dyn ExecObserver) -> Trace {
    observer.on_event(&ExecEvent::RunStarted {
        query_id: input.id.clone(),
        query: input.query.clone(),
        runner: "react".to_owned(),
        at_ms: now_ms(),
    });
    let mut trace = Trace { query_id: input.id.clone(), query: input.query.clone(), ..Trace::default() };
    let ctx = PromptContext {
        query: &input.query,
        instruction: cfg.instruction.as_deref(),
        context: &[],
        question: None,
        options: &[],
        hints: &[],
    };
    let mut checker = cfg.guard.as_ref().map(CallGuard::start);
    match runtime.prompts.render(REACT_TEMPLATE, &ctx) {
        Ok(system) => {
            let messages = vec![Message::system(system.text), Message::user(input.query.clone())];
            steps(runtime, cfg, input, observer, messages, checker.as_mut(), &mut trace).await;
        }
        Err(err) => trace.error = Some(error_chain(&err)),
    }
    // The agent chose to end: the skeleton should be able to end here too.
    if trace.result.is_some()
        && let Some(end) = checker.as_ref().and_then(CallChecker::end)
    {
        let node_id = trace.observations.last().map_or_else(String::new, |o| o.node_id.clone());
        deviated(observer, input, &node_id, &mut trace, end);
    }
    let trace = Arc::new(trace);
    observer.on_event(&ExecEvent::RunFinished { query_id: input.id.clone(), at_ms: now_ms(), trace: trace.clone() });
    Arc::try_unwrap(trace).unwrap_or_else(|shared| shared.as_ref().clone())
}

async fn steps(
    runtime: &Runtime,
    cfg: &AgentConfig,
    input: &RunInput,
    observer: &dyn ExecObserver,
    mut messages: Vec<Message>,
    mut checker: Option<&mut CallChecker>,
    trace: &mut Trace,
) {
    let tools = runtime.tools.definitions();
    // What context grounding searches: the query and every successful tool result so far.
    let query = flowmem_model::normalise_text(&input.query);
    let mut results: Vec<String> = Vec::new();
    for step in 0..cfg.max_steps {
        let node_id = format!("step-{step}");
        let started_at_ms = now_ms();
        let clock = Instant::now();
        observer.on_event(&ExecEvent::NodeStarted {
            query_id: input.id.clone(),
            node_id: node_id.clone(),
            node_kind: "agent:step".to_owned(),
            iteration: step,
            at_ms: started_at_ms,
        });
        let mut observation = NodeObservation {
            node_id: node_id.clone(),
            node_kind: "agent:step".to_owned(),
            iteration: step,
            input: Arc::new(ContextInput::Copied(Arc::new(
                serde_json::to_value(&messages)
                    .expect("chat messages are plain structs with string keys, so they convert"),
            ))),
            prompt: messages.last().and_then(|message| message.content.clone()),
            started_at_ms,
            ..NodeObservation::default()
        };
        let (fitting, kept) = fitted(&messages, &runtime.prompts, None);
        let mut request = ChatRequest::new(fitting, Purpose::Agent);
        request.tools = tools.clone();
        request.tool_choice = if tools.is_empty() { ToolChoice::None } else { ToolChoice::Auto };
        let kept = fit_window(runtime.executor.as_ref(), &messages, &runtime.prompts, kept, &mut request, &[]);
        let reply = chat_or_reask(runtime.executor.as_ref(), &runtime.prompts, &mut request, &node_id).await;
        let mut response = match reply {
            Ok(response) => response,
            Err(err) => {
                let message = error_chain(&err);
                observation.error = Some(message.clone());
                observation.latency_ms = clock.elapsed().as_secs_f64() * 1000.0;
                emit(observer, input, runtime, trace, observation);
                trace.error = Some(format!("agent step {step} failed: {message}"));
                return;
            }
        };
        observation.prompt_tokens = response.usage.prompt_tokens;
        observation.completion_tokens = response.usage.completion_tokens;
        // Context grounding: a step whose calls hold values from nowhere is asked once more.
        if runtime.grounding == Grounding::Context {
            let off = off_context(&tools, &response.tool_calls, &query, &results);
            if let Some((tool, found)) = off.iter().find(|(_, found)| !found.is_empty()) {
                let note = [Message::user(grounding::off_context_message(tool, found))];
                request.messages.extend(note.iter().cloned());
                fit_window(runtime.executor.as_ref(), &messages, &runtime.prompts, kept, &mut request, &note);
                match runtime.executor.chat(&request).await {
                    Ok(again) => {
                        observation.prompt_tokens += again.usage.prompt_tokens;
                        observation.completion_tokens += again.usage.completion_tokens;
                        response = again;
                    }
                    // The first answer stands; the observation shows it was off the context.
                    Err(err) => tracing::warn!("re-asking agent step {step} failed: {}", error_chain(&err)),
                }
            }
            for ((_, off), chosen) in
                off_context(&tools, &response.tool_calls, &query, &results).into_iter().zip(&response.tool_calls)
            {
                observation.grounding.extend(grounding::context_observation(&chosen.arguments, &off));
            }
        }
        observation.output = response.content.clone();
        if response.tool_calls.is_empty() {
            observation.latency_ms = clock.elapsed().as_secs_f64() * 1000.0;
            emit(observer, input, runtime, trace, observation);
            trace.result = Some(response.content.unwrap_or_default());
            return;
        }
        messages.push(Message {
            role: flowmem_llm::Role::Assistant,
            content: response.content.clone(),
            tool_calls: response.tool_calls.clone(),
            tool_call_id: None,
        });
        let budget = runtime.prompts.global(CONTEXT_ITEM_CHARS).and_then(serde_json::Value::as_u64);
        for chosen in response.tool_calls {
            let deviation = checker.as_deref_mut().and_then(|checker| checker.check(&chosen.name));
            if let Some(mut deviation) = deviation {
                deviation.call_id = Some(chosen.id.clone());
                let blocked = deviation.blocked.then(|| {
                    let name = cfg.guard.as_ref().map_or("", CallGuard::name);
                    blocked_result(&deviation, name)
                });
                deviated(observer, input, &node_id, trace, deviation);
                if let Some(text) = blocked {
                    messages.push(Message::tool_result(chosen.id, text));
                    continue;
                }
            }
            let call_started_at_ms = now_ms();
            let mut call = runtime.tools.call(&chosen.name, chosen.arguments).await;
            if call.call_id.is_none() {
                call.call_id = Some(chosen.id.clone());
            }
            let text = match (&call.error, &call.result) {
                (Some(error), _) => format!("error: {error}"),
                (None, Some(result)) => value_text(result),
                (None, None) => String::new(),
            };
            if call.error.is_none() && runtime.grounding == Grounding::Context {
                results.push(flowmem_model::normalise_text(&text));
            }
            messages.push(Message::tool_result(chosen.id, flowmem_llm::clip(text, budget.map(|b| b as usize))));
            observation.tool_call.get_or_insert_with(|| call.clone());
            trace.tool_calls.push(call.clone());
            observer.on_event(&ExecEvent::ToolCalled {
                query_id: input.id.clone(),
                node_id: node_id.clone(),
                started_at_ms: call_started_at_ms,
                call,
            });
        }
        observation.latency_ms = clock.elapsed().as_secs_f64() * 1000.0;
        emit(observer, input, runtime, trace, observation);
    }
    trace.error = Some(format!("no final answer within {} steps", cfg.max_steps));
}

/// The conversation a step sends: all of `sent`, or under
/// [`CONTEXT_CHARS`](crate::CONTEXT_CHARS) the newest tool results that fit (at least
/// one, by [`newest_that_fit`]) and, in place of each earlier one, the `left_out` note.
/// The note keeps its call's id, so every call still has its result; the whole
/// conversation stays in the trace. Without it, a small model's window ended 7 of 15
/// airline runs of the quality bench between steps 4 and 11.
///
/// With `at_most`, no more than that many results are kept. Returns the messages and
/// the number of results kept whole.
fn fitted(sent: &[Message], prompts: &Prompts, at_most: Option<usize>) -> (Vec<Message>, usize) {
    let mut messages = sent.to_vec();
    let chars = |message: &Message| message.content.as_deref().map_or(0, |text| text.chars().count());
    let n_results = messages.iter().filter(|m| m.role == Role::Tool).count();
    let newest_first = messages.iter().rev().filter(|m| m.role == Role::Tool).map(chars);
    let kept = newest_that_fit(prompts, newest_first).unwrap_or(n_results).min(at_most.unwrap_or(n_results));
    // Every result before the kept run is left out: the model sees an unbroken run of
    // the newest results.
    for message in messages.iter_mut().rev().filter(|m| m.role == Role::Tool).skip(kept) {
        let size = chars(message);
        match prompts.render(LEFT_OUT_TEMPLATE, &serde_json::json!({ "chars": size })) {
            Ok(note) => message.content = Some(note.text),
            Err(err) => {
                tracing::warn!("the `{LEFT_OUT_TEMPLATE}` template failed, so results are sent whole: {err}");
                return (sent.to_vec(), n_results);
            }
        }
    }
    (messages, kept)
}

/// Leaves out the oldest of the `kept` results of `sent`, one at a time, while the
/// model counts that `request` (`sent` fitted, then `tail`) does not fit its context
/// ([`ChatModel::room`]), and returns how many are kept; a model that cannot count gets
/// the request as it is. The characters [`fitted`] budgets are only a proxy for tokens:
/// a small window also holds the tool definitions and the reply's budget.
fn fit_window(
    model: &dyn ChatModel,
    sent: &[Message],
    prompts: &Prompts,
    mut kept: usize,
    request: &mut ChatRequest,
    tail: &[Message],
) -> usize {
    while kept > 0 && model.room(request).is_some_and(|room| room < 0) {
        let (mut messages, now) = fitted(sent, prompts, Some(kept - 1));
        messages.extend(tail.iter().cloned());
        request.messages = messages;
        kept = now;
    }
    kept
}

/// The note that stands for a tool result [`fitted`] leaves out.
const LEFT_OUT_TEMPLATE: &str = "left_out";

/// Per tool call of a step: its tool and the values found in neither the query nor the
/// results so far.
fn off_context(
    tools: &[flowmem_llm::ToolDefinition],
    calls: &[flowmem_llm::AssistantToolCall],
    query: &str,
    results: &[String],
) -> Vec<(String, Vec<(String, serde_json::Value)>)> {
    calls
        .iter()
        .map(|chosen| {
            let schema =
                tools.iter().find(|tool| tool.name == chosen.name).map_or(&serde_json::Value::Null, |t| &t.parameters);
            (chosen.name.clone(), grounding::off_context(&chosen.arguments, schema, query, results))
        })
        .collect()
}

/// Records a deviation in the trace and the event stream.
fn deviated(observer: &dyn ExecObserver, input: &RunInput, node_id: &str, trace: &mut Trace, deviation: Deviation) {
    observer.on_event(&ExecEvent::ToolDeviated {
        query_id: input.id.clone(),
        node_id: node_id.to_owned(),
        deviation: deviation.clone(),
    });
    trace.deviations.push(deviation);
}

fn emit(
    observer: &dyn ExecObserver,
    input: &RunInput,
    runtime: &Runtime,
    trace: &mut Trace,
    observation: NodeObservation,
) {
    trace.observations.push(observation.clone());
    observer.on_event(&ExecEvent::NodeFinished {
        query_id: input.id.clone(),
        model: Some(runtime.executor.name().to_owned()),
        observation,
    });
}

#[cfg(test)]
mod tests {
    use flowmem_llm::{AssistantToolCall, ChatModel, ChatRequest, Message, Purpose, Role, ToolChoice, ToolDefinition};
    use flowmem_llm_local::{LocalConfig, LocalModel};
    use serde_json::json;

    use crate::prompts::{exec_prompts, limit_context, limit_context_items};
    use crate::react::{fit_window, fitted};

    /// A conversation the characters budget keeps but a 4,096-token window cannot hold
    /// (twelve long tool definitions, as τ²-bench's, and six results of digits, which
    /// the tokenizer splits one by one) is fitted by the embedded model's own count, and
    /// the model then answers it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_conversation_over_the_window_is_fitted_by_the_models_count() {
        let path =
            flowmem_testsupport::require_path(&flowmem_llm_local::default_model_path(), "scripts/setup/30-model.sh");
        let mut config = LocalConfig::standard();
        config.path = path;
        let model = LocalModel::new(config);
        model.load().unwrap();
        let mut prompts = exec_prompts(None).unwrap();
        // What `flowmem` sets for the embedded model.
        limit_context(&mut prompts, 5_400);
        limit_context_items(&mut prompts, 1_800);

        let mut sent = vec![Message::system("You are a helpful agent."), Message::user("Where are my orders?")];
        for call in 0..6 {
            let id = format!("call_{call}");
            let arguments = json!({"order_id": format!("#W{call}")}).as_object().cloned().unwrap();
            let name = "get_order_details".to_owned();
            sent.push(Message {
                role: Role::Assistant,
                content: None,
                tool_calls: vec![AssistantToolCall { id: id.clone(), name, arguments }],
                tool_call_id: None,
            });
            let result: String = (0..200).map(|n| format!("#W{:07} ", 1_000_000 + 7919 * n + call)).collect();
            sent.push(Message::tool_result(id, &result[..1_800]));
        }
        let tools: Vec<ToolDefinition> = (0..12)
            .map(|n| ToolDefinition {
                name: format!("tool_{n}"),
                description: "Looks up one record of the store by its id and returns every field of it, \
                              with the items, their prices, the payment history and the fulfilments. "
                    .repeat(4),
                parameters: json!({"type": "object", "properties": {"id": {"type": "string", "description": "The id."}}}),
            })
            .collect();
        let (messages, kept) = fitted(&sent, &prompts, None);
        assert_eq!(kept, 3, "5,400 characters hold three results of 1,800");
        let mut request = ChatRequest::new(messages, Purpose::Agent);
        request.tools = tools;
        request.tool_choice = ToolChoice::Auto;
        let before = model.room(&request).unwrap();
        assert!(before < 0, "the characters budget alone leaves it {before} tokens over");
        assert!(model.chat(&request).await.is_err(), "as it stands, the window refuses it");

        let kept = fit_window(&model, &sent, &prompts, kept, &mut request, &[]);
        assert!(kept < 3, "{kept}");
        assert!(model.room(&request).unwrap() >= 0);
        let left_out = request.messages.iter().filter(|m| m.role == Role::Tool).count() - kept;
        assert_eq!(left_out, 6 - kept, "every earlier result is a note, so every call keeps a result");
        model.chat(&request).await.expect("the fitted conversation is answered");
    }
}
