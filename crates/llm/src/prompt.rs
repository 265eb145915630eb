//! The prompt engine: named, versioned minijinja templates rendered from typed contexts.
//!
//! Every prompt flowmem sends lives in a template file `crates/<crate>/prompts/<name>.j2`
//! that the owning crate embeds with [`embedded_prompt!`](crate::embedded_prompt). The
//! first line of each template is a header naming it and giving its version:
//!
//! ```text
//! {# prompt: judge_es v3 #}
//! ```
//!
//! A [`Prompts`] registry holds the templates. Rendering goes through a typed
//! `Serialize` context with [`UndefinedBehavior::Strict`], so a variable the context
//! lacks is an error rather than an empty string. Each render returns the text and the
//! template's [`PromptId`] (name, version and a hash of the source) for traces and cache
//! keys: editing a template changes its hash, which invalidates cached replies.
//!
//! An override directory (the CLI's `--prompts DIR`) holds replacement templates named
//! `<name>.j2`. A file there wins over the embedded template of the same name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `clip(limit)` filter of every template: `text` cut to its first `limit`
/// characters, with a marker saying how many were left out; unchanged when `limit` is
/// `None` or not exceeded.
#[must_use]
pub fn clip(text: String, limit: Option<usize>) -> String {
    let Some(limit) = limit else { return text };
    let total = text.chars().count();
    if total <= limit {
        return text;
    }
    let kept: String = text.chars().take(limit).collect();
    format!("{kept} […{} more characters]", total - limit)
}

/// A template compiled into the binary: its name and source text.
///
/// Build one with [`embedded_prompt!`](crate::embedded_prompt), which reads
/// `prompts/<name>.j2` of the calling crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedPrompt {
    /// The template's name, which its header must repeat.
    pub name: &'static str,
    /// The template source, header included.
    pub source: &'static str,
}

/// Embeds `prompts/<name>.j2` of the calling crate as an [`EmbeddedPrompt`].
///
/// # Example
///
/// In a crate with the file `prompts/judge_es.j2`:
///
/// ```text
/// const JUDGE_ES: flowmem_llm::EmbeddedPrompt = flowmem_llm::embedded_prompt!("judge_es");
/// ```
#[macro_export]
macro_rules! embedded_prompt {
    ($name:literal) => {
        $crate::EmbeddedPrompt {
            name: $name,
            source: include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/prompts/", $name, ".j2")),
        }
    };
}

/// Which template produced a prompt: for trace records and response-cache keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PromptId {
    /// The template's name, as in its header.
    pub name: String,
    /// The version in its header.
    pub version: u32,
    /// The first 16 hex digits of the SHA-256 of the template source.
    pub hash: String,
}

impl std::fmt::Display for PromptId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} v{} ({})", self.name, self.version, self.hash)
    }
}

/// A rendered prompt and the template it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct RenderedPrompt {
    /// The rendered text.
    pub text: String,
    /// The template's identity.
    pub id: PromptId,
}

/// A registry of prompt templates with an optional override directory.
///
/// Templates render with `trim_blocks` and `lstrip_blocks` on, so block tags and the
/// header comment on a line of their own leave no blank line behind, and without HTML
/// escaping. Templates may `{% include %}` each other by name.
///
/// # Example
///
/// ```
/// use flowmem_llm::{EmbeddedPrompt, Prompts};
///
/// #[derive(serde::Serialize)]
/// struct Greeting<'a> {
///     user: &'a str,
/// }
///
/// const HELLO: EmbeddedPrompt = EmbeddedPrompt {
///     name: "hello",
///     source: "{# prompt: hello v2 #}\nHello, {{ user }}!",
/// };
///
/// let mut prompts = Prompts::new();
/// prompts.register(HELLO)?;
/// let rendered = prompts.render("hello", &Greeting { user: "Ada" })?;
/// assert_eq!(rendered.text, "Hello, Ada!");
/// assert_eq!(rendered.id.version, 2);
/// # Ok::<(), flowmem_llm::PromptError>(())
/// ```
#[derive(Debug)]
pub struct Prompts {
    env: Environment<'static>,
    // Invariant: holds exactly the templates added to `env`.
    templates: BTreeMap<String, Registered>,
    override_dir: Option<PathBuf>,
    // Invariant: the globals added to `env`, kept for code that applies them outside a
    // template (such as clipping a tool result in a conversation).
    globals: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone)]
struct Registered {
    id: PromptId,
    // The override file the template came from, if it did not come from the binary.
    override_path: Option<PathBuf>,
}

