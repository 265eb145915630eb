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
use std::sync::{Arc, OnceLock};

use flowmem_llm::{EmbeddedPrompt, PromptError, Prompts, embedded_prompt};
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

/// The executor's templates. `context` is included by the role templates, and
/// `results` (the list of upstream results) by `context`.
pub const EXEC_PROMPTS: &[EmbeddedPrompt] = &[
    embedded_prompt!("results"),
    embedded_prompt!("context"),
    embedded_prompt!("plan"),
    embedded_prompt!("extract"),
    embedded_prompt!("reason"),
    embedded_prompt!("verify"),
    embedded_prompt!("judge"),
    embedded_prompt!("synthesize"),
    embedded_prompt!("tool"),
    embedded_prompt!("react"),
    embedded_prompt!("reask"),
    embedded_prompt!("left_out"),
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

/// The prompt global that bounds the upstream results of a node's context together, in
/// characters (each counted as its [`CONTEXT_ITEM_CHARS`] clip shows it, plus its label).
///
/// Unset, every result is shown. Set, a node sees the newest results that fit, at least
/// one, and a line saying how many earlier ones were left out: a workflow that loops, or
/// calls many tools before an LLM node, then still fits a small model's context window.
/// The ReAct agent's conversation is bounded the same way: its newest tool results that
/// fit, and the `left_out` note in place of each earlier one.
pub const CONTEXT_CHARS: &str = "context_chars";

/// Bounds the upstream results of each node context to `chars` characters in all (see
/// [`CONTEXT_CHARS`]).
pub fn limit_context(prompts: &mut Prompts, chars: usize) {
    prompts.set_global(CONTEXT_CHARS, &chars);
}

/// How many of the newest results fit in the [`CONTEXT_CHARS`] budget of `prompts`:
/// `costs` are their sizes, newest first, and the count is of an unbroken run of the
/// newest, at least one when there is any. `None` when no budget is set (all fit).
///
/// The one rule the workflow executor's node contexts and the ReAct agent's
/// conversation share.
pub(crate) fn newest_that_fit(prompts: &Prompts, costs: impl IntoIterator<Item = usize>) -> Option<usize> {
    let budget = prompts.global(CONTEXT_CHARS).and_then(serde_json::Value::as_u64)? as usize;
    let (mut used, mut kept) = (0_usize, 0);
    for cost in costs {
        if kept > 0 && used + cost > budget {
            break;
        }
        used += cost;
        kept += 1;
    }
    Some(kept)
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
///
/// The engine renders with these variables plus `results`: `context` already rendered
/// by the `results` template, once for all the nodes that read the same context.
/// Without it, as when rendering from this type, the `context` template includes
/// `results` itself; the text is the same.
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

/// The template that renders the upstream results (`context`) as a list.
pub(crate) const RESULTS_TEMPLATE: &str = "results";

/// The variables of the `results` template.
#[derive(Serialize)]
pub(crate) struct ResultsVars<'a> {
    /// The items as one template value, shared without copying.
    pub(crate) context: &'a minijinja::Value,
    /// How many earlier results [`CONTEXT_CHARS`] left out.
    pub(crate) omitted: usize,
}

/// The `context` template variable: a sequence of the items, each converted to a
/// template value only when a template reads it (the `results` template, once per
/// context; role templates only test whether it is empty).
#[derive(Debug)]
struct TemplateItems(Vec<Arc<ContextItem>>);

impl minijinja::value::Object for TemplateItems {
    fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &minijinja::Value) -> Option<minijinja::Value> {
        let item = self.0.get(key.as_usize()?)?;
        Some(minijinja::Value::from(minijinja::value::Serde(item.as_ref())))
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Seq(self.0.len())
    }
}

/// The items as the `context` template variable, read without copying them.
pub(crate) fn template_items(items: Vec<Arc<ContextItem>>) -> minijinja::Value {
    minijinja::Value::from_object(TemplateItems(items))
}

/// What a node's prompt holds besides its context: the fields of [`PromptContext`]
/// other than `context`.
#[derive(Serialize)]
pub(crate) struct OwnVars<'a> {
    pub(crate) query: &'a str,
    pub(crate) instruction: Option<&'a str>,
    pub(crate) question: Option<&'a str>,
    pub(crate) options: &'a [String],
    pub(crate) hints: &'a [String],
}

