//! Integration tests of the embedded model. They need the model file; without it each
//! test prints which command fetches it and returns early (CI always fetches it).

#![allow(clippy::print_stderr)]

mod chat;
mod serve;
mod structured;
mod tokenizer;
mod tools;

use flowmem_llm_local::{LocalConfig, LocalModel, SETUP_COMMAND};

/// The shared model, or `None` (with a message naming the setup command) when the
/// model file is absent.
pub fn model() -> Option<LocalModel> {
    let config = LocalConfig::standard();
    if !config.path.is_file() {
        eprintln!(
            "SKIPPED: model file `{}` is missing; run `{SETUP_COMMAND}` from the repository root",
            config.path.display()
        );
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
