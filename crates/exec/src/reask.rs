//! One more try after an unusable model reply: the one place both the ReAct agent's
//! steps and a workflow's nodes ask again.

use flowmem_llm::{ChatModel, ChatRequest, ChatResponse, LlmError, Message, Prompts};

/// The template of the note that says what was wrong with the reply.
const REASK_TEMPLATE: &str = "reask";

/// What the `reask` template sees.
#[derive(serde::Serialize)]
struct ReaskVars<'a> {
    problem: &'a str,
}

/// Sends `request`; an unusable reply (JSON cut short at the token budget, not the shape
/// asked for, or a tool call whose arguments are not a JSON object) is asked once more,
/// with the `reask` note of what was wrong added to `request`. A small model that ran a
/// free-form argument to the budget then often writes a shorter call. `who` names the
/// step or node in the logs.
pub(crate) async fn chat_or_reask(
    model: &dyn ChatModel,
    prompts: &Prompts,
    request: &mut ChatRequest,
    who: &str,
) -> Result<ChatResponse, LlmError> {
    let first = model.chat(request).await;
    let (problem, raw) = match &first {
        Err(LlmError::InvalidReply { problem, raw, .. }) => (problem.clone(), raw),
        Err(LlmError::ToolArguments { tool, problem, raw, .. }) => {
            (format!("the arguments of `{tool}` are not a JSON object ({problem})"), raw)
        }
        _ => return first,
    };
    tracing::debug!(who, raw = %raw, "an unusable reply");
    let Ok(note) = prompts.render(REASK_TEMPLATE, &ReaskVars { problem: &problem }) else { return first };
    tracing::info!(who, %problem, "asking once more after an unusable reply");
    request.messages.push(Message::user(note.text));
    model.chat(request).await
}
