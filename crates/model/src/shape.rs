//! The shape of a value taken from a query, and the spans of a query that have it.
//!
//! Mining records the shape of the query-sourced values of each argument
//! ([`ValueSource::Query`](crate::ValueSource::Query)); at run time the executor offers
//! the spans of the new query with that shape as the argument's candidates.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a query-sourced value looks like.
///
/// Classification ([`ValueShape::of`]) looks at the value's text, trimmed:
/// - `email`: one token with text before an `@` and a dot after it;
/// - `number`: digits with an optional sign and decimal part, digit grouping allowed
///   (`1,000`); JSON numbers are numbers;
/// - `id`: one token of letters, digits and `_ # - . /` that holds a digit, an
///   underscore or a leading `#` (`#W2378156`, `yusuf_rossi_9620`, `HAT170`);
/// - `name`: one word of letters (and `-` or `'`) starting with a capital (`Yusuf`);
/// - `text`: anything else, a lowercase word or a phrase.
///
/// # Example
///
/// ```
/// use flowmem_model::ValueShape;
/// use serde_json::json;
///
/// assert_eq!(ValueShape::of(&json!("#W2378156")), Some(ValueShape::Id));
/// let query = "You are Yusuf Rossi in zip code 19122. Your order is #W2378156.";
/// assert_eq!(ValueShape::Number.spans(query), ["19122"]);
/// assert_eq!(ValueShape::Name.spans(query), ["Yusuf", "Rossi"]);
/// assert_eq!(ValueShape::Id.spans(query), ["#W2378156"]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ValueShape {
    /// An email address.
    Email,
    /// A number, possibly written with digit grouping.
    Number,
    /// An identifier: letters and digits, underscores, a leading `#`.
    Id,
    /// A capitalised word, such as a first or last name.
    Name,
    /// Free text; only the query's quoted strings are its spans.
    Text,
}

impl std::fmt::Display for ValueShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ValueShape::Email => "email",
            ValueShape::Number => "number",
            ValueShape::Id => "id",
            ValueShape::Name => "name",
            ValueShape::Text => "text",
        })
    }
}

/// Capitalised words that open sentences and are no names, for [`ValueShape::spans`].
const SENTENCE_WORDS: &[&str] = &[
    "A", "Also", "An", "And", "As", "At", "But", "Dear", "For", "He", "Hello", "Hi", "I", "If", "In", "It", "My",
    "Now", "On", "Or", "Our", "Please", "She", "So", "Then", "The", "They", "This", "We", "When", "You", "Your",
];

/// Punctuation a token loses at either end before it is classified.
const EDGE_PUNCTUATION: &[char] = &[
    '.', ',', ';', ':', '!', '?', '(', ')', '[', ']', '{', '}', '"', '\'', '`', '“', '”', '‘', '’', '«', '»', '„', '<',
    '>',
];

impl ValueShape {
    /// The shape of `value`; `None` for booleans, nulls, containers and blank strings.
    #[must_use]
    pub fn of(value: &Value) -> Option<ValueShape> {
        match value {
            Value::Number(_) => Some(ValueShape::Number),
            Value::String(text) => ValueShape::of_text(text),
            Value::Bool(_) | Value::Null | Value::Array(_) | Value::Object(_) => None,
        }
    }

