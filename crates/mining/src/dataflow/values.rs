//! The value-level machinery of data-flow mining: leaves of JSON values under generalised
//! paths, the normalised key two values are compared by, and matching in the query.
//!
//! Normalisation (documented in the module docs of `dataflow`):
//! - strings are trimmed, lose one leading `#` and are lowercased;
//! - digit grouping is dropped: `1,000`, `1_000` and `1 000` (with a no-break or thin
//!   space) read as `1000`, in strings and in the query alike;
//! - numbers print as integers when they are integral (`1000.0` is `1000`);
//! - booleans, null and empty strings have no key: they can only be constants.

use serde_json::Value;

/// One scalar inside a JSON value and its path with every array index generalised to
/// `[*]`.
pub(crate) struct Leaf<'v> {
    pub(crate) path: String,
    pub(crate) value: &'v Value,
}

/// Every scalar leaf of each argument of `args`, in order, under argument paths
/// (`order_id`, `item_ids[*]`, `passengers[*].first_name`).
pub(crate) fn argument_leaves(args: &serde_json::Map<String, Value>) -> Vec<Leaf<'_>> {
    let mut res = Vec::new();
    for (name, value) in args {
        collect(value, &mut name_segment(name, true), &mut res);
    }
    res
}

/// Every scalar leaf of a result under JSON paths rooted at `$` (`$` itself for a scalar
/// result). A string result holding a JSON object or array is parsed first, because MCP
/// tools return their JSON as text.
pub(crate) fn result_leaves(result: &Value) -> Vec<(String, Value)> {
    let parsed;
    let value = match result {
        Value::String(text) if text.trim_start().starts_with(['{', '[']) => match serde_json::from_str(text) {
            Ok(value) => {
                parsed = value;
                &parsed
            }
            Err(_) => result,
        },
        other => other,
    };
    let mut leaves = Vec::new();
    collect(value, &mut "$".to_owned(), &mut leaves);
    leaves.into_iter().map(|leaf| (leaf.path, leaf.value.clone())).collect()
}

fn collect<'v>(value: &'v Value, path: &mut String, res: &mut Vec<Leaf<'v>>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let len = path.len();
                if keyed_by_id(key, child) {
                    path.push_str("[*]");
                } else {
                    path.push_str(&name_segment(key, false));
                }
                collect(child, path, res);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            let len = path.len();
            path.push_str("[*]");
            for item in items {
                collect(item, path, res);
            }
            path.truncate(len);
        }
        scalar => res.push(Leaf { path: path.clone(), value: scalar }),
    }
}

/// Whether `key` is an id in a map of records rather than a field name: it is all digits,
/// or its child is an object with a field of the same value (`variants['8384507844']`
/// holding `"item_id": "8384507844"`, `payment_methods.credit_card_1` holding
/// `"id": "credit_card_1"`). Such keys are generalised to `[*]` like array indices.
pub(crate) fn keyed_by_id(map_key: &str, child: &Value) -> bool {
    if !map_key.is_empty() && map_key.chars().all(|ch| ch.is_ascii_digit()) {
        return true;
    }
    let Some(fields) = child.as_object() else { return false };
    let wanted = key(&Value::String(map_key.to_owned()));
    wanted.is_some() && fields.values().any(|field| key(field) == wanted)
}

/// `.key` for identifier-like keys (`key` at the start of an argument path), else
/// `['key']`.
fn name_segment(key: &str, first: bool) -> String {
    let mut chars = key.chars();
    let identifier = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    match (identifier, first) {
        (true, true) => key.to_owned(),
        (true, false) => format!(".{key}"),
        (false, _) => format!("['{}']", key.replace('\\', "\\\\").replace('\'', "\\'")),
    }
}

/// The normalised key a scalar is compared by; `None` for values that cannot be matched
/// (booleans, null, empty strings, containers).
pub(crate) fn key(value: &Value) -> Option<String> {
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

/// The query as [`find_in_query`] searches it: lowercased, digit grouping removed.
pub(crate) fn normalise_query(query: &str) -> String {
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

/// Whether `key` occurs in the normalised query as a whole token: neither the character
/// before nor the one after is a letter or digit.
pub(crate) fn find_in_query(normalised_query: &str, key: &str) -> bool {
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

    use super::{argument_leaves, find_in_query, key, normalise_query, result_leaves};

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

    #[test]
    fn leaves_generalise_array_indices() {
        let args = json!({"order_id": "#W1", "item_ids": ["1", "2"], "p": [{"first name": "a"}]});
        let mut leaves: Vec<String> = argument_leaves(args.as_object().unwrap()).into_iter().map(|l| l.path).collect();
        leaves.sort();
        assert_eq!(leaves, ["item_ids[*]", "item_ids[*]", "order_id", "p[*]['first name']"]);
        let keyed =
            json!({"variants": {"84": {"item_id": "84"}}, "methods": {"card_1": {"id": "card_1"}}, "k1": {"a": 1}});
        let mut paths: Vec<String> = result_leaves(&keyed).into_iter().map(|(path, _)| path).collect();
        paths.sort();
        assert_eq!(paths, ["$.k1.a", "$.methods[*].id", "$.variants[*].item_id"]);
        let result = json!("{\"items\": [{\"item_id\": \"1\"}, {\"item_id\": \"2\"}], \"user_id\": \"u\"}");
        let paths: Vec<String> = result_leaves(&result).into_iter().map(|(path, _)| path).collect();
        assert_eq!(paths, ["$.items[*].item_id", "$.items[*].item_id", "$.user_id"]);
        assert_eq!(result_leaves(&json!("yusuf_rossi_9620"))[0].0, "$");
        assert_eq!(key(&json!(1000.0)), key(&json!(1000)));
    }
}
