//! Replaying records' validated tool-call logs through the real tools.

use flowmem_model::{Record, ToolCall};
use futures::StreamExt;
use serde::Serialize;

use crate::{CallStatus, Invocation, Registry, StateIsolation, StateLease};

/// How to replay records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayConfig {
    /// How many records replay at once (at least 1). Calls within a record stay in order.
    pub concurrency: usize,
    /// Per-record state isolation, for servers that keep state between calls.
    ///
    /// Each record runs under the key `isolation.key` followed by the record's id (a
    /// [`StateLease`]: records in flight that share an id get `~2`, `~3`, …). Before
    /// a record's calls the reset tool (if any) is called for that key; then every call
    /// whose tool's input schema has the key argument gets it added, unless the record
    /// already sets it. Hidden tools are replayed like any other: hiding concerns agents.
    pub isolation: Option<StateIsolation>,
}

/// What a replay did, over all records and per record.
///
/// This is the `--json` output of `flowmem tools replay` (one object). Counts are over the
/// records' own calls; reset calls are not counted (a failed reset is reported on its
/// record as `reset_error`, and that record's calls are not run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// Records replayed.
    pub records: usize,
    /// Records whose every call returned a result that is not an error.
    pub records_ok: usize,
    /// Calls in the records' logs.
    pub calls: usize,
    /// Calls that returned a result, error results included.
    pub executed: usize,
    /// Calls that timed out or whose session broke.
    pub transport_errors: usize,
    /// Calls whose result was flagged as an error.
    pub tool_errors: usize,
    /// Calls that the server refused with a JSON-RPC error.
    pub protocol_errors: usize,
    /// Calls whose arguments failed the tool's input schema (not sent).
    pub invalid_arguments: usize,
    /// Calls of tools that no server exposes (not sent).
    pub unknown_tools: usize,
    /// Calls that were not run because their record's reset failed.
    pub not_run: usize,
    /// Servers restarted during the replay.
    pub restarts: usize,
    /// One entry per record, in input order.
    pub per_record: Vec<RecordReport>,
}

/// What replaying one record did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordReport {
    /// The record's id.
    pub id: String,
    /// Whether every call returned a result that is not an error.
    pub ok: bool,
    /// Calls in the record's log.
    pub calls: usize,
    /// Calls that returned a result, error results included.
    pub executed: usize,
    /// The state key the record ran under, when isolation is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_key: Option<String>,
    /// Why the state reset failed; the record's calls were then not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_error: Option<String>,
    /// Every call that did not end [`CallStatus::Ok`], in log order.
    pub failures: Vec<CallFailure>,
    /// Server restarts that this record's calls triggered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restarts: Vec<String>,
}

/// One call of a record that did not end [`CallStatus::Ok`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallFailure {
    /// The call's position in the record's log, from 0.
    pub index: usize,
    /// The tool's name.
    pub tool: String,
    /// How it ended.
    pub status: CallStatus,
    /// The error text.
    pub error: String,
}

/// Replays each record's orchestration log through `registry` and reports per record
/// whether every call succeeded.
///
/// Records run concurrently (up to `cfg.concurrency`), each record's calls in order. No
/// failure stops the replay: every call's outcome is counted in the report.
pub async fn replay(registry: &Registry, records: &[Record], cfg: &ReplayConfig) -> ReplayReport {
    replay_with_progress(registry, records, cfg, &|_| {}).await
}

/// Like [`replay`], and calls `on_record` as each record finishes (in completion order),
/// for example to advance a progress bar.
pub async fn replay_with_progress(
    registry: &Registry,
    records: &[Record],
    cfg: &ReplayConfig,
    on_record: &(dyn Fn(&RecordReport) + Sync),
) -> ReplayReport {
    replay_all(registry, records, cfg, on_record).await.0
}

/// Like [`replay_with_progress`], and also gives the records back with what replay
/// observed: each logged call keeps its tool and arguments (without the added state key)
/// and gets the replayed `result`, `error` and `latency_ms`. Calls that were not run
/// (their record's reset failed) keep what the log had.
///
/// This is how logs that record only the calls (τ-bench, τ²-bench) get their results,
/// for example to mine where arguments come from.
pub async fn replay_with_results(
    registry: &Registry,
    records: &[Record],
    cfg: &ReplayConfig,
    on_record: &(dyn Fn(&RecordReport) + Sync),
) -> (ReplayReport, Vec<Record>) {
    let (report, observed) = replay_all(registry, records, cfg, on_record).await;
    let replayed = records
        .iter()
        .zip(observed)
        .map(|(record, observed)| {
            let mut record = record.clone();
            for (logged, replayed) in record.orchestration.iter_mut().zip(observed) {
                logged.result = replayed.result;
                logged.error = replayed.error;
                logged.latency_ms = replayed.latency_ms;
            }
            record
        })
        .collect();
    (report, replayed)
}

