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
        request.response_format = Some(ResponseFormat { name: "edit_plan".to_owned(), schema: edit_plan_schema() });
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
