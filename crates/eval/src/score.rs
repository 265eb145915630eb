//! Scoring logged agent runs against records, with no LLM: `flowmem score`.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use serde::{Deserialize, Serialize};

use flowmem_model::{JsonObject, Record, ToolCall, Trajectory};

use crate::outputs::required_outputs_found;
use crate::tc::{TcConfig, tool_correctness};

/// The result of scoring runs against records: the `flowmem score --json` document.
///
/// Wire format, version 1: `{"version": 1, "mean_tc": number|null, "runs": int,
/// "unmatched": [id], "duplicate_records": [id], "per_run": [RunScore]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreReport {
    /// The format version of this document.
    pub version: u32,
    /// The mean TC over scored runs (FlowScout Eq. 3); `null` when none matched.
    pub mean_tc: Option<f64>,
    /// How many runs were scored.
    pub runs: usize,
    /// The fraction of scored runs whose source labelled them a success, among those
    /// with a label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_rate: Option<f64>,
    /// The fraction of scored runs whose answer contains every required output, among
    /// runs whose record has required outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_rate: Option<f64>,
    /// Ids of runs with no record of the same id, in input order.
    pub unmatched: Vec<String>,
    /// Record ids that occur more than once; the first record with the id is used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub duplicate_records: Vec<String>,
    /// One entry per scored run, in input order.
    pub per_run: Vec<RunScore>,
}

/// The score of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunScore {
    /// The run's (and its record's) id.
    pub id: String,
    /// The attempt number, when the run had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// TC against the record's orchestration.
    pub tc: f64,
    /// Matched calls.
    pub matched: Vec<MatchedCall>,
    /// Reference calls the run did not make.
    pub missing: Vec<LoggedCall>,
    /// Run calls that match no reference call.
    pub extra: Vec<LoggedCall>,
    /// The source's own success label, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<bool>,
    /// Whether the answer contains every required output; absent when the record has
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_found: Option<bool>,
}

/// One matched pair, by position and tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchedCall {
    /// Index in the record's orchestration.
    pub reference: usize,
    /// Index in the run's tool calls.
    pub run: usize,
    /// The tool both called.
    pub tool: String,
}

/// One unmatched call, by position, tool and arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggedCall {
    /// Index in its log.
    pub index: usize,
    /// The tool.
    pub tool: String,
    /// The arguments.
    pub args: JsonObject,
}

/// Scores each run against the record with its id.
///
/// TC comes from [`tool_correctness`] on the run's tool calls; the outcome is the run's
/// own success label and, where the record lists required outputs, whether the final
/// answer contains them all ([`required_outputs_found`]). Runs without a record are
/// listed in [`ScoreReport::unmatched`]; several runs (attempts) may share one record.
#[must_use]
pub fn score_runs(records: &[Record], runs: &[Trajectory], cfg: &TcConfig) -> ScoreReport {
    let mut by_id: BTreeMap<&str, &Record> = BTreeMap::new();
    let mut duplicate_records = Vec::new();
    for record in records {
        match by_id.entry(record.id.as_str()) {
            Entry::Vacant(slot) => {
                slot.insert(record);
            }
            Entry::Occupied(_) => duplicate_records.push(record.id.clone()),
        }
    }
    let mut per_run = Vec::new();
    let mut unmatched = Vec::new();
    for run in runs {
        let Some(record) = by_id.get(run.id.as_str()) else {
            unmatched.push(run.id.clone());
            continue;
        };
        per_run.push(score_run(record, run, cfg));
    }
    let n = per_run.len();
    let mean_tc = (n > 0).then(|| per_run.iter().map(|r| r.tc).sum::<f64>() / n as f64);
    ScoreReport {
        version: 1,
        mean_tc,
        runs: n,
        success_rate: rate(per_run.iter().filter_map(|r| r.success)),
        outputs_rate: rate(per_run.iter().filter_map(|r| r.outputs_found)),
        unmatched,
        duplicate_records,
        per_run,
    }
}

