//! Retrieval by words, by meaning and both, side by side: embedding throughput of the
//! embedded all-MiniLM-L6-v2 on 1 and 2 threads, query-embedding latency, and retrieval
//! latency (p50, p99) at 10,000 and 100,000 workflows for `bm25`, `vector` and
//! `hybrid`, search alone and with the query's embedding.
//!
//! The corpus is [`synthetic_workflows`] (τ-bench-retail-shaped); queries are the retail
//! test instructions. The first 2,000 workflows are embedded for real (their texts as
//! the store embeds them); workflows beyond are given seeded random unit vectors, since
//! an exact scan costs the same whatever the vectors hold and embedding 100,000 texts
//! takes long on 2 cores (the throughput line says how long).
//! Throughput on 1 and 2 threads is measured in child processes of this bench with
//! `RAYON_NUM_THREADS` set, since candle reads it at start.
//!
//! Run: `cargo bench -p flowmem-memory --bench hybrid` (needs
//! `bash scripts/setup/35-embedding-model.sh`). `HYBRID_SIZES=10000` runs one size.

#![allow(clippy::print_stdout, missing_docs)]

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use flowmem_llm::EmbeddingModel;
use flowmem_llm_local::{LocalEmbeddingConfig, LocalEmbeddingModel};
use flowmem_memory::{
    MemoryStore, RetrievalMode, Retriever, SearchQuery, StoreConfig, WorkflowVectors, embed_workflows,
};
use flowmem_model::Scope;
use flowmem_testsupport::{Latencies, Lcg, retail_queries, synthetic_workflows};

/// Workflows embedded for real; the rest get random vectors.
const REAL: usize = 2_000;
/// Texts per throughput measurement.
const THROUGHPUT_TEXTS: usize = 512;
/// Timed searches per mode and size.
const N_QUERIES: usize = 500;
const TOP_K: usize = 5;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime")
}

fn model() -> Arc<dyn EmbeddingModel> {
    let config = LocalEmbeddingConfig::standard();
    if let Some(missing) = LocalEmbeddingModel::missing_file(&config.dir) {
        panic!("`{}` is missing: run `bash scripts/setup/35-embedding-model.sh`", missing.display());
    }
    let model = LocalEmbeddingModel::new(config);
    model.load().expect("the embedding model loads");
    Arc::new(model)
}

/// The child's job: embed the workflow texts and print sentences per second.
fn throughput_child() {
    let model = model();
    let workflows = synthetic_workflows(THROUGHPUT_TEXTS, 3);
    let rt = runtime();
    // Warm up: the first batch pays for allocation.
    rt.block_on(embed_workflows(model.as_ref(), &workflows[..32])).expect("embedding works");
    let started = Instant::now();
    rt.block_on(embed_workflows(model.as_ref(), &workflows)).expect("embedding works");
    println!("{:.1}", THROUGHPUT_TEXTS as f64 / started.elapsed().as_secs_f64());
}

fn throughput(threads: usize) -> f64 {
    let exe = std::env::current_exe().expect("the bench's own path");
    let output = Command::new(exe)
        .env("HYBRID_BENCH_CHILD", "throughput")
        .env("RAYON_NUM_THREADS", threads.to_string())
        .output()
        .expect("running the throughput child");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().last().and_then(|line| line.trim().parse().ok()).unwrap_or_else(|| {
        panic!("the throughput child printed no number: {text}\n{}", String::from_utf8_lossy(&output.stderr))
    })
}

/// A seeded random unit vector of `dim` floats.
fn random_unit(rng: &mut Lcg, dim: usize) -> Vec<f32> {
    let mut vector: Vec<f32> = (0..dim).map(|_| (rng.next_index() % 20_001) as f32 / 10_000.0 - 1.0).collect();
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    vector.iter_mut().for_each(|x| *x /= norm);
    vector
}

