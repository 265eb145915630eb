//! JSON paths as data bindings write them: `$`, then `.name`, `['name']`, `[N]` and
//! `[*]` segments.

use serde_json::Value;

/// The values at `path` in `root`: `$`, then `.name`, `[N]` and `[*]` segments (`[*]`
/// is every element of an array, or every value of an object: mining generalises maps
/// keyed by id so). Objects and arrays at the end are kept whole; a missing step gives
/// nothing.
///
/// # Example
///
/// ```
/// use flowmem_model::values_at;
/// use serde_json::json;
///
/// let order = json!({"items": [{"item_id": "1"}, {"item_id": "2"}], "user": {"id": "u"}});
/// assert_eq!(values_at(&order, "$.items[*].item_id"), [json!("1"), json!("2")]);
/// assert_eq!(values_at(&order, "$.user.id"), [json!("u")]);
/// assert!(values_at(&order, "$.missing").is_empty());
/// ```
pub fn values_at(root: &Value, path: &str) -> Vec<Value> {
    let Some(mut rest) = path.trim().strip_prefix('$') else { return Vec::new() };
    let mut current = vec![root.clone()];
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("[*]") {
            current = current
                .into_iter()
                .flat_map(|value| match value {
                    Value::Array(items) => items,
                    Value::Object(map) => map.into_iter().map(|(_, child)| child).collect(),
                    _ => Vec::new(),
                })
                .collect();
            rest = after;
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else { return Vec::new() };
            let key = &after[..end];
            let key = key.trim_matches(|ch| ch == '\'' || ch == '"');
            current = match key.parse::<usize>() {
                Ok(idx) => current.into_iter().filter_map(|value| value.get(idx).cloned()).collect(),
                Err(_) => current.into_iter().filter_map(|value| value.get(key).cloned()).collect(),
            };
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let key = &after[..end];
            current = current.into_iter().filter_map(|value| value.get(key).cloned()).collect();
            rest = &after[end..];
        } else {
            return Vec::new();
        }
    }
    current
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::values_at;

    #[test]
    fn paths_select_fields_elements_and_every_element() {
        let result = json!({"items": [{"item_id": "1", "product_id": "p"}, {"item_id": "2", "product_id": "p"}],
            "user": {"id": "u"}});
        assert_eq!(values_at(&result, "$.items[*].item_id"), vec![json!("1"), json!("2")]);
        assert_eq!(values_at(&result, "$.items[1].item_id"), vec![json!("2")]);
        assert_eq!(values_at(&result, "$.user.id"), vec![json!("u")]);
        assert_eq!(values_at(&result, "$['user']['id']"), vec![json!("u")]);
        assert_eq!(values_at(&result, "$"), vec![result.clone()]);
        let keyed = json!({"variants": {"84": {"item_id": "84"}, "85": {"item_id": "85"}}});
        assert_eq!(values_at(&keyed, "$.variants[*].item_id"), vec![json!("84"), json!("85")]);
        assert!(values_at(&result, "$.missing.id").is_empty());
        assert!(values_at(&result, "items").is_empty(), "a path starts at $");
    }
}
