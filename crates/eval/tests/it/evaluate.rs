//! `evaluate` over τ²-bench retail records with systems that replay logs.

use std::sync::Mutex;

use flowmem_eval::{
    EvalConfig, EvalJournal, PROGRESS_FILE, Progress, ScoreConfig, System, SystemRole, SystemRun, TcConfig, evaluate,
    evaluate_concurrently, evaluate_resumed,
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

/// Replays the golden log like [`Replayer`], counting its runs; after `stall_after` runs
/// it never finishes another (a run in flight when the evaluation is killed).
struct Counting {
    runs: std::sync::atomic::AtomicUsize,
    stall_after: usize,
}

#[async_trait::async_trait]
impl System for Counting {
    fn name(&self) -> &str {
        "golden"
    }

    fn role(&self) -> SystemRole {
        SystemRole::Workflow
    }

    async fn run(&self, record: &Record) -> SystemRun {
        if self.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= self.stall_after {
            std::future::pending::<()>().await;
        }
        Replayer { name: "golden", role: SystemRole::Workflow, drop_last: 1 }.run(record).await
    }
}

#[tokio::test]
async fn an_interrupted_evaluation_resumes_from_its_journal_without_repeating_a_run() {
    let records: Vec<Record> =
        tau2_records("retail").into_iter().filter(|r| !r.orchestration.is_empty()).take(4).collect();
    let cfg = EvalConfig { repeat: 2, scoring: ScoreConfig { tc: TcConfig::exact(), judge: None, checker: None } };
    let dir = tempfile::tempdir().unwrap();
    let settings = serde_json::json!({"repeat": 2});
    let settings = settings.as_object().unwrap();

    // The first evaluation finishes 3 of its 8 runs and is then dropped, as a kill would.
    let (journal, finished) = EvalJournal::open(dir.path(), settings).unwrap();
    assert!(finished.is_empty());
    let first = Counting { runs: 0.into(), stall_after: 3 };
    let record_run = |p: Progress<'_>| journal.record(p.measurement).unwrap();
    let systems: [&dyn System; 1] = [&first];
    let run = evaluate_resumed(&systems, &records, &cfg, 1, Vec::new(), &record_run);
    assert!(tokio::time::timeout(std::time::Duration::from_millis(500), run).await.is_err(), "the 4th run stalls");
    drop(journal);

    // The second continues: 5 new runs, and a report as if nothing had happened.
    let (journal, finished) = EvalJournal::open(dir.path(), settings).unwrap();
    assert_eq!(finished.len(), 3);
    let second = Counting { runs: 0.into(), stall_after: usize::MAX };
    let seen = Mutex::new(Vec::new());
    let progress = |p: Progress<'_>| {
        journal.record(p.measurement).unwrap();
        seen.lock().unwrap().push(p.done);
    };
    let report = evaluate_resumed(&[&second], &records, &cfg, 1, finished, &progress).await;
    assert_eq!(second.runs.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(*seen.lock().unwrap(), vec![4, 5, 6, 7, 8]);
    let whole = Counting { runs: 0.into(), stall_after: usize::MAX };
    let no_progress = |_: Progress<'_>| {};
    let expected = evaluate(&[&whole], &records, &cfg, &no_progress).await;
    let key = |report: &flowmem_eval::EvalReport| -> Vec<(u32, String, f64)> {
        report.runs.iter().map(|r| (r.repeat, r.record_id.clone(), r.tc)).collect()
    };
    assert_eq!(key(&report), key(&expected));
    assert_eq!(report.systems[0].mean_tc, expected.systems[0].mean_tc);
    journal.finish().unwrap();
    assert!(!dir.path().join(PROGRESS_FILE).exists());
}

#[test]
fn a_journal_of_other_settings_is_refused_by_name_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let before = serde_json::json!({"grounding": "off", "repeat": 1});
    let (journal, _) = EvalJournal::open(dir.path(), before.as_object().unwrap()).unwrap();
    journal.record(&measurement("a")).unwrap();
    drop(journal);
    let saved = std::fs::read_to_string(dir.path().join(PROGRESS_FILE)).unwrap();

    let after = serde_json::json!({"grounding": "bindings", "repeat": 1});
    let err = EvalJournal::open(dir.path(), after.as_object().unwrap()).unwrap_err().to_string();
    assert!(err.contains("progress.jsonl"), "{err}");
    assert!(err.contains("`grounding` was \"off\" there and is \"bindings\" now"), "{err}");
    assert_eq!(std::fs::read_to_string(dir.path().join(PROGRESS_FILE)).unwrap(), saved);

    // A journal with no finished run yet (the evaluation died before its first) holds
    // nothing to keep: other settings take it over.
    let other = tempfile::tempdir().unwrap();
    drop(EvalJournal::open(other.path(), before.as_object().unwrap()).unwrap());
    let (journal, finished) = EvalJournal::open(other.path(), after.as_object().unwrap()).unwrap();
    assert!(finished.is_empty());
    journal.record(&measurement("a")).unwrap();
    drop(journal);
    assert!(EvalJournal::open(other.path(), before.as_object().unwrap()).is_err(), "now it has a run of `after`");
    let (_, finished) = EvalJournal::open(other.path(), after.as_object().unwrap()).unwrap();
    assert_eq!(finished, vec![measurement("a")]);
}

fn measurement(record_id: &str) -> flowmem_eval::RunMeasurement {
    flowmem_eval::RunMeasurement {
        system: "s".into(),
        role: SystemRole::Workflow,
        record_id: record_id.into(),
        repeat: 0,
        tc: 1.0,
        es: None,
        judge_failed: false,
        task_success: None,
        latency_ms: 1.0,
        llm_calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        tool_calls: 0,
        error: None,
        tools: Vec::new(),
    }
}

#[test]
fn a_run_cut_short_by_a_kill_is_dropped_and_a_bad_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(PROGRESS_FILE);
    let settings = serde_json::json!({"repeat": 1});
    let settings = settings.as_object().unwrap();
    let run = measurement;
    let (journal, _) = EvalJournal::open(dir.path(), settings).unwrap();
    journal.record(&run("a")).unwrap();
    drop(journal);
    // A kill in the middle of the second run's line.
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"run\":{\"system\":\"s\",\"ro");
    std::fs::write(&path, &text).unwrap();
    let (journal, finished) = EvalJournal::open(dir.path(), settings).unwrap();
    assert_eq!(finished, vec![run("a")]);
    journal.record(&run("b")).unwrap();
    drop(journal);
    let (_, finished) = EvalJournal::open(dir.path(), settings).unwrap();
    assert_eq!(finished, vec![run("a"), run("b")], "the cut line is gone, the next one whole");

    // A broken line with its newline is not a kill's doing: it is named, not dropped.
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"run\": 3}\n");
    std::fs::write(&path, &text).unwrap();
    let err = EvalJournal::open(dir.path(), settings).unwrap_err().to_string();
    assert!(err.contains("line 4 is not a journal line"), "{err}");
}