/// An error registering or rendering a prompt template.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
    /// The first line is not a `{# prompt: NAME vN #}` header.
    #[error("{origin}: line 1: {problem}")]
    Header {
        /// Where the template came from: a file path or `embedded prompt NAME`.
        origin: String,
        /// What is wrong with the header.
        problem: HeaderError,
    },
    /// The header names a different prompt than the one being registered.
    #[error("{origin}: line 1: the header names prompt `{found}`, expected `{expected}`")]
    NameMismatch {
        /// Where the template came from.
        origin: String,
        /// The name being registered.
        expected: String,
        /// The name in the header.
        found: String,
    },
    /// Two different templates were registered under one name.
    #[error("prompt `{name}` is registered twice with different sources")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// No template has this name.
    #[error("prompt `{name}` is not registered")]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The template does not parse.
    #[error("{origin}: {source}")]
    Syntax {
        /// Where the template came from.
        origin: String,
        /// The parser's error, with the line.
        #[source]
        source: minijinja::Error,
    },
    /// Rendering failed, for example on a variable the context lacks.
    #[error("rendering prompt `{name}` ({origin}): {source}")]
    Render {
        /// The template's name.
        name: String,
        /// Where the template came from.
        origin: String,
        /// The engine's error, with the line.
        #[source]
        source: minijinja::Error,
    },
    /// The override directory or one of its files could not be read.
    #[error("cannot read prompt override {}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl Default for Prompts {
    fn default() -> Prompts {
        Prompts::new()
    }
}

impl Prompts {
    /// An empty registry with no override directory.
    #[must_use]
    pub fn new() -> Prompts {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .expect("the default delimiters are valid");
        env.set_syntax(syntax);
        env.add_filter("clip", clip);
        Prompts { env, templates: BTreeMap::new(), override_dir: None, globals: BTreeMap::new() }
    }

    /// Sets a variable every template sees, such as a length budget shared by several
    /// templates. A render's context wins over a global of the same name.
    pub fn set_global<V: Serialize>(&mut self, name: &str, value: &V) {
        self.env.add_global(name.to_owned(), minijinja::Value::from(Serde(value)));
        self.globals.insert(name.to_owned(), serde_json::to_value(value).unwrap_or(serde_json::Value::Null));
    }

    /// The value of a global set with [`Prompts::set_global`], as JSON.
    #[must_use]
    pub fn global(&self, name: &str) -> Option<&serde_json::Value> {
        self.globals.get(name)
    }

    /// An empty registry whose templates are replaced by files `<name>.j2` in `dir`.
    ///
    /// # Errors
    ///
    /// [`PromptError::Io`] when `dir` is not a readable directory.
    pub fn with_override_dir(dir: &Path) -> Result<Prompts, PromptError> {
        std::fs::read_dir(dir).map_err(|source| PromptError::Io { path: dir.to_path_buf(), source })?;
        Ok(Prompts { override_dir: Some(dir.to_path_buf()), ..Prompts::new() })
    }

    /// The override directory, if any.
    #[must_use]
    pub fn override_dir(&self) -> Option<&Path> {
        self.override_dir.as_deref()
    }

