//! The optimizer LLM: reads a candidate's feedback and proposes an [`EditPlan`].

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use flowmem_llm::{ChatModel, ChatRequest, EmbeddedPrompt, LlmError, Message, Prompts, Purpose, ResponseFormat};
use flowmem_model::WorkflowGraph;

use crate::edit::EditPlan;
use crate::search::{CandidatePlan, ProposalInput, Proposer, SearchError};

/// The optimizer prompt template.
pub const PROPOSE_EDITS: EmbeddedPrompt = flowmem_llm::embedded_prompt!("propose_edits");

/// Proposes edit plans with a chat model, under the JSON Schema of [`EditPlan`].
pub struct LlmProposer {
    /// The optimizer model.
    pub model: Arc<dyn ChatModel>,
    /// The prompt registry; must hold [`PROPOSE_EDITS`].
    pub prompts: Arc<Prompts>,
    /// The names of the available tools, shown to the optimizer.
    pub tools: Vec<String>,
    /// The most edits a plan may hold.
    pub max_edits: usize,
}

/// The most tokens a plan may take. The narrowed schema bounds every free-text field, so
/// [`MAX_PLAN_EDITS`] edits, each with an instruction of the full 400 characters, come
/// to about 1,000 tokens of English; the default for structured replies of some backends
/// (512 on the embedded model) cuts such a plan short.
const PLAN_MAX_TOKENS: u32 = 1536;

/// The most edits [`edit_plan_schema_for`] admits, whatever the caller asks for.
const MAX_PLAN_EDITS: usize = 6;

#[derive(Serialize)]
struct ProposeContext<'a> {
    graph: &'a WorkflowGraph,
    feedback: String,
    tools: &'a [String],
    problems: &'a [String],
    tried: Vec<TriedView>,
    new_id_prefix: String,
    max_edits: usize,
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
            // Invariant: our own types always serialise.
            Some(plan) => TriedView { edits: Some(serde_json::to_string(&plan.edits).unwrap_or_default()), failure: None },
            None => TriedView { edits: None, failure: Some(tried.rejected.last().map(|p| p.join("; ")).unwrap_or_default()) },
        }
    }
}

#[async_trait::async_trait]
impl Proposer for LlmProposer {
    async fn propose(&self, input: &ProposalInput<'_>) -> Result<EditPlan, SearchError> {
        let graph = input.graph;
        let prefix = new_id_prefix(graph);
        let ctx = ProposeContext {
            // The template lists the graph's nodes and edges a line each, without the
            // notes for people: as JSON a mined workflow is three times longer.
            graph,
            // Invariant: JSON values always serialise. Compact: the feedback runs to tens
            // of kilobytes, and every token is read.
            feedback: serde_json::to_string(input.feedback).unwrap_or_default(),
            tools: &self.tools,
            problems: input.problems,
            tried: input.tried.iter().map(TriedView::of).collect(),
            new_id_prefix: prefix.clone(),
            max_edits: self.max_edits.clamp(1, MAX_PLAN_EDITS),
        };
        let prompt = self
            .prompts
            .render(PROPOSE_EDITS.name, &ctx)
            .map_err(|err| SearchError::Proposer(err.to_string()))?;
        let mut request = ChatRequest::new(vec![Message::user(prompt.text)], Purpose::Optimizer);
        let schema = narrowed_schema(graph, &self.tools, self.max_edits, &prefix);
        request.response_format = Some(ResponseFormat { name: "edit_plan".to_owned(), schema });
        request.max_tokens = Some(PLAN_MAX_TOKENS);
        let reply = match self.model.chat(&request).await {
            Ok(reply) => reply,
            Err(LlmError::InvalidReply { problem, .. }) => {
                return Err(SearchError::InvalidProposal(format!("the reply was not an edit plan: {problem}")));
            }
            Err(err) => return Err(SearchError::Proposer(err.to_string())),
        };
        let text = reply.content.unwrap_or_default();
        serde_json::from_str::<EditPlan>(&text)
            .map_err(|err| SearchError::InvalidProposal(format!("the reply was not an edit plan: {err}")))
    }
}

/// The prompt global that bounds the feedback in the optimizer's prompt, in characters.
///
/// Unset, the whole feedback goes in. A model with a short context (the embedded one
/// reads 4,096 tokens) needs it: the feedback on a few queries of a mined τ² workflow
/// runs to tens of thousands of characters.
pub const FEEDBACK_CHARS: &str = "feedback_chars";

/// The JSON Schema an edit plan must satisfy.
#[must_use]
pub fn edit_plan_schema() -> Value {
    // Invariant: a derived schema always serialises.
    serde_json::to_value(schemars::schema_for!(EditPlan)).unwrap_or(Value::Null)
}

/// Fields of an edit that name a node already in the graph.
const NODE_REFERENCES: [&str; 8] = ["id", "after", "before", "from", "to", "around", "new_from", "new_to"];
/// Free-text fields the optimizer writes, and the most characters each may take in a
/// narrowed schema: enough for a real instruction, and a bound on how long a small model
/// that starts repeating itself can go on.
const FREE_TEXT_LIMITS: [(&str, u64); 6] =
    [("instruction", 400), ("question", 200), ("rationale", 300), ("description", 200), ("model", 60), ("label", 40)];
/// The most tool hints a new tool node may carry.
const MAX_HINTS: u64 = 5;

