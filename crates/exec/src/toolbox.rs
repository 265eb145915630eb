//! The tool side of execution, as the engine sees it.
//!
//! The engine only needs the definitions of the available tools (to offer them to the
//! executor model) and a way to invoke one. [`ToolBox`] is that seam; the real
//! implementation is the `flowmem-tools` registry over MCP servers.

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
