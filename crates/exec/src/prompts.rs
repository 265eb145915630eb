//! The role prompt templates, rendered with minijinja from typed contexts.
//!
//! Each role of an LLM node (and the tool-choosing step, and the ReAct agent) has one
//! template in `crates/exec/prompts/<role>.j2`, embedded at build time. A directory of
//! `.j2` files can override any of them for experiments.

use std::path::Path;

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

/// The embedded templates: `(name, source)`.
const EMBEDDED: &[(&str, &str)] = &[
    ("_context.j2", include_str!("../prompts/_context.j2")),
    ("plan.j2", include_str!("../prompts/plan.j2")),
    ("extract.j2", include_str!("../prompts/extract.j2")),
    ("reason.j2", include_str!("../prompts/reason.j2")),
    ("verify.j2", include_str!("../prompts/verify.j2")),
    ("judge.j2", include_str!("../prompts/judge.j2")),
    ("synthesize.j2", include_str!("../prompts/synthesize.j2")),
    ("tool.j2", include_str!("../prompts/tool.j2")),
    ("react.j2", include_str!("../prompts/react.j2")),
];

/// A prompt template that could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
    /// An override file could not be read.
    #[error("cannot read prompt template `{}`", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A template does not parse or does not render with its context.
    #[error("prompt template `{name}` failed")]
    Template {
        /// The template's name.
        name: String,
        /// The cause.
        #[source]
        source: minijinja::Error,
    },
}

/// The set of prompt templates the executor renders: the embedded ones, possibly
/// overridden from a directory.
#[derive(Debug, Clone)]
pub struct Prompts {
    env: Environment<'static>,
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

/// The context every role template renders from.
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

impl Prompts {
    /// The embedded templates.
    #[must_use]
    pub fn embedded() -> Prompts {
        let mut env = strict_env();
        for (name, source) in EMBEDDED {
            // The embedded templates are checked by the crate's tests.
            if let Err(err) = env.add_template(name, source) {
                tracing::error!(template = name, error = %err, "embedded template does not parse");
            }
        }
        Prompts { env }
    }

    /// The embedded templates, with every `NAME.j2` file in `dir` replacing the template
    /// of that name.
    ///
    /// # Errors
    ///
    /// [`PromptError::Io`] when the directory or a file cannot be read,
    /// [`PromptError::Template`] when a file does not parse.
    pub fn with_overrides(dir: &Path) -> Result<Prompts, PromptError> {
        let mut prompts = Prompts::embedded();
        let entries = std::fs::read_dir(dir).map_err(|source| PromptError::Io { path: dir.to_owned(), source })?;
        for entry in entries {
            let entry = entry.map_err(|source| PromptError::Io { path: dir.to_owned(), source })?;
            let path = entry.path();
            if path.extension().and_then(|ext| ext.to_str()) != Some("j2") {
                continue;
            }
            let source = std::fs::read_to_string(&path).map_err(|source| PromptError::Io { path: path.clone(), source })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            prompts
                .env
                .add_template_owned(name.clone(), source)
                .map_err(|source| PromptError::Template { name, source })?;
        }
        Ok(prompts)
    }

    /// Renders the template `name` (such as `plan.j2`) with `ctx`.
    ///
    /// # Errors
    ///
    /// [`PromptError::Template`] when the template is missing or uses an undefined
    /// variable.
    pub fn render(&self, name: &str, ctx: &PromptContext<'_>) -> Result<String, PromptError> {
        let template = self
            .env
            .get_template(name)
            .map_err(|source| PromptError::Template { name: name.to_owned(), source })?;
        template.render(minijinja::value::Serde(ctx)).map_err(|source| PromptError::Template { name: name.to_owned(), source })
    }

    /// Whether a template named `name` exists.
    #[must_use]
    pub fn has(&self, name: &str) -> bool {
        self.env.get_template(name).is_ok()
    }

    /// The version header (`{# prompt: NAME vN #}`) of template `name`, if it has one.
    #[must_use]
    pub fn version(&self, name: &str) -> Option<String> {
        let template = self.env.get_template(name).ok()?;
        let source = template.source();
        let header = source.trim_start().strip_prefix("{# prompt:")?;
        let end = header.find("#}")?;
        Some(header[..end].trim().to_owned())
    }

    /// Renders an ad-hoc template source (a node's instruction or question) against named
    /// values.
    pub(crate) fn render_source(&self, source: &str, values: &serde_json::Value) -> Result<String, minijinja::Error> {
        self.env.render_str(source, minijinja::value::Serde(values))
    }
}

fn strict_env() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Prompts are plain text, not HTML.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env
}
