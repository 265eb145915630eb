//! Rendering a conversation to ChatML text with minijinja templates.
//!
//! The conversation is rendered in two parts: the system message (the part that is
//! the same across calls, whose KV state is cached) and the rest.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior, Value};
use serde::Serialize;

use flowmem_llm::{ChatRequest, Role, ToolChoice};

use crate::error::LocalError;

/// SmolLM2's default system message (from the GGUF's chat template), used when the
/// conversation has none.
const DEFAULT_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// A rendered prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenderedPrompt {
    /// `<|im_start|>system\n…<|im_end|>\n`.
    pub(crate) system: String,
    /// The other turns and the assistant header.
    pub(crate) rest: String,
}

#[derive(Serialize)]
struct Turn {
    role: &'static str,
    content: String,
}

#[derive(Serialize)]
struct ToolView<'a> {
    name: &'a str,
    description: &'a str,
    parameters: String,
}

#[derive(Serialize)]
struct SystemContext<'a> {
    base: &'a str,
    tools: Vec<ToolView<'a>>,
    schema: Option<String>,
}

#[derive(Serialize)]
struct ChatContext {
    messages: Vec<Turn>,
}

/// The prompt templates.
pub(crate) struct Templates {
    env: Environment<'static>,
}

impl Templates {
    pub(crate) fn new() -> Templates {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // The syntax options are constant and valid; building them cannot fail.
        env.set_syntax(SyntaxConfig::builder().keep_trailing_newline(true).build().expect("valid syntax config"));
        // The templates are compiled into the binary and tested; adding them cannot fail.
        env.add_template("chatml", include_str!("../prompts/chatml.j2")).expect("chatml.j2 parses");
        env.add_template("system", include_str!("../prompts/system.j2")).expect("system.j2 parses");
        Templates { env }
    }

    /// Renders `request`. Tools are listed in the system message unless `tool_choice`
    /// is `none`; the response schema is shown there too.
    pub(crate) fn render(&self, request: &ChatRequest) -> Result<RenderedPrompt, LocalError> {
        let render_err = |e: minijinja::Error| LocalError::Request(format!("cannot render the prompt: {e}"));
        let mut messages = request.messages.iter().peekable();
        let base = match messages.peek() {
            Some(m) if m.role == Role::System => {
                let text = m.content.clone().unwrap_or_default();
                messages.next();
                text
            }
            _ => DEFAULT_SYSTEM.to_owned(),
        };
        let tools = if request.tool_choice == ToolChoice::None {
            Vec::new()
        } else {
            request
                .tools
                .iter()
                .map(|t| ToolView { name: &t.name, description: &t.description, parameters: t.parameters.to_string() })
                .collect()
        };
        let schema = request.response_format.as_ref().map(|f| f.schema.to_string());
        let system_text =
            self.env.get_template("system").and_then(|t| t.render(Value::from(Serde(SystemContext { base: &base, tools, schema })))).map_err(render_err)?;

        let chatml = self.env.get_template("chatml").map_err(render_err)?;
        let system = chatml
            .render(Value::from(Serde(ChatContext {
                messages: vec![Turn { role: "system", content: system_text.trim_end().to_owned() }],
            })))
            .map_err(render_err)?;
        let system = system.strip_suffix("<|im_start|>assistant\n").unwrap_or(&system).to_owned();

        let turns = messages
            .map(|m| {
                let mut content = m.content.clone().unwrap_or_default();
                for call in &m.tool_calls {
                    let call = serde_json::json!({"name": call.name, "arguments": call.arguments});
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    content.push_str(&call.to_string());
                }
                Turn { role: role_name(m.role), content }
            })
            .collect();
        let rest = chatml.render(Value::from(Serde(ChatContext { messages: turns }))).map_err(render_err)?;
        Ok(RenderedPrompt { system, rest })
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

#[cfg(test)]
mod tests {
    use flowmem_llm::{ChatRequest, Message, Purpose};

    use super::Templates;

    #[test]
    fn chatml_with_default_system_message() {
        let request = ChatRequest::new(vec![Message::user("Hi")], Purpose::Other);
        let p = Templates::new().render(&request).unwrap();
        assert_eq!(
            p.system,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        );
        assert_eq!(p.rest, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    }
}
