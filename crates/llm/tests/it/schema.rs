//! Schema-constrained replies: validated, re-asked once with the error, then a typed error.

use flowmem_llm::{ChatModel, ChatRequest, LlmError, Message, Purpose, ResponseFormat};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

use crate::support::{client, deadline};

fn verdict_request() -> ChatRequest {
    let mut request =
        ChatRequest::new(vec![Message::system("You are a judge."), Message::user("Is 2 + 2 = 4?")], Purpose::Judge);
    request.response_format = Some(ResponseFormat {
        name: "verdict".into(),
        schema: json!({
            "type": "object",
            "properties": {
                "correct": {"type": "boolean"},
                "score": {"type": "number", "minimum": 0, "maximum": 1},
            },
            "required": ["correct", "score"],
            "additionalProperties": false,
        }),
    });
    request
}

#[tokio::test]
async fn a_valid_reply_passes_and_the_schema_is_sent() {
    let server = ScriptedLlmServer::start(Script::in_order([Reply::json(json!({"correct": true, "score": 1}))])).await;
    let reply = deadline(client(&server).chat(&verdict_request())).await.unwrap();
    let value: Value = serde_json::from_str(reply.content.as_deref().unwrap()).unwrap();
    assert_eq!(value, json!({"correct": true, "score": 1}));
    let body = &server.chat_requests()[0].body;
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["name"], "verdict");
    assert_eq!(body["response_format"]["json_schema"]["schema"]["required"][1], "score");
}

#[tokio::test]
async fn a_fenced_reply_is_unwrapped() {
    let server =
        ScriptedLlmServer::start(Script::in_order([Reply::text("```json\n{\"correct\": false, \"score\": 0}\n```")]))
            .await;
    let reply = deadline(client(&server).chat(&verdict_request())).await.unwrap();
    assert_eq!(reply.content.as_deref(), Some("{\"correct\": false, \"score\": 0}"));
}

#[tokio::test]
async fn an_invalid_reply_is_repaired_by_re_asking() {
    let server = ScriptedLlmServer::start(Script::in_order([
        Reply::json(json!({"correct": "yes", "score": 3})).usage(10, 4),
        Reply::json(json!({"correct": true, "score": 0.9})).usage(30, 5),
    ]))
    .await;
    let reply = deadline(client(&server).chat(&verdict_request())).await.unwrap();
    let value: Value = serde_json::from_str(reply.content.as_deref().unwrap()).unwrap();
    assert_eq!(value, json!({"correct": true, "score": 0.9}));
    // Both calls' tokens count.
    assert_eq!((reply.usage.prompt_tokens, reply.usage.completion_tokens), (40, 9));

    let sent = server.chat_requests();
    assert_eq!(sent.len(), 2);
    let messages = sent[1].messages();
    assert_eq!(messages.len(), 4);
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(messages[2]["content"], json!({"correct": "yes", "score": 3}).to_string());
    let repair = sent[1].last_text("user").unwrap();
    assert!(repair.contains("`verdict`"), "{repair}");
    assert!(repair.contains("/correct"), "the validation error names the field: {repair}");
    assert!(repair.contains("\"additionalProperties\": false"), "the schema is shown: {repair}");
}

#[tokio::test]
async fn a_second_invalid_reply_is_a_typed_error_with_the_raw_reply() {
    let server = ScriptedLlmServer::start(Script::in_order([
        Reply::text("I think it is correct."),
        Reply::json(json!({"correct": true})),
    ]))
    .await;
    let err = deadline(client(&server).chat(&verdict_request())).await.unwrap_err();
    let LlmError::InvalidReply { problem, raw, .. } = &err else { panic!("{err:?}") };
    assert_eq!(raw, &json!({"correct": true}).to_string());
    assert!(problem.contains("verdict") && problem.contains("score"), "{problem}");
    assert!(server.chat_requests()[1].last_text("user").unwrap().contains("not JSON"));
    assert_eq!(server.chat_requests().len(), 2);
}

#[tokio::test]
async fn an_invalid_schema_is_rejected_without_retrying() {
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(json!({})))).await;
    let mut request = verdict_request();
    request.response_format.as_mut().unwrap().schema = json!({"type": "no-such-type"});
    let err = deadline(client(&server).chat(&request)).await.unwrap_err();
    assert!(matches!(err, LlmError::InvalidRequest { .. }), "{err:?}");
    assert_eq!(server.request_count(), 0);
}
