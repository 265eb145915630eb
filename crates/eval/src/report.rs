//! Aggregating runs per system and comparing a workflow with a baseline, as the FlowScout
//! paper reports it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use flowmem_mining::{
    Classifier, EventLog, EventLogBuilder, PetriNet, PrecisionVariant, Variant, discover, precision, token_replay,
    tree_to_petri_net,
};
use flowmem_model::Record;

use crate::reward::{Alpha, reward_of_means};
use crate::scoring::ScoreMeans;

/// Whether a system is a workflow under test or a baseline it is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemRole {
    /// A workflow graph (or a memory-augmented agent) being evaluated.
    Workflow,
    /// A reference system, such as the ReAct agent.
    Baseline,
}

/// What one run of one system on one record measured: one line of `runs.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeasurement {
    /// The system's name, such as `react` or a workflow's name.
    pub system: String,
    /// The system's role in comparisons.
    pub role: SystemRole,
    /// The record's id.
    pub record_id: String,
    /// Which repeat this was, counting from 0.
    pub repeat: u32,
    /// Tool-invocation correctness against the record.
    pub tc: f64,
    /// The execution score, when a judge scored the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub es: Option<f64>,
    /// Whether the judge was asked and failed: the run then has no ES and is left out of
    /// the ES means (its `error` says why).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub judge_failed: bool,
    /// The deterministic task check, where the domain has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_success: Option<bool>,
    /// Wall time of the run in milliseconds.
    pub latency_ms: f64,
    /// LLM calls the run made (judge calls excluded).
    pub llm_calls: u64,
    /// Prompt tokens the run spent.
    pub prompt_tokens: u64,
    /// Completion tokens the run spent.
    pub completion_tokens: u64,
    /// Tool calls the run made.
    pub tool_calls: u64,
    /// The error that ended the run early, if any; it still counts, with its scores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The tools the run called, in order: its case in the log that
    /// [`EvalReport::with_conformance`] checks. Absent from reports written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

/// How a system's produced tool traces fit the reference process (see
/// [`EvalReport::with_conformance`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ToolTraceConformance {
    /// Token-based replay log fitness of the system's traces (PM4Py's default fitness).
    pub fitness: f64,
    /// ETConformance precision, token-based, of the reference model on the system's traces.
    pub precision: f64,
}

/// Per-system figures, each a mean over runs unless named otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemSummary {
    /// The system's name.
    pub system: String,
    /// Its role.
    pub role: SystemRole,
    /// Distinct records run.
    pub n_records: usize,
    /// Runs (records × repeats).
    pub n_runs: usize,
    /// Runs that ended with an error.
    pub n_errors: usize,
    /// Runs whose judge failed: they have no ES and are left out of `mean_es`.
    #[serde(default)]
    pub n_unjudged: usize,
    /// Mean TC (FlowScout Eq. 3).
    pub mean_tc: f64,
    /// Mean ES (Eq. 4) over judged runs; `None` when no run was judged.
    pub mean_es: Option<f64>,
    /// The reward of the means, [`reward_of_means`] (`α·mean_tc + (1−α)·mean_es`, Eq. 7,
    /// or `mean_tc` without ES), once [`EvalReport::with_reward`] set `α`; `None` before.
    #[serde(default)]
    pub mean_reward: Option<f64>,
    /// Fraction of checked runs that passed the deterministic check.
    pub task_success_rate: Option<f64>,
    /// Coefficient of variation of ES per record over repeats (population standard
    /// deviation over mean; 0 when every repeat scored 0), for records judged at least
    /// twice, in record-id order.
    pub cv_es: Vec<RecordCv>,
    /// The mean of `cv_es`; `None` when it is empty.
    pub mean_cv_es: Option<f64>,
    /// Mean wall time per query in milliseconds.
    pub latency_ms_per_query: f64,
    /// Mean LLM calls per query.
    pub llm_calls_per_query: f64,
    /// Mean prompt plus completion tokens per query.
    pub tokens_per_query: f64,
    /// Mean tool calls per query.
    pub tool_calls_per_query: f64,
    /// Fitness and precision of the system's produced tool traces against the process
    /// mined from the reference records, once [`EvalReport::with_conformance`] set them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conformance: Option<ToolTraceConformance>,
}

