//! The API key reaches the server and nothing else: not logs, errors, Debug output, or
//! the cache file.

use std::io::Write;
use std::sync::{Arc, Mutex};

use flowmem_llm::{
    ApiKey, CacheMode, CachedModel, ChatModel, ChatRequest, HttpModel, LlmError, Message, Purpose, ResponseCache,
    ResponseFormat,
};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use serde_json::json;

use crate::support::{config, deadline};

const KEY: &str = "sk-flowmem-test-SECRET-4242";

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_key_never_leaks() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = ScriptedLlmServer::start(Script::in_order([
        // Retries log warnings with the error.
        Reply::server_error(),
        Reply::rate_limited_ms(1),
        Reply::text("hello"),
        // A schema repair logs the problem.
        Reply::text("not json"),
        Reply::json(json!({"ok": true})),
        // Errors carry bodies and raw replies.
        Reply::status(401, "Incorrect API key provided"),
        Reply::tool_call_raw("f", "{broken"),
    ]))
    .await;
    let mut cfg = config(&server);
    cfg.api_key = Some(ApiKey::new(KEY));
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ResponseCache::open(&dir.path().join("cache.sqlite")).unwrap());
    let model =
        CachedModel::new(Arc::new(HttpModel::new(cfg.clone()).unwrap()), Arc::clone(&cache), CacheMode::ReadWrite);

    let mut texts = vec![format!("{cfg:?}"), format!("{model:?}")];
    deadline(model.chat(&ChatRequest::new(vec![Message::user("one")], Purpose::Agent))).await.unwrap();
    let mut json_request = ChatRequest::new(vec![Message::user("two")], Purpose::Judge);
    json_request.response_format = Some(ResponseFormat { name: "ok".into(), schema: json!({"type": "object"}) });
    deadline(model.chat(&json_request)).await.unwrap();
    let errors: Vec<LlmError> = vec![
        deadline(model.chat(&ChatRequest::new(vec![Message::user("three")], Purpose::Agent))).await.unwrap_err(),
        deadline(model.chat(&ChatRequest::new(vec![Message::user("four")], Purpose::Agent))).await.unwrap_err(),
    ];
    for err in &errors {
        texts.push(format!("{err} {err:?}"));
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            texts.push(format!("{cause} {cause:?}"));
            source = cause.source();
        }
    }
    // A connection error, whose message names the URL.
    let mut gone = flowmem_llm::HttpModelConfig::new("gone", "http://127.0.0.1:9/v1", "m");
    gone.api_key = Some(ApiKey::new(KEY));
    gone.retry = crate::support::fast_retries(0);
    let err =
        deadline(HttpModel::new(gone).unwrap().chat(&ChatRequest::new(vec![], Purpose::Other))).await.unwrap_err();
    texts.push(format!("{err} {err:?} {:?}", std::error::Error::source(&err)));

    // The key was really used: every request carried it.
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 7);
    let bearer = format!("Bearer {KEY}");
    assert!(requests.iter().all(|request| request.header("authorization") == Some(bearer.as_str())));

    drop(_guard);
    let log_text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(log_text.contains("retrying chat request"), "the capture works: {log_text}");
    assert!(!log_text.contains(KEY), "key in logs: {log_text}");
    for text in &texts {
        assert!(!text.contains(KEY), "key in {text}");
    }

    // Every file of the cache (database, WAL, shared memory).
    assert_eq!(cache.len().unwrap(), 2);
    drop(model);
    drop(cache);
    let mut n_files = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        n_files += 1;
        assert!(!bytes.windows(KEY.len()).any(|window| window == KEY.as_bytes()), "key in the cache file");
        assert!(!bytes.windows(10).any(|window| window == b"SECRET-424"), "part of the key in the cache file");
    }
    assert!(n_files >= 1);
}

/// The gateway's passthrough: a whole body and a streamed one that echo the key reach
/// the caller redacted.
#[tokio::test]
async fn a_passed_through_body_that_echoes_the_key_is_redacted_whole_or_streamed() {
    use futures::StreamExt as _;

    let echo = format!("data: {{\"error\": \"bad key {KEY}\"}}\n\ndata: [DONE]\n\n");
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::raw(200, echo.clone()))).await;
    let upstream = flowmem_llm::Passthrough::new(&server.base_url(), Some(ApiKey::new(KEY))).unwrap();
    let whole = upstream.chat(b"{}".to_vec()).await.unwrap().bytes().await.unwrap();
    let mut stream = upstream.chat(b"{}".to_vec()).await.unwrap().into_stream();
    let mut streamed = Vec::new();
    while let Some(piece) = stream.next().await {
        streamed.extend_from_slice(&piece.unwrap());
    }
    let expected = echo.replace(KEY, flowmem_model::REDACTED);
    assert_eq!(String::from_utf8_lossy(&whole), expected);
    assert_eq!(String::from_utf8_lossy(&streamed), expected);
}
