//! `response_format`: every reply is JSON that validates against the schema.

use serde_json::{Value, json};

use flowmem_llm::{ChatRequest, Message, Purpose, ResponseFormat};

fn schemas() -> Vec<(&'static str, Value)> {
    vec![
        (
            "sentiment",
            json!({
                "type": "object",
                "properties": {
                    "label": {"type": "string", "enum": ["positive", "negative", "neutral"]},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1}
                },
                "required": ["label", "confidence"]
            }),
        ),
        (
            "person",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "age": {"type": "integer", "minimum": 0, "maximum": 130},
                    "email": {"type": ["string", "null"]}
                },
                "required": ["name", "age"]
            }),
        ),
        (
            "steps",
            json!({
                "type": "object",
                "properties": {
                    "steps": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                    "done": {"type": "boolean"}
                },
                "required": ["steps", "done"]
            }),
        ),
        (
            "plan",
            json!({
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "enum": ["search", "calculator", "calendar"]},
                    "query": {"type": "string"},
                    "priority": {"type": "integer", "enum": [1, 2, 3]},
                    "meta": {
                        "type": "object",
                        "properties": {"source": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
                        "required": ["source"]
                    }
                },
                "required": ["tool", "query", "priority", "meta"]
            }),
        ),
        (
            "verdict",
            json!({
                "type": "object",
                "properties": {
                    "score": {"type": "integer", "minimum": 1, "maximum": 10},
                    "reason": {"type": "string", "maxLength": 80},
                    "pass": {"type": "boolean"}
                },
                "required": ["score", "reason", "pass"]
            }),
        ),
    ]
}

const PROMPTS: [&str; 4] = [
    "I loved the new phone, the battery lasts forever.",
    "Alice is 34 years old and her email is alice@example.com.",
    "To make tea: boil water, add the tea bag, wait three minutes.",
    "Find the population of Canada and rate how hard that is.",
];

#[test]
fn twenty_structured_replies_all_validate() {
    let Some(model) = crate::model() else { return };
    let mut failures = Vec::new();
    let mut count = 0;
    for (name, schema) in schemas() {
        for prompt in PROMPTS {
            count += 1;
            let mut request = ChatRequest::new(
                vec![Message::system("Extract the requested information as JSON."), Message::user(prompt)],
                Purpose::Judge,
            );
            request.response_format = Some(ResponseFormat { name: name.to_owned(), schema: schema.clone() });
            request.max_tokens = Some(256);
            let text = match model.chat_blocking(&request) {
                Ok(reply) => reply.response.content.unwrap_or_default(),
                Err(e) => {
                    failures.push(format!("{name} / {prompt}: error {e}"));
                    continue;
                }
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(value) => {
                    let errors = crate::schema_errors(&schema, &value);
                    if !errors.is_empty() {
                        failures.push(format!("{name} / {prompt}: {text} invalid: {errors:?}"));
                    }
                }
                Err(e) => failures.push(format!("{name} / {prompt}: not JSON ({e}): {text}")),
            }
        }
    }
    assert_eq!(count, 20);
    assert!(failures.is_empty(), "{} of 20 failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn a_schema_that_cannot_compile_is_an_error_not_a_panic() {
    let Some(model) = crate::model() else { return };
    let mut request = ChatRequest::new(vec![Message::user("x")], Purpose::Other);
    request.response_format = Some(ResponseFormat { name: "bad".to_owned(), schema: json!({"type": "no-such-type"}) });
    request.max_tokens = Some(8);
    let err = model.chat_blocking(&request).unwrap_err();
    assert!(err.to_string().contains("response_format `bad`"), "{err}");
}

/// The shape serde and schemars give a flattened tagged enum (the optimizer's edit plan
/// is full of them): `id` beside a `oneOf` of kinds, reached through `$ref`s. It must
/// compile into a grammar, and every reply must validate against the original schema.
#[test]
fn flattened_enum_schemas_compile_and_every_reply_validates() {
    let Some(model) = crate::model() else { return };
    let schema = json!({
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"id": {"type": "string"}},
                "required": ["id"],
                "oneOf": [
                    {"type": "object", "properties": {"kind": {"const": "llm"}, "role": {"$ref": "#/$defs/Role"}}, "required": ["kind", "role"]},
                    {"type": "object", "properties": {"kind": {"const": "tool"}, "hints": {"type": "array", "items": {"type": "string"}}}, "required": ["kind"]},
                    {"$ref": "#/$defs/Join"}
                ]
            },
            "Join": {"type": "object", "properties": {"kind": {"const": "join"}}, "required": ["kind"]},
            "Role": {"type": "string", "enum": ["plan", "extract", "synthesize"]}
        },
        "type": "object",
        "properties": {
            "rationale": {"type": "string"},
            "nodes": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "minItems": 1}
        },
        "required": ["rationale", "nodes"]
    });
    for prompt in ["Add a tool node that looks up the order.", "Add a plan node before the tools."] {
        let mut request = ChatRequest::new(
            vec![Message::system("Answer with workflow nodes as JSON."), Message::user(prompt)],
            Purpose::Optimizer,
        );
        request.response_format = Some(ResponseFormat { name: "nodes".to_owned(), schema: schema.clone() });
        let reply = model.chat_blocking(&request).unwrap_or_else(|e| panic!("{prompt}: {e}"));
        let text = reply.response.content.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{prompt}: not JSON ({e}): {text}"));
        let errors = crate::schema_errors(&schema, &value);
        assert!(errors.is_empty(), "{prompt}: {text} is invalid: {errors:?}");
    }
}

/// A structured reply that reaches `max_tokens` says so, with the partial output kept as
/// the raw reply, instead of passing for a schema that cannot be constrained.
#[test]
fn a_reply_cut_at_max_tokens_is_reported_as_cut() {
    let Some(model) = crate::model() else { return };
    let mut request = ChatRequest::new(vec![Message::user("Tell me a long story.")], Purpose::Other);
    let schema =
        json!({"type": "object", "properties": {"story": {"type": "string", "minLength": 200}}, "required": ["story"]});
    request.response_format = Some(ResponseFormat { name: "story".to_owned(), schema });
    request.max_tokens = Some(6);
    let err = model.chat_blocking(&request).unwrap_err();
    let flowmem_llm_local::LocalError::Truncated { max_tokens, text } = &err else {
        panic!("not reported as cut: {err}")
    };
    assert_eq!(*max_tokens, 6);
    assert!(text.starts_with('{') && text.contains("story"), "the partial output is kept: {text:?}");
    let text = text.clone();
    // Through the chat trait it is an invalid reply that names the cut and keeps the text.
    let flowmem_llm::LlmError::InvalidReply { problem, raw, .. } = flowmem_llm_local::to_llm_error("local", err) else {
        panic!("not an invalid reply")
    };
    assert!(problem.contains("cut at max_tokens = 6 before its JSON was complete"), "{problem}");
    assert!(!problem.contains("cannot constrain"), "{problem}");
    assert_eq!(raw, text);
}
