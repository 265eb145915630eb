//! Fall-throughs, tried in PM4Py's order when no cut holds: activity once per trace,
//! activity concurrent, strict tau loop, tau loop, flower.

use crate::ActivityId;
use crate::tree::Operator;
use crate::variants::cuts::find_cut;
use crate::variants::graph::{Graph, SubLog, SubLogBuilder};

/// What a fall-through produced: an operator over sub-logs to mine further.
pub(crate) struct FallThrough {
    pub(crate) operator: Operator,
    pub(crate) logs: Vec<SubLog>,
}

/// The first fall-through that applies; the flower model always does.
pub(crate) fn fall_through(log: &SubLog, n_global: usize) -> FallThrough {
    let alphabet = log.alphabet(n_global);
    if let Some(activity) = activity_once_per_trace(log, &alphabet, n_global) {
        return split_off(log, activity);
    }
    if let Some(activity) = activity_concurrent(log, &alphabet, n_global) {
        return split_off(log, activity);
    }
    if let Some(fall) = tau_loop(log, n_global, true) {
        return fall;
    }
    if let Some(fall) = tau_loop(log, n_global, false) {
        return fall;
    }
    flower(&alphabet)
}

/// The smallest activity that occurs exactly once in every trace.
fn activity_once_per_trace(log: &SubLog, alphabet: &[ActivityId], n_global: usize) -> Option<ActivityId> {
    let mut candidate = vec![false; n_global];
    for &a in alphabet {
        candidate[a as usize] = true;
    }
    let mut occurrences = vec![0u32; n_global];
    for (trace, _) in &log.traces {
        for &a in trace {
            occurrences[a as usize] += 1;
        }
        for &a in alphabet {
            if occurrences[a as usize] != 1 {
                candidate[a as usize] = false;
            }
        }
        for &a in trace {
            occurrences[a as usize] = 0;
        }
    }
    alphabet.iter().copied().find(|&a| candidate[a as usize])
}

/// The smallest activity whose removal lets some cut hold.
fn activity_concurrent(log: &SubLog, alphabet: &[ActivityId], n_global: usize) -> Option<ActivityId> {
    let mut without = Vec::new();
    alphabet.iter().copied().find(|&candidate| {
        let mut reduced = SubLogBuilder::default();
        for (trace, count) in &log.traces {
            without.clear();
            without.extend(trace.iter().copied().filter(|&a| a != candidate));
            // PM4Py assigns rather than adds here; counts do not affect cut detection.
            reduced.set(&without, *count);
        }
        let graph = Graph::from_log(&reduced.build(), n_global);
        find_cut(&graph).is_some()
    })
}

/// `+( activity, rest )`: the activity's own log and the log without it.
fn split_off(log: &SubLog, activity: ActivityId) -> FallThrough {
    let mut only = SubLogBuilder::default();
    let mut rest = SubLogBuilder::default();
    let mut scratch = Vec::new();
    for (trace, count) in &log.traces {
        scratch.clear();
        scratch.extend(trace.iter().copied().filter(|&a| a == activity));
        only.add(&scratch, *count);
        scratch.clear();
        scratch.extend(trace.iter().copied().filter(|&a| a != activity));
        rest.add(&scratch, *count);
    }
    FallThrough { operator: Operator::Parallel, logs: vec![only.build(), rest.build()] }
}

/// `*( split log, tau )`: traces cut where a start activity follows (strict: follows an
/// end activity). Applies when cutting adds traces.
fn tau_loop(log: &SubLog, n_global: usize, strict: bool) -> Option<FallThrough> {
    let mut is_start = vec![false; n_global];
    let mut is_end = vec![false; n_global];
    for (trace, _) in &log.traces {
        if let (Some(&first), Some(&last)) = (trace.first(), trace.last()) {
            is_start[first as usize] = true;
            is_end[last as usize] = true;
        }
    }
    let mut projected = SubLogBuilder::default();
    let (mut n_before, mut n_after) = (0u64, 0u64);
    for (trace, count) in &log.traces {
        n_before += count;
        let mut from = 0;
        for i in 1..trace.len() {
            if is_start[trace[i] as usize] && (!strict || is_end[trace[i - 1] as usize]) {
                projected.add(&trace[from..i], *count);
                n_after += count;
                from = i;
            }
        }
        projected.add(&trace[from..], *count);
        n_after += count;
    }
    if n_after <= n_before {
        return None;
    }
    Some(FallThrough { operator: Operator::Loop, logs: vec![projected.build(), SubLog::default()] })
}

/// `*( tau, X( a, b, ... ) )`: anything in any order.
fn flower(alphabet: &[ActivityId]) -> FallThrough {
    let mut redo = SubLogBuilder::default();
    for &a in alphabet {
        redo.set(&[a], 1);
    }
    FallThrough { operator: Operator::Loop, logs: vec![SubLog::default(), redo.build()] }
}
