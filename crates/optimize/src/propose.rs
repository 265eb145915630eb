//! The optimizer LLM: reads a candidate's feedback and proposes an [`EditPlan`].

use std::sync::Arc;

use serde::Serialize;

use flowmem_llm::{ChatModel, ChatRequest, EmbeddedPrompt, LlmError, Message, Prompts, Purpose, ResponseFormat};
use flowmem_model::WorkflowGraph;

use crate::edit::EditPlan;
use crate::plan_schema::{MAX_PLAN_EDITS, narrowed_schema, new_id_prefix};
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
/// six edits, each with an instruction of the full 400 characters, come
/// to about 1,000 tokens of English; the default for structured replies of some backends
/// (512 on the embedded model) cuts such a plan short.
const PLAN_MAX_TOKENS: u32 = 1536;

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
            Some(plan) => TriedView {
                edits: Some(
                    serde_json::to_string(&plan.edits)
                        .expect("graph edits are plain enums and structs with string keys, so they serialise"),
                ),
                failure: None,
            },
            None => TriedView {
                edits: None,
                failure: Some(tried.rejected.last().map(|p| p.join("; ")).unwrap_or_default()),
            },
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
            // Compact: the feedback runs to tens of kilobytes, and every token is read.
            feedback: serde_json::to_string(input.feedback).expect("a JSON value always serialises"),
            tools: &self.tools,
            problems: input.problems,
            tried: input.tried.iter().map(TriedView::of).collect(),
            new_id_prefix: prefix.clone(),
            max_edits: self.max_edits.clamp(1, MAX_PLAN_EDITS),
        };
        let prompt =
            self.prompts.render(PROPOSE_EDITS.name, &ctx).map_err(|err| SearchError::Proposer(err.to_string()))?;
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