/// The CV of ES for one record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordCv {
    /// The record's id.
    pub record_id: String,
    /// The coefficient of variation.
    pub cv: f64,
}

/// How a workflow compares with a baseline, in percent, the way FlowScout states its
/// results: `(workflow − baseline) / baseline × 100` for TC, ES and task success ("improves
/// TC by 92.69 %"), `(baseline − workflow) / baseline × 100` for the CV of ES ("reduces
/// the average CV by 62.09 %"), and the runtime overhead `(workflow − baseline) /
/// baseline × 100` for latency. A figure is `None` when the baseline's value is 0 or
/// either side lacks it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The workflow system.
    pub workflow: String,
    /// The baseline system.
    pub baseline: String,
    /// Relative improvement of mean TC, percent.
    pub tc_improvement_pct: Option<f64>,
    /// Relative improvement of mean ES, percent.
    pub es_improvement_pct: Option<f64>,
    /// Relative improvement of the mean reward, percent.
    #[serde(default)]
    pub reward_improvement_pct: Option<f64>,
    /// Relative improvement of the task success rate, percent.
    pub task_success_improvement_pct: Option<f64>,
    /// Relative reduction of the mean CV of ES, percent.
    pub cv_reduction_pct: Option<f64>,
    /// Relative latency overhead per query, percent.
    pub latency_overhead_pct: Option<f64>,
}

/// The whole evaluation: the `flowmem eval --json` document (`report.json`).
///
/// Wire format, version 1: `{"version": 1, "alpha": α?, "systems": [SystemSummary],
/// "comparisons": [Comparison], "runs": [RunMeasurement]}`. `alpha` and the reward
/// fields are present once [`EvalReport::with_reward`] was applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// The format version of this document.
    pub version: u32,
    /// The TC weight `α` of the reward figures, if they were computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// One summary per system, workflows first, then by name.
    pub systems: Vec<SystemSummary>,
    /// Every workflow against every baseline.
    pub comparisons: Vec<Comparison>,
    /// Every run, as measured.
    pub runs: Vec<RunMeasurement>,
}

/// Aggregates runs into per-system summaries and workflow-versus-baseline comparisons.
///
/// A system's role is the role of its first run.
///
/// # Example
///
/// ```
/// use flowmem_eval::{RunMeasurement, SystemRole, summarize};
/// let run = |system: &str, role, es| RunMeasurement {
///     system: system.into(), role, record_id: "1".into(), repeat: 0, tc: 0.5, es: Some(es),
///     judge_failed: false, task_success: None, latency_ms: 100.0, llm_calls: 2, prompt_tokens: 10,
///     completion_tokens: 5, tool_calls: 1, error: None, tools: Vec::new(),
/// };
/// let report = summarize(vec![run("flow", SystemRole::Workflow, 0.6), run("react", SystemRole::Baseline, 0.5)]);
/// let pct = report.comparisons[0].es_improvement_pct.unwrap();
/// assert!((pct - 20.0).abs() < 1e-9);
/// ```
#[must_use]
pub fn summarize(runs: Vec<RunMeasurement>) -> EvalReport {
    let mut by_system: BTreeMap<&str, Vec<&RunMeasurement>> = BTreeMap::new();
    for run in &runs {
        by_system.entry(run.system.as_str()).or_default().push(run);
    }
    let mut systems: Vec<SystemSummary> =
        by_system.into_iter().map(|(name, runs)| summarize_system(name, &runs)).collect();
    systems.sort_by(|a, b| a.role.cmp(&b.role).then_with(|| a.system.cmp(&b.system)));
    let mut comparisons = Vec::new();
    for workflow in systems.iter().filter(|s| s.role == SystemRole::Workflow) {
        for baseline in systems.iter().filter(|s| s.role == SystemRole::Baseline) {
            comparisons.push(compare(workflow, baseline));
        }
    }
    EvalReport { version: 1, alpha: None, systems, comparisons, runs }
}

