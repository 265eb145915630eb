//! Integration tests of flowmem-memory: one binary, one module per topic.

mod concurrency;
mod curve_html;
mod lm;
mod online;
mod render;
mod retrieval;
mod rule_data;
mod store;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use flowmem_llm::{HttpModel, HttpModelConfig, RetryPolicy};
use flowmem_memory::{MemoryStore, StoreConfig};
use flowmem_model::{Scope, Workflow};
use flowmem_testsupport::{PgCluster, ScriptedLlmServer};

/// The repository root (the worktree), so data is reached as `../shared/data/...`.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The real OpenAI-compatible client, pointed at a scripted server, with fast retries
/// and a short timeout so a test fails quickly instead of hanging.
pub fn scripted_model(server: &ScriptedLlmServer) -> HttpModel {
    let mut cfg = HttpModelConfig::new("scripted", server.base_url(), "scripted-model");
    cfg.timeout = Duration::from_secs(10);
    cfg.retry = RetryPolicy {
        max_retries: 2,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(1),
    };
    HttpModel::new(cfg).expect("an HTTP client for the scripted server")
}

/// A workflow with the given description, tool sequence and scope domain.
pub fn workflow(description: &str, tools: &[&str], domain: Option<&str>) -> Workflow {
    let steps: Vec<serde_json::Value> = tools
        .iter()
        .map(|tool| json!({"state": "", "reasoning": format!("call {tool}"), "action": {"tool": tool, "args": {"id": "{id}"}}}))
        .collect();
    let mut workflow: Workflow = serde_json::from_value(json!({"description": description, "steps": steps}))
        .expect("the literal is a valid workflow");
    workflow.scope = Scope { site: None, domain: domain.map(str::to_owned) };
    workflow.provenance.inducer = "rule".to_owned();
    workflow
}

/// Which database a test of the store runs against: the shared suite runs every test
/// against both ([`both_backends!`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A fresh SQLite file in a temporary directory.
    Sqlite,
    /// A fresh database in this test process's throwaway PostgreSQL cluster.
    Postgres,
}

/// A test's memory location: a SQLite file or a PostgreSQL URL, new and empty.
pub struct TestMemory {
    location: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl TestMemory {
    /// A new, empty memory on `backend`.
    pub fn new(backend: Backend) -> TestMemory {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                TestMemory { location: dir.path().join("memory.db"), _dir: Some(dir) }
            }
            Backend::Postgres => {
                TestMemory { location: PathBuf::from(PgCluster::shared().fresh_database()), _dir: None }
            }
        }
    }

    /// The location, as `--memory` takes it.
    pub fn location(&self) -> &Path {
        &self.location
    }

    /// A new handle on the memory.
    pub fn open(&self, cfg: StoreConfig) -> MemoryStore {
        MemoryStore::open(&self.location, cfg).expect("the test memory opens")
    }
}

/// Runs each named test, a `fn(Backend)` of the enclosing module, once against SQLite
/// (in a module `sqlite`) and once against PostgreSQL (in a module `postgres`).
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name($crate::Backend::Sqlite) })*
        }
        mod postgres {
            $(#[test] fn $name() { super::$name($crate::Backend::Postgres) })*
        }
    };
}
