//! `flowmem llm chat` against the scripted OpenAI-compatible server.

use std::path::Path;
use std::process::Output;

use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::Value;

/// Runs the binary in `dir` with a clean LLM environment plus `env`.
async fn flowmem(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.current_dir(dir).args(args);
    for var in ["OPENAI_BASE_URL", "OPENAI_API_KEY", "FLOWMEM_MODEL", "FLOWMEM_CONFIG"] {
        command.env_remove(var);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let run = command.output();
    tokio::time::timeout(std::time::Duration::from_secs(60), run).await.expect("flowmem hung").unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn chats_with_the_environment_endpoint() {
    let server =
        ScriptedLlmServer::start(Script::new().when(Match::last_user_contains("Say hi"), Reply::text("Hi there!")))
            .await;
    let dir = tempfile::tempdir().unwrap();
    let base_url = server.base_url();
    let env = [("OPENAI_BASE_URL", base_url.as_str()), ("OPENAI_API_KEY", "sk-cli-test")];
    let output = flowmem(dir.path(), &["llm", "chat", "--model", "gpt-test", "Say hi"], &env).await;
    assert!(output.status.success(), "{output:?}");
    assert_eq!(stdout(&output), "Hi there!\n");
    let request = &server.chat_requests()[0];
    assert_eq!(request.body["model"], "gpt-test");
    assert_eq!(request.header("authorization"), Some("Bearer sk-cli-test"));
    assert!(!String::from_utf8_lossy(&output.stderr).contains("sk-cli-test"));
}

#[tokio::test]
async fn chats_with_a_configured_model_as_json() {
    let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::text("configured").usage(12, 3))).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[models.big]\nbase_url = \"{}\"\nmodel = \"big-model\"\napi_key_env = \"BIG_KEY\"\n",
        server.base_url()
    );
    std::fs::write(dir.path().join("custom.toml"), config).unwrap();
    let args = ["--json", "llm", "chat", "--config", "custom.toml", "--model", "big", "--system", "Be brief.", "Hello"];
    let output = flowmem(dir.path(), &args, &[("BIG_KEY", "k")]).await;
    assert!(output.status.success(), "{output:?}");
    let json: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(json["version"], 1);
    assert_eq!(json["backend"], "openai");
    assert_eq!(json["model"], "big");
    assert_eq!(json["reply"]["content"], "configured");
    assert_eq!(json["accounting"]["total"]["prompt_tokens"], 12);
    let request = &server.chat_requests()[0];
    assert_eq!(request.body["model"], "big-model");
    assert_eq!(request.messages()[0]["content"], "Be brief.");

    // ./flowmem.toml is found without --config, and FLOWMEM_CONFIG wins over it.
    std::fs::write(dir.path().join("flowmem.toml"), std::fs::read(dir.path().join("custom.toml")).unwrap()).unwrap();
    let output = flowmem(dir.path(), &["llm", "chat", "Hello"], &[("BIG_KEY", "k")]).await;
    assert!(output.status.success(), "{output:?}");
    let output = flowmem(dir.path(), &["llm", "chat", "Hello"], &[("FLOWMEM_CONFIG", "missing.toml")]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("FLOWMEM_CONFIG=missing.toml"), "{output:?}");
}

#[tokio::test]
async fn configuration_errors_exit_2_with_the_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("flowmem.toml"), "[models.big]\nmodel = \"m\"\n").unwrap();
    let output = flowmem(dir.path(), &["llm", "chat", "--model", "big", "Hello"], &[]).await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("models.big.base_url"), "{stderr}");
    assert!(stdout(&output).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chats_with_the_embedded_model_when_nothing_is_configured() {
    // The binary finds the same file by itself; this fails early, naming the setup script.
    let _ = flowmem_testsupport::require_path(&flowmem_llm_local::default_model_path(), "scripts/setup/30-model.sh");
    // No OPENAI_BASE_URL, no FLOWMEM_CONFIG and no ./flowmem.toml: the embedded model.
    let dir = tempfile::tempdir().unwrap();
    let args = ["--json", "llm", "chat", "--max-tokens", "8", "Say hello."];
    let output = flowmem(dir.path(), &args, &[]).await;
    assert!(output.status.success(), "{output:?}");
    let json: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(json["backend"], "local", "{json}");
    assert_eq!(json["model"], flowmem_llm_local::MODEL_NAME, "{json}");
    assert!(!json["reply"]["content"].as_str().unwrap_or("").trim().is_empty(), "{json}");
    let completion_tokens = json["accounting"]["total"]["completion_tokens"].as_u64().unwrap();
    assert!((1..=8).contains(&completion_tokens), "{json}");

    // The same default with the model file absent fails, naming the setup script.
    let empty = tempfile::tempdir().unwrap();
    let env = [("FLOWMEM_MODEL_DIR", empty.path().to_str().unwrap())];
    let output = flowmem(dir.path(), &["llm", "chat", "Say hello."], &env).await;
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("scripts/setup/30-model.sh"), "{stderr}");
    assert!(stdout(&output).is_empty());
}

#[tokio::test]
async fn endpoint_model_comes_from_flag_then_environment_then_the_models_list() {
    let server = ScriptedLlmServer::start(
        Script::new().models(["first-listed", "second-listed"]).otherwise(Reply::text("pong")),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let base_url = server.base_url();
    let endpoint = ("OPENAI_BASE_URL", base_url.as_str());
    let cases: [(&[&str], Option<&str>, &str); 3] = [
        (&["--model", "flag-model"], Some("env-model"), "flag-model"),
        (&[], Some("env-model"), "env-model"),
        (&[], None, "first-listed"),
    ];
    for (flags, env_model, expected) in cases {
        let mut env = vec![endpoint];
        if let Some(name) = env_model {
            env.push(("FLOWMEM_MODEL", name));
        }
        let n_models_before = server.requests().iter().filter(|request| request.path == "/v1/models").count();
        let mut args = vec!["--json", "llm", "chat"];
        args.extend_from_slice(flags);
        args.push("ping");
        let output = flowmem(dir.path(), &args, &env).await;
        assert!(output.status.success(), "{expected}: {output:?}");
        let json: Value = serde_json::from_str(&stdout(&output)).unwrap();
        assert_eq!(json["backend"], "openai", "{json}");
        assert_eq!(json["model"], expected, "{json}");
        assert_eq!(json["reply"]["content"], "pong", "{json}");
        let sent = server.chat_requests().last().unwrap().body["model"].clone();
        assert_eq!(sent, expected);
        // Only the last case needs to ask the endpoint which models it serves.
        let n_models = server.requests().iter().filter(|request| request.path == "/v1/models").count();
        assert_eq!(n_models - n_models_before, usize::from(env_model.is_none()), "{expected}");
    }

    // An endpoint that lists no models, with no name given, is an error naming the fix.
    let empty = ScriptedLlmServer::start(Script::new().models(Vec::<String>::new())).await;
    let base_url = empty.base_url();
    let output = flowmem(dir.path(), &["llm", "chat", "ping"], &[("OPENAI_BASE_URL", base_url.as_str())]).await;
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("FLOWMEM_MODEL") && stderr.contains("listed no models"), "{stderr}");
    assert!(empty.chat_requests().is_empty());
}
