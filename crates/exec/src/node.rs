//! The work of one node: an LLM call, a tool choice plus invocation, or a judge.
//!
//! These functions run inside tasks and touch no run state; they return a
//! [`NodeResult`] that the scheduler applies.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use flowmem_llm::{ChatModel, ChatRequest, ChatResponse, Message, Prompts, Purpose, ResponseFormat, ToolChoice};
use flowmem_model::{
    ArgGrounding, Condition, ContextInput, JsonObject, NodeObservation, PROMPT_RESULTS_MARKER, ToolCall, ValueSource,
    error_chain,
};
use serde_json::{Value, json};

use crate::event::now_ms;
use crate::grounding::{self, Candidates, Grounding};
use crate::plan::{JUDGE_TEMPLATE, Op, PlanInner, PlanNode, RouteEvidence, TOOL_TEMPLATE};
use crate::prompts::{
    CONTEXT_ITEM_CHARS, ContextItem, NodePromptVars, OwnVars, RESULTS_TEMPLATE, ResultsVars, newest_that_fit,
    template_items,
};
use crate::reask::chat_or_reask;

/// One upstream result in a run's context, with its position in the run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CtxEntry {
    /// Unique and increasing within a run: the order results were produced.
    pub(crate) seq: u64,
    pub(crate) is_tool: bool,
    // Shared: a context is copied into every downstream node and merged at joins, so
    // with wide fan-outs a deep copy per entry would cost O(members²) allocations on the
    // scheduler's serial path.
    pub(crate) item: Arc<ContextItem>,
    /// The arguments of the tool call that produced it, for argument-sourced bindings.
    pub(crate) args: Option<Arc<JsonObject>>,
}

impl CtxEntry {
    pub(crate) fn new(
        seq: u64,
        node: &PlanNode,
        iteration: u32,
        output: String,
        failed: bool,
        args: Option<JsonObject>,
    ) -> CtxEntry {
        CtxEntry {
            seq,
            is_tool: matches!(node.op, Op::Tool { .. }),
            args: args.map(Arc::new),
            item: Arc::new(ContextItem {
                node: node.id.clone(),
                kind: node.kind_label.clone(),
                iteration,
                output,
                failed,
            }),
        }
    }
}

/// The upstream results a node reads, oldest first.
///
/// One `Context` is shared, behind an `Arc`, by every node that reads exactly these
/// results: all members of a `parallel` node, and a `join` with the nodes after it. What
/// those nodes derive from it (the observation `input`, the rendered `results` block of
/// their prompts) is built once here, by the first node that needs it, not once per
/// node: with `m` members each reading `m` upstream results, per-node copies are O(m²)
/// work on the critical path.
///
/// A node's output context is its input context as `base` plus its own result, so a
/// member's output does not copy the shared results either, and a `join` of members
/// with one `base` merges only their own results.
#[derive(Debug, Default)]
pub(crate) struct Context {
    // Invariant: every result in `own` is newer (higher `seq`) than those in `base`,
    // and `own` is sorted by `seq`.
    base: Option<Arc<Context>>,
    own: Vec<CtxEntry>,
    // How many `base` links lead from here to a context without one; bounded by
    // `MAX_DEPTH` so that walking (and dropping) a context stays shallow.
    depth: usize,
    len: usize,
    input: OnceLock<Arc<ContextInput>>,
    view: OnceLock<Result<PromptView, String>>,
}

/// The longest chain of `base` links before a context is flattened.
const MAX_DEPTH: usize = 16;

/// The context as the prompt templates see it.
#[derive(Debug)]
struct PromptView {
    /// The `context` variable, shared by every render.
    items: minijinja::Value,
    /// The items rendered by the `results` template.
    results: String,
}

impl Context {
    /// A context holding `entries`, which must be sorted by `seq`.
    pub(crate) fn new(entries: Vec<CtxEntry>) -> Context {
        Context::on(None, entries)
    }

    /// `base` followed by `own`, which must be newer than `base` and sorted by `seq`.
    pub(crate) fn on(base: Option<Arc<Context>>, own: Vec<CtxEntry>) -> Context {
        let base = base.filter(|base| !base.is_empty());
        match base {
            Some(base) if base.depth < MAX_DEPTH => Context {
                depth: base.depth + 1,
                len: base.len + own.len(),
                base: Some(base),
                own,
                ..Context::default()
            },
            Some(base) => {
                let mut entries: Vec<CtxEntry> = base.iter().cloned().collect();
                entries.extend(own);
                Context::on(None, entries)
            }
            None => Context { len: own.len(), own, ..Context::default() },
        }
    }

