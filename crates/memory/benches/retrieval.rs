//! Retrieval latency with 100,000 stored workflows (target: p99 under 20 ms).
//!
//! The corpus is synthetic but shaped like τ-bench retail: tool names come from
//! `../shared/data/tau-bench/retail/tools.json`, words from the retail task
//! instructions, and queries are the instructions of the test split. The store is built
//! once per run in a temporary file. Besides criterion's estimate of one query, the run
//! times the first search (which loads the index) and then 2,000 queries one by one and prints p50, p90, p99 and max, and writes the raw
//! latencies as CSV to `target/bench-retrieval/latencies.csv`.

#![allow(clippy::print_stdout, missing_docs)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};

use flowmem_memory::{MemoryStore, StoreConfig};
use flowmem_model::Scope;
use flowmem_testsupport::{Latencies, Lcg, retail_queries, synthetic_workflows};

/// The default corpus size; `RETRIEVAL_WORKFLOWS` overrides it.
const DEFAULT_WORKFLOWS: usize = 100_000;
const N_TIMED_QUERIES: usize = 2_000;

fn retrieval(c: &mut Criterion) {
    let n_workflows: usize =
        std::env::var("RETRIEVAL_WORKFLOWS").ok().and_then(|n| n.parse().ok()).unwrap_or(DEFAULT_WORKFLOWS);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("bench.db");
    let built = Instant::now();
    let mut store = MemoryStore::open(&path, StoreConfig::standard()).expect("the store opens");
    for chunk in synthetic_workflows(n_workflows, 7).chunks(10_000) {
        store.add_all(chunk).expect("the corpus stores");
    }
    println!("built {n_workflows} workflows in {:.1} s", built.elapsed().as_secs_f64());

    let queries = retail_queries();
    let retail = Scope { site: None, domain: Some("retail".to_owned()) };
    let mut rng = Lcg(11);

    // The first search loads the in-memory index from the file; time it on its own.
    let loaded = Instant::now();
    store.search("warm up", &retail, 5).expect("search works");
    println!(
        "first search (loads the index of {n_workflows} workflows): {:.0} ms",
        loaded.elapsed().as_secs_f64() * 1000.0
    );

    let mut latencies_ms: Vec<f64> = Vec::with_capacity(N_TIMED_QUERIES);
    let mut n_hits = 0;
    for _ in 0..N_TIMED_QUERIES {
        let query = rng.pick(&queries).as_str();
        let start = Instant::now();
        let hits = store.search(black_box(query), &retail, 5).expect("search works");
        latencies_ms.push(start.elapsed().as_secs_f64() * 1000.0);
        n_hits += hits.len();
    }
    let summary = Latencies::new(latencies_ms.clone());
    let pct = |p: f64| summary.quantile(p);
    println!(
        "retrieval over {n_workflows} workflows, {N_TIMED_QUERIES} queries (top 5, scope retail): p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms, mean hits {:.1}; target p99 < 20 ms: {}",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        summary.max(),
        n_hits as f64 / N_TIMED_QUERIES as f64,
        if pct(0.99) < 20.0 { "met" } else { "MISSED" }
    );
    let out_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-retrieval");
    if std::fs::create_dir_all(&out_dir).is_ok() {
        let csv: String = std::iter::once("query_idx,latency_ms\n".to_owned())
            .chain(latencies_ms.iter().enumerate().map(|(idx, ms)| format!("{idx},{ms:.4}\n")))
            .collect();
        let _ = std::fs::write(out_dir.join("latencies.csv"), csv);
    }

    c.bench_function("search_top5_100k_workflows", |b| {
        b.iter(|| store.search(black_box(rng.pick(&queries).as_str()), &retail, 5).expect("search works"))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50);
    targets = retrieval
}
criterion_main!(benches);
