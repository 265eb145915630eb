//! Tool calls: definitions go out as OpenAI function tools, arguments come back parsed.

use flowmem_llm::{ChatModel, ChatRequest, FinishReason, LlmError, Message, Purpose, Role, ToolChoice, ToolDefinition};
use flowmem_model::{ArgsError, error_chain};
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

use crate::support::{client, deadline};

fn get_order_tool() -> ToolDefinition {
    ToolDefinition {
        name: "get_order".into(),
        description: "Look up an order by id.".into(),
        parameters: json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}),
    }
}

#[tokio::test]
async fn tool_call_round_trip() {
    let server = ScriptedLlmServer::start(
        Script::in_order([Reply::tool_call("get_order", json!({"order_id": "#W42", "verbose": true}))])
            .when(Match::after_tool_result(), Reply::text("Order #W42 has shipped.")),
    )
    .await;
    let model = client(&server);
    let mut request = ChatRequest::new(
        vec![Message::system("You help with orders."), Message::user("Where is order #W42?")],
        Purpose::Agent,
    );
    request.tools = vec![get_order_tool()];
    request.tool_choice = ToolChoice::Required;

    let first = deadline(model.chat(&request)).await.unwrap();
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    assert_eq!(first.tool_calls.len(), 1);
    let call = &first.tool_calls[0];
    assert_eq!(call.name, "get_order");
    assert_eq!(Value::Object(call.arguments.clone()), json!({"order_id": "#W42", "verbose": true}));

    request.messages.push(Message {
        role: Role::Assistant,
        content: None,
        tool_calls: first.tool_calls.clone(),
        tool_call_id: None,
    });
    request.messages.push(Message::tool_result(&call.id, r#"{"status": "shipped"}"#));
    let second = deadline(model.chat(&request)).await.unwrap();
    assert_eq!(second.content.as_deref(), Some("Order #W42 has shipped."));
    assert_eq!(second.finish_reason, FinishReason::Stop);

    let sent = server.chat_requests();
    assert_eq!(sent.len(), 2);
    let tools = &sent[0].body["tools"];
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "get_order");
    assert_eq!(tools[0]["function"]["parameters"]["required"][0], "order_id");
    assert_eq!(sent[0].body["tool_choice"], "required");
    // The assistant's call goes back with its arguments as a JSON string, and the tool
    // result names the call it answers.
    let messages = sent[1].messages();
    let echoed = &messages[2]["tool_calls"][0];
    assert_eq!(echoed["id"], call.id.as_str());
    let args: Value = serde_json::from_str(echoed["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"order_id": "#W42", "verbose": true}));
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_call_id"], call.id.as_str());
}

#[tokio::test]
async fn several_calls_in_one_reply() {
    let server = ScriptedLlmServer::start(Script::in_order([Reply::tool_calls([
        ("get_order", json!({"order_id": "#1"})),
        ("get_order", json!({"order_id": "#2"})),
    ])]))
    .await;
    let mut request = ChatRequest::new(vec![Message::user("Orders #1 and #2?")], Purpose::Agent);
    request.tools = vec![get_order_tool()];
    let reply = deadline(client(&server).chat(&request)).await.unwrap();
    let ids: Vec<&Value> = reply.tool_calls.iter().map(|call| &call.arguments["order_id"]).collect();
    assert_eq!(ids, [&json!("#1"), &json!("#2")]);
    assert_ne!(reply.tool_calls[0].id, reply.tool_calls[1].id);
}

#[tokio::test]
async fn bad_arguments_are_a_typed_error_with_the_raw_text() {
    for (raw, not_json) in [("{\"order_id\": ", true), ("[\"#W42\"]", false)] {
        let server = ScriptedLlmServer::start(Script::in_order([Reply::tool_call_raw("get_order", raw)])).await;
        let mut request = ChatRequest::new(vec![Message::user("Where is #W42?")], Purpose::Agent);
        request.tools = vec![get_order_tool()];
        let err = deadline(client(&server).chat(&request)).await.unwrap_err();
        let LlmError::ToolArguments { tool, raw: carried, problem, .. } = &err else { panic!("{err:?}") };
        assert_eq!(tool, "get_order");
        if not_json {
            assert!(matches!(problem, ArgsError::NotJson(_)), "{problem:?}");
        } else {
            assert!(matches!(problem, ArgsError::NotAnObject { found: "array" }), "{problem:?}");
        }
        // The cause is the error's source, so the one-line chain names it.
        assert!(error_chain(&err).ends_with(&error_chain(problem)), "{err:?}");
        assert_eq!(carried, raw);
        assert!(err.to_string().contains(raw), "{err}");
        // A model's bad arguments are not a transport fault: no retry.
        assert_eq!(server.chat_requests().len(), 1);
    }
}

#[tokio::test]
async fn sampling_parameters_are_sent() {
    let server = ScriptedLlmServer::start(Script::in_order([Reply::text("ok")])).await;
    let mut request = ChatRequest::new(vec![Message::user("hi")], Purpose::Other);
    request.temperature = 0.25;
    request.max_tokens = Some(64);
    request.seed = Some(1234);
    deadline(client(&server).chat(&request)).await.unwrap();
    let body = &server.chat_requests()[0].body;
    assert_eq!(body["model"], "scripted-model");
    assert_eq!(body["temperature"], 0.25);
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(body["seed"], 1234);
    assert!(body.get("tools").is_none());
    assert!(body.get("purpose").is_none());
}