    /// The union of several contexts, oldest first.
    pub(crate) fn merge(contexts: &[&Arc<Context>]) -> Context {
        // The common case, members of one `parallel`: all share one base (or are it),
        // so only their own results need merging.
        let base = contexts.iter().find_map(|ctx| ctx.base.as_ref());
        if let Some(base) = base {
            let same_base = contexts.iter().all(|ctx| {
                ctx.is_empty()
                    || Arc::ptr_eq(ctx, base)
                    || ctx.base.as_ref().is_some_and(|other| Arc::ptr_eq(other, base))
            });
            if same_base {
                let mut own: Vec<CtxEntry> = contexts
                    .iter()
                    .filter(|ctx| !Arc::ptr_eq(ctx, base))
                    .flat_map(|ctx| ctx.own.iter().cloned())
                    .collect();
                own.sort_by_key(|entry| entry.seq);
                own.dedup_by_key(|entry| entry.seq);
                return Context::on(Some(base.clone()), own);
            }
        }
        let mut entries: Vec<CtxEntry> = contexts.iter().flat_map(|ctx| ctx.iter().cloned()).collect();
        entries.sort_by_key(|entry| entry.seq);
        entries.dedup_by_key(|entry| entry.seq);
        Context::new(entries)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The results, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &CtxEntry> {
        let mut chain: Vec<&Context> = std::iter::successors(Some(self), |ctx| ctx.base.as_deref()).collect();
        chain.reverse();
        chain.into_iter().flat_map(|ctx| ctx.own.iter())
    }

    /// The results, newest first.
    pub(crate) fn iter_rev(&self) -> impl Iterator<Item = &CtxEntry> {
        std::iter::successors(Some(self), |ctx| ctx.base.as_deref()).flat_map(|ctx| ctx.own.iter().rev())
    }

    /// The newest result.
    pub(crate) fn last(&self) -> Option<&CtxEntry> {
        self.iter_rev().next()
    }

    /// The context as the `input` of an observation: its entry numbers, as runs. Built
    /// from the base's, so a chain's contexts cost their own entries only.
    pub(crate) fn input(&self) -> Arc<ContextInput> {
        let input = self.input.get_or_init(|| {
            let mut input = self.base.as_ref().map(|base| base.input().as_ref().clone()).unwrap_or_default();
            for entry in &self.own {
                input.push_entry(entry.seq);
            }
            Arc::new(input)
        });
        input.clone()
    }

    fn prompt_view(&self, prompts: &Prompts) -> Result<&PromptView, String> {
        self.view
            .get_or_init(|| {
                let (shown, omitted) = self.shown(prompts);
                let items = template_items(shown);
                let results = prompts
                    .render(RESULTS_TEMPLATE, &ResultsVars { context: &items, omitted })
                    .map_err(|err| error_chain(&err))?
                    .text;
                Ok(PromptView { items, results })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The results a prompt shows, oldest first, and how many earlier ones it leaves out:
    /// all of them, or under [`CONTEXT_CHARS`](crate::CONTEXT_CHARS) the newest that fit
    /// (at least one, by [`newest_that_fit`]).
    fn shown(&self, prompts: &Prompts) -> (Vec<Arc<ContextItem>>, usize) {
        let per_item =
            prompts.global(CONTEXT_ITEM_CHARS).and_then(Value::as_u64).map_or(usize::MAX, |chars| chars as usize);
        // An item's cost: its clipped output and its label line, `- [node #n, kind] FAILED: `.
        let cost =
            |item: &ContextItem| item.output.chars().take(per_item).count() + item.node.len() + item.kind.len() + 20;
        let kept = newest_that_fit(prompts, self.iter_rev().map(|entry| cost(&entry.item))).unwrap_or(self.len);
        let mut shown: Vec<_> = self.iter_rev().take(kept).map(|entry| entry.item.clone()).collect();
        shown.reverse();
        (shown, self.len - kept)
    }

    /// The latest output of node `id`, if it is in the context.
    fn latest_output(&self, id: &str) -> Option<&str> {
        self.iter_rev().find(|entry| entry.item.node == id).map(|entry| entry.item.output.as_str())
    }
}

impl grounding::Upstream for Context {
    fn output(&self, id: &str) -> Option<&str> {
        self.latest_output(id)
    }

    fn args(&self, id: &str) -> Option<&JsonObject> {
        self.iter_rev().find(|entry| entry.item.node == id).and_then(|entry| entry.args.as_deref())
    }

    fn calls(&self, id: &str) -> Vec<(&str, Option<&JsonObject>)> {
        self.iter_rev()
            .filter(|entry| entry.item.node == id && !entry.item.failed)
            .map(|entry| (entry.item.output.as_str(), entry.args.as_deref()))
            .collect()
    }
}

/// A node ready to run in a task.
pub(crate) struct NodeWork {
    pub(crate) node_idx: usize,
    pub(crate) iteration: u32,
    pub(crate) ctx: Arc<Context>,
    /// For a loop node: evaluate its `until` judge after a body run.
    pub(crate) loop_check: bool,
}

/// What a node task produced.
pub(crate) struct NodeResult {
    pub(crate) node_idx: usize,
    pub(crate) ctx: Arc<Context>,
    pub(crate) observation: NodeObservation,
    pub(crate) model: Option<String>,
    /// The tool invocation, with its start time, if one happened.
    pub(crate) tool_call: Option<(f64, ToolCall)>,
    pub(crate) outcome: Result<Outcome, String>,
}

pub(crate) enum Outcome {
    /// An LLM or tool node's output; `failed` when it is a tool's error.
    Output { output: String, failed: bool },
    /// A branch's chosen route label.
    Route(String),
    /// A loop judge's answer: whether the loop should stop.
    LoopStop(bool),
}

/// The options a loop's judge chooses between; the first means "stop".
const LOOP_OPTIONS: [&str; 2] = ["yes", "no"];

/// Runs one node's work.
pub(crate) async fn execute(plan: &PlanInner, query: &str, work: NodeWork) -> NodeResult {
    let node = &plan.nodes[work.node_idx];
    let started_at_ms = now_ms();
    let clock = Instant::now();
    let items = work.ctx.as_ref();
    let mut observation = NodeObservation {
        node_id: node.id.clone(),
        node_kind: node.kind_label.clone(),
        iteration: work.iteration,
        input: work.ctx.input(),
        started_at_ms,
        ..NodeObservation::default()
    };
    let mut step = Step { observation: &mut observation, model: None, tool_call: None };
    // Why a branch's routes were narrowed or settled by mined evidence.
    let mut route_why = None;
    let outcome = match &node.op {
        Op::Llm { template, instruction, model } => {
            llm_node(plan, query, node, items, template, instruction.as_deref(), model.as_ref(), &mut step).await
        }
        Op::Tool { tools, hints, instruction, bindings } => {
            let tool = ToolNode { tools, hints, instruction: instruction.as_deref(), bindings };
            tool_node(plan, query, node, items, &tool, &mut step).await
        }
        Op::Branch { condition: Condition::Judge { question }, routes, evidence } => {
            let routing = route_by_data(plan, query, routes, evidence, items);
            route_why = (!routing.why.is_empty()).then(|| routing.why.join("; "));
            match routing.decided {
                Some(route) => Ok(Outcome::Route(route)),
                None => {
                    judge(plan, query, node, items, question, &routing.options, &mut step).await.map(Outcome::Route)
                }
            }
        }
        Op::Loop { until: Condition::Judge { question }, .. } if work.loop_check => {
            let options: Vec<String> = LOOP_OPTIONS.iter().map(|&option| option.to_owned()).collect();
            judge(plan, query, node, items, question, &options, &mut step)
                .await
                .map(|choice| Outcome::LoopStop(choice == LOOP_OPTIONS[0]))
        }
        _ => Err("this node kind runs without a task".to_owned()),
    };
    let (model, tool_call) = (step.model, step.tool_call);
    observation.latency_ms = clock.elapsed().as_secs_f64() * 1000.0;
    match &outcome {
        Ok(Outcome::Output { output, failed }) => {
            observation.output = Some(output.clone());
            if *failed {
                observation.error = Some(output.clone());
            }
        }
        Ok(Outcome::Route(route)) => {
            observation.output = Some(match route_why {
                Some(why) => format!("{route} ({why})"),
                None => route.clone(),
            });
        }
        Ok(Outcome::LoopStop(_)) => {}
        Err(message) => observation.error = Some(message.clone()),
    }
    NodeResult { node_idx: work.node_idx, ctx: work.ctx, observation, model, tool_call, outcome }
}

/// What a node's work records besides its outcome.
struct Step<'o> {
    observation: &'o mut NodeObservation,
    model: Option<String>,
    tool_call: Option<(f64, ToolCall)>,
}

impl Step<'_> {
    /// One model call of the node, asked once more after an unusable reply
    /// ([`chat_or_reask`]).
    async fn chat(
        &mut self,
        model: &dyn ChatModel,
        prompts: &Prompts,
        request: &mut ChatRequest,
    ) -> Result<ChatResponse, String> {
        self.model = Some(model.name().to_owned());
        let who = self.observation.node_id.clone();
        let response = chat_or_reask(model, prompts, request, &who).await.map_err(|err| error_chain(&err))?;
        self.observation.prompt_tokens += response.usage.prompt_tokens;
        self.observation.completion_tokens += response.usage.completion_tokens;
        Ok(response)
    }

    /// Asks again after `previous` with the message the caller added last to `request`.
    /// A re-ask that fails (its message pushes the request past the model's window, say)
    /// keeps `previous`, drops that message and logs why: asking again is a repair, and
    /// the first answer stands without it.
    async fn reask(
        &mut self,
        model: &dyn ChatModel,
        prompts: &Prompts,
        request: &mut ChatRequest,
        previous: ChatResponse,
    ) -> ChatResponse {
        match self.chat(model, prompts, request).await {
            Ok(response) => response,
            Err(err) => {
                request.messages.pop();
                tracing::warn!(node = %self.observation.node_id, error = %err, "asking again failed; the first answer stands");
                previous
            }
        }
    }
}

/// Renders a node's instruction (or question) against the query and upstream outputs.
fn render_node_template(query: &str, node: &PlanNode, items: &Context, source: &str) -> Result<String, String> {
    let mut values = serde_json::Map::new();
    values.insert("query".to_owned(), Value::String(query.to_owned()));
    for name in node.template_vars.iter().filter(|name| name.as_str() != crate::validate::VAR_QUERY) {
        // The latest output of that node; an ancestor skipped by a branch renders empty.
        let output = items.latest_output(name).unwrap_or("");
        values.insert(name.clone(), Value::String(output.to_owned()));
    }
    crate::prompts::render_node_source(source, &Value::Object(values)).map_err(|err| error_chain(&err))
}

/// Renders role template `template` for a node: its own variables, and the context's
/// view shared with every node reading the same context. Gives the prompt, and the
/// prompt as a trace records it: with [`PROMPT_RESULTS_MARKER`] for the upstream
/// results, which the observation's input refers to (so a trace grows linearly).
fn render_prompt(
    plan: &PlanInner,
    template: &str,
    items: &Context,
    own: &OwnVars<'_>,
) -> Result<(String, String), String> {
    let prompts = plan.runtime.prompts.as_ref();
    let view = items.prompt_view(prompts)?;
    let vars = NodePromptVars { own, context: &view.items, results: &view.results };
    let prompt = prompts.render(template, &vars).map(|rendered| rendered.text).map_err(|err| error_chain(&err))?;
    let recorded = match view.results.trim() {
        "" => prompt.clone(),
        results => prompt.replacen(results, PROMPT_RESULTS_MARKER, 1),
    };
    Ok((prompt, recorded))
}

#[allow(clippy::too_many_arguments)]
async fn llm_node(
    plan: &PlanInner,
    query: &str,
    node: &PlanNode,
    items: &Context,
    template: &str,
    instruction: Option<&str>,
    model: &dyn ChatModel,
    step: &mut Step<'_>,
) -> Result<Outcome, String> {
    let instruction = instruction.map(|source| render_node_template(query, node, items, source)).transpose()?;
    let own = OwnVars { query, instruction: instruction.as_deref(), question: None, options: &[], hints: &[] };
    let (prompt, recorded) = render_prompt(plan, template, items, &own)?;
    step.observation.prompt = Some(recorded);
    let mut request = ChatRequest::new(vec![Message::user(prompt)], Purpose::Executor);
    let response = step.chat(model, &plan.runtime.prompts, &mut request).await?;
    match response.content {
        Some(text) => Ok(Outcome::Output { output: text, failed: false }),
        None => Err("the model returned no text".to_owned()),
    }
}

/// A tool node's compiled parts.
struct ToolNode<'a> {
    tools: &'a Arc<[flowmem_llm::ToolDefinition]>,
    hints: &'a [String],
    instruction: Option<&'a str>,
    bindings: &'a [(String, flowmem_model::ArgBinding)],
}

async fn tool_node(
    plan: &PlanInner,
    query: &str,
    node: &PlanNode,
    items: &Context,
    tool: &ToolNode<'_>,
    step: &mut Step<'_>,
) -> Result<Outcome, String> {
    let mut bound = bound_candidates(plan, query, tool.tools, tool.bindings, items);
    // In a loop gone through "for each", the next value not taken yet: first those the
    // query names (the user's own reservation, say), then the collection's order.
    if in_judged_loop(plan, node) {
        let normalised = flowmem_model::normalise_text(query);
        let named = |value: &Value| {
            flowmem_model::value_key(value).is_some_and(|key| flowmem_model::occurs_in(&normalised, &key))
        };
        for found in bound.iter_mut().filter(|found| found.each && !found.elements) {
            let mut unused = unused_values(found, &node.id, items);
            // Stable: within each group the collection's order stays.
            unused.sort_by_key(|value| !named(value));
            if let Some(&next) = unused.first() {
                let (next, left) = (next.clone(), unused.len());
                found.source = format!("{}, for each: the next of {left} not taken yet", found.source);
                found.values = vec![next];
            }
        }
    }
    let fixed: Vec<&Candidates> = bound.iter().filter(|found| found.values.len() == 1 && !found.elements).collect();
    let offered: Vec<&Candidates> = bound.iter().filter(|found| found.values.len() > 1 || found.elements).collect();
    let tools = tool.tools;
    // Everything the only tool needs is known: call it without asking the model.
    if tools.len() == 1
        && !fixed.is_empty()
        && offered.is_empty()
        && grounding::required(&tools[0].parameters).iter().all(|arg| fixed.iter().any(|found| &found.arg == arg))
    {
        let mut args = serde_json::Map::new();
        for found in &fixed {
            args.insert(found.arg.clone(), found.values[0].clone());
        }
        step.observation.grounding = observe_grounding(tool.bindings, &bound, &args);
        return Ok(invoke(plan, &tools[0].name, args, None, step).await);
    }
    let instruction = tool.instruction.map(|source| render_node_template(query, node, items, source)).transpose()?;
    let own = OwnVars { query, instruction: instruction.as_deref(), question: None, options: &[], hints: tool.hints };
    let (prompt, recorded) = render_prompt(plan, TOOL_TEMPLATE, items, &own)?;
    step.observation.prompt = Some(recorded);
    let mut request = ChatRequest::new(vec![Message::user(prompt)], Purpose::Executor);
    request.tools = if bound.is_empty() {
        tools.to_vec()
    } else {
        tools
            .iter()
            .map(|definition| flowmem_llm::ToolDefinition {
                parameters: grounding::constrained_schema(&definition.parameters, &fixed, &offered),
                ..definition.clone()
            })
            .collect()
    };
    request.tool_choice = ToolChoice::Required;
    let mut response = step.chat(plan.runtime.executor.as_ref(), &plan.runtime.prompts, &mut request).await?;
    // A backend that did not honour the `enum` is told the values once and asked again.
    if let Some(chosen) = response.tool_calls.first()
        && let Some(stray) =
            offered.iter().find(|found| chosen.arguments.get(&found.arg).is_some_and(|v| !found.admits(v)))
    {
        let listed: Vec<String> = stray.values.iter().map(Value::to_string).collect();
        let empty = chosen.arguments.get(&stray.arg).is_some_and(|sent| sent.as_array().is_some_and(Vec::is_empty));
        let rule = match (stray.elements, empty) {
            (true, true) => format!("`{}` needs at least one of", stray.arg),
            (true, false) => format!("Each element of `{}` must be one of", stray.arg),
            (false, _) => format!("`{}` must be one of", stray.arg),
        };
        request.messages.push(Message::user(format!(
            "{rule} the values the earlier results hold: {}. Call the tool again with them.",
            listed.join(", ")
        )));
        response = step.reask(plan.runtime.executor.as_ref(), &plan.runtime.prompts, &mut request, response).await;
    }
    // Arrays the mined calls always sent at one length (as many new items as old ones):
    // a reply that breaks this is asked again once, both held to one length (a binding,
    // so under bindings grounding only).
    let by_bindings = plan.runtime.grounding == Grounding::Bindings;
    if let Some(chosen) = response.tool_calls.first().filter(|_| by_bindings)
        && let Some((a, b, length)) = grounding::unequal_lengths(tool.bindings, &chosen.arguments)
    {
        let mut held = length;
        request.tools = request
            .tools
            .iter()
            .map(|definition| {
                let (parameters, cap) = grounding::hold_to_length(&definition.parameters, &[&a, &b], length);
                held = cap;
                flowmem_llm::ToolDefinition { parameters, ..definition.clone() }
            })
            .collect();
        request.messages.push(Message::user(format!(
            "`{a}` and `{b}` must have the same number of elements: {held} each. Call the tool again."
        )));
        response = step.reask(plan.runtime.executor.as_ref(), &plan.runtime.prompts, &mut request, response).await;
    }
    // Arrays whose elements the mined calls always sent in pairs from one result (a new
    // item of the old item's product): a reply that breaks this is asked again once, told
    // the values that fit; an array of one element is held to them.
    if let Some(chosen) = response.tool_calls.first().filter(|_| by_bindings)
        && let Some(grounding::Unpaired { arg: a, other: b, wrong }) =
            grounding::unpaired(tool.bindings, &chosen.arguments, items)
    {
        let whole = chosen.arguments.get(&a).and_then(Value::as_array).is_some_and(|array| array.len() == 1);
        if whole && let Some((_, allowed)) = wrong.first() {
            request.tools = request
                .tools
                .iter()
                .map(|definition| flowmem_llm::ToolDefinition {
                    parameters: grounding::elements_among(&definition.parameters, &a, allowed),
                    ..definition.clone()
                })
                .collect();
        }
        let told: Vec<String> = wrong
            .iter()
            .map(|(idx, allowed)| {
                let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
                format!("element {idx} of `{a}` must be one of {}", listed.join(", "))
            })
            .collect();
        request.messages.push(Message::user(format!(
            "Each element of `{a}` goes with the element of `{b}` at the same position: {}. Call the tool again.",
            told.join("; ")
        )));
        response = step.reask(plan.runtime.executor.as_ref(), &plan.runtime.prompts, &mut request, response).await;
    }
    // Context grounding: a call with values from nowhere is sent back once.
    let context = (plan.runtime.grounding == Grounding::Context).then(|| ContextTexts::of(query, items));
    if let (Some(context), Some(chosen)) = (&context, response.tool_calls.first()) {
        let off = context.off(tools, &chosen.name, &chosen.arguments);
        if !off.is_empty() {
            request.messages.push(Message::user(grounding::off_context_message(&chosen.name, &off)));
            response = step.reask(plan.runtime.executor.as_ref(), &plan.runtime.prompts, &mut request, response).await;
        }
    }
    let Some(chosen) = response.tool_calls.into_iter().next() else {
        return Err("the executor model called no tool".to_owned());
    };
    if !tools.iter().any(|tool| tool.name == chosen.name) {
        let allowed: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
        let message = format!(
            "the model chose tool `{}`, which is outside the allowed tools [{}]",
            chosen.name,
            allowed.join(", ")
        );
        let rejected = ToolCall {
            call_id: Some(chosen.id),
            error: Some(format!("rejected: {message}")),
            ..ToolCall::with_args(chosen.name, chosen.arguments)
        };
        step.observation.tool_call = Some(rejected);
        return Err(message);
    }
    let mut args = chosen.arguments;
    // The candidates were typed by the node's first tool; the chosen one's parameters
    // decide (a node offering several tools may declare an argument differently).
    let parameters = tools.iter().find(|tool| tool.name == chosen.name).map_or(&Value::Null, |tool| &tool.parameters);
    for found in &fixed {
        args.insert(found.arg.clone(), grounding::as_argument_type(found.values[0].clone(), parameters, &found.arg));
    }
    for found in bound.iter_mut().filter(|found| found.elements) {
        let dropped = args.get_mut(&found.arg).map_or(0, |array| found.drop_repeats(array));
        if dropped > 0 {
            found.source = format!("{}; {dropped} repeated element(s) dropped", found.source);
        }
    }
    // Still of two lengths (a backend that ignores the schema): the longer is cut.
    if let Some((a, b, length)) = grounding::unequal_lengths(tool.bindings, &args).filter(|_| by_bindings) {
        for name in [&a, &b] {
            let Some(Value::Array(items)) = args.get_mut(name) else { continue };
            let cut = items.len().saturating_sub(length);
            items.truncate(length);
            if let Some(found) = bound.iter_mut().find(|found| &found.arg == name).filter(|_| cut > 0) {
                found.source = format!(
                    "{}; {cut} element(s) cut to the length of `{}`",
                    found.source,
                    if *name == a { &b } else { &a }
                );
            }
        }
    }
    if let Some(context) = &context {
        let off = context.off(tools, &chosen.name, &args);
        step.observation.grounding = grounding::context_observation(&args, &off);
    } else if !tool.bindings.is_empty() {
        step.observation.grounding = observe_grounding(tool.bindings, &bound, &args);
    }
    Ok(invoke(plan, &chosen.name, args, Some(chosen.id), step).await)
}

/// The candidates of a tool node's arguments with bindings, when the run grounds by
/// bindings: whole scalar arguments and the elements of array arguments (`item_ids[*]`).
/// A deeper part of an argument (`passengers[*].dob`) the model still writes.
fn bound_candidates(
    plan: &PlanInner,
    query: &str,
    tools: &[flowmem_llm::ToolDefinition],
    bindings: &[(String, flowmem_model::ArgBinding)],
    items: &Context,
) -> Vec<Candidates> {
    if plan.runtime.grounding != Grounding::Bindings {
        return Vec::new();
    }
    let schema = tools.first().map_or(&Value::Null, |definition| &definition.parameters);
    // An argument's candidates as `upstream` gives them.
    let of = |path: &str, binding: &flowmem_model::ArgBinding, upstream: &dyn grounding::Upstream| {
        let (arg, elements) = match path.strip_suffix("[*]") {
            Some(arg) => (arg, true),
            None => (path, false),
        };
        if arg.contains(['[', '.']) {
            return None;
        }
        let found = grounding::candidates(arg, binding, query, schema, upstream)?;
        Some(Candidates { elements, ..found })
    };
    let mut found: Vec<Candidates> = bindings.iter().filter_map(|(path, binding)| of(path, binding, items)).collect();
    let rebuild = |arg: &str, upstream: &dyn grounding::Upstream| {
        let (path, binding) = bindings.iter().find(|(path, _)| path.strip_suffix("[*]").unwrap_or(path) == arg)?;
        of(path, binding, upstream)
    };
    grounding::agree_with_sources(&mut found, items, &rebuild);
    grounding::pair_elements(&mut found, bindings, schema, items);
    grounding::narrow_by_anchors(&mut found, query);
    found
}

/// What mined evidence makes of a judged branch before its judge is asked
/// ([`route_by_data`]).
struct Routing {
    /// The route to take with no judge, when the evidence settles it.
    decided: Option<String>,
    /// Otherwise, the routes the judge chooses among.
    options: Vec<String>,
    /// What the evidence did, for the observation; empty when it did nothing.
    why: Vec<String>,
}

/// Routes a judged branch by the mined evidence, with bindings grounding only:
/// - a route with mined cues (words one of which the mined queries that took it nearly
///   always held) is not offered when the query holds none of them;
/// - a route whose first tools all have a bound argument with no value to take (see
///   [`ungroundable`]) is not offered;
/// - a branch mined with its queries' words (`nearest`) takes, with no judge, the route
///   most of the nearest mined queries took among those of the routes still offered
///   ([`nearest_route`](flowmem_model::nearest_route));
/// - when one route offered has cues (the query holds one), and more than half of the
///   mined queries that reached the branch holding one of them took it (`cued`), it is
///   taken with no judge; with two such routes, the query's cues disagree and the rules
///   below go on;
/// - a route that more than half of the mined records reaching the branch took is taken
///   with no judge, when it runs no tool (a `skip`) or its first tool (one of them) has a
///   value for every bound argument, unless another route offered has cues (the query
///   then holds one: it is of the few queries the cue singles out, which the counts over
///   all of them say nothing about);
/// - when one route is left, it is taken with no judge.
///
/// A graph with no mined counts or bindings routes as before: the judge chooses among
/// every route.
fn route_by_data(
    plan: &PlanInner,
    query: &str,
    routes: &[String],
    evidence: &[RouteEvidence],
    items: &Context,
) -> Routing {
    let all = Routing { decided: None, options: routes.to_vec(), why: Vec::new() };
    if plan.runtime.grounding != Grounding::Bindings || evidence.is_empty() {
        return all;
    }
    // Per route: the first tools with their ungroundable arguments.
    let missing: Vec<Vec<(usize, Vec<String>)>> = evidence
        .iter()
        .map(|route| {
            route.entries.iter().map(|&node_idx| (node_idx, ungroundable(plan, query, node_idx, items))).collect()
        })
        .collect();
    let ready = |route_idx: usize| missing[route_idx].iter().find(|(_, args)| args.is_empty()).map(|(idx, _)| *idx);
    let words = flowmem_model::query_words(query);
    let unasked = |route: &RouteEvidence| !route.cues.is_empty() && !route.cues.iter().any(|cue| words.contains(cue));
    let runs_no_tool = |route: &RouteEvidence| route.passable || route.entries.is_empty();
    let mut options = Vec::new();
    let mut why = Vec::new();
    for (route_idx, route) in evidence.iter().enumerate() {
        if unasked(route) {
            let cues: Vec<String> = route.cues.iter().map(|cue| format!("“{cue}”")).collect();
            why.push(format!("`{}` left out: the query says none of {}", route.label, cues.join(", ")));
            continue;
        }
        if runs_no_tool(route) || ready(route_idx).is_some() {
            options.push(route.label.clone());
            continue;
        }
        let (node_idx, args) = &missing[route_idx][0];
        let args: Vec<String> = args.iter().map(|arg| format!("`{arg}`")).collect();
        why.push(format!(
            "`{}` left out: `{}` has no value for {}",
            route.label,
            plan.nodes[*node_idx].id,
            args.join(", ")
        ));
    }
    if options.is_empty() {
        return all;
    }
    let decided = |label: &str, mut why: Vec<String>, reason: String| {
        why.push(reason);
        Routing { decided: Some(label.to_owned()), options: Vec::new(), why }
    };
    let decision_words = flowmem_model::decision_words(query);
    let examples = evidence
        .iter()
        .filter(|route| options.contains(&route.label))
        .flat_map(|route| route.nearest.iter().map(move |example| (route.label.as_str(), &example[..])));
    if let Some(vote) = flowmem_model::nearest_route(&decision_words, examples) {
        let reason = format!("taken by {} of the {} nearest mined queries", vote.votes, vote.of);
        return decided(vote.route, why, reason);
    }
    // A route offered with cues has one in the query (the others were left out above).
    let cued_routes: Vec<&RouteEvidence> =
        evidence.iter().filter(|route| !route.cues.is_empty() && options.contains(&route.label)).collect();
    if let [route] = cued_routes[..]
        && let Some((took, held)) = route.cued.filter(|&(took, held)| 2 * took > held)
    {
        let reason = format!("taken by {took} of the {held} mined queries that held its cue");
        return decided(&route.label, why, reason);
    }
    // A route offered with cues has one in the query: the counts are over every mined
    // query, and this one is of the few the cue singles out, so they say nothing of it.
    let another_has_cues = |label: &str| {
        evidence.iter().any(|other| other.label != label && options.contains(&other.label) && !other.cues.is_empty())
    };
    let total: u64 = evidence.iter().filter_map(|route| route.taken).sum();
    for (route_idx, route) in evidence.iter().enumerate().filter(|(_, route)| options.contains(&route.label)) {
        let Some(taken) = route.taken.filter(|&taken| 2 * taken > total) else { continue };
        if another_has_cues(&route.label) {
            why.push(format!(
                "`{}` not taken for its {taken} of {total} mined records: the query holds another route's cue",
                route.label
            ));
            continue;
        }
        let reason = match ready(route_idx) {
            Some(node_idx) if !runs_no_tool(route) => {
                format!("taken by {taken} of {total} mined records, and `{}` can be grounded", plan.nodes[node_idx].id)
            }
            _ => format!("taken by {taken} of {total} mined records"),
        };
        return decided(&route.label, why, reason);
    }
    match options.len() {
        1 => decided(&options[0], why, "the only route left".to_owned()),
        _ => Routing { decided: None, options, why },
    }
}

/// The bound arguments of tool node `node_idx` that have no value to take now: no
/// source of the binding gives one (an upstream result or argument that is not there,
/// a query with no span of the shape). An argument the model may find in the query (a
/// query source without a shape), one with no mined source, and one the schema does not
/// require are never counted.
fn ungroundable(plan: &PlanInner, query: &str, node_idx: usize, items: &Context) -> Vec<String> {
    let Op::Tool { tools, bindings, .. } = &plan.nodes[node_idx].op else {
        return Vec::new();
    };
    let schema = tools.first().map_or(&Value::Null, |definition| &definition.parameters);
    let required: Option<Vec<&str>> =
        schema.get("required").and_then(Value::as_array).map(|names| names.iter().filter_map(Value::as_str).collect());
    bindings
        .iter()
        .filter_map(|(path, binding)| {
            let arg = path.strip_suffix("[*]").unwrap_or(path);
            let free = binding.sources.is_empty()
                || binding.sources.iter().any(|source| matches!(source.source, ValueSource::Query { shape: None, .. }));
            if free || arg.contains(['[', '.']) || required.as_ref().is_some_and(|names| !names.contains(&arg)) {
                return None;
            }
            grounding::candidates(arg, binding, query, schema, items).is_none().then(|| arg.to_owned())
        })
        .collect()
}

/// Whether a node is in a loop whose `until` is a judge: the kind a "for each" argument
/// ([`Candidates::each`]) takes over from.
fn in_judged_loop(plan: &PlanInner, node: &PlanNode) -> bool {
    node.enclosing_loop
        .is_some_and(|loop_idx| matches!(plan.nodes[loop_idx].op, Op::Loop { until: Condition::Judge { .. }, .. }))
}

/// The candidates node `node_id` has not yet called its tool with, in their order.
fn unused_values<'c>(found: &'c Candidates, node_id: &str, items: &Context) -> Vec<&'c Value> {
    let taken: Vec<&Value> = items
        .iter()
        .filter(|entry| entry.is_tool && entry.item.node == node_id)
        .filter_map(|entry| entry.args.as_deref()?.get(&found.arg))
        .collect();
    found.values.iter().filter(|value| !taken.contains(value)).collect()
}

