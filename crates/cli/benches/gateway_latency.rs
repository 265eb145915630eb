//! What the memory gateway adds to a model call: the same chat requests sent straight
//! to a local upstream and through `flowmem serve --upstream`, side by side in one run,
//! at concurrency 1 and 64, first with memory off and then with retrieval over 10,000
//! workflows (targets: at most 2 ms p50 and 5 ms p99 added without retrieval, at most
//! 20 ms p99 with it).
//!
//! The upstream is the scripted OpenAI-compatible server (it answers at once and keeps
//! no log of the requests, whose growth would slow the later configurations); the
//! gateways are the release `flowmem` binary on loopback; the client is reqwest with a
//! connection pool, as SDKs use. Every request starts a new conversation (the worst
//! case: retrieval runs on each), and the quiet period is long, so no learning runs
//! during the measurement; recording does. The figures are of a steady state: every path
//! is first warmed at concurrency 64 (so each connection pool holds all the connections
//! it will use), and each client sends ten unmeasured requests before its measured ones
//! (so the clients, which start together, no longer move in step).
//!
//! It also prints each gateway's CPU time per request (user and system, from `/proc`):
//! on a machine with few cores, the latency at concurrency 64 is mostly queueing for
//! that CPU. The gateway stores its recorded turns in the background, after their
//! replies, so its CPU is read once it has stored them all (`recording_backlog` 0 in
//! `/v1/flowmem/status`), and the bench prints how long after the last reply that was.
//! And how much its resident memory grew per request: the conversations stay open for
//! the whole run, and on a virtual machine the first touch of a fresh page can
//! cost microseconds of the host's time, in bursts that show in the p99. And how many
//! minor page faults it took per request, which counts pages the allocator gave back to
//! the kernel and touched again as well as fresh ones.
//!
//! Run: `cargo bench -p flowmem --bench gateway_latency`. `LATENCY_REQUESTS` sets the
//! requests per configuration (default 20,000: at concurrency 64 a fast machine answers
//! 2,000 in a tenth of a second, too short a run for a steady p99), `LATENCY_WORKFLOWS`
//! the memory size. To compare two builds or settings, `LATENCY_FLOWMEM` names another
//! `flowmem` binary to run as the gateways and `LATENCY_CONFIG` a `flowmem.toml` for them
//! (for instance `[gateway] record = false`, to see what recording costs).
//! `LATENCY_TRACE` names a file to append every request's latency to, one line each
//! (`BASE_URL cCONCURRENCY START_MS LATENCY_MS`, the start from the configuration's
//! first request), to see when in a run the slow requests came.
//!
//! On a virtual machine whose kernel packs threads onto fewer vCPUs (the bench then
//! prints `kernel.sched_vcpu_pack`), a woken thread can wait behind a busy vCPU while
//! another is idle, and the p99 at concurrency 64 shows it.

#![allow(clippy::print_stdout, missing_docs)]

use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use flowmem_memory::{MemoryStore, StoreConfig};
use flowmem_testsupport::{
    Latencies, Reply, Script, ScriptedLlmServer, process_memory_kib, retail_queries, spawn_listening,
    synthetic_workflows,
};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// What process `pid` has used so far: CPU time (user and system, ms), minor page
/// faults (each a fresh or reclaimed page the kernel had to map), and resident memory
/// (KiB), from `/proc` (zeros when unknown).
#[derive(Clone, Copy)]
struct Usage {
    cpu_ms: f64,
    minor_faults: f64,
    resident_kib: f64,
}

impl Usage {
    fn of(pid: u32) -> Usage {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
        let field = |idx: usize| fields.get(idx).and_then(|value| value.parse::<f64>().ok()).unwrap_or(0.0);
        Usage {
            // Linux reports them in clock ticks of 1/100 s.
            cpu_ms: (field(11) + field(12)) * 10.0,
            minor_faults: field(7),
            resident_kib: process_memory_kib(Some(pid), "VmRSS").unwrap_or(0.0),
        }
    }

