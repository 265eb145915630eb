//! Engine benchmarks against the scripted OpenAI-compatible server.
//!
//! 1. `critical_path`: `k` stages, each a `parallel` fan-out to `m` LLM members and a
//!    `join`, with every model reply delayed by a fixed `L`. The critical path holds `k`
//!    LLM nodes, so the run should take about `k·L` however large `m` is; the target is
//!    at most `1.1·k·L`.
//! 2. `overhead`: the engine's own time per node, that is the wall time minus the time
//!    spent inside model calls, over a chain and over a fan-out of instant replies. The
//!    target is under 200 µs per node.
//!
//! Besides criterion's timings, each group prints the ratios it checks.

#![allow(clippy::print_stderr, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use flowmem_exec::{
    NoObserver, Plan, RunInput, Runtime, ToolCatalog, check, compile, exec_prompts, run,
};
use flowmem_llm::{ChatModel, ChatRequest, ChatResponse, HttpModel, HttpModelConfig, LlmError};
use flowmem_model::WorkflowGraph;
use flowmem_testsupport::{Reply, Script, ScriptedLlmServer};
use flowmem_tools::{Registry, ToolsConfig};
use serde_json::json;

const LATENCY: Duration = Duration::from_millis(50);
const STAGES: usize = 3;
const MAX_MEMBERS: usize = 128;

/// Delegates to the real HTTP model and adds up the wall time spent inside it.
struct Timed {
    inner: HttpModel,
    inside_ns: AtomicU64,
}

#[async_trait::async_trait]
impl ChatModel for Timed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let res = self.inner.chat(request).await;
        self.inside_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
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
    serde_json::from_value(
        json!({"nodes": nodes, "edges": edges, "entry": "start", "exit": previous}),
    )
    .unwrap()
}

fn chain_graph(n_nodes: usize) -> WorkflowGraph {
    let nodes: Vec<_> = (0..n_nodes)
        .map(|idx| json!({"id": format!("n{idx}"), "kind": "llm", "role": "reason"}))
        .collect();
    let edges: Vec<_> = (1..n_nodes)
        .map(|idx| json!({"from": format!("n{}", idx - 1), "to": format!("n{idx}")}))
        .collect();
    let exit = format!("n{}", n_nodes - 1);
    serde_json::from_value(json!({"nodes": nodes, "edges": edges, "entry": "n0", "exit": exit}))
        .unwrap()
}

struct Setup {
    _server: ScriptedLlmServer,
    model: Arc<Timed>,
    registry: Arc<Registry>,
}

async fn setup(latency: Duration) -> Setup {
    let server =
        ScriptedLlmServer::start(Script::new().otherwise(Reply::text("ok").delay(latency))).await;
    // The client's per-model cap defaults to 8 requests in flight, which would make a
    // 128-member fan-out 16 rounds of `L`. The bench measures the engine, so the cap is
    // set above the widest fan-out, as a deployment serving that many parallel members
    // would configure it.
    let mut cfg = HttpModelConfig::new("bench", server.base_url(), "scripted-model");
    cfg.max_concurrency = MAX_MEMBERS;
    let inner = HttpModel::new(cfg).unwrap();
    let model = Arc::new(Timed {
        inner,
        inside_ns: AtomicU64::new(0),
    });
    // A real registry with no servers: these graphs have no tool nodes.
    let registry = Arc::new(Registry::connect(&ToolsConfig::empty()).await.unwrap());
    Setup {
        _server: server,
        model,
        registry,
    }
}

fn plan(setup: &Setup, graph: WorkflowGraph) -> Plan {
    let runtime = Runtime {
        executor: setup.model.clone(),
        models: Default::default(),
        tools: setup.registry.clone(),
        prompts: Arc::new(exec_prompts(None).unwrap()),
    };
    compile(&check(graph, ToolCatalog::Known(&[])).unwrap(), runtime).unwrap()
}

fn input() -> RunInput {
    RunInput {
        id: "bench".to_owned(),
        query: "benchmark the engine".to_owned(),
    }
}

fn critical_path(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let setup = tokio.block_on(setup(LATENCY));
    let bound = LATENCY.as_secs_f64() * STAGES as f64;
    let mut group = c.benchmark_group("critical_path");
    group.sample_size(10);
    for members in [1usize, 8, 32, MAX_MEMBERS] {
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
        // The median is the figure checked; the worst run is shown too, since on a
        // shared machine it mostly measures other processes.
        walls.sort_by(f64::total_cmp);
        let median = walls[walls.len() / 2];
        let worst = walls[walls.len() - 1];
        eprintln!(
            "critical_path: k={STAGES} L={} ms members={members:>3} nodes={:>3} runs={}: median wall {:.1} ms = {:.3} x k·L (target <= 1.1), worst {:.3} x",
            LATENCY.as_millis(),
            1 + STAGES * (members + 2),
            walls.len(),
            median * 1000.0,
            median / bound,
            worst / bound,
        );
    }
    group.finish();
}

fn overhead(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let setup = tokio.block_on(setup(Duration::ZERO));
    let mut group = c.benchmark_group("overhead");
    group.sample_size(20);
    for (name, graph, n_llm) in [
        ("chain50", chain_graph(50), 50usize),
        ("fan64", staged_graph(1, 64), 64),
    ] {
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
                        trace
                            .observations
                            .iter()
                            .map(|o| (o.latency_ms * 1e6) as u128)
                            .max()
                            .unwrap_or(0)
                            .min(inside)
                    };
                    engine_ns += wall.as_nanos().saturating_sub(inside_path);
                    runs += 1;
                    total += wall;
                }
                total
            });
        });
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
