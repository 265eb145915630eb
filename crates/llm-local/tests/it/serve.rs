//! The OpenAI-compatible endpoint answers an HTTP client over loopback.

use std::sync::Arc;

use serde_json::{Value, json};

use flowmem_llm::{ChatModel, EmbeddingModel};

pub struct Server {
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    pub async fn start(model: Arc<dyn ChatModel>) -> Server {
        Server::start_with(model, None).await
    }

    pub async fn start_with(model: Arc<dyn ChatModel>, embedder: Option<Arc<dyn EmbeddingModel>>) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(flowmem_llm_local::serve(listener, model, embedder, async {
            let _ = stopped.await;
        }));
        Server { base, stop: Some(stop), task }
    }

    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let response = client.post(url).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn openai_endpoint_serves_text_tools_and_schemas() {
    let Some(model) = crate::model() else { return };
    let server = Server::start(Arc::new(model)).await;
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", server.base);

    let models: Value = client.get(format!("{}/models", server.base)).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "smollm2-135m-instruct");

    let (status, text) = post(
        &client,
        &url,
        &json!({"model": "local", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 12}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(text["object"], "chat.completion");
    assert_eq!(text["choices"][0]["index"], 0);
    assert!(text["choices"][0]["message"]["content"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(text["usage"]["prompt_tokens"].as_u64().unwrap() > 0);

    let tools: Vec<Value> = crate::tools::tools()
        .into_iter()
        .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
        .collect();
    let (status, called) = post(
        &client,
        &url,
        &json!({
            "messages": [{"role": "user", "content": "What's the weather in Rome in celsius?"}],
            "tools": tools,
            "tool_choice": "required",
            "max_tokens": 96
        }),
    )
    .await;
    assert_eq!(status, 200, "{called}");
    assert_eq!(called["choices"][0]["finish_reason"], "tool_calls");
    let call = &called["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    let name = call["function"]["name"].as_str().unwrap();
    let tool = crate::tools::tools().into_iter().find(|t| t.name == name).expect("an offered tool");
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(crate::schema_errors(&tool.parameters, &arguments), Vec::<String>::new());

    let schema = json!({"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]});
    let (status, structured) = post(
        &client,
        &url,
        &json!({
            "messages": [{"role": "user", "content": "What is 2 + 3?"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "sum", "schema": schema, "strict": true}},
            "max_tokens": 32
        }),
    )
    .await;
    assert_eq!(status, 200, "{structured}");
    let content: Value =
        serde_json::from_str(structured["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(crate::schema_errors(&schema, &content), Vec::<String>::new());

    let (status, error) = post(&client, &url, &json!({"messages": [{"role": "wizard", "content": "x"}]})).await;
    assert_eq!(status, 400);
    assert!(error["error"]["message"].as_str().unwrap().contains("$.messages[0].role"), "{error}");

    // A prompt over the context: a 400 with OpenAI's code and llama.cpp's counts, which
    // our HTTP client reads back, so that callers can shorten the request.
    let long = json!({"messages": [{"role": "user", "content": "apple banana cherry ".repeat(2000)}], "max_tokens": 8});
    let (status, error) = post(&client, &url, &long).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["code"], "context_length_exceeded", "{error}");
    assert_eq!(error["error"]["n_ctx"], 4096, "{error}");
    assert!(error["error"]["n_prompt_tokens"].as_u64().unwrap() > 5000, "{error}");
    let http =
        flowmem_llm::HttpModel::new(flowmem_llm::HttpModelConfig::new("local", server.base.clone(), "local")).unwrap();
    let request = flowmem_llm::ChatRequest::new(
        vec![flowmem_llm::Message::user("apple banana cherry ".repeat(2000))],
        flowmem_llm::Purpose::Executor,
    );
    match http.chat(&request).await {
        Err(flowmem_llm::LlmError::ContextExceeded { tokens: Some(tokens), limit: Some(4096), .. }) => {
            assert!(tokens > 5000, "{tokens}");
        }
        other => panic!("{other:?}"),
    }

    server.shutdown().await;
}

/// The `data:` events of a server-sent event stream, `[DONE]` as a string.
fn events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_owned())))
        .collect()
}

#[tokio::test]
async fn a_streamed_tool_call_arrives_as_openai_chunks() {
    let Some(model) = crate::model() else { return };
    let server = Server::start(Arc::new(model)).await;
    let client = reqwest::Client::new();
    let tools: Vec<Value> = crate::tools::tools()
        .into_iter()
        .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
        .collect();
    let request = json!({
        "messages": [{"role": "user", "content": "What's the weather in Rome in celsius?"}],
        "tools": tools, "tool_choice": "required", "max_tokens": 96, "stream": true,
    });
    let url = format!("{}/chat/completions", server.base);
    let response = client.post(&url).json(&request).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = events(&response.text().await.unwrap());
    assert_eq!(events.last(), Some(&Value::String("[DONE]".to_owned())), "{events:?}");
    let chunks = &events[..events.len() - 1];
    assert!(chunks.iter().all(|chunk| chunk["object"] == "chat.completion.chunk"), "{events:?}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let calls: Vec<&Value> =
        chunks.iter().filter_map(|chunk| chunk["choices"][0]["delta"]["tool_calls"].get(0)).collect();
    assert_eq!(calls.len(), 1, "{events:?}");
    assert_eq!(calls[0]["index"], 0);
    assert!(calls[0]["id"].as_str().is_some_and(|id| !id.is_empty()), "{events:?}");
    let arguments: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(arguments.is_object(), "{events:?}");
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "tool_calls");

    // The same request unstreamed: the same call.
    let mut unstreamed = request.clone();
    unstreamed["stream"] = json!(false);
    let (status, body) = post(&client, &url, &unstreamed).await;
    assert_eq!(status, 200, "{body}");
    let call = &body["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], calls[0]["function"]["name"]);
    assert_eq!(call["arguments"], calls[0]["function"]["arguments"]);
    server.shutdown().await;
}
