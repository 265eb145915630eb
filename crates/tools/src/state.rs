//! Tool-state isolation: how a stateful tool server keeps one state per key, and the
//! helpers that give a run its own key and hide the plumbing from agents.
//!
//! This is the one definition of the concept. `replay` uses it directly on the
//! [`Registry`](crate::Registry); `flowmem-exec`'s `IsolatedTools` wraps any tool box
//! with it for the executor, the evaluator, the optimizer and the memory agents.

use flowmem_model::{JsonObject, ToolCall};
use serde_json::Value;

/// Gives each run its own state on a stateful tool server, such as the τ²-bench ones.
///
/// Such a server keeps one state per *key*: every tool takes an optional `key_arg`
/// argument that selects the state, and `reset_tool` (called with `{key_arg: key}`)
/// gives a key a fresh state. A run under isolation first resets its key, then every
/// call carries `key_arg: key`.
///
/// Agents never see the plumbing: the reset tool and `hidden_tools` are not offered to
/// them, `key_arg` is removed from the input schemas they are shown, and the calls they
/// made are recorded without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateIsolation {
    /// The argument that selects the state, `state_key` for τ².
    pub key_arg: String,
    /// The tool that resets a state, `reset_state` for τ², if the server has one.
    pub reset_tool: Option<String>,
    /// Tools never offered to an agent, such as τ²'s `get_call_log`. A replay of logged
    /// calls still runs them.
    pub hidden_tools: Vec<String>,
    /// The state key of a run, or the stem that callers running several runs derive
    /// per-run keys from: the evaluator's concurrent runs use `key`, `key/1`, …, and
    /// [`replay`](crate::replay) appends each record's id. Runs take their key through a
    /// [`StateLease`], which makes it unique among the runs in flight.
    pub key: String,
}

/// A state key held by one run for as long as the lease lives.
///
/// No two leases of a process hold the same key at once: [`StateLease::acquire`] gives
/// the key asked for when it is free, and otherwise the first free of `KEY~2`, `KEY~3`,
/// …. So runs whose keys derive from ids (a record's, a task's) never share a state when
/// the ids repeat, whatever runs at the same time. A key is free again once its lease is
/// dropped, so runs that follow one another reuse the plain key.
///
/// # Example
///
/// ```
/// use flowmem_tools::StateLease;
///
/// let first = StateLease::acquire("flowmem/7");
/// let second = StateLease::acquire("flowmem/7");
/// assert_eq!(first.key(), "flowmem/7");
/// assert_eq!(second.key(), "flowmem/7~2");
/// drop(first);
/// assert_eq!(StateLease::acquire("flowmem/7").key(), "flowmem/7");
/// ```
#[derive(Debug)]
#[must_use = "the key is free again as soon as the lease is dropped"]
pub struct StateLease {
    key: String,
}

/// The keys leased in this process.
static LEASED: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

impl StateLease {
    /// Leases `wanted`, or the first free `wanted~N` (N = 2, 3, …) when it is taken.
    pub fn acquire(wanted: &str) -> StateLease {
        // A panic while holding the lock cannot leave the set half-changed: every
        // change is one insert or remove.
        let mut leased = LEASED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut key = wanted.to_owned();
        let mut n = 2;
        while !leased.insert(key.clone()) {
            key = format!("{wanted}~{n}");
            n += 1;
        }
        StateLease { key }
    }

    /// The key this lease holds.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for StateLease {
    fn drop(&mut self) {
        LEASED.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.key);
    }
}

/// A state key could not be given a fresh state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot reset state `{key}` with `{tool}`: {error}")]
pub struct StateResetError {
    /// The reset tool.
    pub tool: String,
    /// The state key.
    pub key: String,
    /// The tool's error.
    pub error: String,
}

impl StateIsolation {
    /// The τ²-bench servers' conventions (`state_key`, `reset_state`, with
    /// `get_call_log` hidden), under the state key `key`.
    #[must_use]
    pub fn tau2(key: &str) -> StateIsolation {
        StateIsolation {
            key_arg: "state_key".to_owned(),
            reset_tool: Some("reset_state".to_owned()),
            hidden_tools: vec!["get_call_log".to_owned()],
            key: key.to_owned(),
        }
    }

    /// The same isolation under the state key `key`.
    #[must_use]
    pub fn with_key(&self, key: String) -> StateIsolation {
        StateIsolation { key, ..self.clone() }
    }

    /// Whether `tool` is state plumbing that agents are not offered: the reset tool or
    /// one of the hidden tools.
    #[must_use]
    pub fn hides(&self, tool: &str) -> bool {
        self.reset_tool.as_deref() == Some(tool) || self.hidden_tools.iter().any(|hidden| hidden == tool)
    }

