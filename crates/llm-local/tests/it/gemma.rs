//! Gemma 3 270M, the second embedded model: greedy replies equal llama.cpp's, the
//! prefix cache changes no reply, and twenty tool calls over varied schemas all
//! validate.

use serde_json::{Value, json};

use flowmem_llm::{ChatRequest, FinishReason, Message, Purpose, ToolChoice, ToolDefinition};

#[derive(serde::Deserialize)]
struct Greedy {
    chats: Vec<Chat>,
}

#[derive(serde::Deserialize)]
struct Chat {
    user: String,
    max_tokens: u32,
    llama_cpp: String,
}

/// Greedy replies to one-turn chats equal llama.cpp's on the same file
/// (`tests/fixtures/gemma_greedy.json`, written by `scripts/fixtures/gemma.py`). The
/// file is the pretrained Gemma 3 270M, not the instruction-tuned one, so the replies
/// are poor (it echoes the question); what is checked is that ours follow llama.cpp's
/// through the whole first line (about ten tokens). Further on, the degenerate
/// continuations hang on near ties that llama.cpp's k-quant kernels and our Q8_0 ones
/// break differently ("What is the capital of France?" agrees for all 23 tokens, "Write
/// a haiku about the sea." parts at the tenth). llama.cpp's tool prints a newline
/// before the reply, so its text is trimmed.
#[test]
fn greedy_chat_replies_equal_llama_cpp() {
    let Some(model) = crate::gemma_with_cache(flowmem_llm_local::DEFAULT_PREFIX_CACHE_MB) else { return };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gemma_greedy.json");
    let fixture: Greedy = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for chat in &fixture.chats {
        let mut request = ChatRequest::new(vec![Message::user(chat.user.clone())], Purpose::Other);
        request.max_tokens = Some(chat.max_tokens);
        let reply = model.chat_blocking(&request).unwrap();
        let text = reply.response.content.unwrap_or_default();
        let reference = chat.llama_cpp.trim();
        let first_line = reference.split('\n').next().unwrap_or_default();
        assert!(first_line.len() > 20, "{reference:?}");
        assert!(
            text.starts_with(&format!("{first_line}\n")),
            "{:?}: ours {text:?}, llama.cpp {reference:?}",
            chat.user
        );
        assert_eq!(reply.response.usage.completion_tokens, u64::from(chat.max_tokens));
    }
}

#[test]
fn a_react_loop_replies_the_same_with_and_without_the_cache() {
    let (Some(cached), Some(cold)) = (crate::gemma_with_cache(64), crate::gemma_with_cache(0)) else { return };
    let (with, reused) = crate::prefix::react_loop(&cached);
    let (without, none) = crate::prefix::react_loop(&cold);
    assert_eq!(with, without, "the prefix cache changed a reply");
    assert!(none.iter().all(|&n| n == 0), "{none:?}");
    for (step, &n) in reused.iter().enumerate().take(3).skip(1) {
        assert!(n >= 64, "step {step} reused {n} tokens: {reused:?}");
    }
}

fn tool(name: &str, description: &str, parameters: Value) -> ToolDefinition {
    ToolDefinition { name: name.to_owned(), description: description.to_owned(), parameters }
}

/// Tools in the manner of τ²-bench's retail domain.
fn retail_tools() -> Vec<ToolDefinition> {
    vec![
        tool(
            "get_order_details",
            "Get the status and details of an order.",
            json!({"type": "object", "properties": {
                "order_id": {"type": "string", "description": "The order id, such as '#W0000000'."}
            }, "required": ["order_id"]}),
        ),
        tool(
            "cancel_pending_order",
            "Cancel a pending order.",
            json!({"type": "object", "properties": {
                "order_id": {"type": "string"},
                "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]}
            }, "required": ["order_id", "reason"]}),
        ),
        tool(
            "exchange_delivered_order_items",
            "Exchange items of a delivered order for other options of the same product.",
            json!({"type": "object", "properties": {
                "order_id": {"type": "string"},
                "item_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "new_item_ids": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "payment_method_id": {"type": "string"}
            }, "required": ["order_id", "item_ids", "new_item_ids", "payment_method_id"]}),
        ),
        tool(
            "find_user_id_by_name_zip",
            "Find a user id by first name, last name and zip code.",
            json!({"type": "object", "properties": {
                "first_name": {"type": "string"},
                "last_name": {"type": "string"},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
            }, "required": ["first_name", "last_name", "zip"]}),
        ),
    ]
}

/// Hand-written tools with integers, numbers, enums, booleans and nested arrays.
fn calendar_tools() -> Vec<ToolDefinition> {
    vec![
        tool(
            "create_event",
            "Create a calendar event with attendees.",
            json!({"type": "object", "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 40},
                "duration_minutes": {"type": "integer", "minimum": 5, "maximum": 480},
                "attendees": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3},
                "priority": {"type": "string", "enum": ["low", "normal", "high"]}
            }, "required": ["title", "duration_minutes", "priority"]}),
        ),
        tool(
            "set_thermostat",
            "Set the home thermostat temperature.",
            json!({"type": "object", "properties": {
                "celsius": {"type": "number", "minimum": 10, "maximum": 30},
                "room": {"type": "string", "enum": ["living room", "bedroom", "kitchen"]},
                "eco": {"type": "boolean"}
            }, "required": ["celsius", "room"]}),
        ),
        tool(
            "add_to_shopping_list",
            "Add items with quantities to the shopping list.",
            json!({"type": "object", "properties": {
                "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {
                    "name": {"type": "string", "maxLength": 30}, "quantity": {"type": "integer", "minimum": 1, "maximum": 99}
                }, "required": ["name", "quantity"]}}
            }, "required": ["items"]}),
        ),
    ]
}

