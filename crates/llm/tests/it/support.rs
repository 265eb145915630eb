//! Shared helpers: a fast-retrying client for a scripted server, and a test deadline.

use std::future::Future;
use std::time::Duration;

use flowmem_llm::{HttpModel, HttpModelConfig, RetryPolicy};
use flowmem_testsupport::ScriptedLlmServer;

/// A client for `server` with a 2 s timeout and 3 fast retries.
pub fn client(server: &ScriptedLlmServer) -> HttpModel {
    HttpModel::new(config(server)).unwrap()
}

/// The configuration [`client`] uses, to tweak.
pub fn config(server: &ScriptedLlmServer) -> HttpModelConfig {
    let mut cfg = HttpModelConfig::new("scripted", server.base_url(), "scripted-model");
    cfg.timeout = Duration::from_secs(2);
    cfg.retry = fast_retries(3);
    cfg
}

/// Retries with millisecond backoff.
pub fn fast_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(3),
    }
}

/// Fails the test instead of hanging when `future` takes longer than 20 s.
pub async fn deadline<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future).await.expect("the call hung for 20 s")
}
