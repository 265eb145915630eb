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
    cfg.timeout = Duration::from_secs(5);
    cfg.attempt_timeout = Some(Duration::from_millis(300));
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
    cfg.attempt_timeout = Some(Duration::from_millis(300));
    let reply = deadline(HttpModel::new(cfg).unwrap().chat(&hello())).await.unwrap();
    assert_eq!(reply.content.as_deref(), Some("ok"));

    let started = Instant::now();
    let (err, server) = gives_up_on(Reply::text("late").delay(Duration::from_secs(30))).await;
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    assert_eq!(server.chat_requests().len(), 3);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// Issue 27 (6): a body that is not a chat completion is a protocol error naming the
/// endpoint and the problem, never the model's reply.
#[tokio::test]
async fn malformed_bodies_are_retried_then_reported_as_protocol_errors() {
    recovers_after(vec![Reply::malformed_json()]).await;
    let (err, server) = gives_up_on(Reply::malformed_json()).await;
    let LlmError::Protocol { endpoint, problem, .. } = &err else { panic!("{err:?}") };
    assert_eq!(*endpoint, format!("{}/chat/completions", server.base_url()));
    assert!(problem.contains("not JSON") && problem.contains("chatcmpl-broken"), "{problem}");

    let (err, _) = gives_up_on(Reply::raw(200, "<html><body>502 Bad Gateway</body></html>")).await;
    let LlmError::Protocol { problem, .. } = &err else { panic!("{err:?}") };
    assert!(problem.contains("not JSON") && problem.contains("<html>"), "{problem}");
    assert!(err.to_string().starts_with("protocol error from model `scripted` at `http://127.0.0.1:"), "{err}");
}

#[tokio::test]
async fn missing_fields_are_retried_then_reported_as_protocol_errors() {
    recovers_after(vec![Reply::missing_choices()]).await;
    let (err, _) = gives_up_on(Reply::missing_choices()).await;
    let LlmError::Protocol { problem, .. } = &err else { panic!("{err:?}") };
    assert!(problem.contains("not a chat completion") && problem.contains("choices"), "{problem}");
    assert!(problem.contains("chatcmpl-scripted"), "{problem}");

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

/// Issue 27 (5): the timeout is the deadline of the whole call: a model that never
/// answers fails when it passes, not after every retry's full timeout.
#[tokio::test]
async fn the_timeout_is_a_deadline_for_the_whole_call() {
    let server =
        ScriptedLlmServer::start(Script::new().otherwise(Reply::text("late").delay(Duration::from_secs(60)))).await;
    let mut cfg = config(&server);
    cfg.timeout = Duration::from_millis(800);
    cfg.retry = flowmem_llm::RetryPolicy { max_retries: 4, ..fast_retries(4) };
    let started = Instant::now();
    let err = deadline(HttpModel::new(cfg.clone()).unwrap().chat(&hello())).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, LlmError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("0.8 s"), "{err}");
    assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");

    // With an attempt timeout, stalled attempts are retried, all within the deadline.
    cfg.attempt_timeout = Some(Duration::from_millis(200));
    let started = Instant::now();
    let err = deadline(HttpModel::new(cfg).unwrap().chat(&hello())).await.unwrap_err();
    assert!(matches!(err, LlmError::Timeout { .. } | LlmError::RetryPastDeadline { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_millis(1500), "{:?}", started.elapsed());
    assert!(server.chat_requests().len() >= 3, "{} requests", server.chat_requests().len());
}

/// Issue 27 (5): a `Retry-After` longer than what remains of the deadline fails the
/// call at once, with that reason, instead of sleeping past the deadline. (That each
/// retry that does happen is logged is checked in `tests/logs.rs`.)
#[tokio::test]
async fn a_retry_after_beyond_the_deadline_fails_at_once_saying_why() {
    let server =
        ScriptedLlmServer::start(Script::in_order([Reply::server_error()]).then(Reply::rate_limited(3600))).await;
    let mut cfg = config(&server);
    cfg.timeout = Duration::from_secs(5);
    cfg.retry = flowmem_llm::RetryPolicy { max_retry_after: Duration::from_secs(7200), ..fast_retries(4) };
    let started = Instant::now();
    let err = deadline(HttpModel::new(cfg).unwrap().chat(&hello())).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    let LlmError::RetryPastDeadline { reason, last, .. } = &err else { panic!("{err:?}") };
    assert!(reason.contains("3600") && reason.contains("Retry-After"), "{reason}");
    assert!(matches!(**last, LlmError::Status { status: 429, .. }), "{last:?}");
    assert!(err.to_string().contains("deadline"), "{err}");
    assert_eq!(server.chat_requests().len(), 2);
}
