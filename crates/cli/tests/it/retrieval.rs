//! Retrieval by meaning end to end: `flowmem memory eval-retrieval` on τ-bench (memory
//! induced by rules from the train split, scored on test tasks' golden actions), and
//! `flowmem serve-llm`'s `/v1/embeddings` driven by the official `openai` Python SDK.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::serve::{python, tau_bench_memory};
use crate::support::{TestDir, data};

#[test]
fn eval_retrieval_scores_bm25_vector_and_hybrid_on_tau_bench() {
    let dir = TestDir::new();
    let n_workflows = tau_bench_memory(&dir);
    assert!(n_workflows > 10, "{n_workflows}");
    let run =
        dir.run(&["import", "--format", "tau-bench", &data("tau-bench/retail/tasks_test.jsonl"), "-o", "test.jsonl"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // The first 20 test tasks keep the test quick; the full table is in the bench notes.
    let test = dir.read("test.jsonl");
    let head: Vec<&str> = test.lines().take(20).collect();
    dir.write("head.jsonl", &(head.join("\n") + "\n"));
    let run = dir.run(&["--json", "memory", "eval-retrieval", "head.jsonl", "--memory", "memory.db", "-k", "3"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        (report["version"].as_u64(), report["k"].as_u64(), report["n_records"].as_u64()),
        (Some(1), Some(3), Some(20))
    );
    let modes: Vec<&str> = report["modes"].as_array().unwrap().iter().map(|m| m["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["bm25", "vector", "hybrid"]);
    for mode in report["modes"].as_array().unwrap() {
        for field in ["mean_tc_top1", "recall_at_1", "recall_at_k", "mrr_at_k"] {
            let value = mode[field].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&value), "{field} {value}");
        }
        assert!(mode["recall_at_1"].as_f64() <= mode["recall_at_k"].as_f64(), "{mode}");
        assert!(mode["recall_at_k"].as_f64().unwrap() * 20.0 <= report["n_reachable"].as_f64().unwrap() + 1e-9);
    }
    assert!(report["modes"][1]["mean_embed_ms"].as_f64().unwrap() > 0.0, "vector mode embeds the query");
    assert_eq!(report["modes"][0]["mean_embed_ms"].as_f64(), Some(0.0), "BM25 embeds nothing");
    let records = report["records"].as_array().unwrap();
    assert_eq!(records.len(), 60, "20 records in each of 3 modes");
    for record in records {
        // A workflow of the reference's exact sequence at rank 1 has TC 1.
        if record["rank"] == 1 {
            assert_eq!(record["tc_top1"].as_f64(), Some(1.0), "{record}");
        }
        assert!(record["retrieved"].as_array().unwrap().len() <= 3);
    }

    // The text output is the table, one row per mode.
    let run =
        dir.run(&["memory", "eval-retrieval", "head.jsonl", "--memory", "memory.db", "--retrieval", "bm25,hybrid"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("| retrieval | TC@1 | recall@1 | recall@3 |"), "{}", run.stdout);
    assert!(run.stdout.contains("\n| bm25 |") && run.stdout.contains("\n| hybrid |"), "{}", run.stdout);
    assert!(!run.stdout.contains("| vector |"), "{}", run.stdout);
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    dot / (a.iter().map(|x| x * x).sum::<f64>().sqrt() * b.iter().map(|x| x * x).sum::<f64>().sqrt())
}

fn vectors(step: &Value) -> Vec<Vec<f64>> {
    let vectors = step["vectors"].as_array().unwrap_or_else(|| panic!("no vectors: {step}"));
    vectors.iter().map(|v| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()).collect()
}

#[test]
fn serve_llm_answers_the_openai_sdk_with_embeddings() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flowmem"));
    command.args(["serve-llm", "--port", "0", "--prefix-cache-mb", "0"]);
    let mut served = flowmem_testsupport::spawn_listening(command, "listening on ", Duration::from_secs(60));
    let texts = ["exchange a delivered item", "swap the keyboard I got for a clicky one", "book a flight to Paris"];
    let program = json!({
        "base_url": served.address, "api_key": "unused",
        "steps": [
            {"op": "embed", "input": texts, "encoding_format": "float"},
            {"op": "embed", "input": texts},
            {"op": "embed", "input": "exchange a delivered item"},
            {"op": "embed", "input": [1, 2]},
        ],
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/openai_client.py");
    let output = Command::new(python()).arg(script).arg(program.to_string()).output().expect("running python");
    // SIGTERM stops it gracefully: exit code 0, not death by the signal.
    let term = Command::new("kill").arg("-TERM").arg(served.child.id().to_string()).status().expect("running kill");
    assert!(term.success());
    let status = served.child.wait().expect("waiting for serve-llm");
    assert_eq!(status.code(), Some(0), "{}", served.stderr.lock().unwrap());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|err| panic!("no JSON ({err}): {stdout}\n{}", String::from_utf8_lossy(&output.stderr)));
    let steps = result["steps"].as_array().unwrap();
    let (floats, decoded) = (vectors(&steps[0]), vectors(&steps[1]));
    assert_eq!(steps[0]["indices"], json!([0, 1, 2]));
    assert_eq!(floats.len(), 3);
    assert!(floats.iter().all(|v| v.len() == 384), "all-MiniLM-L6-v2 has 384 dimensions");
    // The SDK asks for base64 by default and decodes it: the same vectors.
    for (a, b) in floats.iter().zip(&decoded) {
        assert!(a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6));
    }
    assert!(cosine(&floats[0], &vectors(&steps[2])[0]) > 0.99999, "one text alone embeds the same");
    assert!(steps[0]["prompt_tokens"].as_u64().unwrap() > 10);
    // The paraphrase is nearer than the unrelated request.
    assert!(cosine(&floats[0], &floats[1]) > cosine(&floats[0], &floats[2]), "{floats:?}");
    assert_eq!(steps[3]["error"]["status"], 400, "{}", steps[3]);
}

#[test]
fn without_the_embedding_model_the_default_falls_back_to_bm25_and_asking_for_vectors_fails() {
    let dir = TestDir::new();
    let runs = r##"{"id":"a","query":"Cancel order #W1","success":true,"meta":{"domain":"retail"},"steps":[{"action":{"kind":"tool_call","tool":"get_order_details","args":{"order_id":"#W1"}}},{"action":{"kind":"tool_call","tool":"cancel_pending_order","args":{"order_id":"#W1"}}}]}"##;
    dir.write("runs.jsonl", &format!("{runs}\n"));
    std::fs::create_dir(dir.path("no-models")).unwrap();
    let no_models = dir.path("no-models").to_string_lossy().into_owned();
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_flowmem"))
            .args(args)
            .current_dir(dir.path("."))
            .env("FLOWMEM_MODEL_DIR", &no_models)
            .env_remove("FLOWMEM_CONFIG")
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run(&["induce", "--mode", "rule", "runs.jsonl", "--memory", "memory.db"]);
    assert_eq!(code, Some(0), "workflows are stored without vectors: {stderr}");
    assert!(stdout.contains("stored wf-"), "{stdout}");
    let (code, stdout, stderr) = run(&["memory", "search", "cancel my order", "--memory", "memory.db"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("Cancel order #W1"), "{stdout}");
    assert!(stderr.contains("35-embedding-model.sh") && stderr.contains("BM25"), "the fallback is said: {stderr}");
    let (code, _, stderr) = run(&["memory", "search", "cancel", "--memory", "memory.db", "--retrieval", "vector"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("bash scripts/setup/35-embedding-model.sh"), "the error names the setup script: {stderr}");
}
