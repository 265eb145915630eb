//! Retrieval latency on SQLite and PostgreSQL side by side, at 100,000 stored workflows
//! (`RETRIEVAL_WORKFLOWS` overrides the number).
//!
//! The corpus is the one of the `retrieval` bench (synthetic, shaped like τ-bench
//! retail; queries are the instructions of the test split). For each backend the run
//! builds the corpus with `add_all` in chunks of 10,000, times the first search (which
//! loads the index), then from that handle 2,000 `search` calls right after the build,
//! then (PostgreSQL only) runs `ANALYZE`, then 2,000 `search` calls again and 500
//! `retrieve` calls (which also count the retrievals in a write transaction), all with
//! the same queries in the same order. A search on a handle whose index is loaded is one
//! query for the log head, one for the hits' rows and one for their provenance; the run
//! also times the log-head query alone (`revision`), the floor of any search. Last, with
//! a second handle opened on the same memory, it times 200 times how long after
//! `writer.add` returns the reader's `search` finds the new workflow.
//!
//! Why two search passes: right after a bulk load PostgreSQL has no planner statistics
//! for the new tables until autovacuum analyzes them (within a minute or so of the load,
//! or not yet), and without them it plans the provenance lookup as a sequential scan of
//! the whole `provenance` table. The first pass shows what a memory gets right after a
//! bulk load (the run prints whether autovacuum analyzed the tables during it); the
//! second the steady state. SQLite's store never analyzes; it is not touched.
//!
//! The PostgreSQL server is a throwaway cluster from `flowmem_testsupport::PgCluster`
//! on loopback (with `fsync=off`); SQLite is a temporary file in WAL mode with
//! `synchronous=NORMAL`. Both backends must find the same number of hits.
//!
//! ```text
//! cargo bench -p flowmem-memory --bench retrieval_backends
//! RETRIEVAL_WORKFLOWS=20000 cargo bench -p flowmem-memory --bench retrieval_backends
//! ```

#![allow(clippy::print_stdout, clippy::print_stderr, missing_docs)]

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use flowmem_db::{Db, DbLocation};
use flowmem_memory::{AddOutcome, MemoryStore, StoreConfig};
use flowmem_model::{Scope, Workflow};
use flowmem_testsupport::{Latencies, Lcg, PgCluster, retail_queries, synthetic_workflows};

/// The default corpus size; `RETRIEVAL_WORKFLOWS` overrides it.
const DEFAULT_WORKFLOWS: usize = 100_000;
const CHUNK: usize = 10_000;
const N_SEARCHES: usize = 2_000;
const N_RETRIEVES: usize = 500;
const N_REVISIONS: usize = 2_000;
const N_CROSS: usize = 200;
const LIMIT: usize = 5;
const CORPUS_SEED: u64 = 7;
const QUERY_SEED: u64 = 11;
const PROBE_SEED: u64 = 1_234;

/// What one backend measured.
struct Run {
    build_s: f64,
    first_search_ms: f64,
    /// Right after the build.
    search_fresh: Latencies,
    /// After `ANALYZE` (PostgreSQL).
    search: Latencies,
    search_hits: usize,
    /// The ids of every search's hits in order, to compare the backends' rankings.
    search_ids: Vec<String>,
    analyze_ms: Option<f64>,
    retrieve: Latencies,
    retrieve_hits: usize,
    revision: Latencies,
    reader_first_search_ms: f64,
    cross: Latencies,
    /// How many searches the reader needed in all to find the 200 new workflows.
    cross_searches: usize,
}

