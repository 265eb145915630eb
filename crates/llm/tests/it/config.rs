//! Resolving which model a purpose uses, from flowmem.toml and the environment.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use flowmem_llm::{CacheMode, LlmSettings, ModelChoice, ModelConfigError, Purpose};
use flowmem_testsupport::{Script, ScriptedLlmServer};

use crate::support::deadline;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Sync + use<> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name: &str| map.get(name).cloned()
}

fn settings(text: &str) -> LlmSettings {
    LlmSettings::from_toml(text, Path::new("/project/flowmem.toml")).unwrap()
}

const TWO_MODELS: &str = r#"
[models.big]
base_url = "http://big.example/v1"
model = "gpt-big"
api_key_env = "BIG_KEY"
timeout = 5.5
max_concurrency = 2
retries = 1

[models.small]
base_url = "http://small.example/v1"
model = "qwen-small"

[models.tiny]
kind = "local"
path = "models/tiny.gguf"

[roles]
default = "small"
optimizer = "big"
judge = "big"

[llm]
cache = "read-only"
cache_path = "state/cache.sqlite"

[unrelated]
owned_by = "another crate"
"#;

fn http(choice: ModelChoice) -> flowmem_llm::HttpModelConfig {
    match choice {
        ModelChoice::Http(cfg) => cfg,
        other => panic!("expected an HTTP model, got {other:?}"),
    }
}

#[tokio::test]
async fn roles_pick_models() {
    let cfg = settings(TWO_MODELS);
    let env = env_of(&[("BIG_KEY", "k-big"), ("OPENAI_API_KEY", "k-default")]);
    let optimizer = http(cfg.resolve(Purpose::Optimizer, None, &env).await.unwrap());
    assert_eq!((optimizer.name.as_str(), optimizer.model.as_str()), ("big", "gpt-big"));
    assert_eq!(optimizer.timeout, Duration::from_secs_f64(5.5));
    assert_eq!(optimizer.max_concurrency, 2);
    assert_eq!(optimizer.retry.max_retries, 1);
    assert!(optimizer.api_key.is_some());
    let executor = http(cfg.resolve(Purpose::Executor, None, &env).await.unwrap());
    assert_eq!(executor.name, "small");
    // No api_key_env: OPENAI_API_KEY is used.
    assert!(executor.api_key.is_some());
    // --model wins over roles.
    let forced = cfg.resolve(Purpose::Optimizer, Some("tiny"), &env).await.unwrap();
    let ModelChoice::Local(local) = forced else { panic!("{forced:?}") };
    assert_eq!(local.name, "tiny");
    assert_eq!(local.path.as_deref(), Some(Path::new("models/tiny.gguf")));
    // FLOWMEM_MODEL stands in for --model.
    let env_model = env_of(&[("BIG_KEY", "k"), ("FLOWMEM_MODEL", "small")]);
    assert_eq!(cfg.resolve(Purpose::Judge, None, &env_model).await.unwrap().name(), "small");
    assert_eq!(cfg.resolve(Purpose::Judge, Some("big"), &env_model).await.unwrap().name(), "big");

    assert_eq!(cfg.cache_mode(), CacheMode::ReadOnly);
    assert_eq!(cfg.cache_path(), Path::new("/project/state/cache.sqlite"));
}

#[tokio::test]
async fn errors_name_the_field() {
    let cfg = settings(TWO_MODELS);
    let err = cfg.resolve(Purpose::Judge, None, &env_of(&[])).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "/project/flowmem.toml: `models.big.api_key_env`: environment variable `BIG_KEY` is not set"
    );
    let err = cfg.resolve(Purpose::Agent, Some("gpt-9"), &env_of(&[])).await.unwrap_err();
    assert!(err.to_string().contains("no such model in [models] (configured: big, small, tiny)"), "{err}");

    let dangling = settings("[models.a]\nbase_url = \"http://a/v1\"\nmodel = \"m\"\n[roles]\njudge = \"b\"\n");
    let err = dangling.resolve(Purpose::Judge, None, &env_of(&[])).await.unwrap_err();
    assert!(err.to_string().contains("`roles.judge`: names model `b`"), "{err}");

    let no_url = settings("[models.a]\nmodel = \"m\"\n");
    let err = no_url.resolve(Purpose::Agent, None, &env_of(&[])).await.unwrap_err();
    assert!(err.to_string().contains("`models.a.base_url`: is missing"), "{err}");
    // OPENAI_BASE_URL fills a missing base_url.
    let filled =
        http(no_url.resolve(Purpose::Agent, None, &env_of(&[("OPENAI_BASE_URL", "http://e/v1")])).await.unwrap());
    assert_eq!(filled.base_url, "http://e/v1");

    let typo = LlmSettings::from_toml("[models.a]\nbse_url = \"x\"\n", Path::new("f.toml")).unwrap_err();
    assert!(matches!(typo, ModelConfigError::Parse { .. }));
    let text = typo.to_string();
    assert!(text.starts_with("f.toml: ") && text.contains("line 2") && text.contains("bse_url"), "{text}");
    let bad_mode = LlmSettings::from_toml("[llm]\ncache = \"sometimes\"\n", Path::new("f.toml")).unwrap_err();
    assert!(bad_mode.to_string().contains("sometimes"), "{bad_mode}");
    let zero = settings("[models.a]\nbase_url = \"u\"\nmodel = \"m\"\nmax_concurrency = 0\n");
    let err = zero.resolve(Purpose::Agent, None, &env_of(&[])).await.unwrap_err();
    assert!(err.to_string().contains("models.a.max_concurrency"), "{err}");
}

