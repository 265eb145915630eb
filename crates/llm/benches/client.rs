//! The client's own overhead per call against the loopback scripted server, at
//! concurrency 1 and 64.
//!
//! Each group measures the same call two ways side by side: `raw` posts a prebuilt JSON
//! body with plain reqwest and parses the reply as a `serde_json::Value`; `http_model`
//! goes through [`HttpModel::chat`] (body building, semaphore, retry loop, typed
//! parsing, tool-argument parsing). The difference is the client's overhead. Throughput
//! is reported in calls per second (`elem/s`).
//!
//! Run with `cargo bench -p flowmem-llm --bench client`.

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use flowmem_llm::{ChatModel, ChatRequest, HttpModel, HttpModelConfig, Message, Purpose, ToolDefinition};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

fn request() -> ChatRequest {
    let mut request = ChatRequest::new(
        vec![
            Message::system("You are a helpful assistant for an online shop."),
            Message::user("Where is my order #W42? It was due yesterday."),
        ],
        Purpose::Agent,
    );
    request.tools = vec![ToolDefinition {
        name: "get_order".into(),
        description: "Look up an order by id.".into(),
        parameters: json!({"type": "object", "properties": {"order_id": {"type": "string"}}}),
    }];
    request
}

fn bench_client(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(ScriptedLlmServer::start(
        Script::new().otherwise(Reply::tool_call("get_order", json!({"order_id": "#W42"}))),
    ));
    let mut cfg = HttpModelConfig::new("bench", server.base_url(), "scripted-model");
    cfg.max_concurrency = 64;
    cfg.timeout = Duration::from_secs(30);
    let model = Arc::new(HttpModel::new(cfg).unwrap());
    let raw_client = reqwest::Client::new();
    let url = format!("{}/chat/completions", server.base_url());
    let raw_body = Arc::new(json!({
        "model": "scripted-model",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant for an online shop."},
            {"role": "user", "content": "Where is my order #W42? It was due yesterday."},
        ],
        "tools": [{"type": "function", "function": {"name": "get_order", "description": "Look up an order by id.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}],
        "tool_choice": "auto",
        "temperature": 0.0,
    }));
    let request = Arc::new(request());

    for concurrency in [1usize, 64] {
        let mut group = c.benchmark_group(format!("chat_concurrency_{concurrency}"));
        group.throughput(Throughput::Elements(concurrency as u64));
        group.sample_size(20);
        group.bench_function(BenchmarkId::from_parameter("raw"), |b| {
            b.to_async(&runtime).iter(|| {
                let calls: Vec<_> = (0..concurrency)
                    .map(|_| {
                        let client = raw_client.clone();
                        let url = url.clone();
                        let body = Arc::clone(&raw_body);
                        tokio::spawn(async move {
                            let reply: Value =
                                client.post(&url).json(&*body).send().await.unwrap().json().await.unwrap();
                            std::hint::black_box(reply);
                        })
                    })
                    .collect();
                async move {
                    for call in futures::future::join_all(calls).await {
                        call.unwrap();
                    }
                }
            });
        });
        group.bench_function(BenchmarkId::from_parameter("http_model"), |b| {
            b.to_async(&runtime).iter(|| {
                let calls: Vec<_> = (0..concurrency)
                    .map(|_| {
                        let model = Arc::clone(&model);
                        let request = Arc::clone(&request);
                        tokio::spawn(async move {
                            let reply = model.chat(std::hint::black_box(&request)).await.unwrap();
                            std::hint::black_box(reply);
                        })
                    })
                    .collect();
                async move {
                    for call in futures::future::join_all(calls).await {
                        call.unwrap();
                    }
                }
            });
        });
        group.finish();
    }
    drop(server);
}

criterion_group!(benches, bench_client);
criterion_main!(benches);
