//! The optimizer LLM: reads a candidate's feedback and proposes its edits, one turn of a
//! conversation at a time.
//!
//! The first message ([`PROPOSE_EDITS`]) shows the candidate, its feedback and the plans
//! already tried on it. Each later turn repeats the conversation so far: the model's
//! earlier replies, and after each a message ([`PROPOSE_NEXT_EDIT`]) saying what became
//! of it (applied, or refused and why) and what changed in the graph. Every reply is
//! decoded under a schema narrowed to the graph as the earlier edits left it, so the
//! model can only name nodes and edges that exist then. The conversation only grows at
//! its end, so the embedded model's prefix cache prefills each turn's new part alone.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use flowmem_llm::{ChatModel, ChatRequest, EmbeddedPrompt, LlmError, Message, Prompts, Purpose, ResponseFormat};
use flowmem_model::{EdgeKind, GraphNode, NodeKind, WorkflowGraph};

use crate::edit::{EditPlan, GraphEdit, apply_edit};
use crate::plan_schema::{DONE, MAX_PLAN_EDITS, edit_step_schema, narrowed_schema, new_id_prefix};
use crate::search::{CandidatePlan, PlanTurn, ProposalInput, ProposedEdits, Proposer, SearchError};

/// The optimizer's first message: the candidate, its feedback, what was tried.
pub const PROPOSE_EDITS: EmbeddedPrompt = flowmem_llm::embedded_prompt!("propose_edits");

/// The optimizer's later messages: what became of its last reply, and the question for
/// the next edit.
pub const PROPOSE_NEXT_EDIT: EmbeddedPrompt = flowmem_llm::embedded_prompt!("propose_next_edit");

/// How the optimizer is asked for a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanDecoding {
    /// One request per edit, each under the schema narrowed to the graph the earlier
    /// edits left; the model says `done` when the plan is complete.
    #[default]
    PerEdit,
    /// One request for the whole plan under the schema narrowed to the parent; when one
    /// of its edits is refused, the model is asked for the rest edit by edit.
    Whole,
}

/// Proposes edit plans with a chat model, under schemas narrowed to the graph.
pub struct LlmProposer {
    /// The optimizer model.
    pub model: Arc<dyn ChatModel>,
    /// The prompt registry; must hold [`PROPOSE_EDITS`] and [`PROPOSE_NEXT_EDIT`].
    pub prompts: Arc<Prompts>,
    /// The names of the available tools, shown to the optimizer.
    pub tools: Vec<String>,
    /// The most edits a plan may hold.
    pub max_edits: usize,
    /// How the plan is asked for.
    pub decoding: PlanDecoding,
    /// The feedback lengths that made first messages fit the model's context, by the
    /// hash of the first message at full length; later turns of the plan reuse them.
    fits: std::sync::Mutex<HashMap<u64, usize>>,
}

impl LlmProposer {
    /// A proposer asking `model`, with the templates of `prompts` (which must hold
    /// [`PROPOSE_EDITS`] and [`PROPOSE_NEXT_EDIT`]).
    #[must_use]
    pub fn new(
        model: Arc<dyn ChatModel>,
        prompts: Arc<Prompts>,
        tools: Vec<String>,
        max_edits: usize,
        decoding: PlanDecoding,
    ) -> LlmProposer {
        LlmProposer { model, prompts, tools, max_edits, decoding, fits: std::sync::Mutex::default() }
    }
}

/// The tokens left free for the reply when a first message is fitted to the context: a
/// per-edit reply is one edit; a whole plan needs more (see [`PLAN_MAX_TOKENS`]).
const EDIT_REPLY_TOKENS: usize = 256;
const PLAN_REPLY_TOKENS: usize = 768;

/// Characters of feedback cut per token a first message is over: JSON tokenizes at two
/// to four characters a token, so four cuts a little more than needed, never less.
const CUT_CHARS_PER_TOKEN: usize = 4;

/// The most tokens a reply may take. A whole plan of six edits, each with an
/// instruction of the full 400 characters, comes to about 1,000 tokens of English; the
/// default for structured replies of some backends (512 on the embedded model) cuts
/// such a plan short. One edit needs far less, but the bound is only a bound.
const PLAN_MAX_TOKENS: u32 = 1536;

#[derive(Serialize)]
struct ProposeContext<'a> {
    graph: &'a WorkflowGraph,
    feedback: String,
    /// Wins over the [`FEEDBACK_CHARS`] global when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    feedback_chars: Option<usize>,
    tools: &'a [String],
    tried: Vec<TriedView>,
    new_id_prefix: String,
    max_edits: usize,
    per_edit: bool,
}

