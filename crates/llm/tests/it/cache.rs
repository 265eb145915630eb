//! The response cache replays temperature-0 calls with zero HTTP requests.

use std::sync::Arc;

use flowmem_llm::{
    CacheMode, CachedModel, ChatModel, ChatRequest, LlmError, Message, PromptId, Purpose, ResponseCache,
};
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::json;

use crate::support::{client, deadline};

fn ask(question: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::system("Answer briefly."), Message::user(question)], Purpose::Executor)
}

fn script() -> Script {
    Script::new()
        .when(Match::last_user_contains("capital"), Reply::text("Paris"))
        .when(Match::last_user_contains("order"), Reply::tool_call("get_order", json!({"order_id": "#1"})))
        .otherwise(Reply::text("something else"))
}

#[tokio::test]
async fn replay_makes_no_http_requests() {
    let server = ScriptedLlmServer::start(script()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache/llm.sqlite");
    let questions = ["What is the capital of France?", "Where is my order?", "Anything?"];

    let cache = Arc::new(ResponseCache::open(&path).unwrap());
    let model = CachedModel::new(Arc::new(client(&server)), Arc::clone(&cache), CacheMode::ReadWrite);
    let mut first = Vec::new();
    for question in questions {
        first.push(deadline(model.chat(&ask(question))).await.unwrap());
    }
    assert!(first.iter().all(|reply| !reply.cached));
    assert_eq!(server.request_count(), 3);
    assert_eq!(cache.stats().misses, 3);
    assert_eq!(cache.stats().writes, 3);
    assert_eq!(cache.len().unwrap(), 3);

    // A fresh process: reopen the file, replay read-only.
    drop(model);
    drop(cache);
    let cache = Arc::new(ResponseCache::open(&path).unwrap());
    let replay = CachedModel::new(Arc::new(client(&server)), Arc::clone(&cache), CacheMode::ReadOnly);
    for (question, original) in questions.iter().zip(&first) {
        let reply = deadline(replay.chat(&ask(question))).await.unwrap();
        assert!(reply.cached);
        assert_eq!(reply.content, original.content);
        assert_eq!(reply.tool_calls, original.tool_calls);
        assert_eq!(reply.usage, original.usage);
        assert!(reply.latency.is_zero());
    }
    assert_eq!(server.request_count(), 3, "the replay sent HTTP requests");
    assert_eq!(cache.stats().hits, 3);
    assert_eq!(cache.stats().misses, 0);

    // A read-only miss is a typed error, and still no request.
    let err = deadline(replay.chat(&ask("A new question"))).await.unwrap_err();
    assert!(matches!(err, LlmError::CacheMiss { .. }), "{err:?}");
    assert_eq!(server.request_count(), 3);
    assert_eq!(cache.stats().misses, 1);
}

#[tokio::test]
async fn what_changes_the_key_misses() {
    let server = ScriptedLlmServer::start(script()).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ResponseCache::open(&dir.path().join("c.sqlite")).unwrap());
    let model = CachedModel::new(Arc::new(client(&server)), Arc::clone(&cache), CacheMode::ReadWrite);
    let base = ask("What is the capital of France?");
    deadline(model.chat(&base)).await.unwrap();
    // Same request for another purpose: a hit.
    let other_purpose = ChatRequest { purpose: Purpose::Judge, ..base.clone() };
    assert!(deadline(model.chat(&other_purpose)).await.unwrap().cached);
    // A new prompt-template version: a miss.
    let new_prompt = ChatRequest {
        prompts: vec![PromptId { name: "plan".into(), version: 2, hash: "0123456789abcdef".into() }],
        ..base.clone()
    };
    assert!(!deadline(model.chat(&new_prompt)).await.unwrap().cached);
    assert_eq!(server.request_count(), 2);
    assert_eq!(cache.stats().hits, 1);
    assert_eq!(cache.stats().misses, 2);
}

#[tokio::test]
async fn sampled_calls_and_off_mode_bypass_the_cache() {
    let server = ScriptedLlmServer::start(script()).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ResponseCache::open(&dir.path().join("c.sqlite")).unwrap());
    let model = CachedModel::new(Arc::new(client(&server)), Arc::clone(&cache), CacheMode::ReadWrite);
    let sampled = ChatRequest { temperature: 0.8, ..ask("What is the capital of France?") };
    deadline(model.chat(&sampled)).await.unwrap();
    deadline(model.chat(&sampled)).await.unwrap();
    assert_eq!(server.request_count(), 2);
    // With a seed, a sampled call is replayable.
    let seeded = ChatRequest { seed: Some(7), ..sampled.clone() };
    deadline(model.chat(&seeded)).await.unwrap();
    assert!(deadline(model.chat(&seeded)).await.unwrap().cached);
    assert_eq!(server.request_count(), 3);

    let off = CachedModel::new(Arc::new(client(&server)), Arc::clone(&cache), CacheMode::Off);
    assert!(!deadline(off.chat(&seeded)).await.unwrap().cached);
    assert_eq!(server.request_count(), 4);
    assert_eq!(cache.stats().bypassed, 3);
}

#[tokio::test]
async fn errors_are_not_cached() {
    let server = ScriptedLlmServer::start(Script::in_order([Reply::status(400, "nope"), Reply::text("fine")])).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ResponseCache::open(&dir.path().join("c.sqlite")).unwrap());
    let model = CachedModel::new(Arc::new(client(&server)), Arc::clone(&cache), CacheMode::ReadWrite);
    assert!(deadline(model.chat(&ask("q"))).await.is_err());
    assert_eq!(deadline(model.chat(&ask("q"))).await.unwrap().content.as_deref(), Some("fine"));
    assert_eq!(cache.len().unwrap(), 1);
}

#[test]
fn a_foreign_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-sqlite.sqlite");
    std::fs::write(&path, "this is not a database, just text that is long enough to matter").unwrap();
    let err = ResponseCache::open(&path).unwrap_err();
    assert!(matches!(err, LlmError::Cache { .. }), "{err:?}");
    assert!(err.to_string().contains("not-sqlite.sqlite"), "{err}");
}
