//! Load on `flowmem serve`: 50 MCP clients at once, 200 `find_workflows` calls each, on
//! a memory of 10,000 workflows (target: no errors, p99 under 50 ms on 2 cores).
//!
//! The server is the release `flowmem` binary, started on loopback; the clients are
//! rmcp's (the official Rust MCP SDK) streamable-HTTP clients, each its own session,
//! each calling in a closed loop. The memory is synthetic but shaped like τ-bench
//! retail (`flowmem_testsupport::synthetic_workflows`), and the tasks are the retail
//! test instructions. Side by side in the same run, the same queries are timed
//! against the store directly (one thread, no protocol), so the ratio shows what MCP,
//! HTTP and concurrency add to a search.
//!
//! Run: `cargo bench -p flowmem --bench serve_load`. Environment: `LOAD_CLIENTS`,
//! `LOAD_CALLS`, `LOAD_WORKFLOWS` override the sizes. Prints one summary block, with
//! the machine's load average before and after.

#![allow(clippy::print_stdout, missing_docs)]

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;

use flowmem_memory::{MemoryStore, StoreConfig};
use flowmem_model::Scope;
use flowmem_testsupport::{Latencies, Lcg, retail_queries, spawn_listening, synthetic_workflows};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|text| text.trim().to_owned()).unwrap_or_else(|_| "unknown".into())
}

/// One client: a session, then `calls` searches one after another. Returns the
/// latencies of the calls that succeeded and the number that failed.
async fn client(url: String, queries: Arc<Vec<String>>, calls: usize, seed: u64) -> (Vec<f64>, usize, Vec<String>) {
    let transport = StreamableHttpClientTransport::from_uri(url.as_str());
    let session = match ().serve(transport).await {
        Ok(session) => session,
        Err(err) => return (Vec::new(), calls, vec![format!("session: {err}")]),
    };
    let mut rng = Lcg(seed);
    let mut latencies = Vec::with_capacity(calls);
    let mut errors = Vec::new();
    for _ in 0..calls {
        let task = rng.pick(&queries).clone();
        let args = json!({"task": task, "k": 5, "scope": {"domain": "retail"}});
        let params =
            CallToolRequestParams::new("find_workflows").with_arguments(args.as_object().expect("an object").clone());
        let started = Instant::now();
        match session.peer().call_tool(params).await {
            Ok(result) if result.is_error != Some(true) => latencies.push(started.elapsed().as_secs_f64() * 1000.0),
            Ok(result) => errors.push(format!("tool error: {:?}", result.content)),
            Err(err) => errors.push(format!("call: {err}")),
        }
    }
    let _ = session.cancel().await;
    let n_errors = errors.len();
    (latencies, n_errors, errors)
}

fn main() {
    let n_clients = env_usize("LOAD_CLIENTS", 50);
    let n_calls = env_usize("LOAD_CALLS", 200);
    let n_workflows = env_usize("LOAD_WORKFLOWS", 10_000);
    let load_before = load_average();

    let dir = tempfile::tempdir().expect("a temporary directory");
    let memory = dir.path().join("memory.db");
    let built = Instant::now();
    let mut store = MemoryStore::open(&memory, StoreConfig::standard()).expect("the store opens");
    for chunk in synthetic_workflows(n_workflows, 7).chunks(5_000) {
        store.add_all(chunk).expect("the corpus stores");
    }
    let n_stored = store.list(&Scope::default()).expect("the store lists").len();
    println!("memory: {n_stored} workflows, built in {:.1} s", built.elapsed().as_secs_f64());

    // Side by side: the same kind of queries, straight against the store.
    let queries = Arc::new(retail_queries());
    let retail = Scope { site: None, domain: Some("retail".to_owned()) };
    store.search("warm up", &retail, 5).expect("search works");
    let mut rng = Lcg(3);
    let direct: Vec<f64> = (0..2_000)
        .map(|_| {
            let started = Instant::now();
            let hits = store.search(rng.pick(queries.as_slice()).as_str(), &retail, 5).expect("search works");
            std::hint::black_box(hits);
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    drop(store);
    let direct = Latencies::new(direct);

    let mut command = Command::new(env!("CARGO_BIN_EXE_flowmem"));
    // BM25 retrieval, as measured before hybrid existed; the workflows have no vectors.
    command
        .args(["serve", "--memory"])
        .arg(&memory)
        .args(["--listen", "127.0.0.1:0", "--retrieval", "bm25"])
        .env_remove("FLOWMEM_CONFIG");
    let started = spawn_listening(command, "listening on ", Duration::from_secs(60));
    let (mut server, url) = (started.child, started.address);

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let started = Instant::now();
    let results = runtime.block_on(async {
        let tasks: Vec<_> = (0..n_clients)
            .map(|idx| tokio::spawn(client(url.clone(), queries.clone(), n_calls, 100 + idx as u64)))
            .collect();
        let mut results = Vec::with_capacity(tasks.len());
        for task in tasks {
            results.push(task.await.expect("a client task"));
        }
        results
    });
    let wall = started.elapsed();
    let mut all = Vec::with_capacity(n_clients * n_calls);
    let mut n_errors = 0;
    let mut first_errors = Vec::new();
    for (latencies, errors, messages) in results {
        all.extend(latencies);
        n_errors += errors;
        first_errors.extend(messages.into_iter().take(2));
    }
    let _ = Command::new("kill").arg("-TERM").arg(server.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = server.kill();

    let mcp = Latencies::new(all);
    let load_after = load_average();
    let p99 = mcp.quantile(0.99);
    println!(
        "flowmem serve load: {n_clients} MCP clients x {n_calls} find_workflows (k 5, scope retail), {n_stored} workflows"
    );
    println!("  cores: {}", std::thread::available_parallelism().map_or(0, std::num::NonZero::get));
    println!("  load average before: {load_before}");
    println!("  load average after:  {load_after}");
    println!("  calls ok: {}, errors: {n_errors}", mcp.len());
    println!("  wall: {:.2} s, throughput: {:.0} calls/s", wall.as_secs_f64(), mcp.len() as f64 / wall.as_secs_f64());
    println!(
        "  over MCP (streamable HTTP): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        mcp.quantile(0.5),
        mcp.quantile(0.9),
        p99,
        mcp.max()
    );
    println!(
        "  direct store search, one thread: p50 {:.3} ms, p99 {:.3} ms",
        direct.quantile(0.5),
        direct.quantile(0.99)
    );
    println!(
        "  ratio MCP/direct: p50 {:.1}x, p99 {:.1}x",
        mcp.quantile(0.5) / direct.quantile(0.5).max(1e-6),
        p99 / direct.quantile(0.99).max(1e-6)
    );
    println!("  target (0 errors, p99 < 50 ms): {}", if n_errors == 0 && p99 < 50.0 { "met" } else { "MISSED" });
    for message in first_errors.iter().take(5) {
        println!("  error: {message}");
    }
}