    /// Sets `key_arg: key` in `args`, replacing any value the caller chose, so a call
    /// can never reach another run's state.
    pub fn add_key(&self, args: &mut JsonObject, key: &str) {
        args.insert(self.key_arg.clone(), Value::String(key.to_owned()));
    }

    /// Removes `key_arg` from `args`, so a recorded call shows only what the agent chose.
    pub fn remove_key(&self, args: &mut JsonObject) {
        args.remove(&self.key_arg);
    }

    /// Whether a tool with the input schema `schema` takes `key_arg`.
    #[must_use]
    pub fn takes_key(&self, schema: &Value) -> bool {
        schema.get("properties").and_then(Value::as_object).is_some_and(|props| props.contains_key(&self.key_arg))
    }

    /// Removes `key_arg` from an input schema's `properties` and `required`, so an agent
    /// is neither shown nor asked for the state key.
    pub fn hide_key(&self, schema: &mut Value) {
        if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            props.remove(&self.key_arg);
        }
        if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|name| name.as_str() != Some(self.key_arg.as_str()));
        }
    }

    /// The call that gives `key` a fresh state: the reset tool's name and `{key_arg:
    /// key}`; `None` when the server has no reset tool.
    #[must_use]
    pub fn reset_call(&self, key: &str) -> Option<(&str, JsonObject)> {
        let tool = self.reset_tool.as_deref()?;
        let mut args = JsonObject::new();
        self.add_key(&mut args, key);
        Some((tool, args))
    }

    /// Whether the reset call `call` of `key` (see [`StateIsolation::reset_call`])
    /// succeeded.
    ///
    /// # Errors
    ///
    /// [`StateResetError`] naming the key, the tool and the call's error when the call
    /// failed.
    pub fn check_reset(&self, key: &str, call: &ToolCall) -> Result<(), StateResetError> {
        match &call.error {
            None => Ok(()),
            Some(error) => Err(StateResetError { tool: call.tool.clone(), key: key.to_owned(), error: error.clone() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::state::StateIsolation;
    use flowmem_model::{JsonObject, ToolCall};

    fn object(value: serde_json::Value) -> JsonObject {
        value.as_object().cloned().expect("an object literal")
    }

    #[test]
    fn the_key_replaces_whatever_the_caller_set_and_is_removed_again() {
        let isolation = StateIsolation::tau2("run/1");
        let mut args = object(json!({"order_id": "#W1", "state_key": "someone-else"}));
        isolation.add_key(&mut args, "run/1");
        assert_eq!(args["state_key"], "run/1");
        isolation.remove_key(&mut args);
        assert_eq!(args, object(json!({"order_id": "#W1"})));
    }

    #[test]
    fn the_reset_tool_and_hidden_tools_are_hidden_and_nothing_else() {
        let isolation = StateIsolation::tau2("k");
        assert!(isolation.hides("reset_state"));
        assert!(isolation.hides("get_call_log"));
        assert!(!isolation.hides("cancel_pending_order"));
        let without_reset = StateIsolation { reset_tool: None, hidden_tools: Vec::new(), ..isolation };
        assert!(!without_reset.hides("reset_state"));
    }

    #[test]
    fn the_key_is_hidden_from_an_input_schema() {
        let isolation = StateIsolation::tau2("k");
        let mut schema = json!({
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "state_key": {"type": "string"}},
            "required": ["order_id", "state_key"]
        });
        assert!(isolation.takes_key(&schema));
        isolation.hide_key(&mut schema);
        assert!(!isolation.takes_key(&schema));
        assert_eq!(schema["properties"], json!({"order_id": {"type": "string"}}));
        assert_eq!(schema["required"], json!(["order_id"]));
    }

    #[test]
    fn a_reset_is_the_reset_tool_with_the_key_and_fails_with_its_error() {
        let isolation = StateIsolation::tau2("k");
        let (tool, args) = isolation.reset_call("k/2").expect("τ² has a reset tool");
        assert_eq!((tool, args), ("reset_state", object(json!({"state_key": "k/2"}))));
        let mut call = ToolCall::new("reset_state", json!({"state_key": "k/2"})).expect("an object");
        assert_eq!(isolation.check_reset("k/2", &call), Ok(()));
        call.error = Some("no such task".to_owned());
        let err = isolation.check_reset("k/2", &call).unwrap_err();
        assert_eq!(err.to_string(), "cannot reset state `k/2` with `reset_state`: no such task");
        let without_reset = StateIsolation { reset_tool: None, ..isolation };
        assert!(without_reset.reset_call("k").is_none());
    }
}
