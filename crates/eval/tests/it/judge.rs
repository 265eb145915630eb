//! The ES judge against the scripted OpenAI-compatible server, through the HTTP backend
//! and the response cache.

use std::sync::Arc;

use flowmem_eval::{EvalError, JUDGE_ES_PROMPT, JudgeInput, judge_es};
use flowmem_llm::{CacheMode, CachedModel, ChatModel, HttpModel, HttpModelConfig, Prompts, ResponseCache};
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::json;

fn prompts() -> Prompts {
    let mut prompts = Prompts::new();
    prompts.register(JUDGE_ES_PROMPT).unwrap();
    prompts
}

fn judge_model(server: &ScriptedLlmServer, cache_dir: &std::path::Path) -> Arc<dyn ChatModel> {
    let http = HttpModel::new(HttpModelConfig::new("judge", server.base_url(), "judge-model")).unwrap();
    let cache = Arc::new(ResponseCache::open(&cache_dir.join("cache.sqlite")).unwrap());
    Arc::new(CachedModel::new(Arc::new(http), cache, CacheMode::ReadWrite))
}

fn input<'a>(answer: &'a str, outputs: &'a [String]) -> JudgeInput<'a> {
    JudgeInput { query: "Cancel order #W42.", reference: "Order #W42 is cancelled; $30 refunded.", answer, required_outputs: outputs }
}

#[tokio::test]
async fn the_judge_asks_for_structured_output_and_repeats_come_from_the_cache() {
    let verdict = json!({"rationale": "Right order, refund missing.", "correctness": 1.0, "completeness": 0.5, "relevance": 1.0, "clarity": 0.5});
    let server = ScriptedLlmServer::start(Script::new().when(Match::wants_json(), Reply::json(verdict))).await;
    let dir = tempfile::tempdir().unwrap();
    let model = judge_model(&server, dir.path());
    let prompts = prompts();
    let outputs = vec!["30".to_string()];

    let judgement = judge_es(model.as_ref(), &prompts, &input("Order #W42 is cancelled.", &outputs)).await.unwrap();
    assert_eq!(judgement.es(), 0.75);
    assert_eq!(judgement.rationale, "Right order, refund missing.");
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["response_format"]["type"], "json_schema");
    let schema = &body["response_format"]["json_schema"]["schema"];
    assert_eq!(schema["properties"]["correctness"]["maximum"], 1.0);
    let prompt = body["messages"][0]["content"].as_str().unwrap();
    assert!(prompt.contains("Cancel order #W42.") && prompt.contains("$30 refunded") && prompt.contains("Order #W42 is cancelled."));

    // The same question again is answered by the cache: the server sees nothing new.
    let again = judge_es(model.as_ref(), &prompts, &input("Order #W42 is cancelled.", &outputs)).await.unwrap();
    assert_eq!(again, judgement);
    assert_eq!(server.chat_requests().len(), 1);
    // A different answer is a different question.
    judge_es(model.as_ref(), &prompts, &input("Nothing was done.", &outputs)).await.unwrap();
    assert_eq!(server.chat_requests().len(), 2);
}

#[tokio::test]
async fn scores_outside_the_unit_interval_are_an_error_naming_the_dimension() {
    let verdict = json!({"rationale": "r", "correctness": 1.5, "completeness": 0.5, "relevance": 1.0, "clarity": 0.5});
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::json(verdict))).await;
    let dir = tempfile::tempdir().unwrap();
    let model = judge_model(&server, dir.path());
    let err = judge_es(model.as_ref(), &prompts(), &input("x", &[])).await.unwrap_err();
    assert!(matches!(err, EvalError::Judge { .. }), "{err}");
    assert!(err.to_string().contains("correctness"), "{err}");
}