    /// Registers a template, or its replacement from the override directory.
    ///
    /// Registering the same name with the same source again does nothing, so every
    /// crate can register its templates into a shared registry without coordination.
    ///
    /// # Errors
    ///
    /// - [`PromptError::Header`] or [`PromptError::NameMismatch`] when the template (or
    ///   its override) does not start with `{# prompt: NAME vN #}` naming `prompt.name`;
    /// - [`PromptError::Syntax`] when it does not parse;
    /// - [`PromptError::Duplicate`] when another source is registered under the name;
    /// - [`PromptError::Io`] when the override file exists but cannot be read.
    pub fn register(&mut self, prompt: EmbeddedPrompt) -> Result<&PromptId, PromptError> {
        let override_path = self.find_override(prompt.name)?;
        let (source, origin) = match &override_path {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| PromptError::Io { path: path.clone(), source })?;
                (text, path.display().to_string())
            }
            None => (prompt.source.to_owned(), format!("embedded prompt `{}`", prompt.name)),
        };
        let header =
            parse_header(&source).map_err(|problem| PromptError::Header { origin: origin.clone(), problem })?;
        if header.name != prompt.name {
            return Err(PromptError::NameMismatch { origin, expected: prompt.name.to_owned(), found: header.name });
        }
        let id = PromptId { name: header.name, version: header.version, hash: source_hash(&source) };
        if let Some(existing) = self.templates.get(prompt.name) {
            if existing.id != id {
                return Err(PromptError::Duplicate { name: prompt.name.to_owned() });
            }
        } else {
            self.env
                .add_template_owned(prompt.name.to_owned(), source)
                .map_err(|source| PromptError::Syntax { origin, source })?;
            self.templates.insert(prompt.name.to_owned(), Registered { id, override_path });
        }
        Ok(&self.templates[prompt.name].id)
    }

    /// Registers several templates; see [`Prompts::register`].
    ///
    /// # Errors
    ///
    /// The first error of [`Prompts::register`].
    pub fn register_all(&mut self, prompts: &[EmbeddedPrompt]) -> Result<(), PromptError> {
        for prompt in prompts {
            self.register(*prompt)?;
        }
        Ok(())
    }

    /// Renders the template `name` with the fields of `ctx` as its variables.
    ///
    /// # Errors
    ///
    /// - [`PromptError::Unknown`] when no template has this name;
    /// - [`PromptError::Render`] when rendering fails, for example because the template
    ///   uses a variable `ctx` does not have.
    pub fn render<C: Serialize>(&self, name: &str, ctx: &C) -> Result<RenderedPrompt, PromptError> {
        let registered = self.templates.get(name).ok_or_else(|| PromptError::Unknown { name: name.to_owned() })?;
        let render_error = |source| PromptError::Render {
            name: name.to_owned(),
            origin: match &registered.override_path {
                Some(path) => path.display().to_string(),
                None => "embedded".to_owned(),
            },
            source,
        };
        let template = self.env.get_template(name).map_err(render_error)?;
        let text = template.render(Serde(ctx)).map_err(render_error)?;
        Ok(RenderedPrompt { text, id: registered.id.clone() })
    }

    /// The identity of the registered template `name`.
    #[must_use]
    pub fn id(&self, name: &str) -> Option<&PromptId> {
        self.templates.get(name).map(|registered| &registered.id)
    }

    /// The override file the registered template `name` was read from, if any.
    #[must_use]
    pub fn override_path(&self, name: &str) -> Option<&Path> {
        self.templates.get(name)?.override_path.as_deref()
    }

    fn find_override(&self, name: &str) -> Result<Option<PathBuf>, PromptError> {
        let Some(dir) = &self.override_dir else { return Ok(None) };
        let path = dir.join(format!("{name}.j2"));
        match std::fs::metadata(&path) {
            Ok(_) => Ok(Some(path)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(PromptError::Io { path, source }),
        }
    }

    /// The identities of all registered templates, by name.
    pub fn ids(&self) -> impl Iterator<Item = &PromptId> {
        self.templates.values().map(|registered| &registered.id)
    }

    /// Files `*.j2` in the override directory that replace no registered template,
    /// most likely misspelt names. Call it after registering everything, to warn.
    ///
    /// # Errors
    ///
    /// [`PromptError::Io`] when the directory cannot be listed.
    pub fn unused_overrides(&self) -> Result<Vec<PathBuf>, PromptError> {
        let Some(dir) = &self.override_dir else { return Ok(Vec::new()) };
        let io_error = |source| PromptError::Io { path: dir.clone(), source };
        let mut res = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io_error)? {
            let path = entry.map_err(io_error)?.path();
            let is_template = path.extension().is_some_and(|ext| ext == "j2");
            let stem = path.file_stem().and_then(|stem| stem.to_str()).unwrap_or_default();
            if is_template && !self.templates.contains_key(stem) {
                res.push(path);
            }
        }
        res.sort();
        Ok(res)
    }
}

/// The name and version in a template's `{# prompt: NAME vN #}` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptHeader {
    /// The prompt's name: letters, digits, `_`, `-` and `.`.
    pub name: String,
    /// The version, a positive integer.
    pub version: u32,
}

/// A first line that is not a valid `{# prompt: NAME vN #}` header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The line is not a `{# prompt: NAME vN #}` comment with exactly a name and a version.
    #[error("expected a first line `{{# prompt: NAME vN #}}`, found `{found}`")]
    Malformed {
        /// The first line, trimmed.
        found: String,
    },
    /// The name holds a character other than letters, digits, `_`, `-` and `.`.
    #[error("prompt name `{name}` may only hold letters, digits, `_`, `-` and `.`")]
    InvalidName {
        /// The name in the header.
        name: String,
    },
    /// The version is not `v` followed by a positive integer.
    #[error("version `{version}` is not of the form vN with N ≥ 1")]
    InvalidVersion {
        /// The version as written in the header.
        version: String,
    },
}

