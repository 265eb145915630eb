//! The tool side of execution, as the engine sees it.
//!
//! The engine only needs the definitions of the available tools (to offer them to the
//! executor model) and a way to invoke one. [`ToolBox`] is that seam; its implementation
//! is the `flowmem-tools` [`Registry`](flowmem_tools::Registry) over real MCP servers.

use flowmem_llm::ToolDefinition;
use flowmem_model::{JsonObject, ToolCall};

/// The available tools `T`: their definitions and a way to call them.
#[async_trait::async_trait]
pub trait ToolBox: Send + Sync {
    /// The definitions of every available tool, in a stable order.
    fn definitions(&self) -> Vec<ToolDefinition>;

    /// Invokes tool `name` with `args` and returns the call with its outcome.
    ///
    /// Failures are part of the returned call ([`ToolCall::error`]), never a panic: a
    /// transport failure and an error result from the tool both land there.
    async fn call(&self, name: &str, args: JsonObject) -> ToolCall;
}

/// The real tool side: the MCP registry of `flowmem-tools`.
#[async_trait::async_trait]
impl ToolBox for flowmem_tools::Registry {
    fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools()
            .iter()
            .map(|spec| ToolDefinition {
                name: spec.name.clone(),
                description: spec.description.clone(),
                parameters: spec.input_schema.clone(),
            })
            .collect()
    }

    async fn call(&self, name: &str, args: JsonObject) -> ToolCall {
        flowmem_tools::Registry::call(self, name, args).await
    }
}
