//! Free-text replies, usage, seeded sampling, and the missing-file
//! error.

use flowmem_llm::{ChatModel, ChatRequest, FinishReason, LlmError, Message, Purpose};
use flowmem_llm_local::{LocalConfig, LocalError, LocalModel, Precision, SETUP_COMMAND};

fn ask(text: &str, max_tokens: u32) -> ChatRequest {
    let mut request = ChatRequest::new(vec![Message::user(text)], Purpose::Other);
    request.max_tokens = Some(max_tokens);
    request
}

#[test]
fn short_instruction_gets_an_english_reply_ending_at_im_end() {
    let Some(model) = crate::model() else { return };
    let reply = model.chat_blocking(&ask("What is the capital of France? Answer in one short sentence.", 48)).unwrap();
    let text = reply.response.content.clone().unwrap();
    assert!(!text.trim().is_empty());
    assert_eq!(reply.stop_token, Some("<|im_end|>"), "reply: {text:?}");
    assert_eq!(reply.response.finish_reason, FinishReason::Stop);
    assert!(!text.contains("<|im_end|>"));
    let letters = text.chars().filter(char::is_ascii_alphabetic).count();
    assert!(letters * 2 > text.chars().count(), "mostly Latin letters: {text:?}");
    let lower = text.to_lowercase();
    let english = ["the", "is", "of", "paris", "capital"];
    assert!(english.iter().any(|w| lower.split(|c: char| !c.is_alphabetic()).any(|x| x == *w)), "{text:?}");
    assert!(reply.response.usage.prompt_tokens > 10);
    assert!(reply.response.usage.completion_tokens > 0);
}

#[test]
fn max_tokens_cuts_the_reply() {
    let Some(model) = crate::model() else { return };
    let reply = model.chat_blocking(&ask("Write a long story about a dragon.", 5)).unwrap();
    assert_eq!(reply.response.finish_reason, FinishReason::Length);
    assert_eq!(reply.response.usage.completion_tokens, 5);
    assert_eq!(reply.stop_token, None);
}

#[test]
fn greedy_is_deterministic_and_seeds_replay() {
    let Some(model) = crate::model() else { return };
    let greedy = ask("Name three fruits.", 12);
    let a = model.chat_blocking(&greedy).unwrap().response.content;
    let b = model.chat_blocking(&greedy).unwrap().response.content;
    assert_eq!(a, b);

    let mut sampled = ask("Tell me a word.", 12);
    sampled.temperature = 1.2;
    sampled.seed = Some(7);
    let c = model.chat_blocking(&sampled).unwrap().response.content;
    let d = model.chat_blocking(&sampled).unwrap().response.content;
    assert_eq!(c, d, "the same seed gives the same sample");
}

#[tokio::test]
async fn chat_trait_runs_on_the_blocking_pool() {
    let Some(model) = crate::model() else { return };
    let response = ChatModel::chat(&model, &ask("Say hi.", 8)).await.unwrap();
    assert!(response.content.is_some());
    assert_eq!(model.name(), "smollm2-135m-instruct");
}

#[tokio::test]
async fn missing_model_file_names_the_setup_command() {
    let config = LocalConfig {
        path: std::env::temp_dir().join("flowmem-no-such-model.gguf"),
        precision: Precision::F32,
        name: "missing".to_owned(),
        prefix_cache_mb: 0,
    };
    let model = LocalModel::new(config);
    let err = model.load().unwrap_err();
    assert!(matches!(err, LocalError::ModelMissing { .. }));
    assert!(err.to_string().contains(SETUP_COMMAND), "{err}");
    match ChatModel::chat(&model, &ask("hi", 4)).await {
        Err(LlmError::Unavailable { reason, .. }) => assert!(reason.contains(SETUP_COMMAND), "{reason}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn room_counts_the_prompt_and_the_reply_budget_exactly() {
    let Some(model) = crate::model() else { return };
    let request = ask("Name three fruits.", 12);
    let room = ChatModel::room(&model, &request).expect("a loaded model counts");
    let reply = model.chat_blocking(&request).unwrap();
    let prompt = i64::try_from(reply.response.usage.prompt_tokens).unwrap();
    // The context is 4,096 tokens, and a sequence may not reach it.
    assert_eq!(room, 4096 - prompt - 12 - 1);
    // A conversation longer than the window has negative room, by as much as it is over.
    let long = ask(&"apple banana cherry ".repeat(2000), 12);
    let over = ChatModel::room(&model, &long).unwrap();
    assert!(over < -1000, "{over}");
    let error = model.chat_blocking(&long).unwrap_err();
    assert!(matches!(error, LocalError::ContextExceeded { .. }), "{error}");
}

/// A request with no room to spare (its prompt and budget fill the context but for the
/// one position `room` keeps) is decoded, also when the grammar forces more tokens than
/// the budget holds: the reply stops at the budget and never feeds past the context
/// (which ReAct's window fitting, trusting `room`, ran into on 3 of 34 retail runs).
#[test]
fn a_request_with_exactly_no_room_is_answered_though_the_grammar_forces_past_its_budget() {
    let Some(model) = crate::model() else { return };
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "verdict": {"enum": ["the answer is certainly yes, beyond any reasonable doubt at all"]},
            "why": {"type": "string"}
        },
        "required": ["verdict", "why"],
        "additionalProperties": false
    });
    let request = |words: usize, max_tokens: u32| {
        let mut request = ask(&format!("Judge this: {}", "plain words ".repeat(words)), max_tokens);
        request.response_format =
            Some(flowmem_llm::ResponseFormat { name: "judgement".to_owned(), schema: schema.clone() });
        request
    };
    // The longest prompt that leaves room for a budget of 4 tokens.
    let room = |words: usize| ChatModel::room(&model, &request(words, 4)).unwrap();
    let (mut low, mut high) = (0usize, 4000usize);
    while low < high {
        let mid = (low + high).div_ceil(2);
        if room(mid) >= 0 { low = mid } else { high = mid - 1 }
    }
    let spare = room(low);
    assert!((0..8).contains(&spare), "{spare}");
    let tight = request(low, 4 + u32::try_from(spare).unwrap());
    assert_eq!(ChatModel::room(&model, &tight).unwrap(), 0);
    // The budget, not the context, ends the reply: a JSON reply cut short, which the
    // caller may ask again with more room.
    match model.chat_blocking(&tight) {
        Err(LocalError::Truncated { text, .. }) => assert!(text.starts_with("{\"verdict\": \"the answer"), "{text}"),
        other => panic!("expected the reply cut at its budget, got {other:?}"),
    }
}
