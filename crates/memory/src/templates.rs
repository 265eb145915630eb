//! The crate's prompt templates and AWM prompt text rendering.

use serde::Serialize;
use serde_json::Value;

use flowmem_llm::{EmbeddedPrompt, PromptError, Prompts, RenderedPrompt};
use flowmem_model::{Workflow, canonical_json};

use crate::induce::PROMPT_NAME as INDUCE_PROMPT_NAME;
use crate::render::single_line;

/// The `workflow` template: workflows as AWM prompt text.
pub const WORKFLOW_PROMPT: EmbeddedPrompt = flowmem_llm::embedded_prompt!("workflow");
/// The `induce` template: AWM's induction instructions and the input trajectories.
pub const INDUCE_PROMPT: EmbeddedPrompt = flowmem_llm::embedded_prompt!("induce");

/// A prompt registry holding this crate's templates (`induce`, `workflow`, `evaluate`).
///
/// # Errors
///
/// [`PromptError`] when an embedded template is malformed, which tests rule out.
pub fn prompts() -> Result<Prompts, PromptError> {
    let mut prompts = Prompts::new();
    add_prompts(&mut prompts)?;
    Ok(prompts)
}

/// Adds this crate's templates to an existing registry (one with an override directory,
/// for instance).
///
/// # Errors
///
/// [`PromptError`] when an embedded template is malformed or a different template of the
/// same name is already registered.
pub fn add_prompts(prompts: &mut Prompts) -> Result<(), PromptError> {
    debug_assert_eq!(INDUCE_PROMPT.name, INDUCE_PROMPT_NAME);
    prompts.register(WORKFLOW_PROMPT)?;
    prompts.register(INDUCE_PROMPT)?;
    prompts.register(crate::judge::EVALUATE_PROMPT)?;
    Ok(())
}

#[derive(Serialize)]
struct WorkflowsContext<'a> {
    workflows: Vec<WorkflowView<'a>>,
}

#[derive(Serialize)]
struct WorkflowView<'a> {
    id: &'a str,
    description: String,
    steps: Vec<StepView>,
}

#[derive(Serialize)]
struct StepView {
    state: String,
    reasoning: String,
    tool: String,
    args: String,
}

/// Renders workflows as AWM prompt text (the format above), through the `workflow`
/// template of `prompts`.
///
/// # Errors
///
/// [`PromptError`] when the template is missing from `prompts` or fails to render.
pub fn prompt_text(prompts: &Prompts, workflows: &[Workflow]) -> Result<RenderedPrompt, PromptError> {
    let ctx = WorkflowsContext {
        workflows: workflows
            .iter()
            .map(|workflow| WorkflowView {
                id: &workflow.id,
                description: single_line(&workflow.description),
                steps: workflow
                    .steps
                    .iter()
                    .map(|step| StepView {
                        state: single_line(&step.state),
                        reasoning: single_line(&step.reasoning),
                        tool: step.action.tool.clone(),
                        args: canonical_json(&Value::Object(step.action.args.clone())),
                    })
                    .collect(),
            })
            .collect(),
    };
    prompts.render(WORKFLOW_PROMPT.name, &ctx)
}
