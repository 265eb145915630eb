//! The embedded all-MiniLM-L6-v2 against sentence-transformers (the committed fixture
//! of `scripts/reference/embedding_fixture.py`), and `/v1/embeddings` over loopback.

use std::sync::Arc;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use flowmem_llm::{ChatModel, EmbeddingModel};
use flowmem_llm_local::{EMBEDDING_DIM, LocalEmbeddingConfig, LocalEmbeddingModel, LocalError};

use crate::serve::Server;

#[derive(Deserialize)]
struct Fixture {
    dim: usize,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    n_tokens: usize,
    f16: String,
}

fn reference() -> Fixture {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/embeddings.json"))
        .expect("the fixture is committed");
    serde_json::from_str(&text).expect("the fixture parses")
}

fn decode(packed: &str) -> Vec<f32> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(packed).expect("base64");
    bytes.chunks_exact(2).map(|pair| half::f16::from_le_bytes([pair[0], pair[1]]).to_f32()).collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
fn embeddings_match_sentence_transformers_on_fifty_texts() {
    let Some(model) = crate::embedding_model() else { return };
    let fixture = reference();
    assert_eq!((fixture.dim, fixture.cases.len()), (EMBEDDING_DIM, 50));
    let texts: Vec<String> = fixture.cases.iter().map(|case| case.text.clone()).collect();
    let vectors = model.embed_blocking(&texts).unwrap();
    let mut worst = (1.0f32, "");
    for (case, vector) in fixture.cases.iter().zip(&vectors) {
        assert_eq!(vector.len(), EMBEDDING_DIM);
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{:?}: norm {norm}", case.text);
        assert_eq!(model.count_tokens(&case.text).unwrap(), case.n_tokens, "{:?}: token count", case.text);
        let similarity = cosine(vector, &decode(&case.f16));
        if similarity < worst.0 {
            worst = (similarity, &case.text);
        }
    }
    assert!(worst.0 >= 0.999, "cosine {} for {:?}", worst.0, worst.1);
    // A text embeds the same alone as in a padded batch.
    let alone = model.embed_blocking(&texts[..1]).unwrap();
    assert!(cosine(&alone[0], &vectors[0]) > 0.99999);
}

#[test]
fn a_missing_model_names_the_setup_script() {
    let mut config = LocalEmbeddingConfig::standard();
    config.dir = std::env::temp_dir().join("flowmem-no-such-embedding-model");
    let err = LocalEmbeddingModel::new(config).embed_blocking(&["x".to_owned()]).unwrap_err();
    assert!(matches!(err, LocalError::EmbeddingModelMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("bash scripts/setup/35-embedding-model.sh"), "{err}");
}

#[tokio::test]
async fn the_endpoint_serves_embeddings_and_rejects_bad_input() {
    let (Some(chat), Some(embedder)) = (crate::model(), crate::embedding_model()) else { return };
    let chat: Arc<dyn ChatModel> = Arc::new(chat);
    let server = Server::start_with(chat, Some(Arc::new(embedder.clone()))).await;
    let client = reqwest::Client::new();
    let url = format!("{}/embeddings", server.base);
    let texts = ["exchange a delivered item", "swap the keyboard I got for a clicky one"];
    let response = client.post(&url).json(&json!({"model": "m", "input": texts})).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    let direct = embedder.embed(&texts.map(str::to_owned)).await.unwrap();
    for (index, vector) in direct.vectors.iter().enumerate() {
        assert_eq!(body["data"][index]["index"], index);
        let served: Vec<f32> =
            serde_json::from_value(body["data"][index]["embedding"].clone()).expect("a list of floats");
        assert_eq!(&served, vector);
    }
    assert_eq!(body["usage"]["prompt_tokens"], direct.prompt_tokens);
    for bad in [json!({"input": 7}), json!({"input": [1, 2]}), json!({"input": "x", "encoding_format": "int8"})] {
        let response = client.post(&url).json(&bad).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 400, "{bad}");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"]["message"].as_str().unwrap().contains("$."), "{body}");
    }
    server.shutdown().await;
}
