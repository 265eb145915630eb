//! One tool invocation, as logged, replayed or scored.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::JsonObject;
use crate::canonical::{canonical_eq, canonical_json};

/// One tool invocation: the tool's name, its arguments and, once run, its outcome.
///
/// Two calls are the *same call* for scoring ([`ToolCall::same_call`]) when the tool names
/// are equal and the arguments are equal as canonical JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCall {
    /// The tool's name, as the tool server exposes it.
    pub tool: String,
    /// The arguments, always a JSON object (the OpenAI string form is parsed on import).
    #[serde(default)]
    pub args: JsonObject,
    /// The tool's result, when the call returned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error, when the call failed (a transport failure or an error result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Wall time of the call in milliseconds, when it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// The call id of the source log (for example OpenAI's `tool_call_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// On a reference call: the only argument names that scoring compares.
    ///
    /// τ²-bench gives this per action as `compare_args`; `None` compares every argument.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare_args: Option<Vec<String>>,
}

/// Arguments that are not a JSON object, or a JSON string that does not parse as one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArgsError {
    /// The arguments were a string that is not valid JSON.
    #[error("arguments are a string that is not valid JSON")]
    NotJson(#[source] serde_json::Error),
    /// The arguments were valid JSON of another type than object.
    #[error("arguments must be a JSON object, found {found}")]
    NotAnObject {
        /// The JSON type found instead, such as `array`.
        found: &'static str,
    },
}

impl ToolCall {
    /// Builds a call from a tool name and arguments that must be a JSON object (or null,
    /// meaning no arguments).
    ///
    /// # Errors
    ///
    /// [`ArgsError::NotAnObject`] when `args` is neither an object nor null.
    pub fn new(tool: impl Into<String>, args: Value) -> Result<ToolCall, ArgsError> {
        Ok(ToolCall::with_args(tool, arguments_object(args)?))
    }

    /// A call not yet run: a tool name and its arguments, with no outcome, latency or ids.
    #[must_use]
    pub fn with_args(tool: impl Into<String>, args: JsonObject) -> ToolCall {
        ToolCall {
            tool: tool.into(),
            args,
            result: None,
            error: None,
            latency_ms: None,
            call_id: None,
            compare_args: None,
        }
    }

    /// Builds a call from the OpenAI wire form, where arguments may be a JSON *string*
    /// holding an object. An empty string means no arguments.
    ///
    /// # Errors
    ///
    /// [`ArgsError::NotJson`] when the string does not parse, and
    /// [`ArgsError::NotAnObject`] when the arguments are not an object.
    pub fn from_wire(tool: impl Into<String>, args: Value) -> Result<ToolCall, ArgsError> {
        match args {
            Value::String(text) => Ok(ToolCall::with_args(tool, wire_arguments(&text)?)),
            other => ToolCall::new(tool, other),
        }
    }

    /// Whether `self` and `other` are the same call: equal names, canonically equal args.
    ///
    /// When either call carries [`compare_args`](ToolCall::compare_args), only those
    /// argument names are compared.
    #[must_use]
    pub fn same_call(&self, other: &ToolCall) -> bool {
        if self.tool != other.tool {
            return false;
        }
        match self.compare_args.as_ref().or(other.compare_args.as_ref()) {
            None => canonical_eq(&Value::Object(self.args.clone()), &Value::Object(other.args.clone())),
            Some(names) => names.iter().all(|name| match (self.args.get(name), other.args.get(name)) {
                (Some(a), Some(b)) => canonical_eq(a, b),
                (None, None) => true,
                _ => false,
            }),
        }
    }

    /// The key under which equal calls collide: tool name plus canonical arguments.
    ///
    /// It ignores [`compare_args`](ToolCall::compare_args); use [`ToolCall::same_call`]
    /// when a reference restricts the compared arguments.
    #[must_use]
    pub fn canonical_key(&self) -> String {
        format!("{}{}", self.tool, canonical_json(&Value::Object(self.args.clone())))
    }

