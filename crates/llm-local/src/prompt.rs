//! Rendering a conversation to ChatML text with minijinja templates.
//!
//! The conversation is rendered in two parts, tokenized apart: the system message
//! (with the tools and the response format, the part most shared across calls, so it
//! comes first for the prefix cache) and the rest.

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
    schema_keys: Vec<String>,
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
        let (schema, schema_keys) = match &request.response_format {
            Some(format) => schema_for_prompt(&format.schema),
            None => (None, Vec::new()),
        };
        let context = SystemContext { base: &base, tools, schema, schema_keys };
        let system_text =
            self.env.get_template("system").and_then(|t| t.render(Value::from(Serde(context)))).map_err(render_err)?;

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

/// The longest response schema shown in the system message, in characters of compact
/// JSON without annotations. Decoding enforces the schema whatever the prompt shows; a
/// long one would only crowd the 4,096-token window (an optimizer edit plan's schema is
/// 9,000 characters, 4,000 without its descriptions), so past this the prompt names the
/// top-level keys instead.
const SCHEMA_PROMPT_CHARS: usize = 1_500;

/// The schema as the prompt shows it: compact and without annotations when short
/// enough, otherwise only its top-level property names.
fn schema_for_prompt(schema: &serde_json::Value) -> (Option<String>, Vec<String>) {
    let bare = without_annotations(schema).to_string();
    if bare.len() <= SCHEMA_PROMPT_CHARS {
        return (Some(bare), Vec::new());
    }
    let keys = schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    (None, keys)
}

/// `schema` without the keywords that only explain (descriptions, titles, formats,
/// examples): the decoder enforces the rest.
fn without_annotations(schema: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as Json;
    const NOTES: [&str; 5] = ["description", "title", "$schema", "format", "examples"];
    match schema {
        Json::Object(map) => Json::Object(
            map.iter()
                .filter(|(k, _)| !NOTES.contains(&k.as_str()))
                .map(|(k, v)| {
                    // Inside `properties` the keys are field names, never annotations.
                    let v = if k == "properties" { properties_without_annotations(v) } else { without_annotations(v) };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.iter().map(without_annotations).collect()),
        other => other.clone(),
    }
}

fn properties_without_annotations(properties: &serde_json::Value) -> serde_json::Value {
    match properties {
        serde_json::Value::Object(map) => {
            serde_json::Value::Object(map.iter().map(|(k, v)| (k.clone(), without_annotations(v))).collect())
        }
        other => without_annotations(other),
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

    use serde_json::json;

    use super::{SCHEMA_PROMPT_CHARS, Templates, schema_for_prompt};

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

    #[test]
    fn a_short_schema_is_shown_without_its_annotations() {
        // A field named `title` is kept: inside `properties` keys are field names.
        let schema = json!({"title": "Reply", "type": "object", "description": "why",
            "properties": {"title": {"type": "string", "description": "the title"}, "n": {"type": "integer", "format": "uint32"}}});
        let (shown, keys) = schema_for_prompt(&schema);
        // Key order depends on serde_json's `preserve_order`, which other crates may enable.
        let shown: serde_json::Value = serde_json::from_str(&shown.expect("shown")).unwrap();
        assert_eq!(
            shown,
            json!({"type": "object", "properties": {"title": {"type": "string"}, "n": {"type": "integer"}}})
        );
        assert!(keys.is_empty());
    }

    #[test]
    fn a_long_schema_is_named_by_its_top_level_keys() {
        let long: serde_json::Map<String, serde_json::Value> =
            (0..200).map(|i| (format!("option_{i}"), json!({"const": i}))).collect();
        let schema = json!({"type": "object", "properties": {"rationale": {"type": "string"}, "edits": {"type": "array", "items": {"oneOf": [long]}}}});
        assert!(schema.to_string().len() > SCHEMA_PROMPT_CHARS);
        let (shown, keys) = schema_for_prompt(&schema);
        assert_eq!(shown, None);
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, ["edits", "rationale"]);
        let mut request = ChatRequest::new(vec![Message::user("Hi")], Purpose::Other);
        request.response_format = Some(flowmem_llm::ResponseFormat { name: "plan".to_owned(), schema });
        let p = Templates::new().render(&request).unwrap();
        let sentence = format!("Answer with one JSON object with the keys {}.", keys.join(", "));
        assert!(p.system.contains(&sentence), "{}", p.system);
    }
}
