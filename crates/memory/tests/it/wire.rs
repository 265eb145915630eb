//! A small OpenAI-compatible chat client for these tests.
//!
//! `flowmem_llm::HttpModel` is not on any branch yet; until it lands, the tests talk to
//! the scripted server over real HTTP with this client. It speaks the chat-completions
//! wire format: messages, function tools, tool choice, `json_schema` response formats.

use std::time::Instant;

use serde_json::{Value, json};

use flowmem_llm::{
    AssistantToolCall, ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Role, ToolChoice, Usage,
};
use flowmem_model::JsonObject;

/// A chat model at `base_url` (the scripted server's).
pub struct WireModel {
    pub base_url: String,
    pub client: reqwest::Client,
}

impl WireModel {
    pub fn new(base_url: String) -> WireModel {
        WireModel { base_url, client: reqwest::Client::new() }
    }
}

fn body(request: &ChatRequest) -> Value {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|message| {
            let role = match message.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool",
            };
            let mut out = json!({"role": role, "content": message.content});
            if !message.tool_calls.is_empty() {
                out["tool_calls"] = message
                    .tool_calls
                    .iter()
                    .map(|call| json!({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": Value::Object(call.arguments.clone()).to_string()}}))
                    .collect();
            }
            if let Some(id) = &message.tool_call_id {
                out["tool_call_id"] = json!(id);
            }
            out
        })
        .collect();
    let mut body = json!({"model": "scripted-model", "messages": messages, "temperature": request.temperature});
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| json!({"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters}}))
            .collect();
        body["tool_choice"] = json!(match request.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        });
    }
    if let Some(format) = &request.response_format {
        body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": format.name, "schema": format.schema, "strict": true}});
    }
    if let Some(max_tokens) = request.max_tokens {
        body["max_tokens"] = json!(max_tokens);
    }
    body
}

#[async_trait::async_trait]
impl ChatModel for WireModel {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let clock = Instant::now();
        let transport = |err: reqwest::Error| LlmError::Transport { model: "scripted".into(), source: Box::new(err) };
        let response = self
            .client
            .post(format!("{}/chat/completions", self.base_url.trim_end_matches('/')))
            .json(&body(request))
            .send()
            .await
            .map_err(transport)?;
        let status = response.status().as_u16();
        let reply: Value = response.json().await.map_err(transport)?;
        if status != 200 {
            return Err(LlmError::Status { model: "scripted".into(), status, body: reply.to_string() });
        }
        let choice = &reply["choices"][0];
        let message = &choice["message"];
        let tool_calls = message["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .map(|call| AssistantToolCall {
                        id: call["id"].as_str().unwrap_or_default().to_owned(),
                        name: call["function"]["name"].as_str().unwrap_or_default().to_owned(),
                        arguments: serde_json::from_str::<JsonObject>(call["function"]["arguments"].as_str().unwrap_or("{}")).unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(ChatResponse {
            content: message["content"].as_str().map(str::to_owned),
            tool_calls,
            finish_reason: match choice["finish_reason"].as_str() {
                Some("stop") => FinishReason::Stop,
                Some("length") => FinishReason::Length,
                Some("tool_calls") => FinishReason::ToolCalls,
                _ => FinishReason::Other,
            },
            usage: Usage {
                prompt_tokens: reply["usage"]["prompt_tokens"].as_u64().unwrap_or_default(),
                completion_tokens: reply["usage"]["completion_tokens"].as_u64().unwrap_or_default(),
            },
            latency: clock.elapsed(),
            cached: false,
        })
    }
}
