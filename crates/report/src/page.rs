//! The page shell: one base template with the shared stylesheet, filled by each report.

use serde::Serialize;

use crate::escape;

/// The name under which report templates extend the shell: `{% extends "page.html.j2" %}`.
pub const PAGE_TEMPLATE: &str = "page.html.j2";

const PAGE_SOURCE: &str = include_str!("../templates/page.html.j2");

/// A report template that did not render.
///
/// Report templates are compiled into their crates and rendered from typed contexts, so
/// this is a bug in the template or its context, never a problem with the input.
#[derive(Debug, thiserror::Error)]
#[error("the report template `{template}` did not render")]
pub struct ReportError {
    /// The template's name.
    pub template: String,
    /// The template engine's error.
    #[source]
    pub source: minijinja::Error,
}

/// Markup inserted into a page as it is: a chart from this crate, or HTML whose text
/// went through [`escape`].
///
/// Every other string in a page context is escaped by the template engine.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct Markup(minijinja::Value);

impl Markup {
    /// Wraps `markup`, which the caller vouches is well-formed and escaped.
    #[must_use]
    pub fn new(markup: String) -> Markup {
        Markup(minijinja::Value::from_safe_string(markup))
    }
}

/// Renders the report template `source` (named `name`) with `ctx`.
///
/// The template extends [`PAGE_TEMPLATE`], which takes a `title` from the context and
/// has two blocks: `heading` (the `<h1>`, by default the title) and `content`. Every
/// value is HTML-escaped unless it is a [`Markup`], and a variable missing from `ctx` is
/// an error rather than an empty string.
///
/// # Errors
///
/// [`ReportError`] when the template does not parse or does not render with `ctx`.
///
/// # Example
///
/// ```
/// #[derive(serde::Serialize)]
/// struct Ctx<'a> {
///     title: &'a str,
///     who: &'a str,
/// }
///
/// let source = r#"{% extends "page.html.j2" %}{% block content %}<p>Hi {{ who }}</p>{% endblock %}"#;
/// let html = flowmem_report::render_page("hello.html.j2", source, &Ctx { title: "Greeting", who: "<you>" })?;
/// assert!(html.contains("<h1>Greeting</h1>"));
/// assert!(html.contains("<p>Hi &lt;you&gt;</p>"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn render_page<C: Serialize>(name: &str, source: &str, ctx: &C) -> Result<String, ReportError> {
    render_page_with(name, source, &[], ctx)
}

/// [`render_page`] with more templates the page may extend or include, as
/// `(name, source)` pairs: a layout of several pages that itself extends
/// [`PAGE_TEMPLATE`], or a part rendered on its own too.
///
/// # Errors
///
/// [`ReportError`] naming the template that does not parse, or `name` when the page does
/// not render with `ctx`.
///
/// # Example
///
/// ```
/// #[derive(serde::Serialize)]
/// struct Ctx<'a> {
///     title: &'a str,
///     who: &'a str,
/// }
///
/// let layout = r#"{% extends "page.html.j2" %}{% block content %}<nav>home</nav>{% block main %}{% endblock %}{% endblock %}"#;
/// let page = r#"{% extends "layout.html.j2" %}{% block main %}<p>{{ who }}</p>{% endblock %}"#;
/// let html = flowmem_report::render_page_with("p.html.j2", page, &[("layout.html.j2", layout)], &Ctx { title: "T", who: "<b>" })?;
/// assert!(html.contains("<nav>home</nav><p>&lt;b&gt;</p>"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn render_page_with<C: Serialize>(
    name: &str,
    source: &str,
    templates: &[(&str, &str)],
    ctx: &C,
) -> Result<String, ReportError> {
    let error = |source| ReportError { template: name.to_owned(), source };
    let mut env = minijinja::Environment::new();
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_template(PAGE_TEMPLATE, PAGE_SOURCE).map_err(error)?;
    for (other, text) in templates {
        env.add_template(other, text).map_err(|source| ReportError { template: (*other).to_owned(), source })?;
    }
    env.add_template(name, source).map_err(error)?;
    let template = env.get_template(name).map_err(error)?;
    template.render(minijinja::value::Serde(ctx)).map_err(error)
}

/// A page that stands in for a report whose template failed: the error, escaped.
///
/// The functions that return a report as a `String` use it, so a bug in a template
/// shows in the file instead of aborting the run that produced the figures.
#[must_use]
pub fn error_page(err: &ReportError) -> String {
    let text = format!("report template error: {err}: {:#}", err.source);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>report error</title></head><body><pre>{}</pre></body></html>\n",
        escape(&text)
    )
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use crate::{Markup, error_page, render_page};

    #[derive(Serialize)]
    struct Ctx {
        title: String,
        chart: Markup,
    }

    const CHILD: &str = r#"{% extends "page.html.j2" %}{% block content %}<div>{{ chart }}</div>{% endblock %}"#;

    #[test]
    fn the_shell_escapes_the_title_and_keeps_markup() {
        let ctx = Ctx { title: "a < b".to_owned(), chart: Markup::new("<svg></svg>".to_owned()) };
        let html = render_page("child.html.j2", CHILD, &ctx).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
        assert!(html.contains("<title>a &lt; b</title>") && html.contains("<h1>a &lt; b</h1>"), "{html}");
        assert!(html.contains("<div><svg></svg></div>"), "{html}");
        assert!(html.contains("border-collapse"), "the shared stylesheet is in the page");
        assert!(!html.contains("<script") && !html.contains("<link"), "nothing is loaded: {html}");
    }

    #[test]
    fn the_heading_block_can_differ_from_the_title() {
        let source = r#"{% extends "page.html.j2" %}{% block heading %}Other{% endblock %}"#;
        let ctx = Ctx { title: "t".to_owned(), chart: Markup::new(String::new()) };
        let html = render_page("h.html.j2", source, &ctx).unwrap();
        assert!(html.contains("<title>t</title>") && html.contains("<h1>Other</h1>"), "{html}");
    }

    #[test]
    fn a_missing_variable_is_an_error_naming_the_template() {
        let source = r#"{% extends "page.html.j2" %}{% block content %}{{ nowhere }}{% endblock %}"#;
        let ctx = Ctx { title: "t".to_owned(), chart: Markup::new(String::new()) };
        let err = render_page("broken.html.j2", source, &ctx).unwrap_err();
        assert_eq!(err.template, "broken.html.j2");
        let page = error_page(&err);
        assert!(page.contains("broken.html.j2") && page.contains("<pre>"), "{page}");
    }
}