async fn replay_all(
    registry: &Registry,
    records: &[Record],
    cfg: &ReplayConfig,
    on_record: &(dyn Fn(&RecordReport) + Sync),
) -> (ReplayReport, Vec<Vec<ToolCall>>) {
    let replayed: Vec<(RecordReport, Vec<ToolCall>)> = futures::stream::iter(records.iter())
        .map(|record| async move {
            let replayed = replay_record(registry, record, cfg.isolation.as_ref()).await;
            on_record(&replayed.0);
            replayed
        })
        .buffered(cfg.concurrency.max(1))
        .collect()
        .await;
    let (per_record, observed): (Vec<RecordReport>, Vec<Vec<ToolCall>>) = replayed.into_iter().unzip();
    let mut report = ReplayReport {
        records: per_record.len(),
        records_ok: 0,
        calls: 0,
        executed: 0,
        transport_errors: 0,
        tool_errors: 0,
        protocol_errors: 0,
        invalid_arguments: 0,
        unknown_tools: 0,
        not_run: 0,
        restarts: 0,
        per_record: Vec::new(),
    };
    for record in &per_record {
        report.records_ok += usize::from(record.ok);
        report.calls += record.calls;
        report.executed += record.executed;
        report.restarts += record.restarts.len();
        if record.reset_error.is_some() {
            report.not_run += record.calls;
        }
        for failure in &record.failures {
            match failure.status {
                CallStatus::Ok => {}
                CallStatus::ToolError => report.tool_errors += 1,
                CallStatus::InvalidArguments => report.invalid_arguments += 1,
                CallStatus::UnknownTool => report.unknown_tools += 1,
                CallStatus::ProtocolError => report.protocol_errors += 1,
                CallStatus::Timeout | CallStatus::TransportError => report.transport_errors += 1,
            }
        }
    }
    report.per_record = per_record;
    (report, observed)
}

/// Replays one record: its report, and the calls as they ran (empty when not run).
async fn replay_record(
    registry: &Registry,
    record: &Record,
    isolation: Option<&StateIsolation>,
) -> (RecordReport, Vec<ToolCall>) {
    let mut report = RecordReport {
        id: record.id.clone(),
        ok: false,
        calls: record.orchestration.len(),
        executed: 0,
        state_key: None,
        reset_error: None,
        failures: Vec::new(),
        restarts: Vec::new(),
    };
    // Held until the record's calls are done: records sharing an id get keys of their own.
    let lease = isolation.map(|isolation| StateLease::acquire(&format!("{}{}", isolation.key, record.id)));
    if let (Some(isolation), Some(lease)) = (isolation, &lease) {
        let key = lease.key().to_owned();
        report.state_key = Some(key.clone());
        if let Some((reset_tool, args)) = isolation.reset_call(&key) {
            let reset = registry.invoke(reset_tool, args).await;
            note_restart(&mut report, &reset);
            if let Err(err) = isolation.check_reset(&key, &reset.call) {
                report.reset_error = Some(err.error);
                return (report, Vec::new());
            }
        }
    }
    let mut observed = Vec::with_capacity(record.orchestration.len());
    for (index, logged) in record.orchestration.iter().enumerate() {
        let mut args = logged.args.clone();
        if let (Some(isolation), Some(key)) = (isolation, &report.state_key) {
            let takes_key = registry.tool(&logged.tool).is_some_and(|spec| isolation.takes_key(&spec.input_schema));
            if takes_key && !args.contains_key(&isolation.key_arg) {
                isolation.add_key(&mut args, key);
            }
        }
        let invocation = registry.invoke(&logged.tool, args).await;
        note_restart(&mut report, &invocation);
        report.executed += usize::from(invocation.status.executed());
        if invocation.status != CallStatus::Ok {
            report.failures.push(CallFailure {
                index,
                tool: logged.tool.clone(),
                status: invocation.status,
                error: invocation.call.error.clone().unwrap_or_default(),
            });
        }
        observed.push(invocation.call);
    }
    report.ok = report.failures.is_empty();
    (report, observed)
}

fn note_restart(report: &mut RecordReport, invocation: &Invocation) {
    if let Some(restart) = &invocation.restart {
        report.restarts.push(format!("{}: {}", restart.server, restart.reason));
    }
}