fn main() {
    if std::env::var("HYBRID_BENCH_CHILD").as_deref() == Ok("throughput") {
        throughput_child();
        return;
    }
    // Cargo passes `--bench`; nothing else is read from the arguments.
    let sizes: Vec<usize> = std::env::var("HYBRID_SIZES")
        .ok()
        .map(|text| text.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    let (one, two) = (throughput(1), throughput(2));
    println!(
        "embedding throughput (all-MiniLM-L6-v2, {THROUGHPUT_TEXTS} workflow texts, batches of 32): 1 thread {one:.0} sentences/s, 2 threads {two:.0} sentences/s ({:.2}x)",
        two / one
    );

    let model = model();
    let model_id = model.model_id();
    let rt = runtime();
    let queries = retail_queries();
    let mut query_ms = Vec::with_capacity(queries.len());
    let mut query_vectors = Vec::with_capacity(queries.len());
    for query in &queries {
        let started = Instant::now();
        let embedded = rt.block_on(model.embed(std::slice::from_ref(query))).expect("embedding works");
        query_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        query_vectors.push(embedded.vectors.into_iter().next().expect("one vector"));
    }
    let query_latency = Latencies::new(query_ms.clone());
    println!(
        "query embedding ({} retail test instructions, one at a time, 2 threads): p50 {:.2} ms, p99 {:.2} ms",
        queries.len(),
        query_latency.quantile(0.5),
        query_latency.quantile(0.99)
    );

    let largest = sizes.iter().copied().max().unwrap_or(0);
    let corpus = synthetic_workflows(largest, 7);
    let started = Instant::now();
    let real = corpus.len().min(REAL);
    let mut vectors = rt.block_on(embed_workflows(model.as_ref(), &corpus[..real])).expect("embedding works").vectors;
    let embed_s = started.elapsed().as_secs_f64();
    println!("embedded {real} workflows in {embed_s:.1} s; the other {} get random unit vectors", corpus.len() - real);
    let mut rng = Lcg(99);
    let dim = vectors.first().map_or(384, Vec::len);
    vectors.extend((real..corpus.len()).map(|_| random_unit(&mut rng, dim)));

    let retail = Scope { site: None, domain: Some("retail".to_owned()) };
    println!();
    println!("retrieval latency, top {TOP_K} in scope retail, {N_QUERIES} queries per row (ms):");
    println!("| workflows | mode | search p50 | search p99 | + query embedding p50 | + query embedding p99 |");
    println!("|---|---|---|---|---|---|");
    for &size in &sizes {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut store = MemoryStore::open(&dir.path().join("bench.db"), StoreConfig::standard()).expect("opens");
        for (workflows, chunk) in corpus[..size].chunks(10_000).zip(vectors[..size].chunks(10_000)) {
            let chunk = WorkflowVectors { model: model_id.clone(), vectors: chunk.to_vec() };
            store.add_all_with_vectors(workflows, Some(&chunk)).expect("the corpus stores");
        }
        let loaded = Instant::now();
        store.search("warm up", &retail, TOP_K).expect("search works");
        let load_ms = loaded.elapsed().as_secs_f64() * 1000.0;
        for mode in RetrievalMode::ALL {
            let retriever = Retriever::new(mode, Some(model.clone())).expect("a retriever");
            let mut rng = Lcg(11);
            let mut search_ms = Vec::with_capacity(N_QUERIES);
            let mut total_ms = Vec::with_capacity(N_QUERIES);
            for _ in 0..N_QUERIES {
                let idx = rng.next_index() % queries.len();
                let query = SearchQuery {
                    text: queries[idx].clone(),
                    mode,
                    embedding: mode.needs_vectors().then(|| flowmem_memory::QueryEmbedding {
                        model: model_id.clone(),
                        vector: query_vectors[idx].clone(),
                    }),
                    provenance: true,
                };
                let started = Instant::now();
                let hits = store.search_with(&query, &retail, TOP_K).expect("search works");
                let ms = started.elapsed().as_secs_f64() * 1000.0;
                assert!(!hits.is_empty(), "{mode} found nothing for {}", queries[idx]);
                search_ms.push(ms);
                total_ms.push(ms + if mode.needs_vectors() { query_ms[idx] } else { 0.0 });
            }
            let (search, total) = (Latencies::new(search_ms), Latencies::new(total_ms));
            println!(
                "| {size} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                retriever.mode(),
                search.quantile(0.5),
                search.quantile(0.99),
                total.quantile(0.5),
                total.quantile(0.99)
            );
        }
        println!("(first search of {size} loads the index, vectors included: {load_ms:.0} ms)");
    }
}