/// Scores one run against its record.
#[must_use]
pub fn score_run(record: &Record, run: &Trajectory, cfg: &TcConfig) -> RunScore {
    let calls: Vec<ToolCall> = run.tool_calls().cloned().collect();
    let score = tool_correctness(&record.orchestration, &calls, cfg);
    let logged = |log: &[ToolCall], index: usize| LoggedCall {
        index,
        tool: log[index].tool.clone(),
        args: log[index].args.clone(),
    };
    RunScore {
        id: run.id.clone(),
        attempt: run.attempt,
        tc: score.tc,
        matched: score
            .alignment
            .matched
            .iter()
            .map(|pair| MatchedCall { reference: pair.reference, run: pair.run, tool: calls[pair.run].tool.clone() })
            .collect(),
        missing: score.alignment.missing.iter().map(|&i| logged(&record.orchestration, i)).collect(),
        extra: score.alignment.extra.iter().map(|&i| logged(&calls, i)).collect(),
        success: run.succeeded(),
        outputs_found: (!record.required_outputs.is_empty())
            .then(|| required_outputs_found(&record.required_outputs, run.final_answer.as_deref().unwrap_or(""))),
    }
}

fn rate(flags: impl Iterator<Item = bool>) -> Option<f64> {
    let (mut yes, mut all) = (0usize, 0usize);
    for flag in flags {
        all += 1;
        yes += usize::from(flag);
    }
    (all > 0).then(|| yes as f64 / all as f64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::score::score_runs;
    use crate::tc::TcConfig;
    use flowmem_model::{Action, Record, Step, ToolCall, Trajectory};

    fn record(id: &str, tools: &[&str], outputs: &[&str]) -> Record {
        let orchestration = tools.iter().map(|t| ToolCall::new(*t, json!({})).expect("object")).collect();
        let text = format!(r#"{{"id": "{id}", "query": "q"}}"#);
        let mut record: Record = serde_json::from_str(&text).expect("minimal record");
        record.orchestration = orchestration;
        record.required_outputs = outputs.iter().map(|o| o.to_string()).collect();
        record
    }

    fn run(id: &str, tools: &[&str], answer: &str) -> Trajectory {
        let text = format!(r#"{{"id": "{id}", "query": "q"}}"#);
        let mut run: Trajectory = serde_json::from_str(&text).expect("minimal trajectory");
        run.steps = tools
            .iter()
            .map(|t| Step {
                observation: None,
                reasoning: None,
                action: Action::ToolCall(ToolCall::new(*t, json!({})).expect("object")),
            })
            .collect();
        run.final_answer = Some(answer.to_string());
        run
    }

    #[test]
    fn runs_are_matched_by_id_and_unmatched_ones_listed() {
        let records = vec![record("1", &["a", "b"], &[]), record("2", &["a"], &["42"])];
        let runs =
            vec![run("1", &["a"], ""), run("9", &["a"], ""), run("2", &["a"], "it is 42"), run("2", &["b"], "no")];
        let report = score_runs(&records, &runs, &TcConfig::exact());
        assert_eq!(report.runs, 3);
        assert_eq!(report.unmatched, vec!["9"]);
        let tcs: Vec<f64> = report.per_run.iter().map(|r| r.tc).collect();
        assert_eq!(tcs, vec![0.5, 1.0, 0.0]);
        assert_eq!(report.mean_tc, Some(0.5));
        assert_eq!(report.per_run[0].missing[0].tool, "b");
        assert_eq!(report.per_run[2].extra[0].tool, "b");
        assert_eq!(report.per_run[1].outputs_found, Some(true));
        assert_eq!(report.per_run[2].outputs_found, Some(false));
        assert_eq!(report.per_run[0].outputs_found, None);
        assert_eq!(report.outputs_rate, Some(0.5));
    }

    #[test]
    fn no_matching_run_gives_no_mean() {
        let report =
            score_runs(&[record("1", &[], &[]), record("1", &["x"], &[])], &[run("2", &[], "")], &TcConfig::exact());
        assert_eq!(report.mean_tc, None);
        assert_eq!(report.duplicate_records, vec!["1"]);
    }
}