/// The fitness and precision of `produced` tool sequences (one case each) against the
/// Inductive Miner's model of the `reference` records' tool sequences, as a Petri net:
/// token-replay log fitness and ETC precision. `None` when the reference has no cases.
/// The scout's candidates and [`EvalReport::with_conformance`] are measured so.
///
/// # Example
///
/// ```
/// use flowmem_eval::tool_trace_conformance;
/// use flowmem_model::Record;
///
/// let reference: Record = serde_json::from_value(serde_json::json!(
///     {"id": "1", "query": "q", "orchestration": [{"tool": "a", "args": {}}, {"tool": "b", "args": {}}]}
/// ))?;
/// let produced = [vec!["a".to_owned(), "b".to_owned()], vec!["b".to_owned()]];
/// let conformance = tool_trace_conformance(&[reference], produced.iter().map(Vec::as_slice)).unwrap();
/// assert!(conformance.fitness < 1.0, "the second run skipped `a`");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[must_use]
pub fn tool_trace_conformance<'a>(
    reference: &[Record],
    produced: impl IntoIterator<Item = &'a [String]>,
) -> Option<ToolTraceConformance> {
    reference_net(reference).map(|net| conformance_against(&net, produced))
}

/// The IM model of the reference records' tool sequences, or `None` without cases.
fn reference_net(reference: &[Record]) -> Option<PetriNet> {
    let reference = EventLog::from_records(reference, Classifier::ToolName);
    (reference.n_cases() > 0).then(|| tree_to_petri_net(&discover(&reference, Variant::Im)))
}

fn conformance_against<'a>(net: &PetriNet, produced: impl IntoIterator<Item = &'a [String]>) -> ToolTraceConformance {
    let mut log = EventLogBuilder::new();
    for tools in produced {
        log.push_trace(tools);
    }
    let log = log.build();
    ToolTraceConformance {
        fitness: token_replay(&log, net).log_fitness,
        precision: precision(&log, net, PrecisionVariant::EtcToken),
    }
}

impl EvalReport {
    /// Adds each system's [`ToolTraceConformance`]: the Inductive Miner's model of the
    /// `reference` records' tool sequences, as a Petri net, checked against the log of the
    /// system's runs (one case per run, [`RunMeasurement::tools`]). Left unset when the
    /// reference has no cases.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_eval::{RunMeasurement, SystemRole, summarize};
    /// use flowmem_model::Record;
    ///
    /// let reference: Record = serde_json::from_value(serde_json::json!(
    ///     {"id": "1", "query": "q", "orchestration": [{"tool": "a", "args": {}}, {"tool": "b", "args": {}}]}
    /// ))?;
    /// let run = RunMeasurement {
    ///     system: "wf".into(), role: SystemRole::Workflow, record_id: "1".into(), repeat: 0,
    ///     tc: 1.0, es: None, judge_failed: false, task_success: None, latency_ms: 1.0, llm_calls: 1,
    ///     prompt_tokens: 1, completion_tokens: 1, tool_calls: 2, error: None, tools: vec!["a".into(), "b".into()],
    /// };
    /// let report = summarize(vec![run]).with_conformance(&[reference]);
    /// let conformance = report.systems[0].conformance.expect("the reference has a case");
    /// assert_eq!((conformance.fitness, conformance.precision), (1.0, 1.0));
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    #[must_use]
    pub fn with_conformance(mut self, reference: &[Record]) -> EvalReport {
        let Some(net) = reference_net(reference) else { return self };
        for system in &mut self.systems {
            let produced = self.runs.iter().filter(|run| run.system == system.system).map(|run| run.tools.as_slice());
            system.conformance = Some(conformance_against(&net, produced));
        }
        self
    }

