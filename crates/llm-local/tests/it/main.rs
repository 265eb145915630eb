//! Integration tests of the embedded model. They need the model file; without it each
//! test prints which command fetches it and returns early. Under CI (`CI` set), where
//! `scripts/test.sh` always fetches the model, a missing file fails the test instead, so
//! a broken setup can never pass silently.

#![allow(clippy::print_stderr)]

mod chat;
mod embed;
mod gemma;
mod prefix;
mod serve;
mod structured;
mod tokenizer;
mod tools;

use std::sync::OnceLock;

use flowmem_llm_local::{
    EMBEDDING_SETUP_COMMAND, GEMMA_SETUP_COMMAND, LocalConfig, LocalEmbeddingConfig, LocalEmbeddingModel, LocalModel,
    SETUP_COMMAND,
};

/// The shared model, or `None` (with a message naming the setup command) when the
/// model file is absent.
pub fn model() -> Option<LocalModel> {
    model_with_cache(LocalConfig::standard().prefix_cache_mb)
}

/// The model with a prefix cache of `mb` MiB (0: none); models of the same bound share
/// one copy, so give a test that counts evictions a bound of its own.
pub fn model_with_cache(mb: u64) -> Option<LocalModel> {
    let mut config = LocalConfig::standard();
    config.prefix_cache_mb = mb;
    loaded(config, SETUP_COMMAND)
}

/// Gemma 3 270M with a prefix cache of `mb` MiB (0: none), or `None` (with a message
/// naming its setup command) when its file is absent.
pub fn gemma_with_cache(mb: u64) -> Option<LocalModel> {
    let mut config = LocalConfig::gemma3();
    config.prefix_cache_mb = mb;
    loaded(config, GEMMA_SETUP_COMMAND)
}

/// The model of `config`, loaded, or `None` when its file is absent (a failure under CI).
fn loaded(config: LocalConfig, setup: &str) -> Option<LocalModel> {
    if !config.path.is_file() {
        assert!(
            std::env::var_os("CI").is_none(),
            "model file `{}` is missing under CI; `{setup}` should have fetched it",
            config.path.display()
        );
        eprintln!("SKIPPED: model file `{}` is missing; run `{setup}` from the repository root", config.path.display());
        return None;
    }
    let model = LocalModel::new(config);
    model.load().expect("the model loads");
    Some(model)
}

/// Validates `instance` against `schema`, returning the validator's messages.
pub fn schema_errors(schema: &serde_json::Value, instance: &serde_json::Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema).expect("the test schema compiles");
    validator.iter_errors(instance).map(|e| format!("{} at {}", e, e.instance_path)).collect()
}

/// The embedding model, loaded once for the whole test binary, or `None` (with a
/// message naming the setup command) when its files are absent.
pub fn embedding_model() -> Option<LocalEmbeddingModel> {
    static MODEL: OnceLock<Option<LocalEmbeddingModel>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let config = LocalEmbeddingConfig::standard();
            if let Some(missing) = LocalEmbeddingModel::missing_file(&config.dir) {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "embedding model file `{}` is missing under CI; `{EMBEDDING_SETUP_COMMAND}` should have fetched it",
                    missing.display()
                );
                eprintln!(
                    "SKIPPED: embedding model file `{}` is missing; run `{EMBEDDING_SETUP_COMMAND}` from the repository root",
                    missing.display()
                );
                return None;
            }
            let model = LocalEmbeddingModel::new(config);
            model.load().expect("the embedding model loads");
            Some(model)
        })
        .clone()
}
