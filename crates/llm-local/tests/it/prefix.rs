//! The prefix cache: replies are identical with it and without it, reuse is reported
//! as `cached_tokens`, a small bound evicts, and concurrent requests through the HTTP
//! endpoint share it without disturbing each other.

use std::sync::Arc;

use serde_json::{Value, json};

use flowmem_llm::{AssistantToolCall, ChatRequest, Message, Purpose};
use flowmem_llm_local::LocalModel;

const SYSTEM: &str = "You are a support agent for an online shop. Look up what you need with the tools, \
    one call at a time, then answer the customer in one sentence.";

/// One ReAct-style conversation, run to the end on `model`: three tool calls, each
/// answered by a canned tool result, then a free-text answer. Returns every reply and
/// the `cached_tokens` of each.
pub fn react_loop(model: &LocalModel) -> (Vec<String>, Vec<u64>) {
    let tools = crate::tools::tools();
    let mut messages = vec![
        Message::system(SYSTEM),
        Message::user("What is the weather in Paris in celsius? Then remind me in 30 minutes to pack an umbrella."),
    ];
    let mut replies = Vec::new();
    let mut cached = Vec::new();
    for step in 0..3 {
        let mut request = ChatRequest::new(messages.clone(), Purpose::Agent);
        request.tools.clone_from(&tools);
        let reply = model.chat_blocking(&request).unwrap().response;
        cached.push(reply.usage.cached_tokens);
        let call = reply.tool_calls.first().expect("a request with tools gets a call").clone();
        replies.push(format!("{} {}", call.name, Value::Object(call.arguments.clone())));
        // The test names the calls, so both runs render the same conversation.
        let id = format!("call_{step}");
        messages.push(Message {
            content: None,
            tool_calls: vec![AssistantToolCall { id: id.clone(), ..call }],
            ..Message::assistant("")
        });
        let result = json!({"step": step, "status": "ok", "note": "Paris: 14 degrees, light rain; reminder saved."});
        messages.push(Message::tool_result(id, result.to_string()));
    }
    let mut request = ChatRequest::new(messages, Purpose::Agent);
    request.max_tokens = Some(24);
    let reply = model.chat_blocking(&request).unwrap().response;
    cached.push(reply.usage.cached_tokens);
    replies.push(reply.content.unwrap_or_default());
    (replies, cached)
}

#[test]
fn a_react_loop_replies_the_same_with_and_without_the_cache() {
    let (Some(cached), Some(cold)) = (crate::model(), crate::model_with_cache(0)) else { return };
    let (with, reused) = react_loop(&cached);
    let (without, none) = react_loop(&cold);
    assert_eq!(with, without, "the prefix cache changed a reply");
    assert!(none.iter().all(|&n| n == 0), "a model without the cache reported reuse: {none:?}");
    // Every tool step after the first extends the conversation before it by a tool
    // call and its result: at least the system prompt with the tools (several blocks)
    // is reused. (The last request offers no tools, so its system message differs.)
    for (step, &n) in reused.iter().enumerate().take(3).skip(1) {
        assert!(n >= 64, "step {step} reused {n} tokens: {reused:?}");
    }
    // Repeating the whole loop reuses from its first request on.
    let (again, reused_again) = react_loop(&cached);
    assert_eq!(again, with);
    assert!(reused_again[0] >= 64, "{reused_again:?}");
}

#[test]
fn reuse_is_counted_in_usage_and_stats() {
    let Some(model) = crate::model() else { return };
    let system = "You are the assistant of the usage test. ".repeat(12);
    let request = |q: &str| {
        let mut r = ChatRequest::new(vec![Message::system(&system), Message::user(q)], Purpose::Other);
        r.max_tokens = Some(2);
        r
    };
    let first = model.chat_blocking(&request("Hello")).unwrap().response.usage;
    let before = model.prefix_cache_stats().unwrap();
    let second = model.chat_blocking(&request("Goodbye")).unwrap().response.usage;
    let after = model.prefix_cache_stats().unwrap();
    assert_eq!(first.cached_tokens, 0, "the system prompt is new: {first:?}");
    // The shared system prompt is over 100 tokens: at least one whole block is reused,
    // in whole blocks, and never the whole prompt.
    assert!(second.cached_tokens >= 64 && second.cached_tokens % 64 == 0, "{second:?}");
    assert!(second.cached_tokens < second.prompt_tokens, "{second:?}");
    // Other tests share the model, so the counters grow by at least this request.
    assert!(after.reused_tokens >= before.reused_tokens + second.cached_tokens, "{before:?} → {after:?}");
    assert!(after.hits > before.hits, "{before:?} → {after:?}");
}

