//! The default text limit: free-text requests without `max_tokens` reach the server with
//! the limit; explicit limits and constrained requests arrive unchanged.

use std::sync::Arc;

use flowmem_llm::{ChatModel, ChatRequest, Message, Purpose, ResponseFormat, TextLimitModel};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

use crate::support::{client, deadline};

fn request(max_tokens: Option<u32>) -> ChatRequest {
    let mut request = ChatRequest::new(vec![Message::user("Plan the steps.")], Purpose::Executor);
    request.max_tokens = max_tokens;
    request
}

fn sent_limits(server: &ScriptedLlmServer) -> Vec<Value> {
    server.chat_requests().iter().map(|r| r.body.get("max_tokens").cloned().unwrap_or(Value::Null)).collect()
}

#[tokio::test]
async fn free_text_without_a_limit_gets_the_default() {
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::text("ok"))).await;
    let model = TextLimitModel::new(Arc::new(client(&server)), 64);
    deadline(model.chat(&request(None))).await.unwrap();
    deadline(model.chat(&request(Some(500)))).await.unwrap();
    deadline(model.chat(&request(Some(10)))).await.unwrap();
    assert_eq!(sent_limits(&server), vec![json!(64), json!(500), json!(10)]);
}

#[tokio::test]
async fn constrained_requests_are_left_alone() {
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(json!({})))).await;
    let model = TextLimitModel::new(Arc::new(client(&server)), 64);
    let mut constrained = request(None);
    constrained.response_format = Some(ResponseFormat { name: "v".into(), schema: json!({"type": "object"}) });
    deadline(model.chat(&constrained)).await.unwrap();
    assert_eq!(sent_limits(&server), vec![Value::Null]);
}
