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
    /// and it is not a common sentence opener (`If Rossi calls`). The words of letters in
    /// a handle are names, capitalised (`mei_kovacs_8020` gives `Mei` and `Kovacs`).
    /// Text spans are the query's quoted strings (`"…"`, `“…”`, `` `…` ``).
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
            // A handle's words of letters are names too: `mei_kovacs_8020` holds `Mei`
            // and `Kovacs`.
            if self == ValueShape::Name
                && let Some(words) = handle_words(&token.text)
            {
                for word in words.into_iter().filter(|word| word.chars().all(char::is_alphabetic)) {
                    push(capitalised(word));
                }
                continue;
            }
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

/// Words that came just before a query-sourced value in the mined records (its left
/// context), and how many values they preceded: `you are` before a first name, `zip
/// code` before a zip code. The executor prefers the spans these words precede
/// ([`anchor_score`]).
///
/// A word `{arg}` stands for the value of the same call's argument `arg`, so a last
/// name's anchor is `{first_name}` whatever the name is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct Anchor {
    /// One or two words, lowercased, in query order.
    pub words: Vec<String>,
    /// How many mined values they preceded.
    pub support: u64,
}

/// The longest left context an [`Anchor`] holds, in words.
pub const ANCHOR_WORDS: usize = 2;

/// The left contexts of the one-word `value`'s occurrences in `query`: for each
/// occurrence, its previous word and its previous two words (fewer at the start),
/// normalised by [`value_key`](crate::value_key). A word equal to the value
/// of one of `others` (`(argument, value)`) is written `{argument}`. Distinct contexts,
/// in order of first occurrence; none for a value of several words.
///
/// # Example
///
/// ```
/// use flowmem_model::left_contexts;
///
/// let query = "You are Yusuf Rossi in zip code 19122.";
/// assert_eq!(left_contexts(query, "Rossi", &[("first_name", "Yusuf")]), [vec!["{first_name}"], vec!["are", "{first_name}"]]);
/// assert_eq!(left_contexts(query, "19122", &[]), [vec!["code"], vec!["zip", "code"]]);
/// ```
#[must_use]
pub fn left_contexts(query: &str, value: &str, others: &[(&str, &str)]) -> Vec<Vec<String>> {
    let target = word_key(value);
    if target.is_empty() || value.trim().contains(char::is_whitespace) {
        return Vec::new();
    }
    let others: Vec<(&str, String)> = others.iter().map(|(arg, value)| (*arg, word_key(value))).collect();
    // The words anchors read, a handle's words standing on their own (`mei_kovacs_8020`
    // reads as `mei kovacs 8020`), and where the value occurs among them: as a word, or
    // as a whole handle (at its first word).
    let mut keys: Vec<String> = Vec::new();
    let mut found: Vec<usize> = Vec::new();
    for token in tokens(query) {
        if word_key(&token.text) == target {
            found.push(keys.len());
        }
        match handle_words(&token.text) {
            Some(words) => keys.extend(words.into_iter().map(word_key)),
            None => keys.push(word_key(&token.text)),
        }
    }
    found.extend(keys.iter().enumerate().filter(|(_, key)| **key == target).map(|(idx, _)| idx));
    found.sort_unstable();
    found.dedup();
    let words: Vec<String> = keys
        .iter()
        .map(|key| match others.iter().find(|(_, other)| !other.is_empty() && other == key) {
            Some((arg, _)) => format!("{{{arg}}}"),
            None => key.clone(),
        })
        .collect();
    let mut res: Vec<Vec<String>> = Vec::new();
    for idx in found {
        for n in 1..=ANCHOR_WORDS.min(idx) {
            let context = words[idx - n..idx].to_vec();
            if !res.contains(&context) {
                res.push(context);
            }
        }
    }
    res
}

/// How strongly `anchors` point at `span` in `query`: the summed support of the anchors
/// found just before one of its occurrences, with `resolved` (`(argument, value)`, the
/// values already chosen for the call's other arguments) standing in for `{argument}`
/// words. 0 when none is found.
///
/// # Example
///
/// ```
/// use flowmem_model::{Anchor, anchor_score};
///
/// let anchors = [Anchor { words: vec!["you".into(), "are".into()], support: 22 }];
/// let query = "Known info: You are Yusuf Rossi, living in Texas.";
/// assert_eq!(anchor_score(query, "Yusuf", &anchors, &[]), 22);
/// assert_eq!(anchor_score(query, "Texas", &anchors, &[]), 0);
/// ```
#[must_use]
pub fn anchor_score(query: &str, span: &str, anchors: &[Anchor], resolved: &[(&str, &str)]) -> u64 {
    let contexts = left_contexts(query, span, resolved);
    anchors.iter().filter(|anchor| contexts.contains(&anchor.words)).map(|anchor| anchor.support).sum()
}

