//! The per-model semaphore caps requests in flight, as the server observes.

use std::sync::Arc;
use std::time::Duration;

use flowmem_llm::{ChatModel, ChatRequest, HttpModel, Message, Purpose};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};

use crate::support::{config, deadline};

async fn max_in_flight(cap: usize, n_calls: usize) -> usize {
    let server =
        ScriptedLlmServer::start(Script::new().otherwise(Reply::text("ok").delay(Duration::from_millis(100)))).await;
    let mut cfg = config(&server);
    cfg.max_concurrency = cap;
    let model = Arc::new(HttpModel::new(cfg).unwrap());
    let calls = (0..n_calls).map(|i| {
        let model = Arc::clone(&model);
        tokio::spawn(async move {
            let request = ChatRequest::new(vec![Message::user(format!("question {i}"))], Purpose::Executor);
            model.chat(&request).await
        })
    });
    let results = deadline(futures::future::join_all(calls)).await;
    assert!(results.into_iter().all(|res| res.unwrap().is_ok()));
    assert_eq!(server.chat_requests().len(), n_calls);
    server.max_in_flight()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_bounds_requests_in_flight() {
    assert_eq!(max_in_flight(3, 12).await, 3);
    // Without a binding cap the same load does reach the server concurrently, so the
    // assertion above is the semaphore's doing.
    assert_eq!(max_in_flight(32, 12).await, 12);
}