/// Whether a loop with a judge goes on, decided by data instead: when a tool node of its
/// body has an argument gone through "for each" ([`Candidates::each`]), the loop stops
/// exactly when no such argument has a value left that its node has not taken. `None`
/// when the body has no such argument (the judge decides), with the reason otherwise.
pub(crate) fn for_each_done(plan: &PlanInner, query: &str, loop_idx: usize, items: &Context) -> Option<(bool, String)> {
    let Op::Loop { body_nodes, .. } = &plan.nodes[loop_idx].op else { return None };
    let mut left = Vec::new();
    let mut any = false;
    for &node_idx in body_nodes {
        let node = &plan.nodes[node_idx];
        let Op::Tool { tools, bindings, .. } = &node.op else { continue };
        // Only a node with "for each" evidence needs its candidates (and its upstream
        // results parsed) at every loop check.
        let usual = |binding: &flowmem_model::ArgBinding| {
            binding.sources.iter().any(|source| source.each.is_some_and(|each| each.is_usual()))
        };
        if node.enclosing_loop != Some(loop_idx) || !bindings.iter().any(|(_, binding)| usual(binding)) {
            continue;
        }
        for found in bound_candidates(plan, query, tools, bindings, items) {
            if !found.each || found.elements {
                continue;
            }
            any = true;
            let unused = unused_values(&found, &node.id, items).len();
            if unused > 0 {
                left.push(format!("`{}` of {} has {unused} of {} left", found.arg, node.id, found.values.len()));
            }
        }
    }
    if !any {
        return None;
    }
    Some(if left.is_empty() {
        (true, "for each: every value taken".to_owned())
    } else {
        (false, format!("for each: {}", left.join("; ")))
    })
}

