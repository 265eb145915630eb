//! The scripted server answers in order, on content, with faults, and records requests.

use std::time::Duration;

use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

async fn post(server: &ScriptedLlmServer, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .bearer_auth("sk-test")
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn chat(user: &str) -> Value {
    json!({"model": "m", "messages": [
        {"role": "system", "content": "You are a judge."},
        {"role": "user", "content": user},
    ]})
}

#[tokio::test]
async fn in_order_text_tool_call_and_json() {
    let server = ScriptedLlmServer::start(Script::in_order([
        Reply::text("hello there"),
        Reply::tool_call("get_order", json!({"order_id": "#W1"})),
        Reply::json(json!({"score": 0.5})).usage(7, 3),
    ]))
    .await;

    let first: Value = post(&server, chat("hi")).await.json().await.unwrap();
    assert_eq!(first["choices"][0]["message"]["content"], "hello there");
    assert_eq!(first["choices"][0]["index"], 0);
    assert_eq!(first["choices"][0]["finish_reason"], "stop");
    assert_eq!(first["usage"]["completion_tokens"], 2);
    assert_eq!(first["usage"]["prompt_tokens"], 5);

    let second: Value = post(&server, chat("order?")).await.json().await.unwrap();
    let call = &second["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_order");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"order_id": "#W1"}));
    assert_eq!(second["choices"][0]["finish_reason"], "tool_calls");

    let third: Value = post(&server, chat("score")).await.json().await.unwrap();
    let content: Value = serde_json::from_str(third["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"score": 0.5}));
    assert_eq!(third["usage"]["prompt_tokens"], 7);

    // The script is used up: a clear, non-retryable error.
    let exhausted = post(&server, chat("more")).await;
    assert_eq!(exhausted.status(), 400);
    assert!(exhausted.text().await.unwrap().contains("no reply for chat request #3"));

    let requests = server.chat_requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[1].last_text("user"), Some("order?"));
    assert_eq!(requests[0].header("Authorization"), Some("Bearer sk-test"));
}

#[tokio::test]
async fn content_rules_win_over_the_queue() {
    let script = Script::in_order([Reply::text("queued")])
        .when(Match::system_contains("planner"), Reply::text("plan"))
        .when_seq(Match::last_user_contains("flaky"), [Reply::server_error()])
        .otherwise(Reply::text("fallback"));
    let server = ScriptedLlmServer::start(script).await;

    let planner = json!({"model": "m", "messages": [
        {"role": "system", "content": "You are a planner."},
        {"role": "user", "content": "go"},
    ]});
    for _ in 0..2 {
        let reply: Value = post(&server, planner.clone()).await.json().await.unwrap();
        assert_eq!(reply["choices"][0]["message"]["content"], "plan");
    }
    assert_eq!(post(&server, chat("flaky")).await.status(), 500);
    // The sequence is used up, so the same request falls through to the queue.
    let reply: Value = post(&server, chat("flaky")).await.json().await.unwrap();
    assert_eq!(reply["choices"][0]["message"]["content"], "queued");
    let reply: Value = post(&server, chat("flaky")).await.json().await.unwrap();
    assert_eq!(reply["choices"][0]["message"]["content"], "fallback");
}

#[tokio::test]
async fn faults() {
    let server = ScriptedLlmServer::start(Script::in_order([
        Reply::rate_limited(3),
        Reply::rate_limited_ms(1500),
        Reply::malformed_json(),
        Reply::missing_choices(),
        Reply::text("x").without("/usage"),
        Reply::tool_call_raw("f", "{not json"),
    ]))
    .await;

    let limited = post(&server, chat("a")).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "3");
    let limited_ms = post(&server, chat("a")).await;
    assert_eq!(limited_ms.status(), 429);
    assert_eq!(limited_ms.headers()["retry-after"], "2");
    assert_eq!(limited_ms.headers()["retry-after-ms"], "1500");

    let malformed = post(&server, chat("b")).await;
    assert_eq!(malformed.status(), 200);
    assert!(serde_json::from_str::<Value>(&malformed.text().await.unwrap()).is_err());

    let missing: Value = post(&server, chat("c")).await.json().await.unwrap();
    assert!(missing.get("choices").is_none());
    assert!(missing.get("id").is_some());

    let no_usage: Value = post(&server, chat("d")).await.json().await.unwrap();
    assert!(no_usage.get("usage").is_none());
    assert_eq!(no_usage["choices"][0]["message"]["content"], "x");

    let raw: Value = post(&server, chat("e")).await.json().await.unwrap();
    assert_eq!(raw["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{not json");
}

#[tokio::test]
async fn tracks_requests_in_flight() {
    let server =
        ScriptedLlmServer::start(Script::new().otherwise(Reply::text("slow").delay(Duration::from_millis(200)))).await;
    let bodies: Vec<Value> = (0..5).map(|i| chat(&format!("q{i}"))).collect();
    let sends = bodies.into_iter().map(|body| post(&server, body));
    let replies = futures::future::join_all(sends).await;
    assert!(replies.iter().all(|reply| reply.status() == 200));
    assert_eq!(server.max_in_flight(), 5);
    assert_eq!(server.in_flight(), 0);
}

#[tokio::test]
async fn lists_models_and_records_unknown_routes() {
    let server = ScriptedLlmServer::start(Script::new().models(["alpha", "beta"])).await;
    let client = reqwest::Client::new();
    let models: Value = client.get(format!("{}/models", server.base_url())).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "alpha");
    assert_eq!(models["data"][1]["id"], "beta");
    let missing = client.get(format!("{}/nowhere", server.base_url())).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(server.request_count(), 2);
    assert!(server.chat_requests().is_empty());
}

#[tokio::test]
async fn an_unlogged_server_answers_and_counts_but_keeps_no_request() {
    let server = ScriptedLlmServer::start_unlogged(Script::new().otherwise(Reply::text("Sure."))).await;
    for i in 0..3 {
        let reply: Value = post(&server, chat(&format!("q{i}"))).await.json().await.unwrap();
        assert_eq!(reply["choices"][0]["message"]["content"], "Sure.");
    }
    assert_eq!(server.request_count(), 3);
    assert_eq!(server.max_in_flight(), 1);
    assert!(server.requests().is_empty(), "an unlogged server kept {} requests", server.requests().len());
}