    /// Whether the call ran and failed.
    #[must_use]
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }
}

/// Parses arguments in the OpenAI wire form: a string holding a JSON object. A blank
/// string or `null` means no arguments.
///
/// # Errors
///
/// [`ArgsError::NotJson`] when the string does not parse, and
/// [`ArgsError::NotAnObject`] when it holds another JSON value than an object.
///
/// # Example
///
/// ```
/// use flowmem_model::{ArgsError, wire_arguments};
/// assert_eq!(wire_arguments(r#"{"id": 7}"#)?["id"], 7);
/// assert!(wire_arguments(" ")?.is_empty());
/// assert!(matches!(wire_arguments("[7]"), Err(ArgsError::NotAnObject { found: "array" })));
/// # Ok::<(), ArgsError>(())
/// ```
pub fn wire_arguments(raw: &str) -> Result<JsonObject, ArgsError> {
    if raw.trim().is_empty() {
        return Ok(JsonObject::new());
    }
    arguments_object(serde_json::from_str(raw).map_err(ArgsError::NotJson)?)
}

/// Arguments as an object: an object as it is, `null` as no arguments.
fn arguments_object(args: Value) -> Result<JsonObject, ArgsError> {
    match args {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(JsonObject::new()),
        other => Err(ArgsError::NotAnObject { found: json_type(&other) }),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{ArgsError, ToolCall, wire_arguments};

    #[test]
    fn wire_string_arguments_parse_into_an_object() {
        let call = ToolCall::from_wire("f", json!("{\"b\": 2, \"a\": 1}")).unwrap();
        assert_eq!(call.args.len(), 2);
        assert!(call.same_call(&ToolCall::new("f", json!({"a": 1.0, "b": 2})).unwrap()));
    }

    #[test]
    fn bad_wire_arguments_are_typed_errors() {
        assert!(ToolCall::from_wire("f", json!("{not json")).is_err());
        assert!(ToolCall::from_wire("f", json!("[1]")).is_err());
        assert!(ToolCall::new("f", json!(3)).is_err());
        assert!(ToolCall::from_wire("f", json!("")).unwrap().args.is_empty());
    }

    #[test]
    fn wire_arguments_are_an_object_or_a_typed_error() {
        assert_eq!(wire_arguments("").unwrap().len(), 0);
        assert_eq!(wire_arguments("{\"x\": 1}").unwrap()["x"], 1);
        assert_eq!(wire_arguments("null").unwrap().len(), 0);
        let err = wire_arguments("[1]").unwrap_err();
        assert!(matches!(err, ArgsError::NotAnObject { found: "array" }), "{err:?}");
        assert!(err.to_string().contains("array"), "{err}");
        let err = wire_arguments("{x").unwrap_err();
        assert!(matches!(err, ArgsError::NotJson(_)), "{err:?}");
        assert!(err.to_string().contains("not valid JSON"), "{err}");
    }

    #[test]
    fn different_names_or_args_are_different_calls() {
        let a = ToolCall::new("f", json!({"x": 1})).unwrap();
        assert!(!a.same_call(&ToolCall::new("g", json!({"x": 1})).unwrap()));
        assert!(!a.same_call(&ToolCall::new("f", json!({"x": 2})).unwrap()));
        assert!(!a.same_call(&ToolCall::new("f", json!({"x": 1, "y": 0})).unwrap()));
    }

    #[test]
    fn compare_args_restricts_the_comparison() {
        let mut reference = ToolCall::new("f", json!({"x": 1, "note": "a"})).unwrap();
        reference.compare_args = Some(vec!["x".into()]);
        let run = ToolCall::new("f", json!({"x": 1.0, "note": "b"})).unwrap();
        assert!(reference.same_call(&run));
        assert!(run.same_call(&reference));
    }
}