/// Parses the header on the first line of a template source.
///
/// # Errors
///
/// A [`HeaderError`] when the first line is not `{# prompt: NAME vN #}` (spaces around
/// the parts are free): [`HeaderError::Malformed`] for another shape,
/// [`HeaderError::InvalidName`] and [`HeaderError::InvalidVersion`] for a bad part.
///
/// # Example
///
/// ```
/// let header = flowmem_llm::parse_header("{# prompt: plan v4 #}\nPlan {{ query }}")?;
/// assert_eq!((header.name.as_str(), header.version), ("plan", 4));
/// # Ok::<(), flowmem_llm::HeaderError>(())
/// ```
pub fn parse_header(source: &str) -> Result<PromptHeader, HeaderError> {
    let first = source.lines().next().unwrap_or_default().trim();
    let malformed = || HeaderError::Malformed { found: first.to_owned() };
    let inner =
        first.strip_prefix("{#").and_then(|rest| rest.strip_suffix("#}")).map(str::trim).ok_or_else(malformed)?;
    let rest = inner.strip_prefix("prompt:").ok_or_else(malformed)?;
    let mut words = rest.split_whitespace();
    let (Some(name), Some(version), None) = (words.next(), words.next(), words.next()) else {
        return Err(malformed());
    };
    let name_ok = name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !name_ok {
        return Err(HeaderError::InvalidName { name: name.to_owned() });
    }
    let version = version
        .strip_prefix('v')
        .and_then(|digits| digits.parse::<u32>().ok())
        .filter(|version| *version > 0)
        .ok_or_else(|| HeaderError::InvalidVersion { version: version.to_owned() })?;
    Ok(PromptHeader { name: name.to_owned(), version })
}