/// An earlier expansion of the same graph, as the prompt shows it.
#[derive(Serialize)]
struct TriedView {
    /// The plan's edits as compact JSON, when one was applied.
    edits: Option<String>,
    /// Why the expansion failed, when none was.
    failure: Option<String>,
}

impl TriedView {
    fn of(tried: &CandidatePlan) -> TriedView {
        match &tried.plan {
            Some(plan) => TriedView { edits: Some(compact(&plan.edits)), failure: None },
            None => TriedView {
                edits: None,
                failure: Some(tried.rejected.last().map(|p| p.join("; ")).unwrap_or_default()),
            },
        }
    }
}

/// What the follow-up message says about one turn.
#[derive(Serialize)]
struct NextContext {
    /// Edits in the reply (0 for `done`, or a reply that was no edit).
    proposed: usize,
    /// Of those, how many were applied.
    applied: usize,
    /// Why the turn was refused; empty when it was not.
    problems: Vec<String>,
    /// The reply was not an edit at all.
    not_an_edit: bool,
    /// The reply was `done`.
    finished: bool,
    /// Nodes added and removed, and edges added and removed, by the applied edits.
    added_nodes: Vec<String>,
    removed_nodes: Vec<String>,
    added_edges: Vec<String>,
    removed_edges: Vec<String>,
    /// Edits the plan holds after this turn, and the most it may hold.
    plan_edits: usize,
    max_edits: usize,
    /// The prefix of new node ids from here on.
    new_id_prefix: String,
}

/// A turn's reply on the wire: the first has the rationale, the whole-plan form its
/// edits, the later ones one edit or `done`.
#[derive(Deserialize)]
struct StepReply {
    #[serde(default)]
    rationale: Option<String>,
    edit: Value,
}

#[async_trait::async_trait]
impl Proposer for LlmProposer {
    async fn propose(&self, input: &ProposalInput<'_>) -> Result<ProposedEdits, SearchError> {
        let max_edits = self.max_edits.clamp(1, MAX_PLAN_EDITS);
        let first = input.turns.is_empty();
        let whole = first && self.decoding == PlanDecoding::Whole;
        let full = self.opening(input, max_edits, None)?;
        let key = text_hash(&full.text);
        let mut fitted = self.fits.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).copied();
        loop {
            let opening = match fitted {
                Some(chars) => self.opening(input, max_edits, Some(chars))?,
                None => full.clone(),
            };
            let request = self.request(input, opening, max_edits, whole)?;
            let reply = self.model.chat(&request).await.map(|reply| reply.content.unwrap_or_default());
            match reply {
                // The first message alone is too long for the model: shorten its
                // feedback and ask again. Later turns reuse the length that fitted; when
                // their conversation outgrows the context, the plan ends (below).
                Err(LlmError::ContextExceeded { problem, tokens, limit, .. }) if first => {
                    let current = fitted.unwrap_or_else(|| self.feedback_len(input.feedback));
                    let reserve = if whole { PLAN_REPLY_TOKENS } else { EDIT_REPLY_TOKENS };
                    let Some(shorter) = shorter_feedback(current, tokens, limit, reserve) else {
                        return Err(SearchError::Unanswerable(problem));
                    };
                    tracing::info!(
                        from = current,
                        to = shorter,
                        %problem,
                        "the optimizer's first message does not fit the model's context; its feedback is cut"
                    );
                    fitted = Some(shorter);
                }
                Err(LlmError::ContextExceeded { problem, .. } | LlmError::InvalidRequest { problem, .. }) => {
                    return Err(SearchError::Unanswerable(problem));
                }
                Err(LlmError::InvalidReply { problem, .. }) => {
                    return Err(SearchError::InvalidProposal(format!("the reply was not an edit: {problem}")));
                }
                Err(err) => return Err(SearchError::Proposer(err.to_string())),
                Ok(text) => {
                    if let Some(chars) = fitted {
                        let mut fits = self.fits.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        if fits.len() >= MAX_FITS {
                            fits.clear();
                        }
                        fits.insert(key, chars);
                    }
                    if whole {
                        let plan = serde_json::from_str::<EditPlan>(&text).map_err(|err| {
                            SearchError::InvalidProposal(format!("the reply was not an edit plan: {err}"))
                        })?;
                        return Ok(ProposedEdits { rationale: Some(plan.rationale), edits: plan.edits });
                    }
                    return parse_step(&text);
                }
            }
        }
    }

    fn max_edits(&self) -> usize {
        self.max_edits.clamp(1, MAX_PLAN_EDITS)
    }
}