/// The prefix every new node id of a plan for `graph` carries: `e<g>_`, where `g` is one
/// more than the largest generation among the graph's ids of that form.
///
/// A plan's new ids then never collide with the graph's, which a JSON Schema pattern
/// cannot otherwise say (it has no "none of these strings"), and the id tells a reader
/// which generation of edits added the node.
#[must_use]
pub fn new_id_prefix(graph: &WorkflowGraph) -> String {
    let generation = graph
        .nodes
        .iter()
        .filter_map(|node| node.id.strip_prefix('e')?.split_once('_')?.0.parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    format!("e{}_", generation.saturating_add(1))
}

/// [`edit_plan_schema`] narrowed to one graph:
/// - every field that names an existing node is an enumeration of the graph's node ids;
/// - a new node's id is a short identifier starting with [`new_id_prefix`], so it is new;
/// - a tool hint is one of `tools` (when any are given);
/// - instructions, questions and the rationale have a length bound;
/// - a plan holds at most `max_edits` edits (and never more than six).
///
/// A plan that satisfies it can still fail to apply (removing the entry, say), but it
/// can no longer name a node that does not exist or reuse an id: with constrained
/// decoding, even a small model's plans refer to the real graph.
#[must_use]
pub fn edit_plan_schema_for(graph: &WorkflowGraph, tools: &[String], max_edits: usize) -> Value {
    narrowed_schema(graph, tools, max_edits, &new_id_prefix(graph))
}

fn narrowed_schema(graph: &WorkflowGraph, tools: &[String], max_edits: usize, prefix: &str) -> Value {
    let mut schema = edit_plan_schema();
    let ids: Vec<Value> = graph.nodes.iter().map(|n| Value::String(n.id.clone())).collect();
    if let Some(Value::Object(defs)) = schema.get_mut("$defs") {
        for (name, def) in defs.iter_mut() {
            if name == "GraphNode" {
                narrow_new_node(def, tools, prefix);
            } else {
                narrow_references(def, &ids);
            }
        }
    }
    bound_sizes(&mut schema, graph.nodes.len());
    if let Some(edits) = schema.pointer_mut("/properties/edits") {
        edits["maxItems"] = Value::from(max_edits.clamp(1, MAX_PLAN_EDITS));
    }
    schema
}

/// Bounds everything the optimizer could write without end: the [`FREE_TEXT_LIMITS`] as
/// `maxLength`, at most [`MAX_HINTS`] hints, and a parallel block of at most the graph's
/// `node_count` nodes. With those a plan has a largest size, and a model that starts
/// repeating itself is stopped by the grammar rather than by the token limit.
fn bound_sizes(schema: &mut Value, node_count: usize) {
    for_each_properties(schema, &mut |properties| {
        for (name, limit) in FREE_TEXT_LIMITS {
            if let Some(Value::Object(property)) = properties.get_mut(name) {
                property.insert("maxLength".to_owned(), Value::from(limit));
            }
        }
        for (name, limit) in [("hints", MAX_HINTS), ("nodes", node_count as u64)] {
            if let Some(Value::Object(property)) = properties.get_mut(name) {
                property.insert("maxItems".to_owned(), Value::from(limit));
            }
        }
    });
}

/// Sets an enumeration of `ids` on every property in [`NODE_REFERENCES`] (and on the
/// items of `nodes`) anywhere under `schema`.
fn narrow_references(schema: &mut Value, ids: &[Value]) {
    for_each_properties(schema, &mut |properties| {
        for (name, property) in properties.iter_mut() {
            if NODE_REFERENCES.contains(&name.as_str()) {
                restrict_to(property, ids);
            } else if name == "nodes"
                && let Some(items) = property.get_mut("items")
            {
                restrict_to(items, ids);
            }
        }
    });
}

/// Calls `f` on every `properties` map anywhere under `schema`, outermost first.
fn for_each_properties(schema: &mut Value, f: &mut impl FnMut(&mut serde_json::Map<String, Value>)) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Object(properties)) = map.get_mut("properties") {
                f(properties);
            }
            map.values_mut().for_each(|child| for_each_properties(child, f));
        }
        Value::Array(items) => items.iter_mut().for_each(|child| for_each_properties(child, f)),
        _ => {}
    }
}

/// Restricts a string (or nullable string) schema to `values`.
fn restrict_to(schema: &mut Value, values: &[Value]) {
    let nullable = match schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        _ => false,
    };
    let mut allowed = values.to_vec();
    if nullable {
        allowed.push(Value::Null);
    }
    if let Value::Object(map) = schema {
        map.insert("enum".to_owned(), Value::Array(allowed));
    }
}

/// A new node's id becomes a short identifier after `prefix`, and its tool hints the
/// known tools.
fn narrow_new_node(schema: &mut Value, tools: &[String], prefix: &str) {
    let names: Vec<Value> = tools.iter().cloned().map(Value::String).collect();
    let pattern = format!("^{prefix}[a-z][a-z0-9_]{{0,19}}$");
    for_each_properties(schema, &mut |properties| {
        if let Some(id) = properties.get_mut("id") {
            id["pattern"] = Value::from(pattern.as_str());
        }
        if let Some(items) = properties.get_mut("hints").and_then(|h| h.get_mut("items"))
            && !names.is_empty()
        {
            restrict_to(items, &names);
        }
    });
}