/// The words of `query` as route cues compare them: lowercased runs of letters and
/// digits (`exchange/return` is two words).
///
/// # Example
///
/// ```
/// use flowmem_model::query_words;
///
/// let words = query_words("You want to Exchange/return order #W123.");
/// assert!(words.contains("exchange") && words.contains("return") && words.contains("w123"));
/// ```
#[must_use]
pub fn query_words(query: &str) -> std::collections::BTreeSet<String> {
    query.split(|ch: char| !ch.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase).collect()
}

/// A word as anchors compare it: its [`value_key`](crate::value_key), the normalisation
/// mining and grounding share (empty for a word with no key).
fn word_key(text: &str) -> String {
    crate::value_key(&Value::String(text.to_owned())).unwrap_or_default()
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

/// The words of a handle such as a user id (`mei_kovacs_8020`): words of letters or of
/// digits joined by single `_`, at least two of them of letters. `None` for any other
/// token.
fn handle_words(text: &str) -> Option<Vec<&str>> {
    let words: Vec<&str> = text.split('_').collect();
    let letters = |word: &&str| word.chars().all(char::is_alphabetic);
    let digits = |word: &&str| word.chars().all(|ch| ch.is_ascii_digit());
    let well_formed = words.iter().all(|word| !word.is_empty() && (letters(word) || digits(word)));
    (well_formed && words.iter().filter(|word| letters(word)).count() >= 2).then_some(words)
}

/// `word` with its first letter in upper case.
fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|first| first.to_uppercase().chain(chars).collect()).unwrap_or_default()
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
    fn left_contexts_name_the_other_arguments_and_anchors_score_the_spans_they_precede() {
        let query = "Known info: You are Yusuf Rossi in zipcode 19,122. Rossi's friend lives in Texas.";
        let others = [("first_name", "yusuf"), ("zip", "19122")];
        assert_eq!(super::left_contexts(query, "Rossi", &others), [vec!["{first_name}"], vec!["are", "{first_name}"]]);
        assert_eq!(super::left_contexts(query, "19122", &[]), [vec!["zipcode"], vec!["in", "zipcode"]]);
        assert_eq!(super::left_contexts(query, "Texas", &others), [vec!["in"], vec!["lives", "in"]]);
        assert_eq!(super::left_contexts(query, "Known", &[]), Vec::<Vec<String>>::new(), "nothing before it");
        assert!(super::left_contexts(query, "no such", &[]).is_empty());
        let anchor = |words: &[&str], support| super::Anchor {
            words: words.iter().map(|word| (*word).to_owned()).collect(),
            support,
        };
        let anchors = [anchor(&["you", "are"], 20), anchor(&["{first_name}"], 24), anchor(&["in"], 2)];
        assert_eq!(super::anchor_score(query, "Yusuf", &anchors, &[]), 20);
        // `{first_name}` only stands for a first name once one is chosen.
        assert_eq!(super::anchor_score(query, "Rossi", &anchors, &[]), 0);
        assert_eq!(super::anchor_score(query, "Rossi", &anchors, &[("first_name", "Yusuf")]), 24);
        assert_eq!(super::anchor_score(query, "Texas", &anchors, &[("first_name", "Yusuf")]), 2);
        assert_eq!(super::anchor_score(query, "19122", &anchors, &[]), 0);
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

    /// A handle's words of letters are names, and anchors read its words one by one: the
    /// first name follows `you are`, the last name follows the first.
    #[test]
    fn a_handle_holds_names_that_anchors_read_word_by_word() {
        let query = "Known info: You are mei_kovacs_8020 living in zipcode 28236. Pay with credit_card_12.";
        assert_eq!(ValueShape::Name.spans(query), ["Mei", "Kovacs", "Credit", "Card"]);
        assert_eq!(ValueShape::Id.spans(query), ["mei_kovacs_8020", "credit_card_12"]);
        let you_are = [vec!["are".to_owned()], vec!["you".to_owned(), "are".to_owned()]];
        assert_eq!(super::left_contexts(query, "Mei", &[]), you_are);
        assert_eq!(super::left_contexts(query, "mei_kovacs_8020", &[]), you_are);
        assert_eq!(
            super::left_contexts(query, "Kovacs", &[("first_name", "Mei")]),
            [vec!["{first_name}".to_owned()], vec!["are".to_owned(), "{first_name}".to_owned()]]
        );
        // Not handles: one word of letters, an empty word, other characters.
        for text in ["paypal_9497703", "mei__kovacs", "mei_kovacs-2", "_mei_kovacs"] {
            assert!(super::handle_words(text).is_none(), "{text}");
        }
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
