//! How a value is compared with another value or found in text: the one normalisation
//! data-flow mining and run-time grounding share.
//!
//! - strings are trimmed, lose one leading `#` and are lowercased;
//! - digit grouping is dropped: `1,000`, `1_000` and `1 000` (with a no-break or thin
//!   space) read as `1000`, in strings and in text alike;
//! - numbers print as integers when they are integral (`1000.0` is `1000`);
//! - booleans, null and empty strings have no key: they never match.
//!
//! A key occurs in a text when it is found in the normalised text as a whole token.

use serde_json::Value;

/// The normalised key a scalar is compared by; `None` for values that cannot be matched
/// (booleans, null, empty strings, containers).
pub fn value_key(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => {
            let text = text.trim();
            let text = text.strip_prefix('#').unwrap_or(text).trim();
            if text.is_empty() {
                return None;
            }
            Some(ungroup_digits(&text.to_lowercase()))
        }
        Value::Number(number) => Some(number_text(number)),
        Value::Bool(_) | Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

fn number_text(number: &serde_json::Number) -> String {
    if number.is_i64() || number.is_u64() {
        return number.to_string();
    }
    match number.as_f64() {
        // Integral floats within the exactly representable range print without `.0`.
        Some(float) if float.fract() == 0.0 && float.abs() < 9.0e15 => format!("{}", float as i64),
        Some(float) => format!("{float}"),
        None => number.to_string(),
    }
}

/// A text (a query, a tool result) as [`occurs_in`] searches it: lowercased, digit
/// grouping removed.
pub fn normalise_text(query: &str) -> String {
    ungroup_digits(&query.to_lowercase())
}

/// Drops a `,`, `_`, no-break or thin space between a digit and a group of exactly
/// three digits (`1,000,000` → `1000000`); other separators stay (`1,23`, `1, 234`).
fn ungroup_digits(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut res = String::with_capacity(text.len());
    for (idx, &c) in chars.iter().enumerate() {
        let separator = matches!(c, ',' | '_' | '\u{a0}' | '\u{202f}' | '\u{2009}');
        let grouped = separator
            && idx > 0
            && chars[idx - 1].is_ascii_digit()
            && chars.get(idx + 1..idx + 4).is_some_and(|group| group.iter().all(char::is_ascii_digit))
            && !chars.get(idx + 4).is_some_and(char::is_ascii_digit);
        if !grouped {
            res.push(c);
        }
    }
    res
}

/// Whether `key` (from [`value_key`]) occurs in a text normalised by
/// [`normalise_text`] as a whole token: neither the character before nor the one after
/// is a letter or digit.
///
/// # Example
///
/// ```
/// use flowmem_model::{normalise_text, occurs_in, value_key};
/// use serde_json::json;
///
/// let query = normalise_text("Order #W2378156 cost 1,000 dollars.");
/// assert!(occurs_in(&query, &value_key(&json!("w2378156")).unwrap()));
/// assert!(occurs_in(&query, &value_key(&json!(1000)).unwrap()));
/// assert!(!occurs_in(&query, &value_key(&json!("W237")).unwrap()), "whole tokens only");
/// ```
pub fn occurs_in(normalised_query: &str, key: &str) -> bool {
    let mut from = 0;
    while let Some(offset) = normalised_query[from..].find(key) {
        let start = from + offset;
        let end = start + key.len();
        let before = normalised_query[..start].chars().next_back();
        let after = normalised_query[end..].chars().next();
        if !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric) {
            return true;
        }
        // Step past the first character of this occurrence (keys are never empty).
        from = start + normalised_query[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{normalise_text as normalise_query, occurs_in as find_in_query, value_key as key};

    fn in_query(query: &str, value: serde_json::Value) -> bool {
        find_in_query(&normalise_query(query), &key(&value).unwrap())
    }

    #[test]
    fn query_matching_ignores_case_a_leading_hash_and_digit_grouping() {
        assert!(in_query("You received your order #W2378156 and", json!("#W2378156")));
        assert!(in_query("order #w2378156.", json!("W2378156")));
        assert!(in_query("You are Yusuf Rossi in zip code 19122.", json!("yusuf")));
        assert!(in_query("a budget of 1,000 dollars", json!(1000)));
        assert!(in_query("a budget of 1_000 dollars", json!("1,000")));
        assert!(!in_query("items 1,23 and 1, 234", json!(123)));
        assert!(in_query("pay 12.5 now", json!(12.5)));
        assert!(in_query("it is no longer needed, thanks", json!("no longer needed")));
    }

    #[test]
    fn query_matching_needs_whole_tokens() {
        assert!(!in_query("order W23781567", json!("W2378156")));
        assert!(!in_query("order aW2378156", json!("W2378156")));
        assert!(!in_query("zip 191223", json!(19122)));
        assert!(in_query("zip 191223 or 19122", json!(19122)));
        assert!(key(&json!(true)).is_none() && key(&json!("  ")).is_none() && key(&json!("#")).is_none());
    }
}
