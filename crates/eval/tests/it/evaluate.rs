//! `evaluate` over τ²-bench retail records with systems that replay logs.

use std::sync::Mutex;

use flowmem_eval::{
    EvalConfig, Progress, ScoreConfig, System, SystemRole, SystemRun, TcConfig, evaluate, evaluate_concurrently,
};
use flowmem_llm::Totals;
use flowmem_model::{ImportFormat, Item, Record, Trace, import};

use crate::util::shared_data;

pub fn tau2_records(domain: &str) -> Vec<Record> {
    let imported = import(ImportFormat::Tau2Bench, &shared_data(&format!("tau2-bench/{domain}/tasks.json"))).unwrap();
    imported
        .items
        .into_iter()
        .filter_map(|item| match item {
            Item::Record(record) => Some(record),
            Item::Trajectory(_) => None,
        })
        .collect()
}

/// Answers every record by replaying its golden log, less `drop_last` calls at the end.
struct Replayer {
    name: &'static str,
    role: SystemRole,
    drop_last: usize,
}

#[async_trait::async_trait]
impl System for Replayer {
    fn name(&self) -> &str {
        self.name
    }

    fn role(&self) -> SystemRole {
        self.role
    }

    async fn run(&self, record: &Record) -> SystemRun {
        let keep = record.orchestration.len().saturating_sub(self.drop_last);
        let trace = Trace {
            query_id: record.id.clone(),
            query: record.query.clone(),
            tool_calls: record.orchestration[..keep].to_vec(),
            result: Some(record.reference_result.clone()),
            ..Trace::default()
        };
        SystemRun { trace, usage: Totals { calls: 2, prompt_tokens: 100, completion_tokens: 10, ..Totals::default() } }
    }
}

#[tokio::test]
async fn every_system_runs_every_record_repeat_times() {
    let records: Vec<Record> =
        tau2_records("retail").into_iter().filter(|r| !r.orchestration.is_empty()).take(10).collect();
    let perfect = Replayer { name: "golden", role: SystemRole::Workflow, drop_last: 0 };
    let lossy = Replayer { name: "lossy", role: SystemRole::Baseline, drop_last: 1 };
    let cfg = EvalConfig { repeat: 2, scoring: ScoreConfig { tc: TcConfig::exact(), judge: None, checker: None } };
    let seen = Mutex::new(Vec::new());
    let progress = |p: Progress<'_>| seen.lock().unwrap().push((p.done, p.total));
    let report = evaluate(&[&perfect, &lossy], &records, &cfg, &progress).await;

    assert_eq!(report.runs.len(), 40);
    assert_eq!(seen.lock().unwrap().last(), Some(&(40, 40)));
    let golden = report.systems.iter().find(|s| s.system == "golden").unwrap();
    assert_eq!((golden.n_records, golden.n_runs, golden.mean_tc), (10, 20, 1.0));
    assert_eq!(golden.llm_calls_per_query, 2.0);
    assert_eq!(golden.tokens_per_query, 110.0);
    assert_eq!(golden.mean_es, None);
    let expected: f64 =
        records.iter().map(|r| (r.orchestration.len() - 1) as f64 / r.orchestration.len() as f64).sum::<f64>() / 10.0;
    let lossy = report.systems.iter().find(|s| s.system == "lossy").unwrap();
    assert!((lossy.mean_tc - expected).abs() < 1e-12);
    let cmp = &report.comparisons[0];
    assert!((cmp.tc_improvement_pct.unwrap() - (1.0 - expected) / expected * 100.0).abs() < 1e-9);
    let tool_calls: usize = records.iter().map(|r| r.orchestration.len()).sum();
    assert_eq!(golden.tool_calls_per_query, tool_calls as f64 / 10.0);
}

/// Finishes a run only once `width` runs are in flight together.
struct Gate {
    barrier: tokio::sync::Barrier,
}

#[async_trait::async_trait]
impl System for Gate {
    fn name(&self) -> &str {
        "gate"
    }

    fn role(&self) -> SystemRole {
        SystemRole::Workflow
    }

    async fn run(&self, record: &Record) -> SystemRun {
        self.barrier.wait().await;
        let trace = Trace {
            query_id: record.id.clone(),
            query: record.query.clone(),
            result: Some("ok".into()),
            ..Trace::default()
        };
        SystemRun { trace, usage: Totals::default() }
    }
}

#[tokio::test]
async fn concurrent_runs_overlap_and_the_report_keeps_the_starting_order() {
    let records: Vec<Record> = tau2_records("retail").into_iter().take(4).collect();
    // With fewer than 2 runs in flight the barrier never opens and the timeout fails the test.
    let gate = Gate { barrier: tokio::sync::Barrier::new(2) };
    let cfg = EvalConfig { repeat: 2, scoring: ScoreConfig { tc: TcConfig::exact(), judge: None, checker: None } };
    let systems: [&dyn System; 1] = [&gate];
    let no_progress = |_: Progress<'_>| {};
    let run = evaluate_concurrently(&systems, &records, &cfg, 2, &no_progress);
    let report = tokio::time::timeout(std::time::Duration::from_secs(20), run).await.expect("runs did not overlap");
    let order: Vec<(u32, &str)> = report.runs.iter().map(|r| (r.repeat, r.record_id.as_str())).collect();
    let expected: Vec<(u32, &str)> =
        (0..2).flat_map(|repeat| records.iter().map(move |r| (repeat, r.id.as_str()))).collect();
    assert_eq!(order, expected);
}