    /// Adds the reward of each system's means ([`reward_of_means`]: `R = α·TC + (1−α)·ES`,
    /// or TC alone for a system with no judged run), and its relative improvement to each
    /// comparison.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_eval::{Alpha, RunMeasurement, SystemRole, summarize};
    /// let run = RunMeasurement {
    ///     system: "react".into(), role: SystemRole::Baseline, record_id: "1".into(), repeat: 0,
    ///     tc: 1.0, es: Some(0.5), judge_failed: false, task_success: None, latency_ms: 100.0, llm_calls: 2,
    ///     prompt_tokens: 10, completion_tokens: 5, tool_calls: 1, error: None, tools: Vec::new(),
    /// };
    /// let report = summarize(vec![run]).with_reward(Alpha::HALF);
    /// assert_eq!(report.systems[0].mean_reward, Some(0.75));
    /// ```
    #[must_use]
    pub fn with_reward(mut self, alpha: Alpha) -> EvalReport {
        for system in &mut self.systems {
            system.mean_reward = Some(reward_of_means(system.mean_tc, system.mean_es, alpha));
        }
        let systems = &self.systems;
        let summary = |name: &str| systems.iter().find(|s| s.system == name);
        for comparison in &mut self.comparisons {
            if let (Some(workflow), Some(baseline)) = (summary(&comparison.workflow), summary(&comparison.baseline)) {
                comparison.reward_improvement_pct = relative_change(workflow.mean_reward, baseline.mean_reward);
            }
        }
        self.alpha = Some(alpha.get());
        self
    }
}

/// Compares one workflow summary with one baseline summary (see [`Comparison`]).
#[must_use]
pub fn compare(workflow: &SystemSummary, baseline: &SystemSummary) -> Comparison {
    Comparison {
        workflow: workflow.system.clone(),
        baseline: baseline.system.clone(),
        tc_improvement_pct: relative_change(Some(workflow.mean_tc), Some(baseline.mean_tc)),
        es_improvement_pct: relative_change(workflow.mean_es, baseline.mean_es),
        reward_improvement_pct: relative_change(workflow.mean_reward, baseline.mean_reward),
        task_success_improvement_pct: relative_change(workflow.task_success_rate, baseline.task_success_rate),
        cv_reduction_pct: relative_change(workflow.mean_cv_es, baseline.mean_cv_es).map(|pct| -pct),
        latency_overhead_pct: relative_change(Some(workflow.latency_ms_per_query), Some(baseline.latency_ms_per_query)),
    }
}

/// `(new − old) / old × 100`, or `None` when either is missing or `old` is 0.
#[must_use]
pub fn relative_change(new: Option<f64>, old: Option<f64>) -> Option<f64> {
    let (new, old) = (new?, old?);
    if old == 0.0 {
        return None;
    }
    Some((new - old) / old * 100.0)
}