/// The texts context grounding searches: the query and every successful tool result
/// upstream, normalised.
struct ContextTexts {
    query: String,
    results: Vec<String>,
}

impl ContextTexts {
    fn of(query: &str, items: &Context) -> ContextTexts {
        let results = items
            .iter()
            .filter(|entry| entry.is_tool && !entry.item.failed)
            .map(|entry| flowmem_model::normalise_text(&entry.item.output))
            .collect();
        ContextTexts { query: flowmem_model::normalise_text(query), results }
    }

    /// The values of a call of `name` found in neither.
    fn off(&self, tools: &[flowmem_llm::ToolDefinition], name: &str, args: &JsonObject) -> Vec<(String, Value)> {
        let schema = tools.iter().find(|tool| tool.name == name).map_or(&Value::Null, |tool| &tool.parameters);
        grounding::off_context(args, schema, &self.query, &self.results)
    }
}

/// Calls the tool and records the call in the step.
async fn invoke(
    plan: &PlanInner,
    name: &str,
    args: JsonObject,
    call_id: Option<String>,
    step: &mut Step<'_>,
) -> Outcome {
    let started_at_ms = now_ms();
    let mut call = plan.runtime.tools.call(name, args).await;
    if call.call_id.is_none() {
        call.call_id = call_id;
    }
    step.observation.tool_call = Some(call.clone());
    let outcome = match (&call.error, &call.result) {
        (Some(error), _) => Outcome::Output { output: format!("error: {error}"), failed: true },
        (None, Some(result)) => Outcome::Output { output: value_text(result), failed: false },
        (None, None) => Outcome::Output { output: String::new(), failed: false },
    };
    step.tool_call = Some((started_at_ms, call));
    outcome
}

