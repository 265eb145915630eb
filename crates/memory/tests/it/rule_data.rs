//! Rule induction on real runs: ToolBench data_example and StableToolBench, imported with
//! flowmem-model's importers. The expected counts are computed here, independently of
//! the inducer, straight from the trajectories' steps.

use std::collections::BTreeSet;

use flowmem_memory::induce::{RuleConfig, SkipReason, rule};
use flowmem_memory::{MemoryStore, OfflineConfig, StoreConfig, induce::Inducer, induce_offline};
use flowmem_model::{Action, ImportFormat, Item, Scope, Trajectory, import};

use crate::repo_root;

fn trajectories(format: ImportFormat, dir: &str) -> Vec<Trajectory> {
    let path = repo_root().join("../shared/data").join(dir);
    let imported = import(format, &path).unwrap_or_else(|err| panic!("importing {}: {err}", path.display()));
    let trajectories: Vec<Trajectory> = imported
        .items
        .into_iter()
        .filter_map(|item| match item {
            Item::Trajectory(trajectory) => Some(trajectory),
            Item::Record(_) => None,
        })
        .collect();
    assert!(!trajectories.is_empty(), "no trajectories under {}", path.display());
    trajectories
}

/// The distinct tool-name sequences of calls that did not fail, split by length.
fn distinct_sequences(trajectories: &[Trajectory]) -> (BTreeSet<Vec<String>>, BTreeSet<Vec<String>>) {
    let mut long = BTreeSet::new();
    let mut short = BTreeSet::new();
    for trajectory in trajectories {
        let mut sequence = Vec::new();
        for step in &trajectory.steps {
            if let Action::ToolCall(call) = &step.action
                && call.error.is_none()
            {
                sequence.push(call.tool.clone());
            }
        }
        if sequence.len() >= 2 {
            long.insert(sequence);
        } else {
            short.insert(sequence);
        }
    }
    (long, short)
}

fn check(trajectories: &[Trajectory]) {
    let (long, short) = distinct_sequences(trajectories);
    let cfg = RuleConfig { min_steps: 2, scope: Some(Scope::default()) };
    let induction = rule(trajectories, &cfg);

    assert_eq!(induction.workflows.len(), long.len(), "one workflow per distinct sequence of >= 2 steps");
    assert_eq!(induction.proposed, long.len() + short.len(), "one candidate per distinct sequence");
    let induced: BTreeSet<Vec<String>> =
        induction.workflows.iter().map(|workflow| workflow.tool_sequence().map(str::to_owned).collect()).collect();
    assert_eq!(induced, long);
    assert_eq!(induction.skipped.len(), short.len(), "one report per distinct short sequence");
    assert!(induction.skipped.iter().all(|s| matches!(s.reason, SkipReason::TooFewSteps { min_steps: 2, .. })));

    // Every trajectory is accounted for exactly once: in a workflow or in a skip report.
    let mut seen: Vec<&String> = induction
        .workflows
        .iter()
        .flat_map(|workflow| &workflow.provenance.trajectory_ids)
        .chain(induction.skipped.iter().flat_map(|skipped| &skipped.trajectory_ids))
        .collect();
    seen.sort();
    let mut all: Vec<&String> = trajectories.iter().map(|t| &t.id).collect();
    all.sort();
    assert_eq!(seen, all);

    // Stored, distinct sequences never merge, so the memory holds exactly as many.
    let dir = tempfile::tempdir().unwrap();
    let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard()).unwrap();
    store.add_all(&induction.workflows).unwrap();
    assert_eq!(store.count(&Scope::default()).unwrap(), long.len() as u64);

    // Deterministic: the same input gives the same workflows.
    assert_eq!(rule(trajectories, &cfg), induction);
}

#[test]
fn toolbench_answers_give_one_workflow_per_distinct_tool_sequence() {
    check(&trajectories(ImportFormat::ToolBench, "toolbench-data_example/answer"));
}

#[test]
fn stabletoolbench_runs_give_one_workflow_per_distinct_tool_sequence() {
    check(&trajectories(ImportFormat::StableToolBench, "stabletoolbench/default_evalset_gpt-3.5-turbo_CoT"));
}

#[test]
fn offline_induction_learns_only_from_successful_runs() {
    let trajectories = trajectories(ImportFormat::ToolBench, "toolbench-data_example/answer");
    let n_failed = trajectories.iter().filter(|t| t.succeeded() == Some(false)).count();
    assert!(n_failed > 0, "the data has lost runs to leave out");
    let successful: Vec<Trajectory> = trajectories.iter().filter(|t| t.succeeded() != Some(false)).cloned().collect();
    let (long, _) = distinct_sequences(&successful);

    let dir = tempfile::tempdir().unwrap();
    let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard()).unwrap();
    let rule_cfg = RuleConfig::standard();
    let scope = Scope { site: None, domain: Some("toolbench".to_owned()) };
    let cfg = OfflineConfig { inducer: Inducer::Rule(&rule_cfg), scope: Some(&scope), batch_size: 5, embedder: None };
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let report = runtime.block_on(induce_offline(&mut store, &trajectories, &cfg)).unwrap();

    assert_eq!(report.n_trajectories, trajectories.len());
    assert_eq!(report.n_used, successful.len());
    let n_unsuccessful = report.skipped.iter().filter(|s| s.reason == SkipReason::Unsuccessful).count();
    assert_eq!(n_unsuccessful, n_failed);
    assert_eq!(store.count(&scope).unwrap(), long.len() as u64);
    assert_eq!(store.count(&Scope { site: None, domain: Some("other".to_owned()) }).unwrap(), 0);
}
