//! Per-run tool-state isolation for stateful tool servers (the τ² servers).

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use flowmem_llm::ToolDefinition;
use flowmem_model::{JsonObject, ToolCall};
use flowmem_tools::StateIsolation;

use crate::ToolBox;

/// A [`ToolBox`] that gives one run its own server-side state.
///
/// It follows [`StateIsolation`]: when started, the reset tool is called with
/// `{key_arg: key}`; afterwards every call of a tool whose input schema has a `key_arg`
/// property gets `key_arg: key` added. The model never sees the key: the reset tool is
/// hidden from [`ToolBox::definitions`], the key property is removed from the schemas,
/// and the key is removed again from the returned call, so `π̂` compares cleanly with a
/// record's reference calls.
pub struct IsolatedTools {
    inner: Arc<dyn ToolBox>,
    key_arg: String,
    reset_tool: Option<String>,
    key: String,
    keyed: BTreeSet<String>,
}

impl IsolatedTools {
    /// Resets the state under `key` and returns the isolated tool box.
    ///
    /// # Errors
    ///
    /// The reset call's error, naming the tool and the key.
    pub async fn start(inner: Arc<dyn ToolBox>, isolation: &StateIsolation, key: String) -> Result<IsolatedTools, String> {
        let keyed = inner
            .definitions()
            .into_iter()
            .filter(|def| def.parameters.get("properties").and_then(|props| props.get(&isolation.key_arg)).is_some())
            .map(|def| def.name)
            .collect();
        if let Some(reset) = &isolation.reset_tool {
            let mut args = JsonObject::new();
            args.insert(isolation.key_arg.clone(), Value::String(key.clone()));
            let call = inner.call(reset, args).await;
            if let Some(err) = call.error {
                return Err(format!("resetting the tool state with `{reset}` for key `{key}` failed: {err}"));
            }
        }
        Ok(IsolatedTools { inner, key_arg: isolation.key_arg.clone(), reset_tool: isolation.reset_tool.clone(), key, keyed })
    }

    /// The state key of this run.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }
}

#[async_trait::async_trait]
impl ToolBox for IsolatedTools {
    fn definitions(&self) -> Vec<ToolDefinition> {
        self.inner
            .definitions()
            .into_iter()
            .filter(|def| self.reset_tool.as_deref() != Some(def.name.as_str()))
            .map(|mut def| {
                if self.keyed.contains(&def.name) {
                    hide_property(&mut def.parameters, &self.key_arg);
                }
                def
            })
            .collect()
    }

    async fn call(&self, name: &str, mut args: JsonObject) -> ToolCall {
        let keyed = self.keyed.contains(name);
        if keyed {
            args.insert(self.key_arg.clone(), Value::String(self.key.clone()));
        }
        let mut call = self.inner.call(name, args).await;
        if keyed {
            call.args.remove(&self.key_arg);
        }
        call
    }
}

/// Removes `name` from a JSON Schema's `properties` and `required`.
fn hide_property(schema: &mut Value, name: &str) {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        props.remove(name);
    }
    if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|item| item.as_str() != Some(name));
    }
}

/// The tool names a graph may bind to under `isolation`: every tool but the reset tool.
#[must_use]
pub fn visible_tool_names(tools: &dyn ToolBox, isolation: Option<&StateIsolation>) -> Vec<String> {
    let reset = isolation.and_then(|iso| iso.reset_tool.as_deref());
    tools.definitions().into_iter().map(|def| def.name).filter(|name| Some(name.as_str()) != reset).collect()
}
