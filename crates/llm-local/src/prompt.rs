//! Rendering a conversation to the model's chat text with minijinja templates: ChatML
//! for SmolLM2, Gemma's turns for Gemma 3.
//!
//! The conversation is rendered in two parts, tokenized apart: the system message
//! (with the tools, the part most shared across calls, so it comes first for the prefix
//! cache) and the rest. The response format (`prompts/format.j2`) differs from call to
//! call (a judge's options, say), so it closes the last user turn: calls that share a
//! conversation and differ in format then share the whole prefix up to it. In the system
//! message it made every judge prefill its whole context again. Gemma has no system role: its system
//! message opens the first user turn, and the rest continues that turn.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior, Value};
use serde::Serialize;

use flowmem_llm::{ChatRequest, Role, ToolChoice};

use crate::error::LocalError;

/// SmolLM2's default system message (from the GGUF's chat template), used when the
/// conversation has none.
const DEFAULT_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// How a model's prompts are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChatFormat {
    /// `<|im_start|>role\n…<|im_end|>` turns (SmolLM2), `prompts/chatml.j2`.
    ChatMl,
    /// `<start_of_turn>user|model\n…<end_of_turn>` turns after `<bos>` (Gemma 3),
    /// `prompts/gemma.j2`: the system message folded into the first user turn, tool
    /// results shown as user turns.
    Gemma,
}

/// A rendered prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenderedPrompt {
    /// `<|im_start|>system\n…<|im_end|>\n`, or Gemma's `<bos><start_of_turn>user\n…\n\n`.
    pub(crate) system: String,
    /// The other turns and the assistant header.
    pub(crate) rest: String,
}

#[derive(Serialize)]
struct Turn {
    role: &'static str,
    content: String,
}

/// A tool as the system message shows it: a compact signature, its description, and a
/// line per documented parameter. The grammar enforces the full JSON Schema whatever the
/// prompt shows, so the prompt spends no tokens on JSON punctuation.
#[derive(Serialize)]
struct ToolView {
    signature: String,
    description: String,
    params: Vec<ParamView>,
}

#[derive(Serialize)]
struct ParamView {
    name: String,
    description: String,
}

#[derive(Serialize)]
struct SystemContext<'a> {
    base: &'a str,
    tools: Vec<ToolView>,
}

#[derive(Serialize)]
struct FormatContext {
    schema: Option<String>,
    schema_keys: Vec<String>,
}

/// Ends the last user turn of `messages` with the response-format note, after a blank
/// line; a conversation that does not end with a user turn gets the note as a user turn
/// of its own.
fn close_with_format(messages: &mut Vec<flowmem_llm::Message>, note: &str) {
    if note.is_empty() {
        return;
    }
    match messages.last_mut() {
        Some(last) if last.role == Role::User => {
            let text = last.content.get_or_insert_with(String::new);
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(note);
        }
        _ => messages.push(flowmem_llm::Message::user(note)),
    }
}

#[derive(Serialize)]
struct ChatContext {
    messages: Vec<Turn>,
}

#[derive(Serialize)]
struct GemmaContext {
    /// Render the opening (`<bos>`, the first user turn's header, the system message)
    /// instead of the turns.
    opening: bool,
    system: String,
    messages: Vec<Turn>,
    /// The first message is a user turn, which continues the opened one.
    continues: bool,
}

/// The prompt templates.
pub(crate) struct Templates {
    env: Environment<'static>,
    format: ChatFormat,
}