#[test]
fn a_small_bound_evicts_the_least_recently_used_blocks() {
    // A block of this model's KV is 64 positions × 46 KiB ≈ 2.9 MiB: 8 MiB holds two.
    let Some(model) = crate::model_with_cache(8) else { return };
    let long = |topic: &str| {
        let text = format!("Tell me everything about {topic}. ").repeat(40);
        let mut r = ChatRequest::new(vec![Message::user(text)], Purpose::Other);
        r.max_tokens = Some(1);
        r
    };
    model.chat_blocking(&long("volcanoes")).unwrap();
    let held = model.prefix_cache_stats().unwrap();
    assert!(held.bytes <= 8 << 20, "{held:?}");
    assert_eq!(held.blocks, 2, "{held:?}");
    assert!(held.evicted_blocks > 0, "the prompt has more than two blocks: {held:?}");
    // The first two blocks stayed (the deepest go first), so the prompt reuses them.
    let again = model.chat_blocking(&long("volcanoes")).unwrap().response.usage;
    assert_eq!(again.cached_tokens, 128, "{again:?}");
    // Another prompt pushes them out.
    model.chat_blocking(&long("glaciers")).unwrap();
    let after = model.chat_blocking(&long("volcanoes")).unwrap().response.usage;
    assert_eq!(after.cached_tokens, 0, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_http_requests_share_the_cache_and_match_sequential_replies() {
    let Some(model) = crate::model_with_cache(512) else { return };
    let questions =
        ["Name a colour.", "Name a fruit.", "Name a river.", "Name a month.", "Name a tree.", "Name a bird."];
    let body = |q: &str| {
        json!({
            "model": "local",
            "messages": [{"role": "system", "content": SYSTEM.repeat(3)}, {"role": "user", "content": q}],
            "max_tokens": 12
        })
    };
    // Sequential replies first, from the model directly.
    let mut sequential = Vec::new();
    for q in questions {
        let request: ChatRequest = {
            let mut r = ChatRequest::new(vec![Message::system(SYSTEM.repeat(3)), Message::user(q)], Purpose::Other);
            r.max_tokens = Some(12);
            r
        };
        sequential.push(model.chat_blocking(&request).unwrap().response.content.unwrap_or_default());
    }
    let server = crate::serve::Server::start(Arc::new(model.clone())).await;
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", server.base);
    let calls = questions.iter().map(|q| {
        let (client, url, body) = (client.clone(), url.clone(), body(q));
        tokio::spawn(async move { client.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap() })
    });
    let mut concurrent = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        concurrent.push(call.await.unwrap());
    }
    server.shutdown().await;
    for ((reply, expected), q) in concurrent.iter().zip(&sequential).zip(questions) {
        assert_eq!(reply["choices"][0]["message"]["content"].as_str(), Some(expected.as_str()), "{q}: {reply}");
        // The system prompt was cached by the sequential run.
        let cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
        assert!(cached >= 64, "{q}: {reply}");
    }
}

/// Two judges over one long context that differ only in their options (the schema of
/// their reply): the second prefills little more than its own question and format note,
/// because the format closes the last turn instead of opening the conversation.
#[test]
fn judges_that_differ_in_their_options_reuse_the_context_they_share() {
    // A cache of its own, so that no other test's prompts are in it.
    let Some(model) = crate::model_with_cache(384) else { return };
    let context: String =
        (0..40).map(|n| format!("Order #W{:07} has 2 items, shipped to Austin.\n", 5_000_000 + 37 * n)).collect();
    let judge = |options: Value| {
        let text = format!("Results so far:\n{context}Question: Which route fits the query?");
        let mut request = ChatRequest::new(vec![Message::user(text)], Purpose::Executor);
        let schema = json!({"type": "object", "properties": {"choice": {"type": "string", "enum": options}},
            "required": ["choice"], "additionalProperties": false});
        request.response_format = Some(flowmem_llm::ResponseFormat { name: "judge_choice".to_owned(), schema });
        model.chat_blocking(&request).unwrap().response.usage
    };
    let first = judge(json!(["cancel_pending_order", "skip"]));
    let second = judge(json!(["return_delivered_order_items", "skip"]));
    assert!(first.prompt_tokens > 600, "{first:?}");
    let prefilled = second.prompt_tokens - second.cached_tokens;
    assert!(prefilled < 160, "the second judge prefilled {prefilled} of {} tokens", second.prompt_tokens);
}