impl LlmProposer {
    /// One request: the first message, the turns so far, and the question for the next
    /// edit (or the whole plan), under the schema narrowed to the graph.
    fn request(
        &self,
        input: &ProposalInput<'_>,
        opening: flowmem_llm::RenderedPrompt,
        max_edits: usize,
        whole: bool,
    ) -> Result<ChatRequest, SearchError> {
        let first = input.turns.is_empty();
        let mut messages = vec![Message::user(opening.text)];
        let mut prompt_ids = vec![opening.id];
        let mut before = input.graph.clone();
        for (idx, turn) in input.turns.iter().enumerate() {
            if let Some(proposed) = &turn.proposed {
                let whole_reply = idx == 0 && self.decoding == PlanDecoding::Whole;
                messages.push(Message::assistant(wire_reply(proposed, idx == 0, whole_reply)));
            }
            let after = replay(&before, turn);
            let plan_edits = plan_edits(&input.turns[..=idx]);
            let next = NextContext::of(turn, &before, &after, plan_edits, max_edits);
            let rendered = self
                .prompts
                .render(PROPOSE_NEXT_EDIT.name, &next)
                .map_err(|err| SearchError::Proposer(err.to_string()))?;
            messages.push(Message::user(rendered.text));
            if idx == 0 {
                prompt_ids.push(rendered.id);
            }
            before = after;
        }
        let schema = if whole {
            narrowed_schema(input.graph, &self.tools, max_edits, &new_id_prefix(input.graph))
        } else {
            let can_finish = plan_edits(input.turns) > 0;
            edit_step_schema(input.current, &self.tools, first, can_finish)
        };
        let mut request = ChatRequest::new(messages, Purpose::Optimizer);
        request.prompts = prompt_ids;
        request.response_format = Some(ResponseFormat { name: "edit_plan".to_owned(), schema });
        request.max_tokens = Some(PLAN_MAX_TOKENS);
        Ok(request)
    }

    /// The first message, the same on every turn of one plan. `feedback_chars`, when
    /// set, bounds the feedback below the [`FEEDBACK_CHARS`] global.
    fn opening(
        &self,
        input: &ProposalInput<'_>,
        max_edits: usize,
        feedback_chars: Option<usize>,
    ) -> Result<flowmem_llm::RenderedPrompt, SearchError> {
        let ctx = ProposeContext {
            // The template lists the graph's nodes and edges a line each, without the
            // notes for people: as JSON a mined workflow is three times longer.
            graph: input.graph,
            // Compact: the feedback runs to tens of kilobytes, and every token is read.
            feedback: serde_json::to_string(input.feedback).expect("a JSON value always serialises"),
            feedback_chars,
            tools: &self.tools,
            tried: input.tried.iter().map(TriedView::of).collect(),
            new_id_prefix: new_id_prefix(input.graph),
            max_edits,
            per_edit: self.decoding == PlanDecoding::PerEdit,
        };
        self.prompts.render(PROPOSE_EDITS.name, &ctx).map_err(|err| SearchError::Proposer(err.to_string()))
    }

    /// The feedback's length in the first message at full length: its compact JSON,
    /// within the [`FEEDBACK_CHARS`] global when one is set.
    fn feedback_len(&self, feedback: &Value) -> usize {
        let len = serde_json::to_string(feedback).map_or(0, |text| text.chars().count());
        let global = self.prompts.global(FEEDBACK_CHARS).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
        global.map_or(len, |limit| len.min(limit))
    }
}

/// The most first-message fits a proposer remembers (one per graph expanded).
const MAX_FITS: usize = 256;

/// The feedback length to try after a first message holding `current` characters of it
/// was `tokens` long against a context of `limit`, leaving `reserve` tokens for the
/// reply; `None` when no feedback is left to cut. Without the counts, it halves.
fn shorter_feedback(current: usize, tokens: Option<usize>, limit: Option<usize>, reserve: usize) -> Option<usize> {
    if current == 0 {
        return None;
    }
    let shorter = match (tokens, limit) {
        (Some(tokens), Some(limit)) => {
            // A reply that ran out of room reports about `limit` tokens: then the
            // reserve is what is missing.
            let over = (tokens + reserve).saturating_sub(limit).max(reserve / 2);
            current.saturating_sub(over * CUT_CHARS_PER_TOKEN)
        }
        _ => current / 2,
    };
    // Below a few hundred characters the feedback says nothing useful.
    Some(if shorter < 200 { 0 } else { shorter })
}

/// A hash of a text, to recognise a first message again within this process.
fn text_hash(text: &str) -> u64 {
    use std::hash::BuildHasher as _;
    std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(text)
}

/// Reads one turn's reply: an edit, or `done`.
fn parse_step(text: &str) -> Result<ProposedEdits, SearchError> {
    let invalid = |err: serde_json::Error| SearchError::InvalidProposal(format!("the reply was not an edit: {err}"));
    let reply: StepReply = serde_json::from_str(text).map_err(invalid)?;
    if reply.edit.get("op").and_then(Value::as_str) == Some(DONE) {
        return Ok(ProposedEdits { rationale: reply.rationale, edits: Vec::new() });
    }
    let edit: GraphEdit = serde_json::from_value(reply.edit).map_err(invalid)?;
    Ok(ProposedEdits { rationale: reply.rationale, edits: vec![edit] })
}