fn main() {
    let n_workflows: usize =
        std::env::var("RETRIEVAL_WORKFLOWS").ok().and_then(|n| n.parse().ok()).unwrap_or(DEFAULT_WORKFLOWS);
    println!("machine load at the start: {}", loadavg());
    println!(
        "N = {n_workflows} workflows; {N_SEARCHES} searches, {N_RETRIEVES} retrieves, {N_CROSS} cross-handle adds (top {LIMIT}, scope retail)"
    );
    let corpus = synthetic_workflows(n_workflows, CORPUS_SEED);
    let probes: Vec<Workflow> = synthetic_workflows(N_CROSS, PROBE_SEED)
        .into_iter()
        .enumerate()
        .map(|(idx, mut workflow)| {
            // A word no other workflow has, so the reader's search finds exactly this one.
            workflow.description = format!("handoffprobe{idx} {}", workflow.description);
            workflow.scope = retail();
            workflow
        })
        .collect();
    let queries = retail_queries();

    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite = measure("sqlite", &dir.path().join("bench.db"), &corpus, &probes, &queries);
    println!("machine load between the backends: {}", loadavg());

    let started = Instant::now();
    let cluster = PgCluster::start();
    let url = cluster.fresh_database();
    println!("postgres: cluster started and database created in {:.1} s", started.elapsed().as_secs_f64());
    let postgres = measure("postgres", Path::new(&url), &corpus, &probes, &queries);
    drop(cluster);

    println!();
    report(n_workflows, &sqlite, &postgres);
    println!();
    println!("machine load at the end: {}", loadavg());
}

/// Builds the corpus in a new memory at `path` and times everything on it.
fn measure(name: &str, path: &Path, corpus: &[Workflow], probes: &[Workflow], queries: &[String]) -> Run {
    let retail = retail();
    let built = Instant::now();
    let mut store = MemoryStore::open(path, StoreConfig::standard()).expect("the store opens");
    for (idx, chunk) in corpus.chunks(CHUNK).enumerate() {
        store.add_all(chunk).expect("the corpus stores");
        eprintln!(
            "{name}: stored {} of {} workflows after {:.1} s",
            (idx * CHUNK + chunk.len()),
            corpus.len(),
            built.elapsed().as_secs_f64()
        );
    }
    let build_s = built.elapsed().as_secs_f64();
    println!("{name}: built {} workflows in {build_s:.1} s", corpus.len());

    // The first search loads the in-memory index from the database; time it on its own.
    let loaded = Instant::now();
    store.search("warm up", &retail, LIMIT).expect("search works");
    let first_search_ms = ms_since(loaded);
    println!("{name}: first search (loads the index): {first_search_ms:.0} ms");

    // A connection of our own for what the store does not do: statistics, ANALYZE.
    let admin = store.is_postgres().then(|| {
        Db::open(&DbLocation::parse(path.as_os_str()), Duration::from_secs(30)).expect("a PostgreSQL connection")
    });
    let analyzed_before = admin.as_ref().map(autoanalyzed);
    let (search_fresh, fresh_hits, fresh_ids) = searches(&store, queries);
    println!("{name}: search right after the build   {}", line(&search_fresh));
    let analyze_ms = admin.as_ref().map(|admin| {
        println!(
            "{name}: tables autovacuum had analyzed before / after that pass: {} / {} of workflows, provenance",
            analyzed_before.unwrap_or_default(),
            autoanalyzed(admin)
        );
        let start = Instant::now();
        admin.batch("ANALYZE").expect("ANALYZE runs");
        let analyze_ms = ms_since(start);
        println!("{name}: ANALYZE took {analyze_ms:.0} ms");
        analyze_ms
    });
    let (search, search_hits, search_ids) = searches(&store, queries);
    println!("{name}: search (steady state)   {}", line(&search));
    assert_eq!((fresh_hits, &fresh_ids), (search_hits, &search_ids), "{name}: the two search passes differ");

    let mut rng = Lcg(QUERY_SEED);
    let mut latencies = Vec::with_capacity(N_RETRIEVES);
    let mut retrieve_hits = 0;
    for _ in 0..N_RETRIEVES {
        let query = rng.pick(queries).as_str();
        let start = Instant::now();
        let hits = store.retrieve(black_box(query), &retail, LIMIT).expect("retrieve works");
        latencies.push(ms_since(start));
        retrieve_hits += hits.len();
    }
    let retrieve = Latencies::new(latencies);
    println!("{name}: retrieve {}", line(&retrieve));

    // The log-head query alone: what every search costs before it ranks anything.
    let mut latencies = Vec::with_capacity(N_REVISIONS);
    for _ in 0..N_REVISIONS {
        let start = Instant::now();
        black_box(store.revision().expect("the revision reads"));
        latencies.push(ms_since(start));
    }
    let revision = Latencies::new(latencies);
    println!("{name}: log head {}", line(&revision));

    // A second handle on the same memory, with an index of its own (not a sibling's).
    let reader = MemoryStore::open(path, StoreConfig::standard()).expect("a second handle opens");
    let loaded = Instant::now();
    reader.search("warm up", &retail, LIMIT).expect("search works");
    let reader_first_search_ms = ms_since(loaded);
    let mut latencies = Vec::with_capacity(N_CROSS);
    let mut cross_searches = 0;
    for (idx, probe) in probes.iter().enumerate() {
        let id = match store.add(probe).expect("the probe stores") {
            AddOutcome::Inserted { id, .. } => id,
            merged @ AddOutcome::Merged { .. } => panic!("probe {idx} merged: {merged:?}"),
        };
        let start = Instant::now();
        let query = format!("handoffprobe{idx}");
        loop {
            cross_searches += 1;
            let hits = reader.search(&query, &retail, LIMIT).expect("search works");
            if hits.iter().any(|hit| hit.workflow.id == id) {
                break;
            }
            assert!(start.elapsed().as_secs() < 10, "{name}: the reader never found probe {idx}");
        }
        latencies.push(ms_since(start));
    }
    let cross = Latencies::new(latencies);
    println!("{name}: cross-handle {} ({cross_searches} searches for {N_CROSS} adds)", line(&cross));

    Run {
        build_s,
        first_search_ms,
        search_fresh,
        search,
        search_hits,
        search_ids,
        analyze_ms,
        retrieve,
        retrieve_hits,
        revision,
        reader_first_search_ms,
        cross,
        cross_searches,
    }
}

