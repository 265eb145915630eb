//! Canonical JSON: the form in which two tool-call argument objects are compared.
//!
//! serde_json keeps object keys in insertion order across this workspace (llguidance
//! switches on `preserve_order`), so the canonical form sorts keys itself.

use serde_json::Value;

/// Renders `value` as canonical JSON text.
///
/// Object keys are sorted, no whitespace is emitted, and a number with an integral value
/// is written as an integer, so `1`, `1.0` and `1e0` all render as `1`.
///
/// # Example
///
/// ```
/// use flowmem_model::canonical_json;
/// let a = serde_json::json!({"b": 1.0, "a": [true, null]});
/// assert_eq!(canonical_json(&a), r#"{"a":[true,null],"b":1}"#);
/// ```
#[must_use]
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Whether two JSON values are equal up to key order and numeric representation.
#[must_use]
pub fn canonical_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| canonical_eq(x, y))
        }
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len() && xs.iter().all(|(key, x)| ys.get(key).is_some_and(|y| canonical_eq(x, y)))
        }
        _ => a == b,
    }
}

fn numbers_equal(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    // Comparing canonical texts keeps equality and `canonical_json` in exact agreement.
    let (mut a, mut b) = (String::new(), String::new());
    write_number(x, &mut a);
    write_number(y, &mut b);
    a == b
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => {
            // serde_json's compact rendering of scalars is already canonical.
            out.push_str(&value.to_string());
        }
        Value::Number(number) => write_number(number, out),
        Value::Array(items) => {
            out.push('[');
            for (idx, item) in items.iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (idx, key) in keys.into_iter().enumerate() {
                if idx > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn write_number(number: &serde_json::Number, out: &mut String) {
    if number.is_i64() || number.is_u64() {
        out.push_str(&number.to_string());
        return;
    }
    // Invariant: a serde_json number that is not an integer is a finite f64.
    let float = number.as_f64().unwrap_or(f64::NAN);
    if float.fract() == 0.0 && float.abs() < 9.007_199_254_740_992e15 {
        // Integral floats within f64's exact-integer range print as integers.
        out.push_str(&format!("{}", float as i64));
    } else {
        out.push_str(&number.to_string());
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use crate::canonical::{canonical_eq, canonical_json};

    fn check(a: Value, b: Value, equal: bool) {
        assert_eq!(canonical_eq(&a, &b), equal, "{a} vs {b}");
        assert_eq!(canonical_json(&a) == canonical_json(&b), equal, "{a} vs {b}");
    }

    #[test]
    fn key_order_does_not_matter() {
        check(json!({"a": 1, "b": {"c": 2, "d": 3}}), json!({"b": {"d": 3, "c": 2}, "a": 1}), true);
    }

    #[test]
    fn integral_floats_equal_integers() {
        check(json!({"n": 1}), json!({"n": 1.0}), true);
        check(json!([-3]), json!([-3.0]), true);
        check(json!({"n": 1}), json!({"n": 1.5}), false);
    }

    #[test]
    fn strings_are_not_numbers() {
        check(json!({"n": "1"}), json!({"n": 1}), false);
    }

    #[test]
    fn array_order_matters() {
        check(json!([1, 2]), json!([2, 1]), false);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            "[a-z]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-e]{1,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Rebuilds `value` with object keys in reverse order and integers written as floats.
    fn reshuffle(value: &Value) -> Value {
        match value {
            Value::Number(n) if n.is_i64() => json!(n.as_i64().unwrap_or(0) as f64),
            Value::Array(items) => Value::Array(items.iter().map(reshuffle).collect()),
            Value::Object(map) => Value::Object(map.iter().rev().map(|(k, v)| (k.clone(), reshuffle(v))).collect()),
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn equal_to_itself(value in arb_json()) {
            prop_assert!(canonical_eq(&value, &value));
        }

        #[test]
        fn invariant_under_reordering_and_float_integers(value in arb_json()) {
            let other = reshuffle(&value);
            prop_assert!(canonical_eq(&value, &other));
            prop_assert_eq!(canonical_json(&value), canonical_json(&other));
        }

        #[test]
        fn equality_agrees_with_canonical_text(a in arb_json(), b in arb_json()) {
            prop_assert_eq!(canonical_eq(&a, &b), canonical_json(&a) == canonical_json(&b));
        }

        #[test]
        fn canonical_text_parses_back_equal(value in arb_json()) {
            let parsed: Value = serde_json::from_str(&canonical_json(&value)).unwrap();
            prop_assert!(canonical_eq(&value, &parsed));
        }

        #[test]
        fn symmetric(a in arb_json(), b in arb_json()) {
            prop_assert_eq!(canonical_eq(&a, &b), canonical_eq(&b, &a));
        }
    }
}