/// The coefficient of variation: population standard deviation over mean.
///
/// Returns `None` for fewer than two values, and 0 when the mean is 0 (ES is never
/// negative, so that means every value is 0).
#[must_use]
pub fn coefficient_of_variation(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if mean == 0.0 {
        return Some(0.0);
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    Some(variance.sqrt() / mean.abs())
}

fn summarize_system(name: &str, runs: &[&RunMeasurement]) -> SystemSummary {
    let n = runs.len() as f64;
    let mean_of = |f: &dyn Fn(&RunMeasurement) -> f64| runs.iter().map(|r| f(r)).sum::<f64>() / n;
    let mut means = ScoreMeans::default();
    for run in runs {
        means.add(run.tc, run.es, run.judge_failed);
    }
    let checked: Vec<bool> = runs.iter().filter_map(|r| r.task_success).collect();
    let mut es_by_record: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut records: Vec<&str> = Vec::new();
    for run in runs {
        if !records.contains(&run.record_id.as_str()) {
            records.push(&run.record_id);
        }
        if let Some(es) = run.es {
            es_by_record.entry(&run.record_id).or_default().push(es);
        }
    }
    let cv_es: Vec<RecordCv> = es_by_record
        .into_iter()
        .filter_map(|(record_id, values)| {
            coefficient_of_variation(&values).map(|cv| RecordCv { record_id: record_id.to_string(), cv })
        })
        .collect();
    let mean_cv_es = (!cv_es.is_empty()).then(|| cv_es.iter().map(|c| c.cv).sum::<f64>() / cv_es.len() as f64);
    SystemSummary {
        system: name.to_string(),
        // Invariant: `summarize` only builds a summary for a system with runs.
        role: runs.first().map_or(SystemRole::Workflow, |r| r.role),
        n_records: records.len(),
        n_runs: runs.len(),
        n_errors: runs.iter().filter(|r| r.error.is_some()).count(),
        n_unjudged: means.n_unjudged(),
        mean_tc: means.mean_tc(),
        mean_es: means.mean_es(),
        mean_reward: None,
        task_success_rate: (!checked.is_empty())
            .then(|| checked.iter().filter(|&&ok| ok).count() as f64 / checked.len() as f64),
        cv_es,
        mean_cv_es,
        latency_ms_per_query: mean_of(&|r| r.latency_ms),
        llm_calls_per_query: mean_of(&|r| r.llm_calls as f64),
        tokens_per_query: mean_of(&|r| (r.prompt_tokens + r.completion_tokens) as f64),
        tool_calls_per_query: mean_of(&|r| r.tool_calls as f64),
        conformance: None,
    }
}

#[cfg(test)]
mod tests {
    use crate::report::{RunMeasurement, SystemRole, coefficient_of_variation, relative_change, summarize};
    use crate::reward::Alpha;

    fn run(system: &str, role: SystemRole, record: &str, repeat: u32, tc: f64, es: f64) -> RunMeasurement {
        RunMeasurement {
            system: system.into(),
            role,
            record_id: record.into(),
            repeat,
            tc,
            es: Some(es),
            judge_failed: false,
            task_success: Some(tc == 1.0),
            latency_ms: 1000.0 * (repeat + 1) as f64,
            llm_calls: 3,
            prompt_tokens: 100,
            completion_tokens: 20,
            tool_calls: 2,
            error: None,
            tools: Vec::new(),
        }
    }

    #[test]
    fn conformance_is_per_system_against_the_process_of_the_reference_records() {
        let record = |id: &str, tools: &[&str]| -> flowmem_model::Record {
            let calls: Vec<serde_json::Value> =
                tools.iter().map(|t| serde_json::json!({"tool": t, "args": {}})).collect();
            serde_json::from_value(serde_json::json!({"id": id, "query": "q", "orchestration": calls})).unwrap()
        };
        // The reference process: find the user, then cancel or refund.
        let reference = [record("1", &["find_user", "cancel"]), record("2", &["find_user", "refund"])];
        let with_tools = |system: &str, role, record_id: &str, tools: &[&str]| RunMeasurement {
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            ..run(system, role, record_id, 0, 1.0, 1.0)
        };
        let runs = vec![
            with_tools("wf", SystemRole::Workflow, "1", &["find_user", "cancel"]),
            with_tools("wf", SystemRole::Workflow, "2", &["find_user", "refund"]),
            // The baseline skips the lookup once and calls a foreign tool once.
            with_tools("react", SystemRole::Baseline, "1", &["cancel"]),
            with_tools("react", SystemRole::Baseline, "2", &["find_user", "delete_account", "refund"]),
        ];
        let report = summarize(runs.clone()).with_conformance(&reference);
        let of = |name: &str| report.systems.iter().find(|s| s.system == name).unwrap().conformance.unwrap();
        assert_eq!(of("wf").fitness, 1.0);
        assert!((of("wf").precision - 1.0).abs() < 1e-12, "{:?}", of("wf"));
        assert!(of("react").fitness < 1.0, "{:?}", of("react"));
        let markdown = crate::render_markdown(&report);
        let wf_row = markdown.lines().find(|line| line.starts_with("| wf |")).unwrap();
        assert!(wf_row.contains("| 1.0000 | 1.0000 | 1.0000 |"), "TC, fitness and precision side by side: {wf_row}");
        // Without reference cases there is nothing to check against.
        assert!(summarize(runs).with_conformance(&[]).systems.iter().all(|s| s.conformance.is_none()));
    }

    #[test]
    fn cv_is_population_sd_over_mean() {
        assert_eq!(coefficient_of_variation(&[0.5]), None);
        assert_eq!(coefficient_of_variation(&[0.0, 0.0]), Some(0.0));
        assert!(coefficient_of_variation(&[0.4, 0.4, 0.4]).unwrap() < 1e-12);
        // mean 0.5, sd 0.25.
        assert!((coefficient_of_variation(&[0.25, 0.75]).unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn relative_change_is_against_the_old_value() {
        // FlowScout: an ES of 0.6 over 0.5 is a 20 % improvement.
        assert!((relative_change(Some(0.6), Some(0.5)).unwrap() - 20.0).abs() < 1e-9);
        assert!((relative_change(Some(0.5), Some(1.0)).unwrap() + 50.0).abs() < 1e-9);
        assert_eq!(relative_change(Some(0.6), Some(0.0)), None);
        assert_eq!(relative_change(None, Some(0.5)), None);
    }

    #[test]
    fn systems_are_summarised_and_compared() {
        let runs = vec![
            run("react", SystemRole::Baseline, "a", 0, 0.5, 0.25),
            run("react", SystemRole::Baseline, "a", 1, 0.5, 0.75),
            run("react", SystemRole::Baseline, "b", 0, 0.0, 0.5),
            run("react", SystemRole::Baseline, "b", 1, 0.0, 0.5),
            run("flow", SystemRole::Workflow, "a", 0, 1.0, 0.5),
            run("flow", SystemRole::Workflow, "a", 1, 1.0, 0.5),
            run("flow", SystemRole::Workflow, "b", 0, 0.5, 0.5),
            run("flow", SystemRole::Workflow, "b", 1, 0.5, 0.9),
        ];
        let report = summarize(runs);
        assert_eq!(report.systems[0].system, "flow");
        let react = &report.systems[1];
        assert_eq!((react.n_records, react.n_runs), (2, 4));
        assert_eq!(react.mean_tc, 0.25);
        assert_eq!(react.mean_es, Some(0.5));
        assert_eq!(react.task_success_rate, Some(0.0));
        assert_eq!(react.cv_es.len(), 2);
        // Record a: 0.5; record b: 0.
        assert!((react.mean_cv_es.unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(react.latency_ms_per_query, 1500.0);
        assert_eq!(react.tokens_per_query, 120.0);
        let flow = &report.systems[0];
        assert_eq!(flow.task_success_rate, Some(0.5));
        // Record b: values 0.5, 0.9: mean 0.7, sd 0.2.
        assert!((flow.mean_cv_es.unwrap() - 0.2 / 0.7 / 2.0).abs() < 1e-12);
        let cmp = &report.comparisons[0];
        assert_eq!((cmp.workflow.as_str(), cmp.baseline.as_str()), ("flow", "react"));
        // TC 0.75 vs 0.25: +200 %.
        assert!((cmp.tc_improvement_pct.unwrap() - 200.0).abs() < 1e-9);
        // ES 0.6 vs 0.5: +20 %.
        assert!((cmp.es_improvement_pct.unwrap() - 20.0).abs() < 1e-9);
        // Baseline task success is 0: no relative figure.
        assert_eq!(cmp.task_success_improvement_pct, None);
        // CV 0.142857 vs 0.25: reduced by 42.857 %.
        assert!((cmp.cv_reduction_pct.unwrap() - (1.0 - (0.2 / 0.7 / 2.0) / 0.25) * 100.0).abs() < 1e-9);
        assert_eq!(cmp.latency_overhead_pct, Some(0.0));
    }

    #[test]
    fn the_reward_is_of_the_means_and_compared_like_the_rest() {
        let runs = vec![
            run("react", SystemRole::Baseline, "a", 0, 0.5, 0.25),
            run("react", SystemRole::Baseline, "a", 1, 0.5, 0.75),
            run("flow", SystemRole::Workflow, "a", 0, 1.0, 0.5),
        ];
        let plain = summarize(runs.clone());
        assert_eq!((plain.alpha, plain.systems[0].mean_reward), (None, None));
        let report = summarize(runs).with_reward(Alpha::new(0.25).unwrap());
        assert_eq!(report.alpha, Some(0.25));
        // flow: 0.25·1 + 0.75·0.5 = 0.625; react: 0.25·0.5 + 0.75·0.5 = 0.5.
        assert_eq!(report.systems[0].mean_reward, Some(0.625));
        assert_eq!(report.systems[1].mean_reward, Some(0.5));
        assert!((report.comparisons[0].reward_improvement_pct.unwrap() - 25.0).abs() < 1e-9);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["alpha"], 0.25);
    }

    #[test]
    fn unjudged_runs_have_no_es_or_cv() {
        let mut only = run("react", SystemRole::Baseline, "a", 0, 1.0, 0.0);
        only.es = None;
        let report = summarize(vec![only]);
        assert_eq!(report.systems[0].mean_es, None);
        assert_eq!(report.systems[0].mean_cv_es, None);
        assert!(report.comparisons.is_empty());
    }
}
