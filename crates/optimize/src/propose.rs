//! The optimizer LLM: reads a candidate's feedback and proposes an [`EditPlan`].

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use flowmem_llm::{ChatModel, ChatRequest, EmbeddedPrompt, LlmError, Message, Prompts, Purpose, ResponseFormat};
use flowmem_model::WorkflowGraph;

use crate::edit::EditPlan;
use crate::search::{Proposer, SearchError};

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

#[derive(Serialize)]
struct ProposeContext<'a> {
    graph: &'a WorkflowGraph,
    feedback: String,
    tools: &'a [String],
    problems: &'a [String],
    max_edits: usize,
}

#[async_trait::async_trait]
impl Proposer for LlmProposer {
    async fn propose(&self, graph: &WorkflowGraph, feedback: &Value, problems: &[String]) -> Result<EditPlan, SearchError> {
        let ctx = ProposeContext {
            // The template lists the graph's nodes and edges a line each, without the
            // notes for people: as JSON a mined workflow is three times longer.
            graph,
            // Invariant: JSON values always serialise. Compact: the feedback runs to tens
            // of kilobytes, and every token is read.
            feedback: serde_json::to_string(feedback).unwrap_or_default(),
            tools: &self.tools,
            problems,
            max_edits: self.max_edits,
        };
        let prompt = self
            .prompts
            .render(PROPOSE_EDITS.name, &ctx)
            .map_err(|err| SearchError::Proposer(err.to_string()))?;
        let mut request = ChatRequest::new(vec![Message::user(prompt.text)], Purpose::Optimizer);
        let schema = edit_plan_schema_for(graph, &self.tools, self.max_edits);
        request.response_format = Some(ResponseFormat { name: "edit_plan".to_owned(), schema });
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
/// What a new node's id may look like: short, lower-case, and never a reference to
/// something else.
const NEW_NODE_ID_PATTERN: &str = "^[a-z][a-z0-9_]{0,23}$";

/// [`edit_plan_schema`] narrowed to one graph: every field that names an existing node
/// is an enumeration of the graph's node ids, a new node's id is a short identifier, a
/// tool hint is one of `tools` (when any are given), and a plan holds at most
/// `max_edits` edits.
///
/// A plan that satisfies it can still fail to apply (removing the entry, say), but it
/// can no longer name a node that does not exist: with constrained decoding, even a
/// small model's plans refer to the real graph.
#[must_use]
pub fn edit_plan_schema_for(graph: &WorkflowGraph, tools: &[String], max_edits: usize) -> Value {
    let mut schema = edit_plan_schema();
    let ids: Vec<Value> = graph.nodes.iter().map(|n| Value::String(n.id.clone())).collect();
    if let Some(Value::Object(defs)) = schema.get_mut("$defs") {
        for (name, def) in defs.iter_mut() {
            if name == "GraphNode" {
                narrow_new_node(def, tools);
            } else {
                narrow_references(def, &ids);
            }
        }
    }
    if let Some(edits) = schema.pointer_mut("/properties/edits") {
        edits["maxItems"] = Value::from(max_edits.max(1));
    }
    schema
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

/// A new node's id becomes a short identifier, and its tool hints the known tools.
fn narrow_new_node(schema: &mut Value, tools: &[String]) {
    let names: Vec<Value> = tools.iter().cloned().map(Value::String).collect();
    for_each_properties(schema, &mut |properties| {
        if let Some(id) = properties.get_mut("id") {
            id["pattern"] = Value::from(NEW_NODE_ID_PATTERN);
        }
        if let Some(items) = properties.get_mut("hints").and_then(|h| h.get_mut("items"))
            && !names.is_empty()
        {
            restrict_to(items, &names);
        }
    });
}