/// Per argument of `args`: the source its value came from, the candidates there were,
/// and whether the value is one of them.
fn observe_grounding(
    bindings: &[(String, flowmem_model::ArgBinding)],
    bound: &[Candidates],
    args: &JsonObject,
) -> Vec<ArgGrounding> {
    let mut observed: Vec<ArgGrounding> = args
        .iter()
        .map(|(arg, value)| match bound.iter().find(|found| &found.arg == arg) {
            Some(found) => ArgGrounding {
                arg: arg.clone(),
                source: found.source.clone(),
                candidates: found.values.len(),
                grounded: found.admits(value),
            },
            None => ArgGrounding {
                arg: arg.clone(),
                source: if bindings
                    .iter()
                    .any(|(bound_arg, _)| bound_arg == arg || bound_arg.strip_suffix("[*]") == Some(arg.as_str()))
                {
                    "model (the binding gave no value)".to_owned()
                } else {
                    "model".to_owned()
                },
                candidates: 0,
                grounded: false,
            },
        })
        .collect();
    observed.sort_by(|a, b| a.arg.cmp(&b.arg));
    observed
}

async fn judge(
    plan: &PlanInner,
    query: &str,
    node: &PlanNode,
    items: &Context,
    question: &str,
    options: &[String],
    step: &mut Step<'_>,
) -> Result<String, String> {
    let question = render_node_template(query, node, items, question)?;
    let own = OwnVars { query, instruction: None, question: Some(&question), options, hints: &[] };
    let (prompt, recorded) = render_prompt(plan, JUDGE_TEMPLATE, items, &own)?;
    step.observation.prompt = Some(recorded);
    let mut request = ChatRequest::new(vec![Message::user(prompt)], Purpose::Executor);
    request.response_format = Some(ResponseFormat {
        name: "judge_choice".to_owned(),
        schema: json!({
            "type": "object",
            "properties": {"choice": {"type": "string", "enum": options}},
            "required": ["choice"],
            "additionalProperties": false,
        }),
    });
    let response = step.chat(plan.runtime.executor.as_ref(), &plan.runtime.prompts, &mut request).await?;
    let text = response.content.unwrap_or_default();
    match parse_choice(&text, options) {
        Some(choice) => Ok(choice),
        None => Err(format!("the judge answered `{}`, which is none of [{}]", text.trim(), options.join(", "))),
    }
}

