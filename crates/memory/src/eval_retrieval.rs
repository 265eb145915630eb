//! Retrieval quality, measured without any agent run: for held-out records with
//! reference tool logs, does retrieval bring a workflow that does what the reference did?
//!
//! For each record and each retrieval mode, the top `k` workflows for the record's query
//! are retrieved. Two numbers per mode:
//! - **TC@1**: eval's tool correctness ([`flowmem_eval::tool_correctness`], the one TC
//!   implementation) between the top workflow's tool sequence and the reference's,
//!   comparing tool names only (a workflow's arguments are `{variables}`); a record
//!   with no hit scores 0.
//! - **recall@k**: the share of records for which a workflow with exactly the
//!   reference's tool sequence is among the top `k`.
//!
//! `reachable` counts the records whose reference sequence some stored workflow in the
//! scope has at all: no retrieval can recall the others, so it bounds recall@k.

use std::collections::BTreeSet;

use serde::Serialize;

use flowmem_eval::{TcConfig, tool_correctness};
use flowmem_model::{Record, Scope, ToolCall};

use crate::error::MemoryError;
use crate::retrieval::{RetrievalMode, Retriever};
use crate::store::MemoryStore;

/// Options of [`eval_retrieval`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrievalEvalConfig {
    /// How many workflows are retrieved per query (the `k` of recall@k).
    pub k: usize,
    /// The scope workflows are retrieved from.
    pub scope: Scope,
}

/// What [`eval_retrieval`] measured: the `--json` document of `flowmem memory
/// eval-retrieval` (version 1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrievalReport {
    /// The document's version.
    pub version: u32,
    /// Workflows retrieved per query.
    pub k: usize,
    /// Records scored (those with a reference tool log).
    pub n_records: usize,
    /// Records left out because they have no reference tool log.
    pub n_without_reference: usize,
    /// Records whose reference tool sequence some stored workflow in the scope has.
    pub n_reachable: usize,
    /// One summary per mode, in the order asked.
    pub modes: Vec<ModeSummary>,
    /// Every record's result per mode.
    pub records: Vec<RecordResult>,
}

/// The scores of one retrieval mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModeSummary {
    /// The mode.
    pub mode: RetrievalMode,
    /// Mean TC between the top workflow's tool sequence and the reference's.
    pub mean_tc_top1: f64,
    /// Share of records with a workflow of the reference's tool sequence at rank 1.
    pub recall_at_1: f64,
    /// Share of records with a workflow of the reference's tool sequence in the top k.
    pub recall_at_k: f64,
    /// Mean reciprocal rank of the first such workflow (0 when not in the top k).
    pub mrr_at_k: f64,
    /// Mean milliseconds spent embedding a query.
    pub mean_embed_ms: f64,
    /// Mean milliseconds spent ranking.
    pub mean_search_ms: f64,
}

/// One record under one mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordResult {
    /// The record's id.
    pub id: String,
    /// The mode.
    pub mode: RetrievalMode,
    /// The reference's tool sequence.
    pub reference: Vec<String>,
    /// The retrieved workflows' ids, best first.
    pub retrieved: Vec<String>,
    /// TC of the top workflow's tool sequence.
    pub tc_top1: f64,
    /// The 1-based rank of the first workflow with the reference's tool sequence.
    pub rank: Option<usize>,
}

fn tool_calls<'a>(tools: impl IntoIterator<Item = &'a str>) -> Vec<ToolCall> {
    tools
        .into_iter()
        .map(|tool| ToolCall::new(tool, serde_json::json!({})).expect("an empty object is a JSON object"))
        .collect()
}

/// Measures each retriever's quality on `records` against `store` (read-only: nothing
/// counts as a retrieval). See the module docs for what is measured.
///
/// # Errors
///
/// [`MemoryError`] when a search or a query embedding fails.
pub async fn eval_retrieval(
    store: &MemoryStore,
    retrievers: &[Retriever],
    records: &[Record],
    cfg: &RetrievalEvalConfig,
) -> Result<RetrievalReport, MemoryError> {
    let scored: Vec<&Record> = records.iter().filter(|record| !record.orchestration.is_empty()).collect();
    let stored: BTreeSet<Vec<String>> =
        store.list(&cfg.scope)?.iter().map(|workflow| workflow.tool_sequence().map(str::to_owned).collect()).collect();
    let references: Vec<Vec<String>> =
        scored.iter().map(|record| record.orchestration.iter().map(|call| call.tool.clone()).collect()).collect();
    let mut report = RetrievalReport {
        version: 1,
        k: cfg.k,
        n_records: scored.len(),
        n_without_reference: records.len() - scored.len(),
        n_reachable: references.iter().filter(|reference| stored.contains(*reference)).count(),
        modes: Vec::with_capacity(retrievers.len()),
        records: Vec::new(),
    };
    for retriever in retrievers {
        let mut sums = [0.0f64; 6];
        for (record, reference) in scored.iter().zip(&references) {
            let retrieval = retriever.search(store, &record.query, &cfg.scope, cfg.k).await?;
            let sequences: Vec<Vec<&str>> =
                retrieval.hits.iter().map(|hit| hit.workflow.tool_sequence().collect()).collect();
            let tc_top1 = sequences.first().map_or(0.0, |top| {
                let reference_calls = tool_calls(reference.iter().map(String::as_str));
                tool_correctness(&reference_calls, &tool_calls(top.iter().copied()), &TcConfig::exact()).tc
            });
            let rank = sequences.iter().position(|sequence| sequence == reference).map(|idx| idx + 1);
            sums[0] += tc_top1;
            sums[1] += f64::from(u8::from(rank == Some(1)));
            sums[2] += f64::from(u8::from(rank.is_some()));
            sums[3] += rank.map_or(0.0, |rank| 1.0 / rank as f64);
            sums[4] += retrieval.embed_ms;
            sums[5] += retrieval.search_ms;
            report.records.push(RecordResult {
                id: record.id.clone(),
                mode: retrieval.mode,
                reference: reference.clone(),
                retrieved: retrieval.hits.iter().map(|hit| hit.workflow.id.clone()).collect(),
                tc_top1,
                rank,
            });
        }
        let n = scored.len().max(1) as f64;
        report.modes.push(ModeSummary {
            mode: retriever.mode(),
            mean_tc_top1: sums[0] / n,
            recall_at_1: sums[1] / n,
            recall_at_k: sums[2] / n,
            mrr_at_k: sums[3] / n,
            mean_embed_ms: sums[4] / n,
            mean_search_ms: sums[5] / n,
        });
    }
    Ok(report)
}