impl Templates {
    pub(crate) fn new(format: ChatFormat) -> Templates {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // The syntax options are constant and valid; building them cannot fail.
        env.set_syntax(SyntaxConfig::builder().keep_trailing_newline(true).build().expect("valid syntax config"));
        // The templates are compiled into the binary and tested; adding them cannot fail.
        env.add_template("chatml", include_str!("../prompts/chatml.j2")).expect("chatml.j2 parses");
        env.add_template("system", include_str!("../prompts/system.j2")).expect("system.j2 parses");
        env.add_template("gemma", include_str!("../prompts/gemma.j2")).expect("gemma.j2 parses");
        env.add_template("format", include_str!("../prompts/format.j2")).expect("format.j2 parses");
        Templates { env, format }
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
            _ if self.format == ChatFormat::Gemma => String::new(),
            _ => DEFAULT_SYSTEM.to_owned(),
        };
        let tools = if request.tool_choice == ToolChoice::None {
            Vec::new()
        } else {
            request.tools.iter().map(|t| tool_view(&t.name, &t.description, &t.parameters)).collect()
        };
        let (schema, schema_keys) = match &request.response_format {
            Some(format) => schema_for_prompt(&format.schema),
            None => (None, Vec::new()),
        };
        let format = FormatContext { schema, schema_keys };
        let format =
            self.env.get_template("format").and_then(|t| t.render(Value::from(Serde(format)))).map_err(render_err)?;
        let context = SystemContext { base: &base, tools };
        let system_text =
            self.env.get_template("system").and_then(|t| t.render(Value::from(Serde(context)))).map_err(render_err)?;
        let mut messages: Vec<flowmem_llm::Message> = messages.cloned().collect();
        close_with_format(&mut messages, format.trim());
        if self.format == ChatFormat::Gemma {
            return self.render_gemma(system_text.trim().to_owned(), messages.iter().collect());
        }

        let chatml = self.env.get_template("chatml").map_err(render_err)?;
        let system = chatml
            .render(Value::from(Serde(ChatContext {
                messages: vec![Turn { role: "system", content: system_text.trim_end().to_owned() }],
            })))
            .map_err(render_err)?;
        let system = system.strip_suffix("<|im_start|>assistant\n").unwrap_or(&system).to_owned();

        let turns = messages.iter().map(|m| Turn { role: role_name(m.role), content: turn_content(m) }).collect();
        let rest = chatml.render(Value::from(Serde(ChatContext { messages: turns }))).map_err(render_err)?;
        Ok(RenderedPrompt { system, rest })
    }
}

impl Templates {
    /// Gemma's two parts: the opening with the system message, then the turns.
    fn render_gemma(&self, system: String, messages: Vec<&flowmem_llm::Message>) -> Result<RenderedPrompt, LocalError> {
        let render_err = |e: minijinja::Error| LocalError::Request(format!("cannot render the prompt: {e}"));
        let template = self.env.get_template("gemma").map_err(render_err)?;
        let continues = messages.first().is_some_and(|m| m.role == Role::User);
        let turns = messages
            .iter()
            .map(|m| {
                let role = if m.role == Role::Assistant { "model" } else { "user" };
                Turn { role, content: turn_content(m) }
            })
            .collect();
        let opening = GemmaContext { opening: true, system: system.clone(), messages: Vec::new(), continues: false };
        let system = template.render(Value::from(Serde(opening))).map_err(render_err)?;
        let context = GemmaContext { opening: false, system: String::new(), messages: turns, continues };
        let rest = template.render(Value::from(Serde(context))).map_err(render_err)?;
        Ok(RenderedPrompt { system, rest })
    }
}

/// A message's text with its tool calls as JSON lines.
fn turn_content(m: &flowmem_llm::Message) -> String {
    let mut content = m.content.clone().unwrap_or_default();
    for call in &m.tool_calls {
        let call = serde_json::json!({"name": call.name, "arguments": call.arguments});
        if !content.is_empty() {
            content.push('\n');
        }
        content.push_str(&call.to_string());
    }
    content
}

/// The most characters of a tool's description the prompt shows: its first sentences
/// up to this bound. τ² descriptions run to 500 characters of policy, most of it repeated
/// in the system prompt of a real deployment.
const TOOL_DESCRIPTION_CHARS: usize = 240;
/// The most characters of a parameter's description.
const PARAM_DESCRIPTION_CHARS: usize = 160;