    fn of_text(text: &str) -> Option<ValueShape> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        if text.contains(char::is_whitespace) {
            return Some(ValueShape::Text);
        }
        if is_email(text) {
            Some(ValueShape::Email)
        } else if ungrouped_number(text).is_some() {
            Some(ValueShape::Number)
        } else if is_id(text) {
            Some(ValueShape::Id)
        } else if is_name(text) {
            Some(ValueShape::Name)
        } else {
            Some(ValueShape::Text)
        }
    }

    /// The distinct spans of `query` with this shape, in order of first occurrence.
    /// Numbers lose their digit grouping. A capitalised word that starts a sentence is a
    /// name only when it also occurs mid-sentence, or a name follows it (`Yusuf Rossi`)
    /// and it is not a common sentence opener (`If Rossi calls`). Text spans are the query's quoted strings (`"…"`, `“…”`,
    /// `` `…` ``).
    #[must_use]
    pub fn spans(self, query: &str) -> Vec<String> {
        let mut res: Vec<String> = Vec::new();
        let mut push = |span: String| {
            if !span.is_empty() && !res.contains(&span) {
                res.push(span);
            }
        };
        if self == ValueShape::Text {
            for span in quoted(query) {
                push(span.trim().to_owned());
            }
            return res;
        }
        let tokens = tokens(query);
        for (idx, token) in tokens.iter().enumerate() {
            if ValueShape::of_text(&token.text) != Some(self) {
                continue;
            }
            match self {
                ValueShape::Number => push(ungrouped_number(&token.text).unwrap_or_default()),
                ValueShape::Name => {
                    let mid_sentence = |t: &Token| !t.starts_sentence && t.text == token.text;
                    let full_name = !SENTENCE_WORDS.contains(&token.text.as_str())
                        && tokens.get(idx + 1).is_some_and(|next| {
                            !next.starts_sentence && ValueShape::of_text(&next.text) == Some(ValueShape::Name)
                        });
                    if !token.starts_sentence || full_name || tokens.iter().any(mid_sentence) {
                        push(token.text.clone());
                    }
                }
                _ => push(token.text.clone()),
            }
        }
        res
    }
}

/// One whitespace-separated word of a query, without its edge punctuation.
struct Token {
    text: String,
    /// It is the first word, or the word before it ends a sentence.
    starts_sentence: bool,
}

fn tokens(query: &str) -> Vec<Token> {
    let mut res = Vec::new();
    let mut starts_sentence = true;
    for raw in query.split_whitespace() {
        // A leading `#` belongs to an id; other edge punctuation does not.
        let text = raw.trim_matches(EDGE_PUNCTUATION);
        let text =
            if raw.trim_start_matches(EDGE_PUNCTUATION).starts_with('#') { text } else { text.trim_start_matches('#') };
        if !text.is_empty() {
            res.push(Token { text: text.to_owned(), starts_sentence });
        }
        let end = raw.trim_end_matches(['"', '\'', ')', '”', '’']);
        starts_sentence = end.ends_with(['.', '!', '?', ':']) || (text.is_empty() && starts_sentence);
    }
    res
}

fn quoted(query: &str) -> Vec<&str> {
    let mut res = Vec::new();
    for (open, close) in [('"', '"'), ('“', '”'), ('`', '`')] {
        let mut rest = query;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else { break };
            res.push(&after[..end]);
            rest = &after[end + close.len_utf8()..];
        }
    }
    res
}

fn is_email(text: &str) -> bool {
    let Some((local, domain)) = text.split_once('@') else { return false };
    !local.is_empty()
        && domain.split_once('.').is_some_and(|(host, tld)| !host.is_empty() && !tld.is_empty())
        && !domain.contains('@')
}

/// `text` as a plain number (sign, digits, an optional decimal part), with digit
/// grouping by `,` or `_` removed; `None` when it is not one.
fn ungrouped_number(text: &str) -> Option<String> {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let groups: Vec<&str> = whole.split([',', '_']).collect();
    let grouped_ok = groups.len() == 1
        || (!groups[0].is_empty() && groups[0].len() <= 3 && groups[1..].iter().all(|group| group.len() == 3));
    let digits = |part: &str| !part.is_empty() && part.chars().all(|ch| ch.is_ascii_digit());
    if !grouped_ok || !groups.iter().all(|group| digits(group)) || fraction.is_some_and(|part| !digits(part)) {
        return None;
    }
    let mut res = String::with_capacity(text.len());
    if text.starts_with('-') {
        res.push('-');
    }
    res.extend(groups);
    if let Some(fraction) = fraction {
        res.push('.');
        res.push_str(fraction);
    }
    Some(res)
}