/// A reply as the model gave it, for the conversation's assistant turns.
fn wire_reply(proposed: &ProposedEdits, first: bool, whole: bool) -> String {
    let rationale = proposed.rationale.clone().unwrap_or_default();
    let value = if whole {
        serde_json::json!({"rationale": rationale, "edits": proposed.edits})
    } else {
        let edit = match proposed.edits.first() {
            Some(edit) => serde_json::to_value(edit).expect("graph edits serialise"),
            None => serde_json::json!({"op": DONE}),
        };
        if first {
            serde_json::json!({"rationale": rationale, "edit": edit})
        } else {
            serde_json::json!({"edit": edit})
        }
    };
    value.to_string()
}

/// The edits the plan holds after `turns`.
fn plan_edits(turns: &[PlanTurn]) -> usize {
    turns.iter().map(|turn| turn.applied).sum()
}

/// `graph` after the applied edits of `turn` (they applied when the turn was taken, so
/// they apply again).
fn replay(graph: &WorkflowGraph, turn: &PlanTurn) -> WorkflowGraph {
    let mut res = graph.clone();
    let Some(proposed) = &turn.proposed else { return res };
    for edit in proposed.edits.iter().take(turn.applied) {
        match apply_edit(&res, edit) {
            Ok(next) => res = next,
            // Cannot happen for a recorded turn; showing the graph unchanged is the
            // honest fallback if a run directory was edited by hand.
            Err(_) => break,
        }
    }
    res
}

impl NextContext {
    fn of(
        turn: &PlanTurn,
        before: &WorkflowGraph,
        after: &WorkflowGraph,
        plan_edits: usize,
        max_edits: usize,
    ) -> NextContext {
        let proposed = turn.proposed.as_ref().map_or(0, |p| p.edits.len());
        let node_line = |node: &GraphNode| format!("{} ({})", node.id, kind_name(&node.kind));
        let added_nodes = after.nodes.iter().filter(|n| before.node(&n.id).is_none()).map(node_line).collect();
        let removed_nodes = before.nodes.iter().filter(|n| after.node(&n.id).is_none()).map(node_line).collect();
        let edge_lines = |graph: &WorkflowGraph| -> Vec<String> { graph.edges.iter().map(edge_line).collect() };
        let (old_edges, new_edges) = (edge_lines(before), edge_lines(after));
        NextContext {
            proposed,
            applied: turn.applied,
            problems: turn.problems.clone(),
            not_an_edit: turn.proposed.is_none(),
            finished: turn.proposed.is_some() && proposed == 0,
            added_nodes,
            removed_nodes,
            added_edges: new_edges.iter().filter(|e| !old_edges.contains(e)).cloned().collect(),
            removed_edges: old_edges.iter().filter(|e| !new_edges.contains(e)).cloned().collect(),
            plan_edits,
            max_edits,
            new_id_prefix: new_id_prefix(after),
        }
    }
}

/// An edge as the first message lists it.
fn edge_line(edge: &flowmem_model::Edge) -> String {
    let mut res = format!("{} -> {}", edge.from, edge.to);
    if edge.kind != EdgeKind::Data {
        let kind = serde_json::to_value(edge.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        res.push_str(&format!(" ({kind})"));
    }
    if let Some(label) = &edge.label {
        res.push_str(&format!(" [{label}]"));
    }
    res
}

fn kind_name(kind: &NodeKind) -> String {
    match kind {
        NodeKind::Llm { role, .. } => {
            let role = serde_json::to_value(role).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            format!("llm {role}")
        }
        NodeKind::Tool { hints, .. } if !hints.is_empty() => format!("tool [{}]", hints.join(", ")),
        NodeKind::Tool { .. } => "tool".to_owned(),
        NodeKind::Branch { .. } => "branch".to_owned(),
        NodeKind::Parallel {} => "parallel".to_owned(),
        NodeKind::Join {} => "join".to_owned(),
        NodeKind::Loop { .. } => "loop".to_owned(),
    }
}

fn compact(edits: &[GraphEdit]) -> String {
    serde_json::to_string(edits).expect("graph edits are plain enums and structs with string keys, so they serialise")
}

/// The prompt global that bounds the feedback in the optimizer's prompt, in characters.
///
/// Unset, the whole feedback goes in. A model with a short context (the embedded one
/// reads 4,096 tokens) needs it: the feedback on a few queries of a mined τ² workflow
/// runs to tens of thousands of characters.
pub const FEEDBACK_CHARS: &str = "feedback_chars";