#[tokio::test]
async fn the_environment_endpoint_is_the_default() {
    let server = ScriptedLlmServer::start(Script::new().models(["listed-first", "listed-second"])).await;
    let base_url = server.base_url();
    let empty = LlmSettings::default();

    // --model names the model at OPENAI_BASE_URL.
    let vars = env_of(&[("OPENAI_BASE_URL", &base_url), ("OPENAI_API_KEY", "sk-x"), ("FLOWMEM_MODEL", "from-env")]);
    let chosen = http(empty.resolve(Purpose::Agent, Some("from-flag"), &vars).await.unwrap());
    assert_eq!(chosen.model, "from-flag");
    assert_eq!(chosen.base_url, base_url);
    assert!(chosen.api_key.is_some());
    // Then FLOWMEM_MODEL.
    assert_eq!(http(empty.resolve(Purpose::Agent, None, &vars).await.unwrap()).model, "from-env");
    assert_eq!(server.request_count(), 0);
    // Then the first model GET /models lists.
    let vars = env_of(&[("OPENAI_BASE_URL", &base_url)]);
    let listed = http(deadline(empty.resolve(Purpose::Agent, None, &vars)).await.unwrap());
    assert_eq!(listed.model, "listed-first");
    assert_eq!(server.requests()[0].path, "/v1/models");

    // An endpoint that lists nothing is a clear error.
    let bare = ScriptedLlmServer::start(Script::new().models(Vec::<String>::new())).await;
    let vars = env_of(&[("OPENAI_BASE_URL", &bare.base_url())]);
    let err = deadline(empty.resolve(Purpose::Agent, None, &vars)).await.unwrap_err();
    assert!(matches!(err, ModelConfigError::Discovery { .. }), "{err:?}");
}

/// Gemma 3 270M is chosen by its name, requested or as a `local` entry's `model`; the
/// default stays SmolLM2 (`model` absent), and an unknown embedded name is an error.
#[tokio::test]
async fn gemma_is_chosen_by_name_or_by_a_local_entry() {
    let none = LlmSettings::default();
    let choice = none.resolve(Purpose::Agent, Some("gemma3-270m"), &env_of(&[])).await.unwrap();
    let ModelChoice::Local(local) = choice else { panic!("{choice:?}") };
    assert_eq!((local.name.as_str(), local.model.as_deref()), ("gemma3-270m", Some("gemma3-270m")));
    let choice = none.resolve(Purpose::Agent, None, &env_of(&[("FLOWMEM_MODEL", "gemma3-270m")])).await.unwrap();
    assert_eq!(choice.name(), "gemma3-270m");

    let cfg = settings("[models.g]\nkind = \"local\"\nmodel = \"gemma3-270m\"\n[models.s]\nkind = \"local\"\n");
    let ModelChoice::Local(g) = cfg.resolve(Purpose::Agent, Some("g"), &env_of(&[])).await.unwrap() else { panic!() };
    assert_eq!(g.model.as_deref(), Some("gemma3-270m"));
    let ModelChoice::Local(s) = cfg.resolve(Purpose::Agent, Some("s"), &env_of(&[])).await.unwrap() else { panic!() };
    assert_eq!(s.model, None);

    let bad = settings("[models.x]\nkind = \"local\"\nmodel = \"llama-70b\"\n");
    let err = bad.resolve(Purpose::Agent, Some("x"), &env_of(&[])).await.unwrap_err();
    assert!(err.to_string().contains("llama-70b"), "{err}");
}

#[tokio::test]
async fn with_nothing_configured_the_local_model_is_the_default() {
    let choice = LlmSettings::default().resolve(Purpose::Agent, None, &env_of(&[])).await.unwrap();
    let ModelChoice::Local(local) = choice else { panic!("{choice:?}") };
    assert_eq!(local.name, "local");
    assert_eq!(local.model, None);
    assert_eq!(local.path, None);
    // A single configured model is the default even with OPENAI_BASE_URL set.
    let one = settings("[models.only]\nbase_url = \"http://o/v1\"\nmodel = \"m\"\n");
    let vars = env_of(&[("OPENAI_BASE_URL", "http://elsewhere/v1")]);
    assert_eq!(one.resolve(Purpose::Judge, None, &vars).await.unwrap().name(), "only");
}

#[tokio::test]
async fn the_local_prefix_cache_bound_reaches_every_local_model() {
    let none = LlmSettings::default().resolve(Purpose::Agent, None, &env_of(&[])).await.unwrap();
    let ModelChoice::Local(local) = none else { panic!("{none:?}") };
    assert_eq!(local.prefix_cache_mb, None, "unset: the embedded model's default");
    let set = settings("[llm.local]\nprefix_cache_mb = 0\n\n[models.small]\nkind = \"local\"\n");
    for choice in [
        set.resolve(Purpose::Agent, None, &env_of(&[])).await.unwrap(),
        set.resolve(Purpose::Agent, Some("small"), &env_of(&[])).await.unwrap(),
    ] {
        let ModelChoice::Local(local) = choice else { panic!("{choice:?}") };
        assert_eq!(local.prefix_cache_mb, Some(0));
    }
    let typo = LlmSettings::from_toml("[llm.local]\nprefix_cache = 1\n", Path::new("f.toml")).unwrap_err();
    assert!(typo.to_string().contains("prefix_cache"), "{typo}");
}