    /// Each figure's growth since `before`, per request of `n`; CPU in µs.
    fn per_request(self, before: Usage, n: usize) -> Usage {
        let n = n as f64;
        Usage {
            cpu_ms: (self.cpu_ms - before.cpu_ms) * 1000.0 / n,
            minor_faults: (self.minor_faults - before.minor_faults) / n,
            resident_kib: (self.resident_kib - before.resident_kib) / n,
        }
    }
}

/// The kernel's vCPU packing setting, where it has one (some virtual machines' kernels
/// do: `sched_vcpu_pack`): it places a woken thread on a busy vCPU rather than waking an
/// idle one, which shows in the p99 at concurrency 64 (see
/// `bench/runs/2026-12-07-vm/gateway_batch_writer.txt`).
fn vcpu_packing() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/sched_vcpu_pack").ok().map(|text| text.trim().to_owned())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map(|text| text.trim().to_owned()).unwrap_or_else(|_| "unknown".into())
}

/// `flowmem serve` with the gateway in front of `upstream`; returns the process and
/// its `/v1` URL.
fn start_gateway(memory: &Path, upstream: &str, mode: &str) -> (Child, String) {
    let binary = std::env::var("LATENCY_FLOWMEM").unwrap_or_else(|_| env!("CARGO_BIN_EXE_flowmem").to_owned());
    let mut command = Command::new(binary);
    command
        .args(["serve", "--memory"])
        .arg(memory)
        .args(["--listen", "127.0.0.1:0", "--upstream", upstream, "--gateway-memory", mode, "--quiet-secs", "3600"])
        // BM25, the gateway's default, for both surfaces: the workflows have no vectors,
        // and the `hybrid` bench of flowmem-memory prints what embedding a query adds.
        .args(["--retrieval", "bm25", "--gateway-retrieval", "bm25"])
        .env("OPENAI_BASE_URL", upstream)
        .env("FLOWMEM_MODEL", "scripted-model")
        .env_remove("FLOWMEM_CONFIG");
    if let Ok(config) = std::env::var("LATENCY_CONFIG") {
        command.env("FLOWMEM_CONFIG", config);
    }
    let started = spawn_listening(command, "listening on ", Duration::from_secs(60));
    (started.child, started.address.trim_end_matches("/mcp").to_owned() + "/v1")
}

/// How many requests each client sends before its measured ones. The clients start
/// together, so their first requests arrive at once and move through the client, the
/// gateway and the upstream in step; a few rounds in they are spread out, as the
/// requests of independent agents are.
const RAMP_PER_CLIENT: usize = 10;

