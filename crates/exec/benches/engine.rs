//! Engine benchmarks with a scripted model of fixed latency.
//!
//! 1. `critical_path`: `k` stages, each a `parallel` fan-out to `m` LLM members and a
//!    `join`, with every model reply delayed by a fixed `L`. The critical path holds `k`
//!    LLM nodes, so the run should take about `k·L` however large `m` is; the target is
//!    at most `1.1·k·L`. It runs at `L` = 50 ms and 200 ms, and at `L` = 0, where the
//!    wall time is the residue that does not overlap the model's latency. Each runs on
//!    two models, side by side:
//!    - `in-process`: a `ChatModel` that sleeps `L` and answers. This measures the
//!      engine alone, and is the figure the target applies to.
//!    - `http`: the scripted OpenAI-compatible server on loopback through `HttpModel`.
//!      The residue then adds, per member, one HTTP round trip whose client and server
//!      share the machine's two cores with the engine.
//! 2. `overhead`: the engine's own time per node, that is the wall time minus the time
//!    spent inside model calls, over a chain and over a fan-out of instant replies. The
//!    target is under 200 µs per node.
//!
//! Besides criterion's timings, each group prints the ratios it checks; `critical_path`
//! ends with a table of all latencies side by side.

#![allow(clippy::print_stderr, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, criterion_group, criterion_main};
use flowmem_exec::{NoObserver, Plan, RunInput, Runtime, ToolCatalog, check, compile, exec_prompts, run};
use flowmem_llm::{ChatModel, ChatRequest, ChatResponse, FinishReason, HttpModel, HttpModelConfig, LlmError, Usage};
use flowmem_model::WorkflowGraph;
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use flowmem_tools::{Registry, ToolsConfig};
use serde_json::json;

/// The model latencies `L`; 0 measures the residue.
const LATENCIES_MS: [u64; 3] = [0, 50, 200];
const STAGES: usize = 3;
const MEMBERS: [usize; 4] = [1, 8, 32, MAX_MEMBERS];
const MAX_MEMBERS: usize = 128;

/// Delegates to a model and adds up the wall time spent inside it.
struct Timed {
    inner: Arc<dyn ChatModel>,
    inside_ns: AtomicU64,
}

/// A scripted model in the process: every call sleeps `latency`, then answers "ok".
struct FixedLatency {
    latency: Duration,
}

#[async_trait::async_trait]
impl ChatModel for FixedLatency {
    fn name(&self) -> &str {
        "fixed-latency"
    }

    async fn chat(&self, _request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        tokio::time::sleep(self.latency).await;
        Ok(ChatResponse {
            content: Some("ok".to_owned()),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Stop,
            usage: Usage { prompt_tokens: 0, completion_tokens: 1, cached_tokens: 0 },
            latency: self.latency,
            cached: false,
        })
    }
}

/// Which scripted model a benchmark runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    InProcess,
    Http,
}

impl Backend {
    fn label(self) -> &'static str {
        match self {
            Backend::InProcess => "in-process",
            Backend::Http => "http",
        }
    }
}

#[async_trait::async_trait]
impl ChatModel for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let res = self.inner.chat(request).await;
        self.inside_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        res
    }
}

fn staged_graph(stages: usize, members: usize) -> WorkflowGraph {
    let mut nodes = vec![json!({"id": "start", "kind": "join"})];
    let mut edges = Vec::new();
    let mut previous = "start".to_owned();
    for stage in 0..stages {
        let (fan, join) = (format!("fan{stage}"), format!("join{stage}"));
        nodes.push(json!({"id": fan, "kind": "parallel"}));
        nodes.push(json!({"id": join, "kind": "join"}));
        edges.push(json!({"from": previous, "to": fan}));
        for member in 0..members {
            let id = format!("s{stage}m{member}");
            nodes.push(json!({"id": id, "kind": "llm", "role": "reason"}));
            edges.push(json!({"from": fan, "to": id}));
            edges.push(json!({"from": id, "to": join}));
        }
        previous = join;
    }
    serde_json::from_value(json!({"nodes": nodes, "edges": edges, "entry": "start", "exit": previous})).unwrap()
}

