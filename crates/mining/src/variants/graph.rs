//! The miner's working data: a sub-log of variants and its dense directly-follows graph.

use rustc_hash::FxHashMap;

use crate::ActivityId;

/// A multiset of traces over global activity ids (PM4Py's `UVCL`).
#[derive(Debug, Clone, Default)]
pub(crate) struct SubLog {
    // Invariant: traces are unique.
    pub(crate) traces: Vec<(Vec<ActivityId>, u64)>,
}

/// Accumulates traces with counts into a [`SubLog`].
#[derive(Debug, Default)]
pub(crate) struct SubLogBuilder {
    traces: FxHashMap<Vec<ActivityId>, u64>,
}

impl SubLogBuilder {
    pub(crate) fn add(&mut self, trace: &[ActivityId], count: u64) {
        if let Some(existing) = self.traces.get_mut(trace) {
            *existing += count;
        } else {
            self.traces.insert(trace.to_vec(), count);
        }
    }

    /// Like PM4Py's `counter[trace] = count`: replaces rather than adds.
    pub(crate) fn set(&mut self, trace: &[ActivityId], count: u64) {
        self.traces.insert(trace.to_vec(), count);
    }

    pub(crate) fn build(self) -> SubLog {
        SubLog { traces: self.traces.into_iter().collect() }
    }
}

impl SubLog {
    pub(crate) fn total(&self) -> u64 {
        self.traces.iter().map(|(_, n)| n).sum()
    }

    /// The sorted set of activities occurring in the log.
    pub(crate) fn alphabet(&self, n_global: usize) -> Vec<ActivityId> {
        let mut seen = vec![false; n_global];
        for (trace, _) in &self.traces {
            for &a in trace {
                seen[a as usize] = true;
            }
        }
        seen.iter().enumerate().filter(|(_, s)| **s).map(|(a, _)| a as ActivityId).collect()
    }
}

/// A directly-follows graph over a sorted set of vertices with local indices.
///
/// Local index order equals global id order, which equals activity name order.
#[derive(Debug, Clone)]
pub(crate) struct Graph {
    /// Local index -> global id; sorted.
    pub(crate) acts: Vec<ActivityId>,
    /// `n * n` edge counts; 0 means no edge.
    pub(crate) edge: Vec<u64>,
    pub(crate) start: Vec<u64>,
    pub(crate) end: Vec<u64>,
}

impl Graph {
    pub(crate) fn n(&self) -> usize {
        self.acts.len()
    }

    pub(crate) fn has_edge(&self, a: usize, b: usize) -> bool {
        self.edge[a * self.acts.len() + b] > 0
    }

    pub(crate) fn n_edges(&self) -> usize {
        self.edge.iter().filter(|n| **n > 0).count()
    }

    /// PM4Py's `discover_dfg_uvcl`: case-weighted edges, starts and ends.
    pub(crate) fn from_log(log: &SubLog, n_global: usize) -> Graph {
        let mut local = vec![u32::MAX; n_global];
        let mut acts = Vec::new();
        for (trace, _) in &log.traces {
            for &a in trace {
                if local[a as usize] == u32::MAX {
                    local[a as usize] = 0;
                    acts.push(a);
                }
            }
        }
        acts.sort_unstable();
        for (idx, &a) in acts.iter().enumerate() {
            local[a as usize] = idx as u32;
        }
        let n = acts.len();
        let mut graph = Graph { acts, edge: vec![0; n * n], start: vec![0; n], end: vec![0; n] };
        for (trace, count) in &log.traces {
            let (Some(&first), Some(&last)) = (trace.first(), trace.last()) else { continue };
            graph.start[local[first as usize] as usize] += count;
            graph.end[local[last as usize] as usize] += count;
            for pair in trace.windows(2) {
                let (a, b) = (local[pair[0] as usize] as usize, local[pair[1] as usize] as usize);
                graph.edge[a * n + b] += count;
            }
        }
        graph
    }