/// Waits until the gateway at `base` (its `/v1` URL) has stored every turn it recorded,
/// and returns how long that took. Asks with a growing pause, since each answer counts
/// the queue table's rows, and that CPU is the gateway's too.
async fn recorded(http: &reqwest::Client, base: &str) -> Duration {
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        let status: serde_json::Value = http
            .get(format!("{base}/flowmem/status"))
            .bearer_auth("unused")
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("the gateway's status")
            .json()
            .await
            .expect("the gateway's status as JSON");
        let backlog = status["recording_backlog"].as_u64().expect("the status has a recording backlog");
        if backlog == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the gateway at {base} still had {backlog} writes to store after two minutes"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// Where the ramp's request numbers start, apart from the measured ones'.
const RAMP_NUMBERS: usize = 500_000_000;

/// Sends `n` chat requests to `base` from `concurrency` clients in closed loops (after
/// [`RAMP_PER_CLIENT`] unmeasured ones each) and returns the latencies (ms) and the
/// number of failures. With `LATENCY_TRACE` set, also appends each measured request's
/// start and latency to that file.
async fn measure(
    http: &reqwest::Client,
    base: &str,
    queries: &Arc<Vec<String>>,
    n: usize,
    concurrency: usize,
    offset: usize,
) -> (Latencies, usize) {
    let per_client = n.div_ceil(concurrency);
    let tasks: Vec<_> = (0..concurrency)
        .map(|client| {
            let (http, url, queries) = (http.clone(), format!("{base}/chat/completions"), queries.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(per_client);
                let mut failures = 0;
                for idx in 0..RAMP_PER_CLIENT + per_client {
                    // Every request starts a conversation of its own: the ramp's are
                    // numbered apart from the measured ones.
                    let n = match idx.checked_sub(RAMP_PER_CLIENT) {
                        Some(measured) => offset + client * per_client + measured,
                        None => RAMP_NUMBERS + offset + client * RAMP_PER_CLIENT + idx,
                    };
                    let body = json!({"model": "scripted-model", "messages": [
                        {"role": "system", "content": "You are a retail support agent."},
                        {"role": "user", "content": format!("{} (request {n})", queries[n % queries.len()])}]});
                    let started = Instant::now();
                    let res = http.post(&url).bearer_auth("unused").json(&body).send().await;
                    let ok = match res {
                        Ok(reply) => reply.status().is_success() && reply.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    if idx < RAMP_PER_CLIENT {
                        continue;
                    }
                    if ok {
                        latencies.push((started, started.elapsed().as_secs_f64() * 1000.0));
                    } else {
                        failures += 1;
                    }
                }
                (latencies, failures)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    let mut failures = 0;
    for task in tasks {
        let (latencies, failed) = task.await.expect("a client task");
        all.extend(latencies);
        failures += failed;
    }
    if let Ok(path) = std::env::var("LATENCY_TRACE") {
        append_trace(Path::new(&path), &format!("{base} c{concurrency}"), &all);
    }
    (Latencies::new(all.into_iter().map(|(_, ms)| ms).collect()), failures)
}

/// Appends one line per request to the trace file at `path`: `label`, the request's
/// start (ms after the first request's) and its latency (ms).
fn append_trace(path: &Path, label: &str, requests: &[(Instant, f64)]) {
    use std::io::Write as _;
    let Some(first) = requests.iter().map(|(started, _)| *started).min() else { return };
    let mut text = String::new();
    for (started, ms) in requests {
        let at = started.duration_since(first).as_secs_f64() * 1000.0;
        text.push_str(&format!("{label} {at:.3} {ms:.3}\n"));
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()));
    if let Err(err) = written {
        panic!("LATENCY_TRACE: cannot append to {}: {err}", path.display());
    }
}

fn main() {
    let n = env_usize("LATENCY_REQUESTS", 20_000);
    let n_workflows = env_usize("LATENCY_WORKFLOWS", 10_000);
    let load_before = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let upstream = runtime.block_on(ScriptedLlmServer::start_unlogged(Script::new().otherwise(Reply::text("Sure."))));
    let upstream_url = upstream.base_url();

    let dir = tempfile::tempdir().expect("a temporary directory");
    let empty = dir.path().join("empty.db");
    MemoryStore::open(&empty, StoreConfig::standard()).expect("an empty memory");
    let full = dir.path().join("full.db");
    let mut store = MemoryStore::open(&full, StoreConfig::standard()).expect("the store opens");
    for chunk in synthetic_workflows(n_workflows, 7).chunks(5_000) {
        store.add_all(chunk).expect("the corpus stores");
    }
    drop(store);

    let (mut plain, plain_url) = start_gateway(&empty, &upstream_url, "off");
    let (mut with_memory, memory_url) = start_gateway(&full, &upstream_url, "prompt");
    let (plain_pid, memory_pid) = (plain.id(), with_memory.id());
    let queries = Arc::new(retail_queries());
    let http = reqwest::Client::builder().pool_max_idle_per_host(128).build().expect("a client");

    println!("gateway latency: {n} chat requests per configuration, {n_workflows} workflows in the memory");
    println!("  cores: {}", std::thread::available_parallelism().map_or(0, std::num::NonZero::get));
    println!("  load average before: {load_before}");
    if let Some(packing) = vcpu_packing() {
        println!("  kernel.sched_vcpu_pack: {packing} (threads packed onto fewer vCPUs when not 0)");
    }
    let mut met = true;
    runtime.block_on(async {
        // Warm up every path at the highest concurrency measured, so that each pool
        // holds the 64 connections it will use (the client's to the upstream and to
        // each gateway, and each gateway's to the upstream) and the memory's index is
        // loaded: the figures are of a steady state, not of 64 connection set-ups.
        for base in [upstream_url.as_str(), plain_url.as_str(), memory_url.as_str()] {
            let _ = measure(&http, base, &queries, 640, 64, 1_000_000).await;
        }
        // Nor does one configuration's recording run into the next one's measurement.
        for base in [plain_url.as_str(), memory_url.as_str()] {
            recorded(&http, base).await;
        }
        for concurrency in [1, 64] {
            let (direct, direct_failed) = measure(&http, &upstream_url, &queries, n, concurrency, 0).await;
            let before = Usage::of(plain_pid);
            let (off, off_failed) = measure(&http, &plain_url, &queries, n, concurrency, 0).await;
            let off_stored = recorded(&http, &plain_url).await;
            let off_use = Usage::of(plain_pid).per_request(before, n);
            let before = Usage::of(memory_pid);
            let (retrieval, retrieval_failed) = measure(&http, &memory_url, &queries, n, concurrency, 0).await;
            let retrieval_stored = recorded(&http, &memory_url).await;
            let retrieval_use = Usage::of(memory_pid).per_request(before, n);
            let added = |through: &Latencies, q: f64| through.quantile(q) - direct.quantile(q);
            println!("  concurrency {concurrency}:");
            println!(
                "    direct:                       p50 {:.2} ms, p99 {:.2} ms ({direct_failed} failed)",
                direct.quantile(0.5),
                direct.quantile(0.99)
            );
            println!(
                "    gateway, memory off:          p50 {:.2} ms, p99 {:.2} ms ({off_failed} failed); added p50 {:.2} ms, p99 {:.2} ms",
                off.quantile(0.5),
                off.quantile(0.99),
                added(&off, 0.5),
                added(&off, 0.99)
            );
            println!(
                "    gateway, retrieval over {n_workflows}: p50 {:.2} ms, p99 {:.2} ms ({retrieval_failed} failed); added p50 {:.2} ms, p99 {:.2} ms",
                retrieval.quantile(0.5),
                retrieval.quantile(0.99),
                added(&retrieval, 0.5),
                added(&retrieval, 0.99)
            );
            println!(
                "    gateway CPU per request:      {:.0} µs memory off, {:.0} µs with retrieval",
                off_use.cpu_ms, retrieval_use.cpu_ms
            );
            println!(
                "    gateway recording stored:     {:.0} ms after the last reply memory off, {:.0} ms with retrieval",
                off_stored.as_secs_f64() * 1000.0,
                retrieval_stored.as_secs_f64() * 1000.0
            );
            println!(
                "    gateway memory growth:        {:.2} KiB per request memory off, {:.2} KiB with retrieval",
                off_use.resident_kib, retrieval_use.resident_kib
            );
            println!(
                "    gateway page faults:          {:.2} per request memory off, {:.2} with retrieval",
                off_use.minor_faults, retrieval_use.minor_faults
            );
            let ok = direct_failed + off_failed + retrieval_failed == 0
                && added(&off, 0.5) <= 2.0
                && added(&off, 0.99) <= 5.0
                && added(&retrieval, 0.99) <= 20.0;
            println!("    targets (added ≤ 2 ms p50 and ≤ 5 ms p99 off, ≤ 20 ms p99 with retrieval): {}", if ok { "met" } else { "MISSED" });
            met &= ok;
        }
    });
    println!("  load average after:  {}", load_average());
    println!("  all targets: {}", if met { "met" } else { "MISSED" });
    for child in [&mut plain, &mut with_memory] {
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let _ = child.wait();
    }
}
