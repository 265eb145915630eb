//! Data-flow grounding of tool arguments: a tool node whose arguments carry mined
//! bindings ([`ArgBinding`]) takes their values from the run's context instead of
//! leaving them to the model.
//!
//! For each bound argument the sources are tried in order of support; the first that
//! yields values gives the candidates: an upstream node's latest result at a JSON path
//! (`$.items[*].item_id` gives every element), or a constant. One candidate is used as
//! it is; several are offered to the model as a JSON Schema `enum` on that argument;
//! none leaves the argument to the model, marked ungrounded. Query-sourced and
//! argument-sourced bindings give no candidates here yet.

use serde_json::Value;

use flowmem_model::{ArgBinding, ValueSource};

/// How a run grounds tool arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Grounding {
    /// The model writes every argument.
    Off,
    /// Bound arguments take their values from the context (the default).
    #[default]
    Bindings,
}

/// The candidates of one bound argument.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidates {
    pub arg: String,
    /// The source that gave them, for the observation.
    pub source: String,
    pub values: Vec<Value>,
}

/// The values at `path` in `root`: `$`, then `.name`, `[N]` and `[*]` segments.
/// Objects and arrays at the end are kept whole; a missing step gives nothing.
pub(crate) fn values_at(root: &Value, path: &str) -> Vec<Value> {
    let Some(mut rest) = path.trim().strip_prefix('$') else { return Vec::new() };
    let mut current = vec![root.clone()];
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("[*]") {
            current = current.into_iter().flat_map(|value| value.as_array().cloned().unwrap_or_default()).collect();
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

/// The candidates `binding` gives in a context where `output_of(node)` is the latest
/// output of an upstream node; `None` when no source gives any.
pub(crate) fn candidates<'a>(
    arg: &str,
    binding: &ArgBinding,
    output_of: impl Fn(&str) -> Option<&'a str>,
) -> Option<Candidates> {
    for source in &binding.sources {
        let (label, mut values) = match &source.source {
            ValueSource::Result { node, path } => {
                let Some(output) = output_of(node) else { continue };
                let Ok(result) = serde_json::from_str::<Value>(output) else { continue };
                (format!("result of {node} at {path}"), values_at(&result, path))
            }
            ValueSource::Constant { value } => ("constant".to_owned(), vec![value.clone()]),
            ValueSource::Query | ValueSource::Argument { .. } => continue,
        };
        values.retain(|value| !value.is_null());
        let mut unique: Vec<Value> = Vec::with_capacity(values.len());
        for value in values {
            if !unique.contains(&value) {
                unique.push(value);
            }
        }
        if !unique.is_empty() {
            return Some(Candidates { arg: arg.to_owned(), source: label, values: unique });
        }
    }
    None
}

/// `schema` (a tool's parameters) with each argument of `fixed` removed (the executor
/// fills it) and each argument of `offered` limited to its candidates.
pub(crate) fn constrained_schema(schema: &Value, fixed: &[&Candidates], offered: &[&Candidates]) -> Value {
    let mut schema = schema.clone();
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for candidates in fixed {
            properties.remove(&candidates.arg);
        }
        for candidates in offered {
            if let Some(property) = properties.get_mut(&candidates.arg).and_then(Value::as_object_mut) {
                property.insert("enum".to_owned(), Value::Array(candidates.values.clone()));
            }
        }
    }
    if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|name| !fixed.iter().any(|candidates| name.as_str() == Some(candidates.arg.as_str())));
    }
    schema
}

/// The required parameters of a tool schema.
pub(crate) fn required(schema: &Value) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use flowmem_model::{ArgBinding, BindingSource, ValueSource};

    use super::{candidates, constrained_schema, values_at};

    #[test]
    fn paths_select_fields_elements_and_every_element() {
        let result = json!({"items": [{"item_id": "1", "product_id": "p"}, {"item_id": "2", "product_id": "p"}],
            "user": {"id": "u"}});
        assert_eq!(values_at(&result, "$.items[*].item_id"), vec![json!("1"), json!("2")]);
        assert_eq!(values_at(&result, "$.items[1].item_id"), vec![json!("2")]);
        assert_eq!(values_at(&result, "$.user.id"), vec![json!("u")]);
        assert_eq!(values_at(&result, "$['user']['id']"), vec![json!("u")]);
        assert_eq!(values_at(&result, "$"), vec![result.clone()]);
        assert!(values_at(&result, "$.missing.id").is_empty());
        assert!(values_at(&result, "items").is_empty(), "a path starts at $");
    }

    #[test]
    fn the_first_source_with_values_gives_deduplicated_candidates() {
        let binding = ArgBinding {
            observed: 4,
            sources: vec![
                BindingSource { source: ValueSource::Result { node: "absent".into(), path: "$.x".into() }, support: 3 },
                BindingSource {
                    source: ValueSource::Result { node: "order".into(), path: "$.items[*].product_id".into() },
                    support: 2,
                },
                BindingSource { source: ValueSource::Constant { value: json!("c") }, support: 1 },
            ],
        };
        let output = json!({"items": [{"product_id": "p1"}, {"product_id": "p1"}, {"product_id": "p2"}]}).to_string();
        let found = candidates("product_id", &binding, |node| (node == "order").then_some(output.as_str())).unwrap();
        assert_eq!(found.values, vec![json!("p1"), json!("p2")]);
        assert_eq!(found.source, "result of order at $.items[*].product_id");
        let constant = candidates("product_id", &binding, |_| None).unwrap();
        assert_eq!(constant.values, vec![json!("c")]);
        let schema = json!({"type": "object", "properties": {"product_id": {"type": "string"}, "order_id": {"type": "string"}},
            "required": ["product_id", "order_id"]});
        let fixed = candidates(
            "order_id",
            &ArgBinding {
                observed: 1,
                sources: vec![BindingSource { source: ValueSource::Constant { value: json!("#W1") }, support: 1 }],
            },
            |_| None,
        )
        .unwrap();
        let constrained = constrained_schema(&schema, &[&fixed], &[&found]);
        assert_eq!(constrained["properties"]["product_id"]["enum"], json!(["p1", "p2"]));
        assert!(constrained["properties"].get("order_id").is_none());
        assert_eq!(constrained["required"], json!(["product_id"]));
    }
}
