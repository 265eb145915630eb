//! PM4Py 2.7.23.11 parity of conformance checking on every shared XES log, for the IM and
//! IMf(0.2) trees PM4Py discovers: the Petri net the tree converts to, token-based replay
//! (log fitness and token counts exactly), alignment fitness per variant (within 1e-9) and
//! ETConformance precision (within 1e-9).
//!
//! The figures come from `scripts/reference/pm4py_conformance.py`
//! (`tests/fixtures/pm4py_conformance.json`). Optimal alignments may tie: PM4Py returns
//! one of several move sequences with the same cost, chosen by its search order, so only
//! the cost (and the fitness derived from it) is compared, never the moves.

use std::path::Path;

use flowmem_mining::{
    AlignConfig, DEFAULT_MAX_STATES, EventLog, MOVE_COST, PetriNet, PrecisionVariant, ProcessTree, align_log,
    precision, read_xes, token_replay, tree_to_petri_net,
};

fn fixture() -> &'static serde_json::Value {
    static FIXTURE: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    FIXTURE.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pm4py_conformance.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        serde_json::from_str(&text).expect("the fixture is JSON")
    })
}

fn trees(file: &str) -> serde_json::Value {
    let path = crate::xes_dir().join("pm4py-trees.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let all: serde_json::Value = serde_json::from_str(&text).expect("pm4py-trees.json is JSON");
    all["logs"][file].clone()
}

/// The log's variants sorted by activity names, as the fixture lists them.
fn sorted_variants(log: &EventLog) -> Vec<usize> {
    let names = |i: usize| log.variants()[i].activities.iter().map(|&a| log.activity(a)).collect::<Vec<_>>();
    let mut order: Vec<usize> = (0..log.variants().len()).collect();
    order.sort_by_key(|&i| names(i));
    order
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9
}

/// Checks one model of one log; returns every mismatch.
fn check_model(log: &EventLog, net: &PetriNet, want: &serde_json::Value, tag: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let want_net = &want["net"];
    let n_silent = net.transitions.iter().filter(|t| t.label.is_none()).count();
    let ours = (net.places.len(), net.transitions.len(), n_silent, net.structure_digest());
    let theirs = (
        want_net["places"].as_u64().unwrap_or(0) as usize,
        want_net["transitions"].as_u64().unwrap_or(0) as usize,
        want_net["silent"].as_u64().unwrap_or(0) as usize,
        want_net["md5"].as_str().unwrap_or("").to_owned(),
    );
    if ours != theirs {
        problems.push(format!("{tag} net: ours {ours:?}, PM4Py {theirs:?}\n{}", net.structure_text()));
        return problems;
    }

    let replay = token_replay(log, net);
    let want_tr = &want["token_replay"];
    for (name, value) in [
        ("fitting_cases", replay.fitting_cases),
        ("missing", replay.missing),
        ("consumed", replay.consumed),
        ("remaining", replay.remaining),
        ("produced", replay.produced),
    ] {
        if want_tr[name].as_u64() != Some(value) {
            problems.push(format!("{tag} token replay {name}: ours {value}, PM4Py {}", want_tr[name]));
        }
    }
    if want_tr["log_fitness"].as_f64() != Some(replay.log_fitness) {
        problems.push(format!(
            "{tag} token replay log fitness: ours {}, PM4Py {}",
            replay.log_fitness, want_tr["log_fitness"]
        ));
    }
    if !want_tr["average_trace_fitness"].as_f64().is_some_and(|w| close(w, replay.average_trace_fitness)) {
        problems.push(format!(
            "{tag} token replay average trace fitness: ours {}, PM4Py {}",
            replay.average_trace_fitness, want_tr["average_trace_fitness"]
        ));
    }

    if let Some(want_al) = want.get("alignments") {
        match align_log(log, net, AlignConfig { max_states: DEFAULT_MAX_STATES, keep_moves: false }) {
            Err(e) => problems.push(format!("{tag} alignments: {e}")),
            Ok(report) => {
                let bwc = want_al["bwc"].as_u64().expect("bwc");
                if report.best_worst_cost != bwc {
                    problems.push(format!("{tag} best-worst cost: ours {}, PM4Py {bwc}", report.best_worst_cost));
                }
                let costs = want_al["costs"].as_array().expect("costs");
                let order = sorted_variants(log);
                assert_eq!(costs.len(), order.len(), "{tag}: variant count");
                let mut wrong = 0;
                for (&i, cost) in order.iter().zip(costs) {
                    let cost = cost.as_u64().expect("cost");
                    let len = log.variants()[i].activities.len() as u64;
                    let den = (len * MOVE_COST + bwc) / MOVE_COST;
                    let theirs = if den > 0 { 1.0 - (cost / MOVE_COST) as f64 / den as f64 } else { 0.0 };
                    let ours = &report.variants[i];
                    if ours.cost != cost || !close(ours.fitness, theirs) {
                        wrong += 1;
                        if wrong <= 3 {
                            problems.push(format!(
                                "{tag} alignment of variant {:?}: ours cost {} fitness {}, PM4Py cost {cost} fitness {theirs}",
                                log.variants()[i].activities.iter().map(|&a| log.activity(a)).collect::<Vec<_>>(),
                                ours.cost,
                                ours.fitness
                            ));
                        }
                    }
                }
                if wrong > 3 {
                    problems.push(format!("{tag}: {wrong} variants differ in all"));
                }
                for (name, ours) in [
                    ("average_fitness", report.average_fitness),
                    ("percentage_fitting", report.percentage_fitting),
                    ("log_fitness", report.log_fitness),
                ] {
                    if !want_al[name].as_f64().is_some_and(|w| close(w, ours)) {
                        problems.push(format!("{tag} alignments {name}: ours {ours}, PM4Py {}", want_al[name]));
                    }
                }
            }
        }
    }

    let ours = precision(log, net, PrecisionVariant::EtcToken);
    if !want["precision"].as_f64().is_some_and(|w| close(w, ours)) {
        problems.push(format!("{tag} precision: ours {ours}, PM4Py {}", want["precision"]));
    }
    problems
}

fn check(file: &str) {
    let want = &fixture()["logs"][file];
    assert!(want.is_object(), "{file} is missing from the fixture");
    let log = read_xes(&crate::xes_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}")).to_event_log();
    assert_eq!(want["cases"].as_u64(), Some(log.n_cases()), "{file}: cases");
    assert_eq!(want["variants"].as_u64(), Some(log.variants().len() as u64), "{file}: variants");
    let trees = trees(file);
    let mut problems = Vec::new();
    for (key, tree_key) in [("im", "im_tree"), ("imf02", "imf02_tree")] {
        let tree = ProcessTree::parse(trees[tree_key].as_str().expect("tree")).expect("PM4Py tree parses");
        problems.extend(check_model(&log, &tree_to_petri_net(&tree), &want[key], &format!("{file} {key}")));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

per_shared_log!(check, every_shared_log_has_a_conformance_parity_test);