    /// IMf's noise filter on the graph (PM4Py 2.7.23.11 `__filter_dfg_noise`): an edge
    /// stays when its count exceeds `noise` times the largest outgoing count of its source
    /// (its end count included); a start activity stays when its count is at least `noise`
    /// times the largest start count. End activities stay. Vertices that lose every edge,
    /// start and end mark disappear.
    pub(crate) fn filter_noise(&self, noise: f64) -> Graph {
        let n = self.n();
        let mut keep_edge = vec![0u64; n * n];
        for a in 0..n {
            let row = &self.edge[a * n..(a + 1) * n];
            let mut outgoing_max = row.iter().copied().max().unwrap_or(0);
            if outgoing_max == 0 {
                continue;
            }
            if self.end[a] > 0 {
                outgoing_max = outgoing_max.max(self.end[a]);
            }
            for b in 0..n {
                if row[b] > 0 && row[b] as f64 > noise * outgoing_max as f64 {
                    keep_edge[a * n + b] = row[b];
                }
            }
        }
        let start_max = self.start.iter().copied().max().unwrap_or(0);
        let keep_start: Vec<u64> =
            self.start.iter().map(|&s| if s > 0 && s as f64 >= start_max as f64 * noise { s } else { 0 }).collect();
        // Re-index on the vertices that remain.
        let alive: Vec<usize> = (0..n)
            .filter(|&a| {
                keep_start[a] > 0
                    || self.end[a] > 0
                    || (0..n).any(|b| keep_edge[a * n + b] > 0 || keep_edge[b * n + a] > 0)
            })
            .collect();
        let m = alive.len();
        let mut graph = Graph {
            acts: alive.iter().map(|&a| self.acts[a]).collect(),
            edge: vec![0; m * m],
            start: alive.iter().map(|&a| keep_start[a]).collect(),
            end: alive.iter().map(|&a| self.end[a]).collect(),
        };
        for (i, &a) in alive.iter().enumerate() {
            for (j, &b) in alive.iter().enumerate() {
                graph.edge[i * m + j] = keep_edge[a * n + b];
            }
        }
        graph
    }

    /// `reach[a * n + b]`: `b` is reachable from `a` by one or more edges, excluding `a`
    /// itself (networkx's `descendants`).
    pub(crate) fn reachability(&self) -> Vec<bool> {
        let n = self.n();
        let mut reach = vec![false; n * n];
        let mut stack = Vec::new();
        for source in 0..n {
            stack.clear();
            stack.push(source);
            while let Some(a) = stack.pop() {
                for b in 0..n {
                    if self.has_edge(a, b) && !reach[source * n + b] {
                        reach[source * n + b] = true;
                        stack.push(b);
                    }
                }
            }
            reach[source * n + source] = false;
        }
        reach
    }
}

/// A union-find over local indices.
pub(crate) struct UnionFind {
    parent: Vec<usize>,
}

impl UnionFind {
    pub(crate) fn new(n: usize) -> UnionFind {
        UnionFind { parent: (0..n).collect() }
    }

    pub(crate) fn find(&mut self, mut a: usize) -> usize {
        while self.parent[a] != a {
            self.parent[a] = self.parent[self.parent[a]];
            a = self.parent[a];
        }
        a
    }

    pub(crate) fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            // The smaller root wins, so a group's root is its smallest member.
            let (low, high) = if ra < rb { (ra, rb) } else { (rb, ra) };
            self.parent[high] = low;
        }
    }

    /// The groups, each sorted, ordered by their smallest member.
    pub(crate) fn groups(mut self) -> Vec<Vec<usize>> {
        let n = self.parent.len();
        let mut by_root: Vec<Vec<usize>> = vec![Vec::new(); n];
        for a in 0..n {
            let root = self.find(a);
            by_root[root].push(a);
        }
        by_root.into_iter().filter(|group| !group.is_empty()).collect()
    }
}