/// Times `N_SEARCHES` searches with the queries `QUERY_SEED` picks; returns the
/// latencies, the number of hits and their ids in order.
fn searches(store: &MemoryStore, queries: &[String]) -> (Latencies, usize, Vec<String>) {
    let retail = retail();
    let mut rng = Lcg(QUERY_SEED);
    let mut latencies = Vec::with_capacity(N_SEARCHES);
    let mut n_hits = 0;
    let mut ids = Vec::with_capacity(N_SEARCHES * LIMIT);
    for _ in 0..N_SEARCHES {
        let query = rng.pick(queries).as_str();
        let start = Instant::now();
        let hits = store.search(black_box(query), &retail, LIMIT).expect("search works");
        latencies.push(ms_since(start));
        n_hits += hits.len();
        ids.extend(hits.into_iter().map(|hit| hit.workflow.id));
    }
    (Latencies::new(latencies), n_hits, ids)
}

/// How many of the tables `workflows` and `provenance` autovacuum has analyzed.
fn autoanalyzed(admin: &Db) -> i64 {
    admin
        .query_one(
            "SELECT COUNT(*) FROM pg_stat_user_tables
             WHERE relname IN ('workflows', 'provenance') AND autoanalyze_count > 0",
            &[],
        )
        .and_then(|row| row.int(0))
        .expect("reading pg_stat_user_tables")
}

