//! The one [`ToolBox`] wrapper for tool-state isolation: every run in the evaluator, the
//! optimizer's simulator and the online memory agents goes through [`IsolatedTools`].
//!
//! The concept itself (key argument, reset tool, hidden tools, and the key helpers) is
//! [`StateIsolation`] in `flowmem-tools`; this module applies it to any tool box.

use std::sync::Arc;

use flowmem_llm::ToolDefinition;
use flowmem_model::{JsonObject, ToolCall};
use flowmem_tools::{StateIsolation, StateLease, StateResetError};

use crate::plan::Runtime;
use crate::toolbox::ToolBox;

/// A [`ToolBox`] that runs every call under one state key and hides the state plumbing
/// (see [`StateIsolation`]).
///
/// Its definitions leave out the reset tool and the hidden tools, and no longer mention
/// the key argument. Each call gets `key_arg: key` (replacing any value the model chose),
/// and the returned call carries the model's own arguments, so a trace and TC see only
/// what the model chose.
pub struct IsolatedTools {
    inner: Arc<dyn ToolBox>,
    isolation: StateIsolation,
    // Holds the key for as long as the tools live, when they have it to themselves.
    _lease: Option<StateLease>,
}

impl IsolatedTools {
    /// Wraps `inner`, with calls under the state key `isolation.key` exactly, shared with
    /// anyone else who names it (as a client of `flowmem serve` may, on purpose).
    #[must_use]
    pub fn new(inner: Arc<dyn ToolBox>, isolation: StateIsolation) -> IsolatedTools {
        IsolatedTools { inner, isolation, _lease: None }
    }

    /// Wraps `inner` for one run with a state of its own: the key is `isolation.key`, or
    /// `KEY~2`, `KEY~3`, … while another run of this process holds it (a
    /// [`StateLease`], held until these tools are dropped). Runs whose keys derive from
    /// ids that repeat therefore never share a state.
    #[must_use]
    pub fn exclusive(inner: Arc<dyn ToolBox>, isolation: StateIsolation) -> IsolatedTools {
        let lease = StateLease::acquire(&isolation.key);
        let isolation = isolation.with_key(lease.key().to_owned());
        IsolatedTools { inner, isolation, _lease: Some(lease) }
    }

    /// The state key every call runs under.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.isolation.key
    }

    /// Gives the state key a fresh state with the reset tool; without a reset tool there
    /// is nothing to do.
    ///
    /// # Errors
    ///
    /// [`StateResetError`] naming the key and the tool when the reset call fails.
    pub async fn reset(&self) -> Result<(), StateResetError> {
        let Some((tool, args)) = self.isolation.reset_call(&self.isolation.key) else {
            return Ok(());
        };
        let call = self.inner.call(tool, args).await;
        self.isolation.check_reset(&self.isolation.key, &call)
    }
}

#[async_trait::async_trait]
impl ToolBox for IsolatedTools {
    fn definitions(&self) -> Vec<ToolDefinition> {
        self.inner
            .definitions()
            .into_iter()
            .filter(|def| !self.isolation.hides(&def.name))
            .map(|mut def| {
                self.isolation.hide_key(&mut def.parameters);
                def
            })
            .collect()
    }

    async fn call(&self, name: &str, args: JsonObject) -> ToolCall {
        let chosen = args.clone();
        let mut sent = args;
        self.isolation.add_key(&mut sent, &self.isolation.key);
        let mut call = self.inner.call(name, sent).await;
        call.args = chosen;
        self.isolation.remove_key(&mut call.args);
        call
    }
}

/// The names of the tools a run sees under `isolation`: all of `tools` but the reset
/// tool and the hidden tools. A workflow graph must bind to these.
#[must_use]
pub fn visible_tools(tools: &dyn ToolBox, isolation: Option<&StateIsolation>) -> Vec<String> {
    tools
        .definitions()
        .into_iter()
        .map(|def| def.name)
        .filter(|name| isolation.is_none_or(|isolation| !isolation.hides(name)))
        .collect()
}