fn chain_graph(n_nodes: usize) -> WorkflowGraph {
    let nodes: Vec<_> =
        (0..n_nodes).map(|idx| json!({"id": format!("n{idx}"), "kind": "llm", "role": "reason"})).collect();
    let edges: Vec<_> =
        (1..n_nodes).map(|idx| json!({"from": format!("n{}", idx - 1), "to": format!("n{idx}")})).collect();
    let exit = format!("n{}", n_nodes - 1);
    serde_json::from_value(json!({"nodes": nodes, "edges": edges, "entry": "n0", "exit": exit})).unwrap()
}

struct Setup {
    server: Option<ScriptedLlmServer>,
    model: Arc<Timed>,
    registry: Arc<Registry>,
}

async fn setup(latency: Duration, backend: Backend) -> Setup {
    let (server, inner): (_, Arc<dyn ChatModel>) = match backend {
        Backend::InProcess => (None, Arc::new(FixedLatency { latency })),
        Backend::Http => {
            let server = ScriptedLlmServer::start(Script::new().otherwise(Reply::text("ok").delay(latency))).await;
            // The client's per-model cap defaults to 8 requests in flight, which would
            // make a 128-member fan-out 16 rounds of `L`. The bench measures the engine,
            // so the cap is set above the widest fan-out, as a deployment serving that
            // many parallel members would configure it.
            let mut cfg = HttpModelConfig::new("bench", server.base_url(), "scripted-model");
            cfg.max_concurrency = MAX_MEMBERS;
            let model = HttpModel::new(cfg).unwrap();
            (Some(server), Arc::new(model))
        }
    };
    let model = Arc::new(Timed { inner, inside_ns: AtomicU64::new(0) });
    // A real registry with no servers: these graphs have no tool nodes.
    let registry = Arc::new(Registry::connect(&ToolsConfig::empty()).await.unwrap());
    Setup { server, model, registry }
}

fn plan(setup: &Setup, graph: WorkflowGraph) -> Plan {
    let runtime = Runtime {
        executor: setup.model.clone(),
        models: Default::default(),
        tools: setup.registry.clone(),
        prompts: Arc::new(exec_prompts(None).unwrap()),
        grounding: flowmem_exec::Grounding::default(),
    };
    compile(&check(graph, ToolCatalog::Known(&[])).unwrap(), runtime).unwrap()
}

fn input() -> RunInput {
    RunInput { id: "bench".to_owned(), query: "benchmark the engine".to_owned() }
}

/// Median and worst wall time of one configuration, in seconds.
struct Walls {
    runs: usize,
    median: f64,
    worst: f64,
}

fn critical_path(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for backend in [Backend::InProcess, Backend::Http] {
        critical_path_on(c, &tokio, backend);
    }
}

fn critical_path_on(c: &mut Criterion, tokio: &tokio::runtime::Runtime, backend: Backend) {
    let label = backend.label();
    // (L in ms, members) -> walls
    let mut table: Vec<(u64, usize, Walls)> = Vec::new();
    for latency_ms in LATENCIES_MS {
        let latency = Duration::from_millis(latency_ms);
        let setup = tokio.block_on(setup(latency, backend));
        let mut group = c.benchmark_group(format!("critical_path_{label}_L{latency_ms}ms"));
        group.sample_size(10);
        if latency_ms >= 200 {
            // One run takes over 0.6 s: the same few iterations per sample.
            group.sampling_mode(SamplingMode::Flat);
        }
        for members in MEMBERS {
            let plan = plan(&setup, staged_graph(STAGES, members));
            let mut walls: Vec<f64> = Vec::new();
            group.bench_with_input(BenchmarkId::new("members", members), &members, |b, _| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let started = Instant::now();
                        let trace = tokio.block_on(run(&plan, &input(), &NoObserver));
                        let wall = started.elapsed();
                        assert_eq!(trace.error, None);
                        walls.push(wall.as_secs_f64());
                        total += wall;
                    }
                    total
                });
            });
            if walls.is_empty() {
                // Filtered out on the command line.
                continue;
            }
            // The median is the figure checked; the worst run is shown too, since on a
            // shared machine it mostly measures other processes.
            walls.sort_by(f64::total_cmp);
            let walls = Walls { runs: walls.len(), median: walls[walls.len() / 2], worst: walls[walls.len() - 1] };
            let bound = latency.as_secs_f64() * STAGES as f64;
            if latency_ms == 0 {
                eprintln!(
                    "critical_path {label}: k={STAGES} L=0 members={members:>3} nodes={:>3} runs={}: median residue {:.1} ms = {:.0} µs per member, worst {:.1} ms",
                    1 + STAGES * (members + 2),
                    walls.runs,
                    walls.median * 1000.0,
                    walls.median * 1e6 / (STAGES * members) as f64,
                    walls.worst * 1000.0,
                );
            } else {
                eprintln!(
                    "critical_path {label}: k={STAGES} L={latency_ms} ms members={members:>3} nodes={:>3} runs={}: median wall {:.1} ms = {:.3} x k·L (target <= 1.1), worst {:.3} x",
                    1 + STAGES * (members + 2),
                    walls.runs,
                    walls.median * 1000.0,
                    walls.median / bound,
                    walls.worst / bound,
                );
            }
            table.push((latency_ms, members, walls));
        }
        group.finish();
        // The server answers concurrently: the widest fan-out had all its requests in
        // flight at once, so neither it nor the client's cap serialises the members.
        if let Some(server) = &setup.server {
            eprintln!(
                "critical_path {label}: L={latency_ms} ms: at most {} chat requests in flight at the server",
                server.max_in_flight()
            );
        }
    }
    print_table(label, &table);
}