fn tool_view(name: &str, description: &str, parameters: &serde_json::Value) -> ToolView {
    let properties = parameters.get("properties").and_then(serde_json::Value::as_object);
    let required: Vec<&str> = parameters
        .get("required")
        .and_then(serde_json::Value::as_array)
        .map(|r| r.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let mut args = Vec::new();
    let mut params = Vec::new();
    for (arg, schema) in properties.into_iter().flatten() {
        let optional = if required.contains(&arg.as_str()) { "" } else { "?" };
        args.push(format!("{arg}{optional}: {}", type_text(schema, 0)));
        if let Some(text) = schema.get("description").and_then(serde_json::Value::as_str) {
            params.push(ParamView { name: arg.clone(), description: clip_sentences(text, PARAM_DESCRIPTION_CHARS) });
        }
    }
    ToolView {
        signature: format!("{name}({})", args.join(", ")),
        description: clip_sentences(description, TOOL_DESCRIPTION_CHARS),
        params,
    }
}

/// A JSON Schema type as short text: `string`, `integer`, `"a" | "b"`, `string[]`,
/// `{id: string, n?: integer}` (two levels of objects, then `object`).
fn type_text(schema: &serde_json::Value, depth: usize) -> String {
    use serde_json::Value as Json;
    if let Some(Json::Array(values)) = schema.get("enum") {
        return values.iter().map(Json::to_string).collect::<Vec<_>>().join(" | ");
    }
    if let Some(value) = schema.get("const") {
        return value.to_string();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Json::Array(options)) = schema.get(key) {
            let texts: Vec<String> = options.iter().map(|o| type_text(o, depth)).collect();
            return texts.join(" | ");
        }
    }
    let kind = match schema.get("type") {
        Some(Json::String(kind)) => kind.clone(),
        Some(Json::Array(kinds)) => {
            kinds.iter().filter_map(Json::as_str).filter(|k| *k != "null").collect::<Vec<_>>().join(" | ")
        }
        _ if schema.get("properties").is_some() => "object".to_owned(),
        _ => "any".to_owned(),
    };
    match kind.as_str() {
        "array" => {
            let items = schema.get("items").map_or_else(|| "any".to_owned(), |items| type_text(items, depth + 1));
            if items.contains(" | ") { format!("({items})[]") } else { format!("{items}[]") }
        }
        "object" if depth < 2 => {
            let Some(properties) = schema.get("properties").and_then(Json::as_object) else { return kind };
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Json::as_array)
                .map(|r| r.iter().filter_map(Json::as_str).collect())
                .unwrap_or_default();
            let fields: Vec<String> = properties
                .iter()
                .map(|(name, field)| {
                    let optional = if required.contains(&name.as_str()) { "" } else { "?" };
                    format!("{name}{optional}: {}", type_text(field, depth + 1))
                })
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        _ => kind,
    }
}

