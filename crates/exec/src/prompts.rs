//! The executor's role prompt templates and the typed context they render from.
//!
//! Each role of an LLM node (and the tool-choosing step, the judges, and the ReAct
//! agent) has one template in `crates/exec/prompts/<name>.j2`, embedded at build time
//! and rendered by the shared prompt engine ([`flowmem_llm::Prompts`]), so `--prompts
//! DIR` overrides apply and every render is identified by name, version and hash.
//!
//! A node's own `instruction` and a judge's `question` are small templates too, but they
//! are graph data, not prompt files: they render in a separate strict environment
//! against `query` and the outputs of upstream nodes.

use std::path::Path;
use std::sync::OnceLock;

use flowmem_llm::{EmbeddedPrompt, PromptError, Prompts, embedded_prompt};
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

/// The executor's templates. `context` is included by the role templates.
pub const EXEC_PROMPTS: &[EmbeddedPrompt] = &[
    embedded_prompt!("context"),
    embedded_prompt!("plan"),
    embedded_prompt!("extract"),
    embedded_prompt!("reason"),
    embedded_prompt!("verify"),
    embedded_prompt!("judge"),
    embedded_prompt!("synthesize"),
    embedded_prompt!("tool"),
    embedded_prompt!("react"),
];

/// The prompt global that bounds each upstream result in a node's context, and each tool
/// result in the ReAct agent's conversation, in characters.
///
/// Unset, results go in whole. Small local models need it: a τ² product lookup returns
/// about 6,600 characters, which every downstream node would read again, and prefill is
/// what their time goes on. The full result always stays in the trace.
pub const CONTEXT_ITEM_CHARS: &str = "context_item_chars";

/// Bounds each upstream result in the executor's node contexts to `chars` characters
/// (see [`CONTEXT_ITEM_CHARS`]).
pub fn limit_context_items(prompts: &mut Prompts, chars: usize) {
    prompts.set_global(CONTEXT_ITEM_CHARS, &chars);
}

/// Adds the executor's templates to a shared prompt registry.
///
/// # Errors
///
/// Any [`PromptError`] of [`Prompts::register`], such as an override file with a bad
/// header or a syntax error.
pub fn register_prompts(prompts: &mut Prompts) -> Result<(), PromptError> {
    prompts.register_all(EXEC_PROMPTS)
}

/// A registry holding exactly the executor's templates, with overrides from `dir`.
///
/// # Errors
///
/// [`PromptError`] when `dir` is unreadable or an override does not register.
pub fn exec_prompts(dir: Option<&Path>) -> Result<Prompts, PromptError> {
    let mut prompts = match dir {
        Some(dir) => Prompts::with_override_dir(dir)?,
        None => Prompts::new(),
    };
    register_prompts(&mut prompts)?;
    Ok(prompts)
}

/// One upstream result as the templates see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextItem {
    /// The node that produced it.
    pub node: String,
    /// The node kind, such as `tool` or `llm:plan`.
    pub kind: String,
    /// Which loop iteration produced it.
    pub iteration: u32,
    /// The node's output (a tool's result or error text).
    pub output: String,
    /// Whether it is an error.
    pub failed: bool,
}

/// The context every executor template renders from.
#[derive(Debug, Clone, Serialize)]
pub struct PromptContext<'a> {
    /// The query text.
    pub query: &'a str,
    /// The node's rendered instruction, if any.
    pub instruction: Option<&'a str>,
    /// The upstream results, oldest first.
    pub context: &'a [ContextItem],
    /// For a judge: the question.
    pub question: Option<&'a str>,
    /// For a judge: the allowed answers.
    pub options: &'a [String],
    /// For a tool node: the hint list.
    pub hints: &'a [String],
}

/// Renders a node's instruction or question source against named values.
pub(crate) fn render_node_source(
    source: &str,
    values: &serde_json::Value,
) -> Result<String, minijinja::Error> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env
    });
    env.render_str(source, minijinja::value::Serde(values))
}
