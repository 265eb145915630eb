//! A minimal OpenAI-compatible chat client for these tests and the bench.
//!
//! It speaks the chat-completions wire format to the scripted server in
//! `flowmem-testsupport`, so every LLM call of the engine under test goes over real HTTP.
//! It stands in only until `flowmem_llm::HttpModel` is merged into this branch; then
//! `support::http_model` and the bench switch to it (one line each).

#![allow(missing_docs)]

use std::time::{Duration, Instant};

use flowmem_llm::{
    AssistantToolCall, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, ToolChoice,
    Usage,
};
use serde_json::{Value, json};

pub struct HttpModel {
    pub base_url: String,
    pub client: reqwest::Client,
}

#[async_trait::async_trait]
impl ChatModel for HttpModel {
    fn name(&self) -> &str {
        "scripted"
    }
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let messages: Vec<Value> = request.messages.iter().map(|m| {
            let mut v = json!({"role": m.role, "content": m.content});
            if !m.tool_calls.is_empty() {
                v["tool_calls"] = Value::Array(m.tool_calls.iter().map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": Value::Object(c.arguments.clone()).to_string()}})).collect());
            }
            if let Some(id) = &m.tool_call_id { v["tool_call_id"] = json!(id); }
            v
        }).collect();
        let mut body = json!({"model": "scripted-model", "messages": messages});
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(request.tools.iter().map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}})).collect());
            body["tool_choice"] = json!(match request.tool_choice {
                ToolChoice::Auto => "auto",
                ToolChoice::Required => "required",
                ToolChoice::None => "none",
            });
        }
        if let Some(format) = &request.response_format {
            body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": format.name, "schema": format.schema}});
        }
        let err = |e: String| LlmError::Status {
            model: "scripted".into(),
            status: 0,
            body: e,
        };
        let resp = self
            .client
            .post(format!("{}/chat/completions", self.base_url))
            .json(&body)
            .send()
            .await
            .map_err(|e| err(e.to_string()))?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| err(e.to_string()))?;
        if status != 200 {
            return Err(LlmError::Status {
                model: "scripted".into(),
                status,
                body: text,
            });
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        let msg = &v["choices"][0]["message"];
        let tool_calls = msg["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| AssistantToolCall {
                        id: c["id"].as_str().unwrap_or("").to_owned(),
                        name: c["function"]["name"].as_str().unwrap_or("").to_owned(),
                        arguments: serde_json::from_str::<Value>(
                            c["function"]["arguments"].as_str().unwrap_or("{}"),
                        )
                        .ok()
                        .and_then(|a| a.as_object().cloned())
                        .unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(ChatResponse {
            content: msg["content"].as_str().map(str::to_owned),
            tool_calls,
            finish_reason: FinishReason::Stop,
            usage: Usage {
                prompt_tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
                completion_tokens: v["usage"]["completion_tokens"].as_u64().unwrap_or(0),
            },
            latency: started.elapsed().max(Duration::ZERO),
            cached: false,
        })
    }
}
