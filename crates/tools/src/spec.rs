//! What the registry tells a model about one tool.

use serde::Serialize;
use serde_json::Value;

/// One exposed tool: its unique name, what it does, and the JSON Schema of its input.
///
/// This is also the `--json` shape of `flowmem tools list` (an array of these).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The name callers use: the server's own name, or `server.tool` when two servers
    /// list a tool of the same name, or its `[[tools.alias]]` name.
    pub name: String,
    /// What the tool does, as the server describes it (empty when it gives none) or as
    /// its alias does.
    pub description: String,
    /// The JSON Schema that arguments must satisfy (always an object schema).
    pub input_schema: Value,
    /// The server that provides the tool.
    pub server: String,
    /// The tool's name on its server (differs from `name` when qualified or aliased).
    pub remote_name: String,
}

impl ToolSpec {
    /// The tool as an OpenAI-style function tool:
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`.
    #[must_use]
    pub fn openai_function(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            }
        })
    }
}