/// The `critical_path` figures side by side: residue at `L` = 0, then `median (worst)`
/// as multiples of `k·L` for each latency.
fn print_table(label: &str, table: &[(u64, usize, Walls)]) {
    let latencies: Vec<u64> = LATENCIES_MS.iter().copied().filter(|&ms| ms > 0).collect();
    let mut header = format!("critical_path {label} (k={STAGES}): members | L=0 residue median (worst)");
    for ms in &latencies {
        header.push_str(&format!(" | L={ms} ms: x k·L median (worst)"));
    }
    eprintln!("{header}   [target <= 1.1]");
    for members in MEMBERS {
        let find =
            |ms: u64| table.iter().find(|(latency, m, _)| *latency == ms && *m == members).map(|(_, _, walls)| walls);
        let mut row = format!("critical_path {label} (k={STAGES}): {members:>7} |");
        match find(0) {
            Some(walls) => {
                row.push_str(&format!(" {:>6.1} ms ({:>6.1} ms)", walls.median * 1000.0, walls.worst * 1000.0))
            }
            None => row.push_str("                  -"),
        }
        for &ms in &latencies {
            let bound = ms as f64 / 1000.0 * STAGES as f64;
            match find(ms) {
                Some(walls) => row.push_str(&format!(" | {:>13.3} ({:.3})", walls.median / bound, walls.worst / bound)),
                None => row.push_str(" |             -"),
            }
        }
        eprintln!("{row}");
    }
}

fn overhead(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let setup = tokio.block_on(setup(Duration::ZERO, Backend::Http));
    let mut group = c.benchmark_group("overhead");
    group.sample_size(20);
    for (name, graph, n_llm) in [("chain50", chain_graph(50), 50usize), ("fan64", staged_graph(1, 64), 64)] {
        let n_nodes = graph.nodes.len();
        let plan = plan(&setup, graph);
        let (mut engine_ns, mut runs) = (0u128, 0u128);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    setup.model.inside_ns.store(0, Ordering::Relaxed);
                    let started = Instant::now();
                    let trace = tokio.block_on(run(&plan, &input(), &NoObserver));
                    let wall = started.elapsed();
                    assert_eq!(trace.error, None);
                    // On a chain the model calls are sequential, so their sum is on the
                    // critical path; on a fan-out they overlap, so the longest one is.
                    let inside = setup.model.inside_ns.load(Ordering::Relaxed) as u128;
                    let inside_path = if name.starts_with("chain") {
                        inside
                    } else {
                        trace.observations.iter().map(|o| (o.latency_ms * 1e6) as u128).max().unwrap_or(0).min(inside)
                    };
                    engine_ns += wall.as_nanos().saturating_sub(inside_path);
                    runs += 1;
                    total += wall;
                }
                total
            });
        });
        if runs == 0 {
            continue;
        }
        let per_node_us = engine_ns as f64 / runs as f64 / n_nodes as f64 / 1000.0;
        eprintln!(
            "overhead: {name}: {n_nodes} nodes ({n_llm} LLM): engine time {per_node_us:.1} µs per node = {:.3} x 200 µs target",
            per_node_us / 200.0,
        );
    }
    group.finish();
}

criterion_group!(benches, critical_path, overhead);
criterion_main!(benches);