fn is_id(text: &str) -> bool {
    let allowed = text.chars().all(|ch| ch.is_alphanumeric() || matches!(ch, '_' | '#' | '-' | '.' | '/'));
    let marked = text.starts_with('#') || text.contains('_') || text.chars().any(|ch| ch.is_ascii_digit());
    allowed && marked && text.chars().any(char::is_alphanumeric) && !text.chars().skip(1).any(|ch| ch == '#')
}

fn is_name(text: &str) -> bool {
    text.chars().next().is_some_and(char::is_uppercase)
        && text.chars().all(|ch| ch.is_alphabetic() || matches!(ch, '-' | '\''))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::ValueShape;

    #[test]
    fn values_are_classified_by_their_text() {
        let cases = [
            (json!("yusuf.rossi@example.com"), ValueShape::Email),
            (json!("19122"), ValueShape::Number),
            (json!("1,000.50"), ValueShape::Number),
            (json!(-3), ValueShape::Number),
            (json!("#W2378156"), ValueShape::Id),
            (json!("yusuf_rossi_9620"), ValueShape::Id),
            (json!("HAT170"), ValueShape::Id),
            (json!("Yusuf"), ValueShape::Name),
            (json!("O'Brien"), ValueShape::Name),
            (json!("economy"), ValueShape::Text),
            (json!("no longer needed"), ValueShape::Text),
            (json!("1,23"), ValueShape::Text),
        ];
        for (value, shape) in cases {
            assert_eq!(ValueShape::of(&value), Some(shape), "{value}");
        }
        assert_eq!(ValueShape::of(&json!(true)), None);
        // Multi-byte characters anywhere are fine.
        assert_eq!(ValueShape::of(&json!("é1")), Some(ValueShape::Id));
        assert_eq!(ValueShape::of(&json!("Zoë")), Some(ValueShape::Name));
        assert!(ValueShape::Id.spans("commande «é1» — №7 ü2").contains(&"é1".to_owned()));
        assert_eq!(ValueShape::of(&json!("  ")), None);
    }

    #[test]
    fn spans_of_each_shape_are_found_in_a_query() {
        let query = "You received order #W2378156 (and #W1). If it costs 1,200 dollars, email me at \
                     a.b@example.com. Yusuf Rossi lives at 19122; Rossi said \"no longer needed\" twice.";
        assert_eq!(ValueShape::Id.spans(query), ["#W2378156", "#W1"]);
        assert_eq!(ValueShape::Number.spans(query), ["1200", "19122"]);
        assert_eq!(ValueShape::Email.spans(query), ["a.b@example.com"]);
        // `You` and `If` only start sentences; `Yusuf` does too, but a name follows it.
        assert_eq!(ValueShape::Name.spans(query), ["Yusuf", "Rossi"]);
        assert_eq!(ValueShape::Name.spans("If Rossi calls, tell Rossi."), ["Rossi"]);
        assert!(ValueShape::Name.spans("If it rains. You stay.").is_empty());
        assert_eq!(ValueShape::Text.spans(query), ["no longer needed"]);
        assert!(ValueShape::Text.spans("no quotes here").is_empty());
    }

    proptest::proptest! {
        /// Any text, in any script, classifies and splits into spans without a panic,
        /// and every span has the shape asked for (text spans are quoted, not shaped).
        #[test]
        fn any_text_gives_spans_of_the_shape_asked_for(text in "\\PC{0,80}") {
            for shape in [ValueShape::Email, ValueShape::Number, ValueShape::Id, ValueShape::Name, ValueShape::Text] {
                for span in shape.spans(&text) {
                    if shape != ValueShape::Text {
                        proptest::prop_assert_eq!(ValueShape::of(&serde_json::Value::String(span.clone())), Some(shape), "{}", span);
                    }
                }
            }
        }
    }
}