fn report(n_workflows: usize, sqlite: &Run, postgres: &Run) {
    let mean = |hits: usize, n: usize| hits as f64 / n as f64;
    assert_eq!(
        mean(sqlite.search_hits, N_SEARCHES),
        mean(postgres.search_hits, N_SEARCHES),
        "the backends found different numbers of search hits"
    );
    assert_eq!(
        mean(sqlite.retrieve_hits, N_RETRIEVES),
        mean(postgres.retrieve_hits, N_RETRIEVES),
        "the backends found different numbers of retrieve hits"
    );
    let same_ids = sqlite.search_ids == postgres.search_ids;

    println!("side by side, N = {n_workflows} (times in ms unless marked)");
    println!("{:<44} {:>12} {:>12} {:>9}", "", "SQLite", "PostgreSQL", "PG/SQLite");
    let row = |label: &str, a: f64, b: f64, decimals: usize| {
        println!("{label:<44} {a:>12.decimals$} {b:>12.decimals$} {:>8.2}x", b / a);
    };
    row("build (add_all, chunks of 10,000), s", sqlite.build_s, postgres.build_s, 1);
    row("first search (loads the index)", sqlite.first_search_ms, postgres.first_search_ms, 0);
    println!("{:<44} {:>12} {:>12.0}", "ANALYZE (PostgreSQL only)", "-", postgres.analyze_ms.unwrap_or_default());
    for (label, pick) in [
        ("search right after the build", (|run: &Run| &run.search_fresh) as fn(&Run) -> &Latencies),
        ("search, steady state (PostgreSQL analyzed)", |run: &Run| &run.search),
        ("retrieve", |run: &Run| &run.retrieve),
        ("log head query alone (revision)", |run: &Run| &run.revision),
        ("cross-handle: add returned -> reader finds", |run: &Run| &run.cross),
    ] {
        let (a, b) = (pick(sqlite), pick(postgres));
        println!("{label} ({} calls)", a.len());
        for (name, p) in [("p50", 0.50), ("p90", 0.90), ("p99", 0.99)] {
            row(&format!("  {name}"), a.quantile(p), b.quantile(p), 3);
        }
        row("  max", a.max(), b.max(), 3);
    }
    row(
        "second handle's first search (loads index)",
        sqlite.reader_first_search_ms,
        postgres.reader_first_search_ms,
        0,
    );
    println!(
        "{:<44} {:>12} {:>12}",
        "cross-handle searches per add",
        format!("{:.2}", sqlite.cross_searches as f64 / N_CROSS as f64),
        format!("{:.2}", postgres.cross_searches as f64 / N_CROSS as f64)
    );
    println!(
        "{:<44} {:>12.2} {:>12.2}",
        "mean hits per search",
        mean(sqlite.search_hits, N_SEARCHES),
        mean(postgres.search_hits, N_SEARCHES)
    );
    println!(
        "{:<44} {:>12.2} {:>12.2}",
        "mean hits per retrieve",
        mean(sqlite.retrieve_hits, N_RETRIEVES),
        mean(postgres.retrieve_hits, N_RETRIEVES)
    );
    println!("{:<44} {:>12}", "identical hit ids in identical order", if same_ids { "yes" } else { "NO" });
    println!(
        "ratios PostgreSQL/SQLite: search right after the build p50 {:.2}x, p99 {:.2}x; \
         steady state: search p50 {:.2}x, p99 {:.2}x; retrieve p50 {:.2}x, p99 {:.2}x",
        postgres.search_fresh.quantile(0.50) / sqlite.search_fresh.quantile(0.50),
        postgres.search_fresh.quantile(0.99) / sqlite.search_fresh.quantile(0.99),
        postgres.search.quantile(0.50) / sqlite.search.quantile(0.50),
        postgres.search.quantile(0.99) / sqlite.search.quantile(0.99),
        postgres.retrieve.quantile(0.50) / sqlite.retrieve.quantile(0.50),
        postgres.retrieve.quantile(0.99) / sqlite.retrieve.quantile(0.99),
    );
}

fn line(latencies: &Latencies) -> String {
    format!(
        "p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} calls)",
        latencies.quantile(0.50),
        latencies.quantile(0.90),
        latencies.quantile(0.99),
        latencies.max(),
        latencies.len()
    )
}

fn retail() -> Scope {
    Scope { site: None, domain: Some("retail".to_owned()) }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|err| format!("(unreadable: {err})"), |s| s.trim().to_owned())
}
