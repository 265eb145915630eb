//! Several OS processes writing to one memory lose nothing, make no twins and count
//! exactly, on SQLite (4 processes) and PostgreSQL (8); a writer killed mid-transaction
//! leaves the memory consistent and the others finish.
//!
//! The tests re-run their own test binary as the writer processes: a child is the same
//! test, started with `FLOWMEM_MEMORY_WRITER` set, which makes it write and exit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flowmem_memory::{MemoryStore, StoreConfig, UseOutcome};
use flowmem_model::Scope;

use crate::{Backend, TestMemory, workflow};

crate::both_backends!(
    writers_lose_nothing_make_no_twins_and_count_exactly,
    a_writer_killed_mid_transaction_loses_only_its_transaction
);

const N_PER_PROCESS: usize = 1000;
/// Every tenth write of every writer adds one of the same 100 workflows (and records a
/// use of it), so each of those is added by every writer at about the same time.
const SHARED_EVERY: usize = 10;
/// The killed writer's transactions: this many workflows each.
const BATCH: usize = 100;
const WRITER_ENV: &str = "FLOWMEM_MEMORY_WRITER";

fn writers(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => 4,
        Backend::Postgres => 8,
    }
}

fn distinct(writer: &str, idx: usize) -> flowmem_model::Workflow {
    let tools = [format!("w{writer}_step_a_{idx}"), format!("w{writer}_step_b_{idx}")];
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    workflow(&format!("writer {writer} workflow {idx}"), &tools, Some("retail"))
}

fn victim_workflow(idx: usize) -> flowmem_model::Workflow {
    let tools = [format!("victim_a_{idx}"), format!("victim_b_{idx}")];
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    workflow(&format!("victim workflow {idx}"), &tools, Some("retail"))
}

/// The child's part: `ROLE:WRITER:LOCATION`, where ROLE is `steady` (1,000 writes, one
/// transaction each, every tenth a shared workflow) or `victim` (batches of `BATCH`
/// until killed).
fn write_as_child(spec: &str) {
    let mut parts = spec.splitn(3, ':');
    let (role, writer, location) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let mut store = MemoryStore::open(Path::new(location), StoreConfig::standard()).unwrap();
    if role == "victim" {
        for batch in 0.. {
            let set: Vec<_> = (batch * BATCH..(batch + 1) * BATCH).map(victim_workflow).collect();
            store.add_all(&set).unwrap();
        }
    }
    for idx in 0..N_PER_PROCESS {
        if idx % SHARED_EVERY == 0 {
            let k = idx / SHARED_EVERY;
            let tools = [format!("shared_a_{k}"), format!("shared_b_{k}")];
            let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
            let mut shared = workflow(&format!("shared workflow {k}"), &tools, Some("retail"));
            shared.provenance.trajectory_ids = vec![format!("w{writer}-t{idx}")];
            let id = store.add(&shared).unwrap().id().to_owned();
            store.record_use(&id, UseOutcome::Success).unwrap();
        } else {
            store.add(&distinct(writer, idx)).unwrap();
        }
    }
}

fn spawn_writer(test: &str, role: &str, writer: usize, location: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--test-threads", "1"])
        .env(WRITER_ENV, format!("{role}:{writer}:{}", location.display()))
        .stdout(Stdio::null())
        .spawn()
        .expect("the test binary can run itself")
}

fn test_name(backend: Backend, name: &str) -> String {
    let module = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    format!("concurrency::{module}::{name}")
}

/// Checks what the steady writers `0..n` wrote: all distinct workflows, each shared one
/// once with every writer's provenance and use.
fn check_steady_writes(store: &MemoryStore, n: usize) {
    let stored = store.list(&Scope::default()).unwrap();
    let mut by_description: BTreeMap<String, Vec<flowmem_model::Workflow>> = BTreeMap::new();
    for workflow in stored {
        by_description.entry(workflow.description.clone()).or_default().push(workflow);
    }
    for writer in 0..n {
        for idx in (0..N_PER_PROCESS).filter(|idx| idx % SHARED_EVERY != 0) {
            let found = by_description.get(&format!("writer {writer} workflow {idx}")).map_or(0, Vec::len);
            assert_eq!(found, 1, "writer {writer}'s workflow {idx}: lost or twinned");
        }
    }
    for k in 0..N_PER_PROCESS / SHARED_EVERY {
        let twins = &by_description[&format!("shared workflow {k}")];
        assert_eq!(twins.len(), 1, "shared workflow {k} has twins");
        let shared = &twins[0];
        let ids: BTreeSet<&str> = shared.provenance.trajectory_ids.iter().map(String::as_str).collect();
        let expected: BTreeSet<String> = (0..n).map(|writer| format!("w{writer}-t{}", k * SHARED_EVERY)).collect();
        assert_eq!(ids, expected.iter().map(String::as_str).collect(), "shared workflow {k}'s provenance");
        assert_eq!(store.provenances(&shared.id).unwrap().len(), n, "one provenance per writer");
        assert_eq!(shared.stats.used_success, n as u64, "shared workflow {k}'s use counter");
        assert_eq!(store.usage(&shared.id).unwrap().iter().map(|day| day.stats.used_success).sum::<u64>(), n as u64);
    }
}

