//! Several OS processes writing to one memory file lose nothing.
//!
//! The test re-runs its own test binary as the writer processes: a child is this same
//! test, started with `FLOWMEM_MEMORY_WRITER` set, which makes it write and exit.

use std::collections::BTreeSet;
use std::process::Command;

use flowmem_memory::{MemoryStore, StoreConfig};
use flowmem_model::Scope;

use crate::workflow;

const N_PROCESSES: usize = 4;
const N_PER_PROCESS: usize = 1000;
const WRITER_ENV: &str = "FLOWMEM_MEMORY_WRITER";

/// Adds `N_PER_PROCESS` distinct workflows, one transaction each.
fn write_as_child(spec: &str) {
    let (writer, path) = spec.split_once(':').expect("the spec is WRITER:PATH");
    let mut store = MemoryStore::open(std::path::Path::new(path), StoreConfig::standard()).unwrap();
    for idx in 0..N_PER_PROCESS {
        let tools = [format!("w{writer}_step_a_{idx}"), format!("w{writer}_step_b_{idx}")];
        let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
        let description = format!("writer {writer} workflow {idx}");
        store.add(&workflow(&description, &tools, Some("retail"))).unwrap();
    }
}

#[test]
fn four_processes_writing_a_thousand_workflows_each_lose_none() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        write_as_child(&spec);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..N_PROCESSES)
        .map(|writer| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "concurrency::four_processes_writing_a_thousand_workflows_each_lose_none",
                    "--test-threads",
                    "1",
                ])
                .env(WRITER_ENV, format!("{writer}:{}", path.display()))
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("the test binary can run itself")
        })
        .collect();
    for mut child in children {
        let status = child.wait().unwrap();
        assert!(status.success(), "a writer process failed: {status}");
    }
    let store = MemoryStore::open(&path, StoreConfig::standard()).unwrap();
    let stored = store.list(&Scope::default()).unwrap();
    assert_eq!(stored.len(), N_PROCESSES * N_PER_PROCESS);
    let descriptions: BTreeSet<String> = stored.into_iter().map(|w| w.description).collect();
    for writer in 0..N_PROCESSES {
        for idx in 0..N_PER_PROCESS {
            assert!(descriptions.contains(&format!("writer {writer} workflow {idx}")));
        }
    }
    assert_eq!(store.search("writer 3 workflow 999", &Scope::default(), 1).unwrap().len(), 1);
}
