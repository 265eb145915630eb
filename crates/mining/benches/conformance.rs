//! Times flowmem's conformance checking on the shared XES logs, for the side-by-side
//! comparison with PM4Py in `scripts/bench-conformance.sh`.
//!
//! For each log given in `CONFORM_LOGS` (comma-separated file names; all shared logs
//! when unset) and each of PM4Py's IM and IMf(0.2) trees: reading the XES file into
//! variants, then token-based replay and alignments, each timed after the read. Prints
//! CSV rows `log,model,read_ms,token_replay_ms,alignments_ms`, the minimum of `REPS`
//! runs (default 3). Models whose alignments PM4Py did not finish for the reference
//! fixture are not aligned (the column is empty), so both sides time the same work.

#![allow(missing_docs, clippy::print_stdout)] // a bench binary prints its table.

use std::path::Path;
use std::time::Instant;

use flowmem_mining::{
    AlignConfig, DEFAULT_MAX_STATES, ProcessTree, align_log, read_xes, token_replay, tree_to_petri_net,
};

fn main() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/xes");
    let trees: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data.join("pm4py-trees.json")).expect("pm4py-trees.json next to the logs"),
    )
    .expect("pm4py-trees.json is JSON");
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pm4py_conformance.json"))
            .expect("the conformance fixture"),
    )
    .expect("the fixture is JSON");
    let reps: usize = std::env::var("REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let logs: Vec<String> = match std::env::var("CONFORM_LOGS") {
        Ok(list) => list.split(',').map(str::to_owned).collect(),
        Err(_) => trees["logs"].as_object().expect("logs").keys().cloned().collect(),
    };
    for name in logs {
        for (model, key) in [("im", "im_tree"), ("imf02", "imf02_tree")] {
            let tree = ProcessTree::parse(trees["logs"][&name][key].as_str().expect("a tree")).expect("tree parses");
            let net = tree_to_petri_net(&tree);
            let (mut read_ms, mut token_ms, mut align_ms) = (f64::MAX, f64::MAX, f64::MAX);
            for _ in 0..reps {
                let started = Instant::now();
                let log = read_xes(&data.join(&name)).expect("log reads").to_event_log();
                read_ms = read_ms.min(started.elapsed().as_secs_f64() * 1e3);
                let started = Instant::now();
                std::hint::black_box(token_replay(&log, &net));
                token_ms = token_ms.min(started.elapsed().as_secs_f64() * 1e3);
                if fixture["logs"][&name][model].get("alignments").is_none() {
                    continue;
                }
                let started = Instant::now();
                let config = AlignConfig { max_states: DEFAULT_MAX_STATES, keep_moves: true };
                if std::hint::black_box(align_log(&log, &net, config)).is_ok() {
                    align_ms = align_ms.min(started.elapsed().as_secs_f64() * 1e3);
                }
            }
            let align = if align_ms == f64::MAX { String::new() } else { format!("{align_ms:.3}") };
            println!("{name},{model},{read_ms:.3},{token_ms:.3},{align}");
        }
    }
}
