//! Directly-follows graphs.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::{ActivityId, EventLog};

/// A directly-follows graph with frequencies, weighted by case counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dfg {
    /// `(from, to, count)`: how often `to` directly followed `from`; sorted by ids.
    pub edges: Vec<(ActivityId, ActivityId, u64)>,
    /// `(activity, count)`: how many cases started with the activity; sorted by id.
    pub start: Vec<(ActivityId, u64)>,
    /// `(activity, count)`: how many cases ended with the activity; sorted by id.
    pub end: Vec<(ActivityId, u64)>,
    /// How often each activity occurred, indexed by [`ActivityId`].
    pub activity_counts: Vec<u64>,
}

/// Discovers the directly-follows graph of `log`.
///
/// # Example
///
/// ```
/// use flowmem_mining::{discover_dfg, EventLogBuilder};
///
/// let mut builder = EventLogBuilder::new();
/// builder.push_trace(["a", "b", "b"]);
/// let dfg = discover_dfg(&builder.build());
/// assert_eq!(dfg.edges, vec![(0, 1, 1), (1, 1, 1)]);
/// assert_eq!((dfg.start.clone(), dfg.end.clone()), (vec![(0, 1)], vec![(1, 1)]));
/// ```
#[must_use]
pub fn discover_dfg(log: &EventLog) -> Dfg {
    let mut edges: FxHashMap<(ActivityId, ActivityId), u64> = FxHashMap::default();
    let mut start = vec![0u64; log.activities().len()];
    let mut end = vec![0u64; log.activities().len()];
    let mut activity_counts = vec![0u64; log.activities().len()];
    for variant in log.variants() {
        let trace = &variant.activities;
        let (Some(&first), Some(&last)) = (trace.first(), trace.last()) else { continue };
        start[first as usize] += variant.count;
        end[last as usize] += variant.count;
        for &activity in trace {
            activity_counts[activity as usize] += variant.count;
        }
        for pair in trace.windows(2) {
            *edges.entry((pair[0], pair[1])).or_insert(0) += variant.count;
        }
    }
    let mut edges: Vec<(ActivityId, ActivityId, u64)> = edges.into_iter().map(|((a, b), n)| (a, b, n)).collect();
    edges.sort_unstable();
    let nonzero = |counts: Vec<u64>| -> Vec<(ActivityId, u64)> {
        counts.into_iter().enumerate().filter(|(_, n)| *n > 0).map(|(a, n)| (a as ActivityId, n)).collect()
    };
    Dfg { edges, start: nonzero(start), end: nonzero(end), activity_counts }
}