fn writers_lose_nothing_make_no_twins_and_count_exactly(backend: Backend) {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        write_as_child(&spec);
        return;
    }
    let memory = TestMemory::new(backend);
    drop(memory.open(StoreConfig::standard()));
    let n = writers(backend);
    let test = test_name(backend, "writers_lose_nothing_make_no_twins_and_count_exactly");
    let children: Vec<_> = (0..n).map(|writer| spawn_writer(&test, "steady", writer, memory.location())).collect();
    for mut child in children {
        let status = child.wait().unwrap();
        assert!(status.success(), "a writer process failed: {status}");
    }
    let store = memory.open(StoreConfig::standard());
    let distinct_per_writer = N_PER_PROCESS - N_PER_PROCESS / SHARED_EVERY;
    assert_eq!(
        store.count(&Scope::default()).unwrap() as usize,
        n * distinct_per_writer + N_PER_PROCESS / SHARED_EVERY
    );
    check_steady_writes(&store, n);
    assert_eq!(store.search("writer 3 workflow 999", &Scope::default(), 1).unwrap().len(), 1);
}

fn a_writer_killed_mid_transaction_loses_only_its_transaction(backend: Backend) {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        write_as_child(&spec);
        return;
    }
    let memory = TestMemory::new(backend);
    let store = memory.open(StoreConfig::standard());
    let n = writers(backend) / 2;
    let test = test_name(backend, "a_writer_killed_mid_transaction_loses_only_its_transaction");
    let mut victim = spawn_writer(&test, "victim", 99, memory.location());
    let steady: Vec<_> = (0..n).map(|writer| spawn_writer(&test, "steady", writer, memory.location())).collect();
    // Kill the victim once it has committed a few batches: it is then almost always
    // inside its next one, which takes far longer than the gap between two.
    let deadline = Instant::now() + Duration::from_secs(120);
    let victims = |store: &MemoryStore| {
        let query = flowmem_memory::PageQuery { text: Some("victim workflow".into()), ..Default::default() };
        store.page(&query).unwrap().total as usize
    };
    while victims(&store) < 3 * BATCH {
        assert!(Instant::now() < deadline, "the victim wrote too little");
        std::thread::sleep(Duration::from_millis(20));
    }
    victim.kill().unwrap();
    assert!(!victim.wait().unwrap().success());
    for mut child in steady {
        let status = child.wait().unwrap();
        assert!(status.success(), "a writer process failed after the kill: {status}");
    }
    let mut store = memory.open(StoreConfig::standard());
    check_steady_writes(&store, n);
    // The victim's writes are whole batches, in order: no transaction half-stored.
    let victim_ids: BTreeSet<usize> = store
        .list(&Scope::default())
        .unwrap()
        .into_iter()
        .filter_map(|w| w.description.strip_prefix("victim workflow ").map(|idx| idx.parse().unwrap()))
        .collect();
    assert!(
        victim_ids.len() >= 3 * BATCH && victim_ids.len().is_multiple_of(BATCH),
        "{} of the victim's",
        victim_ids.len()
    );
    assert_eq!(victim_ids, (0..victim_ids.len()).collect(), "the victim's batches are a prefix");
    let report = MemoryStore::check(memory.location()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // A fresh index agrees with the rows, and the write lock is free.
    assert_eq!(
        store.search("victim", &Scope::default(), 100_000).unwrap().len(),
        victim_ids.len(),
        "the index follows the log"
    );
    store.add(&distinct("after", 0)).unwrap();
}
