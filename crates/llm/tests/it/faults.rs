//! Every injected fault ends in a retried success or the documented typed error, fast.

use std::time::{Duration, Instant};

use flowmem_llm::{ChatModel, ChatRequest, HttpModel, LlmError, Message, Purpose};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};

use crate::support::{client, config, deadline, fast_retries};

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::user("hello")], Purpose::Other)
}

/// Runs one call against a server answering `faults` then `ok`.
async fn recovers_after(faults: Vec<Reply>) -> ScriptedLlmServer {
    let n_faults = faults.len();
    let server = ScriptedLlmServer::start(Script::in_order(faults).then(Reply::text("ok"))).await;
    let reply = deadline(client(&server).chat(&hello())).await.unwrap();
    assert_eq!(reply.content.as_deref(), Some("ok"));
    assert_eq!(server.chat_requests().len(), n_faults + 1);
    server
}

/// Runs one call against a server that always answers `fault`, with 2 retries.
async fn gives_up_on(fault: Reply) -> (LlmError, ScriptedLlmServer) {
    let server = ScriptedLlmServer::start(Script::new().otherwise(fault)).await;
    let mut cfg = config(&server);
    cfg.timeout = Duration::from_millis(300);
    cfg.retry = fast_retries(2);
    let err = deadline(HttpModel::new(cfg).unwrap().chat(&hello())).await.unwrap_err();
    (err, server)
}

#[tokio::test]
async fn rate_limits_are_retried_after_the_requested_wait() {
    let started = Instant::now();
    recovers_after(vec![Reply::rate_limited_ms(300), Reply::rate_limited_ms(300)]).await;
    assert!(started.elapsed() >= Duration::from_millis(600), "{:?}", started.elapsed());

    // Plain `Retry-After` in seconds is honoured too.
    let started = Instant::now();
    recovers_after(vec![Reply::rate_limited(1)]).await;
    assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());

    let (err, server) = gives_up_on(Reply::rate_limited_ms(1)).await;
    assert!(matches!(err, LlmError::Status { status: 429, .. }), "{err:?}");
    assert_eq!(server.chat_requests().len(), 3);
}

#[tokio::test]
async fn server_errors_are_retried() {
    recovers_after(vec![Reply::server_error(), Reply::status(503, "overloaded")]).await;
    let (err, server) = gives_up_on(Reply::server_error()).await;
    let LlmError::Status { status, body, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*status, 500);
    assert!(body.contains("The server had an error"), "{body}");
    assert_eq!(server.chat_requests().len(), 3);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let (err, server) = gives_up_on(Reply::status(400, "bad model")).await;
    assert!(matches!(err, LlmError::Status { status: 400, .. }), "{err:?}");
    assert_eq!(server.chat_requests().len(), 1);
}

#[tokio::test]
async fn slow_replies_time_out_and_are_retried() {
    let server = ScriptedLlmServer::start(
        Script::in_order([Reply::text("late").delay(Duration::from_secs(5))]).then(Reply::text("ok")),
    )
    .await;
    let mut cfg = config(&server);
    cfg.timeout = Duration::from_millis(300);
    let reply = deadline(HttpModel::new(cfg).unwrap().chat(&hello())).await.unwrap();
    assert_eq!(reply.content.as_deref(), Some("ok"));

    let started = Instant::now();
    let (err, server) = gives_up_on(Reply::text("late").delay(Duration::from_secs(30))).await;
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    assert_eq!(server.chat_requests().len(), 3);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[tokio::test]
async fn malformed_bodies_are_retried_then_reported_raw() {
    recovers_after(vec![Reply::malformed_json()]).await;
    let (err, _) = gives_up_on(Reply::malformed_json()).await;
    let LlmError::InvalidReply { raw, problem, .. } = &err else { panic!("{err:?}") };
    assert!(raw.starts_with(r#"{"id": "chatcmpl-broken""#), "{raw}");
    assert!(problem.contains("not a chat completion"), "{problem}");
}

#[tokio::test]
async fn missing_fields_are_retried_then_reported_raw() {
    recovers_after(vec![Reply::missing_choices()]).await;
    let (err, _) = gives_up_on(Reply::missing_choices()).await;
    let LlmError::InvalidReply { raw, problem, .. } = &err else { panic!("{err:?}") };
    assert!(problem.contains("choices"), "{problem}");
    assert!(raw.contains("chatcmpl-scripted"), "{raw}");

    // Optional fields may be missing: no usage means zero tokens, not an error.
    let server = ScriptedLlmServer::start(Script::in_order([Reply::text("ok").without("/usage")])).await;
    let reply = deadline(client(&server).chat(&hello())).await.unwrap();
    assert_eq!(reply.usage.prompt_tokens, 0);
}

#[tokio::test]
async fn connection_errors_are_retried_then_reported() {
    // Bind a port and close it again, so nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut cfg = flowmem_llm::HttpModelConfig::new("gone", format!("http://127.0.0.1:{port}/v1"), "m");
    cfg.retry = fast_retries(2);
    let err = deadline(HttpModel::new(cfg).unwrap().chat(&hello())).await.unwrap_err();
    assert!(matches!(err, LlmError::Transport { .. }), "{err:?}");
    assert!(err.to_string().contains("could not reach model `gone`"), "{err}");
}