fn source_hash(source: &str) -> String {
    let digest = Sha256::digest(source.as_bytes());
    digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Ctx {
        user: String,
        items: Vec<String>,
    }

    const GREET: EmbeddedPrompt = EmbeddedPrompt {
        name: "greet",
        source: "{# prompt: greet v1 #}\nHello {{ user }}.\n{% for item in items %}\n- {{ item }}\n{% endfor %}\n",
    };

    fn ctx() -> Ctx {
        Ctx { user: "Ada".into(), items: vec!["a".into(), "b".into()] }
    }

    #[test]
    fn renders_without_header_blank_line() {
        let mut prompts = Prompts::new();
        let id = prompts.register(GREET).unwrap().clone();
        let rendered = prompts.render("greet", &ctx()).unwrap();
        assert_eq!(rendered.text, "Hello Ada.\n- a\n- b\n");
        assert_eq!(id.name, "greet");
        assert_eq!(id.version, 1);
        assert_eq!(id.hash.len(), 16);
        assert_eq!(rendered.id, id);
    }

    const CLIPPED: EmbeddedPrompt = EmbeddedPrompt {
        name: "clipped",
        source: "{# prompt: clipped v1 #}\n{% for item in items %}{{ item | clip(budget) }}|{% endfor %}",
    };

    #[test]
    fn clip_cuts_at_the_global_budget_and_says_how_much_is_left_out() {
        let mut prompts = Prompts::new();
        prompts.register(CLIPPED).unwrap();
        let ctx = Ctx { user: String::new(), items: vec!["añbcdef".into(), "xyz".into()] };
        prompts.set_global("budget", &Option::<usize>::None);
        assert_eq!(prompts.render("clipped", &ctx).unwrap().text, "añbcdef|xyz|");
        prompts.set_global("budget", &3);
        assert_eq!(prompts.render("clipped", &ctx).unwrap().text, "añb […4 more characters]|xyz|");
    }

    #[test]
    fn strict_undefined_is_an_error() {
        #[derive(Serialize)]
        struct Partial {
            user: String,
        }
        let mut prompts = Prompts::new();
        prompts.register(GREET).unwrap();
        let err = prompts.render("greet", &Partial { user: "Ada".into() }).unwrap_err();
        assert!(matches!(err, PromptError::Render { .. }), "{err:?}");
        assert!(err.to_string().contains("greet"), "{err}");
        // Attribute access on a missing field is an error too, not an empty string.
        let mut prompts = Prompts::new();
        prompts.register(EmbeddedPrompt { name: "attr", source: "{# prompt: attr v1 #}\n{{ user.nme }}" }).unwrap();
        #[derive(Serialize)]
        struct User {
            name: String,
        }
        #[derive(Serialize)]
        struct Outer {
            user: User,
        }
        let err = prompts.render("attr", &Outer { user: User { name: "x".into() } }).unwrap_err();
        assert!(matches!(err, PromptError::Render { .. }), "{err:?}");
    }

    #[test]
    fn header_parsing() {
        let ok = parse_header("{#prompt:  judge_es   v12#}\nbody").unwrap();
        assert_eq!(ok, PromptHeader { name: "judge_es".into(), version: 12 });
        for bad in ["", "Hello {{ user }}", "{# judge_es v1 #}", "{# prompt: judge_es #}", "{# prompt: judge es v1 #}"]
        {
            let err = parse_header(bad).unwrap_err();
            assert_eq!(err, HeaderError::Malformed { found: bad.trim().to_owned() }, "{bad:?}");
            assert!(err.to_string().starts_with("expected a first line `{# prompt: NAME vN #}`, found `"), "{err}");
        }
        for (bad, version) in [
            ("{# prompt: judge_es 1 #}", "1"),
            ("{# prompt: judge_es v0 #}", "v0"),
            ("{# prompt: judge_es vx #}", "vx"),
        ] {
            assert_eq!(parse_header(bad), Err(HeaderError::InvalidVersion { version: version.to_owned() }), "{bad:?}");
        }
        let err = parse_header("{# prompt: judge/es v1 #}").unwrap_err();
        assert_eq!(err, HeaderError::InvalidName { name: "judge/es".to_owned() });
    }

    #[test]
    fn registration_checks_header() {
        let mut prompts = Prompts::new();
        let err = prompts.register(EmbeddedPrompt { name: "plan", source: "Plan {{ query }}" }).unwrap_err();
        assert!(matches!(err, PromptError::Header { .. }), "{err:?}");
        assert!(err.to_string().contains("embedded prompt `plan`: line 1"), "{err}");
        let err = prompts.register(EmbeddedPrompt { name: "plan", source: "{# prompt: other v1 #}\nx" }).unwrap_err();
        assert!(matches!(err, PromptError::NameMismatch { .. }), "{err:?}");
        let err =
            prompts.register(EmbeddedPrompt { name: "plan", source: "{# prompt: plan v1 #}\n{% if %}" }).unwrap_err();
        assert!(matches!(err, PromptError::Syntax { .. }), "{err:?}");
        assert!(prompts.id("plan").is_none());
    }

    #[test]
    fn duplicate_registration() {
        let mut prompts = Prompts::new();
        prompts.register(GREET).unwrap();
        prompts.register(GREET).unwrap();
        let changed = EmbeddedPrompt { name: "greet", source: "{# prompt: greet v1 #}\nHi" };
        assert!(matches!(prompts.register(changed), Err(PromptError::Duplicate { .. })));
    }

    #[test]
    fn hash_tracks_source() {
        let mut a = Prompts::new();
        let mut b = Prompts::new();
        let id_a = a.register(GREET).unwrap().clone();
        let edited = EmbeddedPrompt { name: "greet", source: "{# prompt: greet v1 #}\nHi {{ user }}" };
        let id_b = b.register(edited).unwrap().clone();
        assert_eq!(id_a.version, id_b.version);
        assert_ne!(id_a.hash, id_b.hash);
    }

    #[test]
    fn override_precedence() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("greet.j2"), "{# prompt: greet v7 #}\nYo {{ user }}!").unwrap();
        std::fs::write(dir.path().join("gret.j2"), "{# prompt: gret v1 #}\nmisspelt").unwrap();
        let other = EmbeddedPrompt { name: "other", source: "{# prompt: other v1 #}\nembedded" };

        let mut prompts = Prompts::with_override_dir(dir.path()).unwrap();
        prompts.register_all(&[GREET, other]).unwrap();
        let greet = prompts.render("greet", &ctx()).unwrap();
        assert_eq!(greet.text, "Yo Ada!");
        assert_eq!(greet.id.version, 7);
        assert_eq!(prompts.override_path("greet"), Some(dir.path().join("greet.j2").as_path()));
        assert_eq!(prompts.override_path("other"), None);
        // Templates without an override file keep the embedded source.
        assert_eq!(prompts.render("other", &ctx()).unwrap().text, "embedded");
        assert_eq!(prompts.unused_overrides().unwrap(), vec![dir.path().join("gret.j2")]);

        // Without the directory the embedded template is used.
        let mut plain = Prompts::new();
        plain.register(GREET).unwrap();
        assert_eq!(plain.render("greet", &ctx()).unwrap().text, "Hello Ada.\n- a\n- b\n");
    }

    #[test]
    fn override_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("greet.j2"), "no header").unwrap();
        let mut prompts = Prompts::with_override_dir(dir.path()).unwrap();
        let err = prompts.register(GREET).unwrap_err();
        assert!(err.to_string().contains("greet.j2: line 1"), "{err}");
        assert!(Prompts::with_override_dir(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn unknown_prompt() {
        let prompts = Prompts::new();
        assert!(matches!(prompts.render("nope", &ctx()), Err(PromptError::Unknown { .. })));
    }
}
