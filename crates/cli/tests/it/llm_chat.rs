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
    let server = ScriptedLlmServer::start(
        Script::new().when(Match::last_user_contains("Say hi"), Reply::text("Hi there!")),
    )
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
