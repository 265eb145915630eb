//! Accounting counts calls, tokens, cache hits and time per model and purpose.

use std::sync::Arc;

use flowmem_llm::{
    AccountedModel, Accounting, CacheMode, CachedModel, ChatModel, ChatRequest, Message, Purpose, ResponseCache,
};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};

use crate::support::{client, deadline};

#[tokio::test]
async fn counts_per_model_and_purpose_through_the_cache() {
    let server = ScriptedLlmServer::start(Script::in_order([
        Reply::text("plan").usage(100, 10),
        Reply::text("verdict").usage(50, 5),
        Reply::status(400, "bad"),
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ResponseCache::open(&dir.path().join("c.sqlite")).unwrap());
    let accounting = Accounting::new();
    let model = AccountedModel::new(
        Arc::new(CachedModel::new(Arc::new(client(&server)), cache, CacheMode::ReadWrite)),
        accounting.clone(),
    );
    let optimize = ChatRequest::new(vec![Message::user("propose edits")], Purpose::Optimizer);
    let judge = ChatRequest::new(vec![Message::user("judge this")], Purpose::Judge);
    deadline(model.chat(&optimize)).await.unwrap();
    deadline(model.chat(&judge)).await.unwrap();
    // A cache hit: counted as a call, spending no tokens.
    assert!(deadline(model.chat(&judge)).await.unwrap().cached);
    let failing = ChatRequest::new(vec![Message::user("fails")], Purpose::Agent);
    assert!(deadline(model.chat(&failing)).await.is_err());

    let snapshot = accounting.snapshot();
    let total = snapshot.total;
    assert_eq!((total.calls, total.errors, total.cache_hits), (4, 1, 1));
    assert_eq!((total.prompt_tokens, total.completion_tokens), (150, 15));
    // What the cache hit's original call spent is kept apart.
    assert_eq!((total.cached_prompt_tokens, total.cached_completion_tokens), (50, 5));
    assert_eq!(snapshot.per_model["scripted"].calls, 4);
    assert_eq!(snapshot.per_purpose[&Purpose::Optimizer].prompt_tokens, 100);
    assert_eq!(snapshot.per_purpose[&Purpose::Judge].calls, 2);
    assert_eq!(snapshot.per_purpose[&Purpose::Judge].completion_tokens, 5);
    assert_eq!(snapshot.per_purpose[&Purpose::Agent].errors, 1);
    let json = serde_json::to_value(&snapshot).unwrap();
    assert_eq!(json["per_purpose"]["judge"]["cache_hits"], 1);
}

#[tokio::test]
async fn a_nested_accounting_counts_one_run_apart_from_the_whole() {
    let server = ScriptedLlmServer::start(Script::in_order([
        Reply::text("first").usage(10, 1),
        Reply::text("second").usage(20, 2),
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ResponseCache::open(&dir.path().join("c.sqlite")).unwrap());
    let whole = Accounting::new();
    let model: Arc<dyn ChatModel> = Arc::new(AccountedModel::new(
        Arc::new(CachedModel::new(Arc::new(client(&server)), cache, CacheMode::ReadWrite)),
        whole.clone(),
    ));
    let request = |text: &str| ChatRequest::new(vec![Message::user(text)], Purpose::Executor);
    let first_run = AccountedModel::new(model.clone(), Accounting::new());
    deadline(first_run.chat(&request("a"))).await.unwrap();
    let second_run = AccountedModel::new(model.clone(), Accounting::new());
    deadline(second_run.chat(&request("b"))).await.unwrap();
    assert!(deadline(second_run.chat(&request("a"))).await.unwrap().cached);

    let first = first_run.accounting().snapshot().total;
    assert_eq!((first.calls, first.prompt_tokens, first.completion_tokens), (1, 10, 1));
    let second = second_run.accounting().snapshot().total;
    assert_eq!((second.calls, second.cache_hits, second.prompt_tokens, second.cached_prompt_tokens), (2, 1, 20, 10));
    assert_eq!(second.completion_tokens + second.cached_completion_tokens, 3);
    assert_eq!(whole.snapshot().total.calls, 3, "the run-wide tally still sees every call");
}
