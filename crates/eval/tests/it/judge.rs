//! The ES judge against the scripted OpenAI-compatible server, through the HTTP client
//! (which validates structured replies and re-asks once) and the response cache.

use std::sync::Arc;
use std::time::Duration;

use flowmem_eval::{EvalError, JUDGE_ES_PROMPT, JudgeInput, judge_es};
use flowmem_llm::{CacheMode, CachedModel, ChatModel, HttpModel, HttpModelConfig, Prompts, ResponseCache, RetryPolicy};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

fn prompts() -> Prompts {
    let mut prompts = Prompts::new();
    prompts.register(JUDGE_ES_PROMPT).unwrap();
    prompts
}

/// The HTTP client for `server`, with fast retries so a failing test fails quickly.
fn http(server: &ScriptedLlmServer) -> HttpModel {
    let mut cfg = HttpModelConfig::new("judge", server.base_url(), "judge-model");
    cfg.timeout = Duration::from_secs(5);
    cfg.retry = RetryPolicy {
        max_retries: 1,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(1),
    };
    HttpModel::new(cfg).unwrap()
}

const QUERY: &str = "Cancel order #W42 and tell me the refund.";
const REFERENCE: &str = "Order #W42 is cancelled; $30 goes back to the gift card.";

fn input<'a>(answer: &'a str, outputs: &'a [String]) -> JudgeInput<'a> {
    JudgeInput { query: QUERY, reference: REFERENCE, answer, required_outputs: outputs }
}

fn verdict(correctness: Value, completeness: f64) -> Value {
    json!({
        "rationale": "Right order; the refund amount is missing.",
        "correctness": correctness,
        "completeness": completeness,
        "relevance": 1.0,
        "clarity": 0.5,
    })
}

#[tokio::test]
async fn a_valid_judgement_gives_four_scores_and_es_is_their_mean() {
    let server = ScriptedLlmServer::start(Script::in_order([Reply::json(verdict(json!(1.0), 0.25))])).await;
    let outputs = vec!["30".to_string()];
    let judgement = judge_es(&http(&server), &prompts(), &input("Order #W42 is cancelled.", &outputs)).await.unwrap();

    assert_eq!(
        (judgement.correctness, judgement.completeness, judgement.relevance, judgement.clarity),
        (1.0, 0.25, 1.0, 0.5)
    );
    assert_eq!(judgement.es(), (1.0 + 0.25 + 1.0 + 0.5) / 4.0);
    assert_eq!(judgement.rationale, "Right order; the refund amount is missing.");

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["temperature"], 0.0, "a judge must be greedy to be replayable");
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["name"], "es_judgement");
    assert_eq!(body["response_format"]["json_schema"]["schema"]["properties"]["clarity"]["maximum"], 1.0);
    let prompt = requests[0].last_text("user").unwrap();
    for part in [QUERY, REFERENCE, "Order #W42 is cancelled.", "30"] {
        assert!(prompt.contains(part), "the prompt lacks {part:?}: {prompt}");
    }
}

#[tokio::test]
async fn an_out_of_range_score_is_repaired_by_the_clients_re_ask() {
    // The first reply breaks the schema's maximum; the client re-asks with the error and
    // the judge's second reply is the one scored.
    let server = ScriptedLlmServer::start(Script::in_order([
        Reply::json(verdict(json!(1.5), 0.5)),
        Reply::json(verdict(json!(0.75), 0.5)),
    ]))
    .await;
    let judgement = judge_es(&http(&server), &prompts(), &input("Cancelled.", &[])).await.unwrap();
    assert_eq!(judgement.correctness, 0.75);
    assert_eq!(judgement.es(), (0.75 + 0.5 + 1.0 + 0.5) / 4.0);

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2, "one re-ask, no more");
    let repair = requests[1].last_text("user").unwrap();
    assert!(repair.contains("/correctness"), "the re-ask names the bad field: {repair}");
    assert!(repair.contains("es_judgement"), "the re-ask names the schema: {repair}");
}

#[tokio::test]
async fn a_reply_invalid_twice_is_a_judge_error_naming_the_field() {
    let server = ScriptedLlmServer::start(Script::in_order([
        Reply::text("It looks mostly right to me."),
        Reply::json(verdict(json!("high"), 0.5)),
    ]))
    .await;
    let err = judge_es(&http(&server), &prompts(), &input("Cancelled.", &[])).await.unwrap_err();
    let EvalError::Judge { model, problem, raw } = &err else { panic!("expected EvalError::Judge, got {err:?}") };
    assert_eq!(model, "judge");
    assert!(problem.contains("correctness"), "the problem names the field: {problem}");
    assert!(raw.contains("\"high\""), "the last raw reply is kept: {raw}");
    let message = err.to_string();
    assert!(message.contains("`judge`") && message.contains("correctness"), "{message}");
    assert_eq!(server.chat_requests().len(), 2, "exactly one re-ask before giving up");
}

#[tokio::test]
async fn judging_again_is_answered_by_the_cache_without_http() {
    let server = ScriptedLlmServer::start(Script::in_order([
        // The first judging needs a re-ask; what gets cached is the repaired reply.
        Reply::text("not json"),
        Reply::json(verdict(json!(1.0), 0.5)),
        Reply::json(verdict(json!(0.0), 0.0)),
    ]))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ResponseCache::open(&dir.path().join("llm-cache.sqlite")).unwrap());
    let model: Arc<dyn ChatModel> =
        Arc::new(CachedModel::new(Arc::new(http(&server)), cache.clone(), CacheMode::ReadWrite));
    let prompts = prompts();

    let first = judge_es(model.as_ref(), &prompts, &input("Cancelled.", &[])).await.unwrap();
    assert_eq!(server.request_count(), 2);
    let again = judge_es(model.as_ref(), &prompts, &input("Cancelled.", &[])).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(server.request_count(), 2, "the second identical judging made HTTP requests");
    assert_eq!(cache.stats().hits, 1);

    // A different answer is a different question: it reaches the server.
    let other = judge_es(model.as_ref(), &prompts, &input("Nothing was done.", &[])).await.unwrap();
    assert_eq!(other.es(), (0.0 + 0.0 + 1.0 + 0.5) / 4.0);
    assert_eq!(server.request_count(), 3);
}