/// `runtime` with its tools wrapped in [`IsolatedTools::exclusive`] under `isolation`
/// (the key, or a free variant of it, just given a fresh state), or `runtime` as it is
/// without isolation.
///
/// # Errors
///
/// [`StateResetError`] when the reset fails; the runtime must then not be used, since
/// the state is not fresh.
pub async fn isolated_runtime(
    runtime: &Runtime,
    isolation: Option<&StateIsolation>,
) -> Result<Runtime, StateResetError> {
    let Some(isolation) = isolation else {
        return Ok(runtime.clone());
    };
    let tools = IsolatedTools::exclusive(Arc::clone(&runtime.tools), isolation.clone());
    tools.reset().await?;
    Ok(Runtime { tools: Arc::new(tools), ..runtime.clone() })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::{Value, json};

    use crate::isolated::{IsolatedTools, visible_tools};
    use crate::toolbox::ToolBox;
    use flowmem_llm::ToolDefinition;
    use flowmem_model::{JsonObject, ToolCall};
    use flowmem_tools::StateIsolation;

    /// A tool box of three τ²-like tools that records the arguments each call arrived
    /// with, and fails the reset of one key.
    #[derive(Default)]
    struct Recorder {
        received: Mutex<Vec<(String, JsonObject)>>,
    }

    #[async_trait::async_trait]
    impl ToolBox for Recorder {
        fn definitions(&self) -> Vec<ToolDefinition> {
            let schema = json!({
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "state_key": {"type": "string"}},
                "required": ["order_id", "state_key"]
            });
            ["cancel_pending_order", "reset_state", "get_call_log"]
                .into_iter()
                .map(|name| ToolDefinition {
                    name: name.to_owned(),
                    description: String::new(),
                    parameters: schema.clone(),
                })
                .collect()
        }

        async fn call(&self, name: &str, args: JsonObject) -> ToolCall {
            self.received.lock().unwrap().push((name.to_owned(), args.clone()));
            let mut call = ToolCall::new(name, Value::Object(args)).unwrap();
            if call.args["state_key"] == "broken" {
                call.error = Some("cannot reset".to_owned());
            } else {
                call.result = Some(json!("ok"));
            }
            call
        }
    }

    fn args(value: Value) -> JsonObject {
        value.as_object().cloned().unwrap()
    }

    #[tokio::test]
    async fn calls_run_under_the_key_and_are_recorded_without_it() {
        let inner = Arc::new(Recorder::default());
        let tools = IsolatedTools::new(inner.clone(), StateIsolation::tau2("run/1"));
        let call = tools.call("cancel_pending_order", args(json!({"order_id": "#W1", "state_key": "other"}))).await;
        assert_eq!(call.args, args(json!({"order_id": "#W1"})));
        let received = inner.received.lock().unwrap().clone();
        assert_eq!(
            received,
            vec![("cancel_pending_order".to_owned(), args(json!({"order_id": "#W1", "state_key": "run/1"})))]
        );
    }

    #[tokio::test]
    async fn the_plumbing_is_hidden_and_a_failed_reset_names_the_key() {
        let inner = Arc::new(Recorder::default());
        let tools = IsolatedTools::new(inner.clone(), StateIsolation::tau2("broken"));
        let definitions = tools.definitions();
        assert_eq!(definitions.iter().map(|def| def.name.as_str()).collect::<Vec<_>>(), ["cancel_pending_order"]);
        assert_eq!(definitions[0].parameters["required"], json!(["order_id"]));
        assert!(definitions[0].parameters["properties"].get("state_key").is_none());
        assert_eq!(
            visible_tools(inner.as_ref(), Some(&StateIsolation::tau2("k"))),
            vec!["cancel_pending_order".to_owned()]
        );
        assert_eq!(visible_tools(inner.as_ref(), None).len(), 3);

        let err = tools.reset().await.unwrap_err();
        assert_eq!((err.key.as_str(), err.tool.as_str()), ("broken", "reset_state"));
        let fine = IsolatedTools::new(inner.clone(), StateIsolation::tau2("fresh"));
        fine.reset().await.unwrap();
        let received = inner.received.lock().unwrap().clone();
        assert_eq!(received.last(), Some(&("reset_state".to_owned(), args(json!({"state_key": "fresh"})))));
    }
    /// Issue 27 (3): runs asking for one key at the same time each get a state of their
    /// own, and the plain key is free again once its run is over.
    #[tokio::test]
    async fn exclusive_runs_asking_for_one_key_get_their_own() {
        let inner = Arc::new(Recorder::default());
        let isolation = StateIsolation::tau2("issue27/records/7");
        let first = IsolatedTools::exclusive(inner.clone(), isolation.clone());
        let second = IsolatedTools::exclusive(inner.clone(), isolation.clone());
        assert_eq!((first.key(), second.key()), ("issue27/records/7", "issue27/records/7~2"));
        first.call("cancel_pending_order", args(json!({"order_id": "#W1"}))).await;
        second.call("cancel_pending_order", args(json!({"order_id": "#W1"}))).await;
        let keys: Vec<Value> =
            inner.received.lock().unwrap().iter().map(|(_, args)| args["state_key"].clone()).collect();
        assert_eq!(keys, [json!("issue27/records/7"), json!("issue27/records/7~2")]);
        drop(first);
        let third = IsolatedTools::exclusive(inner, isolation);
        assert_eq!(third.key(), "issue27/records/7");
    }
}
