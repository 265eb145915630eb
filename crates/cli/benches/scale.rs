//! How `flowmem graph check` and `flowmem run` scale with the size of a graph (issue 27):
//! checking must stay near-linear, and a run's trace must grow linearly with its nodes.
//!
//! - `graph check` on graphs of 1,000, 10,000 and 100,000 nodes, two shapes each: loops
//!   in sequence (each body reading the previous body's result; valid) and the same
//!   loops unclosed (invalid: every loop lacks its `back` edge). Timed in process
//!   (`flowmem_exec::violations`) and as the release binary (parsing included).
//! - `flowmem run` on chains of 100 and 1,000 LLM nodes against the scripted
//!   OpenAI-compatible server: the trace's size, and the process's peak memory as
//!   `/usr/bin/time -f %M` reports it.
//!
//! Ratios are printed side by side: time per node, and trace bytes per node, at each
//! size against the smallest. Near-linear means ratios near 1.
//!
//! Run: `cargo bench -p flowmem --bench scale`. `SCALE_MAX_NODES` caps the graph sizes
//! (default 100000). Prints one summary block, with the load average before and after.

#![allow(clippy::print_stdout, missing_docs)]

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use flowmem_exec::{ToolCatalog, violations};
use flowmem_model::WorkflowGraph;
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use serde_json::Value;

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|text| text.trim().to_owned()).unwrap_or_else(|_| "unknown".into())
}

/// Loops in sequence with `n_nodes` nodes in all (see testsupport's
/// `loops_in_sequence`).
fn loops(n_nodes: usize, closed: bool) -> Value {
    flowmem_testsupport::loops_in_sequence((n_nodes - 1) / 2, closed)
}

fn chain(n: usize) -> Value {
    flowmem_testsupport::llm_chain(n)
}

fn flowmem() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flowmem"));
    for var in ["OPENAI_API_KEY", "FLOWMEM_CONFIG", "FLOWMEM_MEMORY"] {
        command.env_remove(var);
    }
    command
}

/// Times `graph check` on `graph`: in process, and the binary on a file.
fn time_check(dir: &Path, name: &str, graph: &Value) -> (f64, f64, usize) {
    let parsed: WorkflowGraph = serde_json::from_value(graph.clone()).expect("the bench graph parses");
    let started = Instant::now();
    let found = violations(&parsed, ToolCatalog::Unchecked);
    let in_process = started.elapsed().as_secs_f64();
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, graph.to_string()).expect("writing the bench graph");
    let started = Instant::now();
    let output = flowmem().arg("graph").arg("check").arg(&path).output().expect("running flowmem");
    let binary = started.elapsed().as_secs_f64();
    assert!(matches!(output.status.code(), Some(0 | 1)), "{output:?}");
    (in_process, binary, found.len())
}

/// Runs `flowmem run` on a chain of `n` nodes; the trace's bytes, peak RSS in KiB (if
/// `/usr/bin/time` exists) and the wall time.
fn run_chain(dir: &Path, base_url: &str, n: usize) -> (u64, Option<u64>, f64) {
    let graph = dir.join(format!("chain{n}.json"));
    std::fs::write(&graph, chain(n).to_string()).expect("writing the chain");
    let trace = dir.join(format!("chain{n}.trace.jsonl"));
    let time = Path::new("/usr/bin/time");
    let mut command = if time.exists() {
        let mut command = Command::new(time);
        command.args(["-f", "peak-rss-kib %M"]).arg(env!("CARGO_BIN_EXE_flowmem"));
        command
    } else {
        flowmem()
    };
    command
        .args(["run"])
        .arg(&graph)
        .args(["--query", "go", "--trace"])
        .arg(&trace)
        .env("OPENAI_BASE_URL", base_url)
        .env("FLOWMEM_MODEL", "scripted-model")
        .env_remove("OPENAI_API_KEY")
        .env_remove("FLOWMEM_CONFIG");
    let started = Instant::now();
    let output = command.output().expect("running flowmem run");
    let wall = started.elapsed().as_secs_f64();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let peak = stderr.lines().rev().find_map(|line| line.strip_prefix("peak-rss-kib ")?.trim().parse().ok());
    let bytes = std::fs::metadata(&trace).map(|meta| meta.len()).unwrap_or(0);
    (bytes, peak, wall)
}

fn main() {
    let max_nodes: usize = std::env::var("SCALE_MAX_NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("a temporary directory");
    println!("flowmem scale: graph check and run trace growth");
    println!("  cores: {}", std::thread::available_parallelism().map_or(0, usize::from));
    println!("  load average before: {}", load_average());

    println!("  graph check (seconds; per-node time relative to the smallest size):");
    for closed in [true, false] {
        let shape = if closed { "loops in sequence, valid" } else { "loops in sequence, unclosed (invalid)" };
        let mut first_per_node = None;
        for n_nodes in [1_001, 10_001, 100_001].into_iter().filter(|&n| n <= max_nodes + 1) {
            let graph = loops(n_nodes, closed);
            let (in_process, binary, n_violations) = time_check(dir.path(), &format!("loops{n_nodes}{closed}"), &graph);
            let per_node = in_process / n_nodes as f64;
            let ratio = per_node / *first_per_node.get_or_insert(per_node);
            println!(
                "    {shape:<38} {n_nodes:>7} nodes: in process {in_process:>8.4} s, binary {binary:>8.4} s, {n_violations:>6} violations, per-node ratio {ratio:>5.2}"
            );
        }
    }

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let server = runtime.block_on(ScriptedLlmServer::start(
        Script::new().otherwise(Reply::text("a result of forty characters or so.....")),
    ));
    println!("  flowmem run on chains of LLM nodes (scripted model):");
    let mut first_per_node = None;
    for n in [100, 1_000] {
        let (bytes, peak, wall) = run_chain(dir.path(), &server.base_url(), n);
        let per_node = bytes as f64 / n as f64;
        let ratio = per_node / *first_per_node.get_or_insert(per_node);
        let peak = peak.map_or("unknown".to_owned(), |kib| format!("{:.1} MiB", kib as f64 / 1024.0));
        println!(
            "    {n:>5} nodes: trace {bytes:>10} bytes ({per_node:>7.0} per node, ratio {ratio:>4.2}), peak RSS {peak}, wall {wall:.2} s"
        );
    }
    println!("  load average after:  {}", load_average());
}