/// Reads a judge's choice: `{"choice": ...}`, a bare option, or the only option named.
pub(crate) fn parse_choice(text: &str, options: &[String]) -> Option<String> {
    let normalise =
        |text: &str| text.trim().trim_matches(|c: char| c == '"' || c == '`' || c == '.' || c == '\'').to_lowercase();
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text.trim())
        && let Some(Value::String(choice)) = map.get("choice")
    {
        let choice = normalise(choice);
        return options.iter().find(|option| option.to_lowercase() == choice).cloned();
    }
    let answer = normalise(text);
    if let Some(option) = options.iter().find(|option| option.to_lowercase() == answer) {
        return Some(option.clone());
    }
    let words: Vec<&str> = answer.split(|c: char| !c.is_alphanumeric() && c != '_' && c != '-').collect();
    let mut named = options.iter().filter(|option| words.contains(&option.to_lowercase().as_str()));
    match (named.next(), named.next()) {
        (Some(option), None) => Some(option.clone()),
        _ => None,
    }
}

/// A tool result as text for the context: strings verbatim, anything else as JSON.
pub(crate) fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::node::{Context, CtxEntry, MAX_DEPTH, parse_choice};
    use crate::prompts::ContextItem;

    fn entry(seq: u64) -> CtxEntry {
        CtxEntry {
            seq,
            is_tool: false,
            item: Arc::new(ContextItem {
                node: format!("n{seq}"),
                kind: "llm:reason".to_owned(),
                iteration: 0,
                output: format!("out{seq}"),
                failed: false,
            }),
            args: None,
        }
    }

    fn seqs(ctx: &Context) -> Vec<u64> {
        ctx.iter().map(|entry| entry.seq).collect()
    }

    #[test]
    fn contexts_merge_in_order_without_duplicates_whether_they_share_a_base_or_not() {
        let base = Arc::new(Context::new(vec![entry(0), entry(1), entry(2)]));
        let members: Vec<Arc<Context>> =
            [12, 10, 11].into_iter().map(|seq| Arc::new(Context::on(Some(base.clone()), vec![entry(seq)]))).collect();
        let empty = Arc::new(Context::default());
        let mut shared: Vec<&Arc<Context>> = members.iter().collect();
        shared.extend([&base, &empty, &members[0]]);
        let merged = Context::merge(&shared);
        assert_eq!(seqs(&merged), [0, 1, 2, 10, 11, 12]);
        assert_eq!(merged.last().map(|entry| entry.seq), Some(12));
        assert_eq!(*merged.input(), flowmem_model::ContextInput::Entries(vec![[0, 2], [10, 12]]));
        // A deeper branch does not share the members' base: the general merge.
        let deeper =
            Arc::new(Context::on(Some(Arc::new(Context::on(Some(base.clone()), vec![entry(20)]))), vec![entry(21)]));
        let merged = Context::merge(&[&members[1], &deeper]);
        assert_eq!(seqs(&merged), [0, 1, 2, 10, 20, 21]);
        assert_eq!(merged.latest_output("n20"), Some("out20"), "the latest output is found through the base");
    }

    #[test]
    fn a_context_budget_shows_the_newest_results_that_fit_and_counts_the_rest() {
        let ctx = Context::on(Some(Arc::new(Context::new(vec![entry(0), entry(1), entry(2)]))), vec![entry(3)]);
        let mut prompts = crate::prompts::exec_prompts(None).unwrap();
        let (all, none) = ctx.shown(&prompts);
        assert_eq!((all.len(), none), (4, 0), "no budget, no limit");
        // Each entry costs its 4 output characters, `n0` and `llm:reason` and 20 for its
        // label: 36. Two fit in 80, not three.
        crate::prompts::limit_context(&mut prompts, 80);
        let (shown, omitted) = ctx.shown(&prompts);
        let nodes: Vec<&str> = shown.iter().map(|item| item.node.as_str()).collect();
        assert_eq!((nodes, omitted), (vec!["n2", "n3"], 2));
        let text = ctx.prompt_view(&prompts).unwrap().results.clone();
        assert!(text.starts_with("- (2 earlier results left out)\n- [n2, llm:reason] out2\n"), "{text}");
        assert!(!text.contains("out1"), "{text}");
        // The newest result is shown even when it alone is over the budget.
        crate::prompts::limit_context(&mut prompts, 1);
        assert_eq!(ctx.shown(&prompts).1, 3);
    }

    #[test]
    fn a_long_chain_of_contexts_stays_shallow_and_in_order() {
        let mut ctx = Arc::new(Context::default());
        for seq in 0..(3 * MAX_DEPTH as u64) {
            ctx = Arc::new(Context::on(Some(ctx), vec![entry(seq)]));
            assert!(ctx.depth <= MAX_DEPTH);
        }
        let expected: Vec<u64> = (0..(3 * MAX_DEPTH as u64)).collect();
        assert_eq!(seqs(&ctx), expected);
        let newest_first: Vec<u64> = ctx.iter_rev().map(|entry| entry.seq).collect();
        assert_eq!(newest_first, expected.into_iter().rev().collect::<Vec<_>>());
    }

    fn options() -> Vec<String> {
        vec!["yes".to_owned(), "no".to_owned(), "needs_more".to_owned()]
    }

    #[test]
    fn a_judge_reply_is_read_as_json_a_bare_option_or_the_only_option_named() {
        assert_eq!(parse_choice("{\"choice\": \"no\"}", &options()).as_deref(), Some("no"));
        assert_eq!(parse_choice(" `Yes`. ", &options()).as_deref(), Some("yes"));
        assert_eq!(parse_choice("I think needs_more is right", &options()).as_deref(), Some("needs_more"));
    }

    #[test]
    fn an_unclear_judge_reply_is_no_choice() {
        assert_eq!(parse_choice("{\"choice\": \"maybe\"}", &options()), None);
        assert_eq!(parse_choice("yes or no", &options()), None);
        assert_eq!(parse_choice("", &options()), None);
    }
}