/// (tool set, user message)
fn requests() -> Vec<(Vec<ToolDefinition>, &'static str)> {
    let (retail, calendar, travel) = (retail_tools(), calendar_tools(), crate::tools::tools());
    let mut out = Vec::new();
    for text in [
        "What's the status of my order #W2378156?",
        "Please cancel order #W4817420, I ordered it by mistake.",
        "I want to exchange item 1008292230 in order #W9911714 for item 4579334072, pay with credit_card_9513926.",
        "My name is Yusuf Rossi and my zip code is 19122. Can you find my account?",
        "Cancel #W5565470, I no longer need it.",
        "Where is order #W1092119?",
        "I'm Mia Garcia from 80218, look me up please.",
    ] {
        out.push((retail.clone(), text));
    }
    for text in [
        "Schedule a one hour high priority meeting called Budget review with Ana and Li.",
        "Set the bedroom to 19.5 degrees in eco mode.",
        "Add 3 apples and 2 cartons of milk to my shopping list.",
        "Create a 30 minute low priority event: dentist.",
        "Make the kitchen 22 degrees.",
        "Put bread on the shopping list, just one.",
        "Book a 45 minute sync with Omar, normal priority.",
    ] {
        out.push((calendar.clone(), text));
    }
    for text in [
        "What's the weather in Lisbon in celsius?",
        "Book a flight from AMS to JFK for two passengers.",
        "Remind me to stretch in 45 minutes.",
        "Convert 250 GBP to JPY.",
        "Is it cold in Oslo? Fahrenheit please.",
        "Create a reminder to submit the report in 90 minutes, tags work and urgent.",
    ] {
        out.push((travel.clone(), text));
    }
    out
}

#[test]
fn twenty_tool_calls_over_varied_schemas_are_all_schema_valid() {
    let Some(model) = crate::gemma_with_cache(flowmem_llm_local::DEFAULT_PREFIX_CACHE_MB) else { return };
    let requests = requests();
    assert_eq!(requests.len(), 20);
    let mut failures = Vec::new();
    for (tools, text) in &requests {
        let mut request = ChatRequest::new(
            vec![Message::system("You are an assistant that calls tools."), Message::user(*text)],
            Purpose::Agent,
        );
        request.tools.clone_from(tools);
        request.tool_choice = ToolChoice::Required;
        let response = match model.chat_blocking(&request) {
            Ok(reply) => reply.response,
            Err(flowmem_llm_local::LocalError::Truncated { text: partial, .. }) => {
                failures.push(format!("{text}: cut at max_tokens: {partial}"));
                continue;
            }
            Err(e) => {
                failures.push(format!("{text}: error {e}"));
                continue;
            }
        };
        if response.finish_reason != FinishReason::ToolCalls || response.tool_calls.len() != 1 {
            failures.push(format!("{text}: {:?} with {} calls", response.finish_reason, response.tool_calls.len()));
            continue;
        }
        let call = &response.tool_calls[0];
        let Some(tool) = tools.iter().find(|t| t.name == call.name) else {
            failures.push(format!("{text}: unknown tool `{}`", call.name));
            continue;
        };
        let arguments = Value::Object(call.arguments.clone());
        let errors = crate::schema_errors(&tool.parameters, &arguments);
        if !errors.is_empty() {
            failures.push(format!("{text}: {} {arguments} invalid: {errors:?}", call.name));
        }
        eprintln!("{text} -> {} {arguments}", call.name);
    }
    assert!(failures.is_empty(), "{} of 20 failed:\n{}", failures.len(), failures.join("\n"));
}

/// An integer argument with no bound in its schema ends within
/// [`DEFAULT_MAX_INTEGER`](flowmem_llm_local::DEFAULT_MAX_INTEGER)'s 16 digits. Asked to
/// copy a 60-digit number, the pretrained model copies digits for as long as the grammar
/// lets it: with no bound that is until `max_tokens` cuts the reply (as it did to tool
/// calls in the study's backbone swap).
#[test]
fn an_unbounded_integer_argument_ends_within_sixteen_digits() {
    let Some(model) = crate::gemma_with_cache(flowmem_llm_local::DEFAULT_PREFIX_CACHE_MB) else { return };
    let order = tool(
        "get_order",
        "Look up an order by its number.",
        json!({"type": "object", "properties": {"order_number": {"type": "integer"}}, "required": ["order_number"]}),
    );
    let digits = "1".repeat(60);
    let mut request =
        ChatRequest::new(vec![Message::user(format!("Look up my order number {digits}."))], Purpose::Agent);
    request.tools = vec![order];
    request.tool_choice = ToolChoice::Required;
    request.max_tokens = Some(40);
    let reply = model.chat_blocking(&request).expect("the call ends before max_tokens");
    let call = &reply.response.tool_calls[0];
    let number = call.arguments["order_number"].as_i64().expect("an integer");
    assert!(number.unsigned_abs() <= flowmem_llm_local::DEFAULT_MAX_INTEGER.unsigned_abs(), "{number}");
    // The grammar cut a real copy short: the model was copying the digits.
    assert!(number.to_string().len() >= 10, "{number}");
}
