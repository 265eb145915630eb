//! The OpenAI-compatible embeddings client against the scripted server on loopback, and
//! choosing the embedding model from flowmem.toml.

use std::path::Path;
use std::time::Duration;

use flowmem_llm::{
    ApiKey, EmbeddingChoice, EmbeddingModel, HttpEmbeddingConfig, HttpEmbeddingModel, LlmError, LlmSettings,
};
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer, bag_of_words};

use crate::support::{deadline, fast_retries};

const KEY: &str = "sk-embedding-secret-42";

fn client(server: &ScriptedLlmServer, batch_size: usize) -> HttpEmbeddingModel {
    let mut cfg = HttpEmbeddingConfig::new("embed", server.base_url(), "text-embedder");
    cfg.timeout = Duration::from_secs(2);
    cfg.retry = fast_retries(3);
    cfg.batch_size = batch_size;
    cfg.api_key = Some(ApiKey::new(KEY));
    HttpEmbeddingModel::new(cfg).unwrap()
}

fn texts(items: &[&str]) -> Vec<String> {
    items.iter().map(|text| (*text).to_owned()).collect()
}

#[tokio::test]
async fn vectors_come_back_in_input_order_across_batches() {
    let server = ScriptedLlmServer::start(Script::new()).await;
    let model = client(&server, 2);
    let input = texts(&["cancel my order", "exchange a delivered item", "where is my parcel", "refund", ""]);
    let out = deadline(model.embed(&input)).await.unwrap();
    let expected: Vec<Vec<f32>> = input.iter().map(|text| bag_of_words(text)).collect();
    assert_eq!(out.vectors, expected);
    let requests = server.embedding_requests();
    assert_eq!(requests.len(), 3, "5 texts in batches of 2");
    assert_eq!(requests[0].body["input"], serde_json::json!(["cancel my order", "exchange a delivered item"]));
    assert_eq!(requests[0].body["model"], "text-embedder");
    assert_eq!(requests[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(out.prompt_tokens, 3 + 4 + 4 + 1, "the usage of every batch is summed");
    assert_eq!(model.model_id(), "openai:text-embedder");
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried() {
    let script = Script::new().embedding_faults([Reply::rate_limited_ms(5), Reply::server_error()]);
    let server = ScriptedLlmServer::start(script).await;
    let out = deadline(client(&server, 8).embed(&texts(&["order status"]))).await.unwrap();
    assert_eq!(out.vectors, [bag_of_words("order status")]);
    assert_eq!(server.embedding_requests().len(), 3);
}

#[tokio::test]
async fn a_refusal_is_an_error_that_carries_no_key() {
    let server = ScriptedLlmServer::start(Script::new().embedding_faults([Reply::status(401, "bad key")])).await;
    let model = client(&server, 8);
    let err = deadline(model.embed(&texts(&["x"]))).await.unwrap_err();
    assert!(matches!(err, LlmError::Status { status: 401, .. }), "{err:?}");
    assert_eq!(server.embedding_requests().len(), 1, "401 is not retried");
    for text in [err.to_string(), format!("{err:?}"), format!("{model:?}")] {
        assert!(!text.contains(KEY), "the key leaked: {text}");
    }
}

#[tokio::test]
async fn a_reply_with_too_few_vectors_is_invalid() {
    let body = r#"{"object": "list", "data": [{"index": 0, "embedding": [1.0, 0.0]}]}"#;
    let server = ScriptedLlmServer::start(Script::new().embedding_faults([Reply::raw(200, body)])).await;
    let err = deadline(client(&server, 8).embed(&texts(&["a", "b"]))).await.unwrap_err();
    match err {
        LlmError::InvalidReply { problem, .. } => assert!(problem.contains("1 embeddings for 2 inputs"), "{problem}"),
        other => panic!("expected an invalid reply, got {other:?}"),
    }
}

#[test]
fn the_embedding_role_picks_an_endpoint_and_the_default_is_the_embedded_model() {
    let text = r#"
[models.embed]
base_url = "http://embed.example/v1"
model = "text-embedding-3-small"
api_key_env = "EMBED_KEY"
timeout = 7

[models.mini]
kind = "local"
path = "models/minilm"

[roles]
embedding = "embed"
"#;
    let settings = LlmSettings::from_toml(text, Path::new("/p/flowmem.toml")).unwrap();
    let env = |name: &str| (name == "EMBED_KEY").then(|| KEY.to_owned());
    match settings.resolve_embedding(&env).unwrap() {
        EmbeddingChoice::Http(cfg) => {
            assert_eq!(
                (cfg.base_url.as_str(), cfg.model.as_str()),
                ("http://embed.example/v1", "text-embedding-3-small")
            );
            assert_eq!(cfg.api_key, Some(ApiKey::new(KEY)));
            assert_eq!(cfg.timeout, Duration::from_secs(7));
        }
        other => panic!("expected an endpoint, got {other:?}"),
    }
    let local =
        LlmSettings::from_toml(&text.replace("embedding = \"embed\"", "embedding = \"mini\""), Path::new("f")).unwrap();
    match local.resolve_embedding(&env).unwrap() {
        EmbeddingChoice::Local(cfg) => assert_eq!(cfg.path.as_deref(), Some(Path::new("models/minilm"))),
        other => panic!("expected the embedded model, got {other:?}"),
    }
    // OPENAI_BASE_URL alone is a chat endpoint: embeddings stay embedded.
    let openai = |name: &str| (name == "OPENAI_BASE_URL").then(|| "http://chat.example/v1".to_owned());
    assert!(matches!(LlmSettings::default().resolve_embedding(&openai).unwrap(), EmbeddingChoice::Local(_)));
    let unknown = LlmSettings::from_toml("[roles]\nembedding = \"nope\"\n", Path::new("f")).unwrap();
    let err = unknown.resolve_embedding(&env).unwrap_err().to_string();
    assert!(err.contains("roles.embedding") && err.contains("nope"), "{err}");
}