/// The engine's variables for a role template: those of [`PromptContext`], with
/// `context` as one template value and its `results` rendered once, both shared by
/// every node reading the same context.
///
/// When `results` is set the `context` template prints it instead of including the
/// `results` template, so a wide fan-out renders its shared upstream list once.
#[derive(Serialize)]
pub(crate) struct NodePromptVars<'a> {
    #[serde(flatten)]
    pub(crate) own: &'a OwnVars<'a>,
    pub(crate) context: &'a minijinja::Value,
    pub(crate) results: &'a str,
}

/// Renders a node's instruction or question source against named values.
pub(crate) fn render_node_source(source: &str, values: &serde_json::Value) -> Result<String, minijinja::Error> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env
    });
    env.render_str(source, minijinja::value::Serde(values))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flowmem_llm::Prompts;

    use crate::prompts::{
        ContextItem, EXEC_PROMPTS, NodePromptVars, OwnVars, PromptContext, RESULTS_TEMPLATE, ResultsVars, exec_prompts,
        limit_context_items, template_items,
    };

    fn items() -> Vec<ContextItem> {
        vec![
            ContextItem {
                node: "plan".into(),
                kind: "llm:plan".into(),
                iteration: 0,
                output: "1. find the order\n2. report".into(),
                failed: false,
            },
            ContextItem {
                node: "lookup".into(),
                kind: "tool".into(),
                iteration: 2,
                output: "error: not found".into(),
                failed: true,
            },
        ]
    }

    /// Renders every role template both ways: from [`PromptContext`] (the `context`
    /// template includes `results`) and as the engine does (shared `results` text).
    fn both_ways(prompts: &Prompts, items: &[ContextItem], instruction: Option<&str>) -> Vec<(String, String)> {
        let options = vec!["yes".to_owned(), "no".to_owned()];
        let hints = vec!["get_order".to_owned()];
        let public = PromptContext {
            query: "Where is #W1?",
            instruction,
            context: items,
            question: Some("Found?"),
            options: &options,
            hints: &hints,
        };
        let value = template_items(items.iter().cloned().map(Arc::new).collect());
        let results = prompts.render(RESULTS_TEMPLATE, &ResultsVars { context: &value, omitted: 0 }).unwrap().text;
        let own =
            OwnVars { query: public.query, instruction, question: public.question, options: &options, hints: &hints };
        let engine = NodePromptVars { own: &own, context: &value, results: &results };
        EXEC_PROMPTS
            .iter()
            .filter(|prompt| !matches!(prompt.name, "results" | "react" | "reask" | "left_out"))
            .map(|prompt| {
                (prompts.render(prompt.name, &public).unwrap().text, prompts.render(prompt.name, &engine).unwrap().text)
            })
            .collect()
    }

    #[test]
    fn the_shared_results_block_renders_the_same_prompts_as_the_inline_list() {
        let mut clipped = exec_prompts(None).unwrap();
        limit_context_items(&mut clipped, 4);
        // An override that lists `context` itself, as `context` v2 did, still sees it.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("context.j2"),
            "{# prompt: context v2 #}\nTask: {{ query }}\n{% for item in context %}{{ loop.index }}. {{ item.node }} ({{ item.kind }}, {{ item.iteration }}, {{ item.failed }}): {{ item.output }}\n{% endfor %}{{ context | length }} results\n",
        )
        .unwrap();
        let overridden = exec_prompts(Some(dir.path())).unwrap();
        let listed = overridden.render(
            "plan",
            &PromptContext {
                query: "q",
                instruction: None,
                context: &items(),
                question: None,
                options: &[],
                hints: &[],
            },
        );
        let listed = listed.unwrap().text;
        assert!(listed.contains("2. lookup (tool, 2, True): error: not found\n2 results"), "{listed}");
        for prompts in [exec_prompts(None).unwrap(), clipped, overridden] {
            for (items, instruction) in
                [(items(), Some("Be brief.")), (items(), None), (Vec::new(), Some("Be brief.")), (Vec::new(), None)]
            {
                for (public, engine) in both_ways(&prompts, &items, instruction) {
                    assert_eq!(public, engine);
                }
            }
        }
    }
}
