//! The value-level machinery of data-flow mining: leaves of JSON values under generalised
//! paths. Values are compared by [`flowmem_model::value_key`].

use flowmem_model::value_key as key;
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{argument_leaves, result_leaves};
    use flowmem_model::value_key as key;

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
