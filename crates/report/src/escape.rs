//! Escaping text for HTML and SVG.

/// Escapes `text` for HTML or SVG, in element content and in quoted attributes.
///
/// `&`, `<`, `>`, `"` and `'` become character references; everything else is kept.
///
/// # Example
///
/// ```
/// assert_eq!(flowmem_report::escape(r#"<a href="x">Tom & Jerry's</a>"#),
///            "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;");
/// ```
#[must_use]
pub fn escape(text: &str) -> String {
    let mut res = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => res.push_str("&amp;"),
            '<' => res.push_str("&lt;"),
            '>' => res.push_str("&gt;"),
            '"' => res.push_str("&quot;"),
            '\'' => res.push_str("&#39;"),
            _ => res.push(c),
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use crate::escape;

    #[test]
    fn escapes_the_five_special_characters_and_nothing_else() {
        assert_eq!(escape("<>&\"'"), "&lt;&gt;&amp;&quot;&#39;");
        assert_eq!(escape("τ² retail: a|b"), "τ² retail: a|b");
        assert_eq!(escape(""), "");
    }

    #[test]
    fn escaping_twice_escapes_the_ampersands_again() {
        assert_eq!(escape(&escape("<")), "&amp;lt;");
    }
}