/// `text` with its whitespace collapsed, cut after the last sentence that ends within
/// `limit` characters (or at `limit`, with an ellipsis, when the first sentence is longer).
fn clip_sentences(text: &str, limit: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= limit {
        return flat;
    }
    let cut: String = flat.chars().take(limit).collect();
    match cut.rfind(". ") {
        Some(end) if end > 0 => cut[..=end].to_owned(),
        _ => format!("{}…", cut.trim_end()),
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

    use super::{ChatFormat, SCHEMA_PROMPT_CHARS, Templates, schema_for_prompt};

    #[test]
    fn chatml_with_default_system_message() {
        let request = ChatRequest::new(vec![Message::user("Hi")], Purpose::Other);
        let p = Templates::new(ChatFormat::ChatMl).render(&request).unwrap();
        assert_eq!(
            p.system,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        );
        assert_eq!(p.rest, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    }

    /// Gemma: the system message opens the first user turn, which the rest continues;
    /// assistant turns are the model's, tool results the user's.
    #[test]
    fn gemma_folds_the_system_message_into_the_first_user_turn() {
        let templates = Templates::new(ChatFormat::Gemma);
        let messages =
            vec![Message::system("Be brief."), Message::user("Hi"), Message::assistant("Hello!"), Message::user("Bye")];
        let p = templates.render(&ChatRequest::new(messages, Purpose::Other)).unwrap();
        assert_eq!(p.system, "<bos><start_of_turn>user\nBe brief.\n\n");
        assert_eq!(
            p.rest,
            "Hi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
        let p = templates.render(&ChatRequest::new(vec![Message::user("Hi")], Purpose::Other)).unwrap();
        assert_eq!(
            format!("{}{}", p.system, p.rest),
            "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
        // A conversation that does not start with a user turn closes the opened one.
        let p = templates.render(&ChatRequest::new(vec![Message::assistant("Yes?")], Purpose::Other)).unwrap();
        assert_eq!(p.rest, "<end_of_turn>\n<start_of_turn>model\nYes?<end_of_turn>\n<start_of_turn>model\n");
    }

    /// Tools are listed as compact signatures with their parameters' notes: the grammar
    /// holds the schema, the prompt only has to say what each tool is for.
    #[test]
    fn tools_are_shown_as_compact_signatures() {
        let mut request = ChatRequest::new(vec![Message::user("Cancel #W1")], Purpose::Other);
        request.tools = vec![flowmem_llm::ToolDefinition {
            name: "cancel_pending_order".into(),
            description: "Cancel a pending order. If the order is already processed or delivered,\n\nit cannot be cancelled. The agent needs to explain the cancellation detail and ask for explicit user confirmation (yes/no) to proceed. If the user confirms, the order status will be changed.".into(),
            parameters: json!({"type": "object", "title": "parameters", "required": ["order_id", "reason"], "properties": {
                "order_id": {"type": "string", "title": "Order Id", "description": "The order id, such as '#W0000000'."},
                "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
                "items": {"type": "array", "items": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}, "n": {"type": ["integer", "null"]}}}}
            }}),
        }];
        let system = Templates::new(ChatFormat::ChatMl).render(&request).unwrap().system;
        let signature = "- cancel_pending_order(order_id: string, reason: \"no longer needed\" | \"ordered by mistake\", \
                         items?: {id: string, n?: integer}[]): Cancel a pending order. If the order is already \
                         processed or delivered, it cannot be cancelled. The agent";
        assert!(system.contains(signature), "{system}");
        // Cut after the last whole sentence within the bound.
        let notes = "(yes/no) to proceed.\n  order_id: The order id, such as '#W0000000'.\nCall exactly one tool";
        assert!(system.contains(notes), "{system}");
        assert!(!system.contains("If the user confirms"), "{system}");
        assert!(!system.contains("\"title\""), "{system}");
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
        let p = Templates::new(ChatFormat::ChatMl).render(&request).unwrap();
        let sentence = format!("Answer with one JSON object with the keys {}.", keys.join(", "));
        assert!(p.rest.contains(&format!("Hi\n\n{sentence}<|im_end|>")), "{}", p.rest);
        assert!(!p.system.contains("Answer with"), "{}", p.system);
    }

    /// Two judges over one conversation that differ only in their options share every
    /// token up to the format note, which closes the last user turn; the system message
    /// holds no format.
    #[test]
    fn the_response_format_closes_the_last_user_turn_so_calls_share_the_rest() {
        let templates = Templates::new(ChatFormat::ChatMl);
        let judge = |options: serde_json::Value| {
            let mut request =
                ChatRequest::new(vec![Message::user("Task: find the order.\nQuestion: which?")], Purpose::Other);
            let schema = json!({"type": "object", "properties": {"choice": {"type": "string", "enum": options}}});
            request.response_format = Some(flowmem_llm::ResponseFormat { name: "judge".to_owned(), schema });
            templates.render(&request).unwrap()
        };
        let (a, b) = (judge(json!(["cancel", "skip"])), judge(json!(["return", "skip"])));
        assert_eq!(a.system, b.system);
        assert!(!a.system.contains("JSON Schema"), "{}", a.system);
        let shared = a.rest.chars().zip(b.rest.chars()).take_while(|(x, y)| x == y).count();
        let note = a.rest.find("Answer with one JSON object that satisfies").expect("the note is in the turn");
        assert!(shared >= note, "they differ only inside the note: {shared} < {note}\n{}", a.rest);
        assert!(
            a.rest.starts_with("<|im_start|>user\nTask: find the order.\nQuestion: which?\n\nAnswer with"),
            "{}",
            a.rest
        );
        // A conversation that ends with a tool result gets the note as a user turn.
        let mut request =
            ChatRequest::new(vec![Message::user("Go."), Message::tool_result("call_1", "done")], Purpose::Other);
        request.response_format =
            Some(flowmem_llm::ResponseFormat { name: "x".to_owned(), schema: json!({"type": "object"}) });
        let p = templates.render(&request).unwrap();
        assert!(p.rest.ends_with("<|im_start|>user\nAnswer with one JSON object that satisfies this JSON Schema: {\"type\":\"object\"}<|im_end|>\n<|im_start|>assistant\n"), "{}", p.rest);
    }
}
