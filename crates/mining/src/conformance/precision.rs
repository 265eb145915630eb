//! ETConformance precision, token-based, as PM4Py 2.7.23.11 computes it by default
//! (`pm4py/algo/evaluation/precision/variants/etconformance_token.py`).
//!
//! Every proper prefix of every case is replayed (PM4Py's precision options: stop at the
//! first transition that cannot fire, no attempt to reach the final marking). For each
//! prefix that replays, the visible transitions enabled after it, possibly through silent
//! ones, are the allowed activities; those the log never follows the prefix with are
//! escaping edges. The empty prefix counts once per case against the log's start
//! activities. Precision is `1 − escaping / allowed`, both weighted by how many cases
//! share the prefix.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::EventLog;
use crate::conformance::net::Compiled;
use crate::conformance::token_replay::{Options, Replayer};

pub(crate) fn etc_token(log: &EventLog, net: &Compiled<'_>) -> f64 {
    // Each proper prefix: the activities that follow it and how many cases pass it.
    let mut prefixes: FxHashMap<&[u32], (FxHashSet<u32>, u64)> = FxHashMap::default();
    let mut starts: FxHashSet<u32> = FxHashSet::default();
    for variant in log.variants() {
        let trace = &variant.activities;
        if let Some(&first) = trace.first() {
            starts.insert(first);
        }
        for i in 1..trace.len() {
            let entry = prefixes.entry(&trace[..i]).or_default();
            entry.0.insert(trace[i]);
            entry.1 += variant.count;
        }
    }
    let label_activity: FxHashMap<&str, u32> =
        log.activities().iter().enumerate().map(|(a, name)| (name.as_str(), a as u32)).collect();
    // Labels are compared as names: a model label the log never has is its own activity.
    let labels_of = |ts: Vec<u32>| -> FxHashSet<Result<u32, &str>> {
        ts.into_iter()
            .filter_map(|t| net.label(t))
            .map(|label| label_activity.get(label).copied().ok_or(label))
            .collect()
    };
    let n_cases = log.n_cases();
    let initial = labels_of(net.visible_eventually_enabled(&net.initial_marking()));
    let mut allowed = n_cases * initial.len() as u64;
    let mut escaping = n_cases * initial.iter().filter(|a| !matches!(a, Ok(a) if starts.contains(a))).count() as u64;
    let replayer = Replayer::new(net, Options::PRECISION);
    for (prefix, (followers, count)) in &prefixes {
        let replay = replayer.replay(prefix);
        if !replay.fit {
            continue;
        }
        let enabled = labels_of(net.visible_eventually_enabled(&replay.reached));
        allowed += enabled.len() as u64 * count;
        escaping += enabled.iter().filter(|a| !matches!(a, Ok(a) if followers.contains(a))).count() as u64 * count;
    }
    if allowed > 0 { 1.0 - escaping as f64 / allowed as f64 } else { 1.0 }
}
