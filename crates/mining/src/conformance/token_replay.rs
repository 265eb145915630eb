//! Token-based replay, following PM4Py 2.7.23.11's `token_replay` variant step by step
//! (`pm4py/algo/conformance/tokenreplay/variants/token_replay.py`), so that the token
//! counts agree exactly.
//!
//! An event fires the transition carrying its activity. When that transition is not
//! enabled, silent transitions are tried first: PM4Py's heuristic fires the shortest
//! silent paths (precomputed between every pair of places) from the marked places to the
//! places that lack tokens, at most two levels deep; whatever is still missing is added
//! and counted as missing. Events whose activity no transition carries are skipped. At the
//! end silent paths towards the final marking are fired, then tokens left over are
//! counted as remaining. Fitness is `½(1 − m/c) + ½(1 − r/p)`.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::conformance::net::{Compiled, OrderedMarking};

/// PM4Py's `MAX_REC_DEPTH`: how deep the search for silent paths between places goes.
const MAX_PATH_DEPTH: usize = 50;
/// PM4Py's `MAX_REC_DEPTH_HIDTRANSENABL`.
const MAX_HIDDEN_DEPTH: usize = 2;
/// PM4Py's `MAX_IT_FINAL1` and `MAX_IT_FINAL2`.
const FINAL_ROUNDS: usize = 5;

/// Which of PM4Py's replay options are on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Remaining tokens make a trace unfit (`consider_remaining_in_fitness`).
    pub(crate) consider_remaining: bool,
    /// Fire silent paths towards the final marking after the last event.
    pub(crate) reach_final: bool,
    /// Stop at the first event whose transition cannot fire (one missing token counted).
    pub(crate) stop_immediately_unfit: bool,
}

impl Options {
    /// PM4Py's defaults for fitness.
    pub(crate) const FITNESS: Options =
        Options { consider_remaining: true, reach_final: true, stop_immediately_unfit: false };
    /// What ETConformance precision asks of the replay of prefixes.
    pub(crate) const PRECISION: Options =
        Options { consider_remaining: false, reach_final: false, stop_immediately_unfit: true };
}

/// The replay of one trace.
#[derive(Debug, Clone)]
pub(crate) struct TraceReplay {
    pub(crate) fit: bool,
    pub(crate) fitness: f64,
    pub(crate) missing: u64,
    pub(crate) consumed: u64,
    pub(crate) remaining: u64,
    pub(crate) produced: u64,
    /// The marking reached, before remaining tokens are counted.
    pub(crate) reached: OrderedMarking,
}

/// `paths[p1][p2]`: the silent transitions of a shortest silent path from `p1` to `p2`.
pub(crate) type SilentPaths = Vec<FxHashMap<u32, Vec<u32>>>;

pub(crate) struct Replayer<'c, 'n> {
    net: &'c Compiled<'n>,
    paths: SilentPaths,
    options: Options,
}

impl<'c, 'n> Replayer<'c, 'n> {
    pub(crate) fn new(net: &'c Compiled<'n>, options: Options) -> Replayer<'c, 'n> {
        Replayer { net, paths: silent_paths(net), options }
    }

    /// Replays `trace` (log activity ids).
    pub(crate) fn replay(&self, trace: &[u32]) -> TraceReplay {
        let net = self.net;
        let mut marking = net.initial_marking();
        let mut missing = 0u64;
        let mut consumed = 0u64;
        let mut produced: u64 = net.initial.iter().map(|&(_, n)| u64::from(n)).sum();
        for &activity in trace {
            let candidates = &net.by_activity[activity as usize];
            // PM4Py's `trans_map` keeps the last transition of a label by name.
            let Some(&default) = candidates.last() else { continue };
            let t = candidates.iter().copied().find(|&t| net.enabled(t, &marking)).unwrap_or(default);
            if !net.enabled(t, &marking) {
                let mut visited = FxHashSet::default();
                let mut fired = Vec::new();
                marking = self.apply_hidden(t, marking, 0, &mut visited, &mut fired);
                for f in fired {
                    consumed += net.consumed(f);
                    produced += net.produced(f);
                }
            }
            if !net.enabled(t, &marking) {
                if self.options.stop_immediately_unfit {
                    missing += 1;
                    break;
                }
                for &(p, w) in &net.inputs[t as usize] {
                    let have = marking.get(p);
                    if have < w {
                        missing += u64::from(w - have);
                        // PM4Py adds the arc's weight, not the difference.
                        marking.add(p, w);
                    }
                }
            }
            consumed += net.consumed(t);
            produced += net.produced(t);
            net.fire(t, &mut marking);
        }
        if self.options.reach_final {
            self.reach_final(&mut marking, &mut consumed, &mut produced);
        }
        let reached = marking.clone();
        let final_tokens = |p: u32| net.final_marking.iter().find(|&&(q, _)| q == p).map(|&(_, n)| n);
        let mut short = 0u64;
        for &(p, n) in &net.final_marking {
            short += u64::from(n.saturating_sub(marking.get(p)));
        }
        let remaining: u64 = marking
            .0
            .iter()
            .map(|&(p, n)| match final_tokens(p) {
                Some(f) => u64::from(n.saturating_sub(f)),
                None => u64::from(n),
            })
            .sum();
        let fit = missing == 0 && (!self.options.consider_remaining || remaining == 0);
        consumed += net.final_marking.iter().map(|&(_, n)| u64::from(n)).sum::<u64>();
        missing += short;
        let fitness = if consumed > 0 && produced > 0 {
            0.5 * (1.0 - missing as f64 / consumed as f64) + 0.5 * (1.0 - remaining as f64 / produced as f64)
        } else {
            1.0
        };
        TraceReplay { fit, fitness, missing, consumed, remaining, produced, reached }
    }

    /// PM4Py's `apply_hidden_trans`: fires silent transitions to enable `t`.
    fn apply_hidden(
        &self,
        t: u32,
        mut marking: OrderedMarking,
        depth: usize,
        visited: &mut FxHashSet<u32>,
        fired: &mut Vec<u32>,
    ) -> OrderedMarking {
        let net = self.net;
        if depth >= MAX_HIDDEN_DEPTH || visited.contains(&t) {
            return marking;
        }
        visited.insert(t);
        let at_start = marking.clone();
        let lacking: Vec<u32> =
            net.inputs[t as usize].iter().filter(|&&(p, w)| marking.get(p) < w).map(|&(p, _)| p).collect();
        let groups = self.paths_between(&marking, &lacking);
        if groups.is_empty() {
            return marking;
        }
        marking = self.enable_hidden(t, marking, &groups, visited, fired);
        if !net.enabled(t, &marking) {
            let groups = self.paths_between(&marking, &lacking);
            for group in &groups {
                for &t4 in group.iter() {
                    if t4 == t || visited.contains(&t4) {
                        continue;
                    }
                    if !net.enabled(t4, &marking) {
                        marking = self.apply_hidden(t4, marking, depth + 1, visited, fired);
                    }
                    if net.enabled(t4, &marking) {
                        net.fire(t4, &mut marking);
                        fired.push(t4);
                        visited.insert(t4);
                    }
                }
            }
        }
        if !net.enabled(t, &marking) && !at_start.same(&marking) {
            // `t` is visited by now, so this returns at once, as in PM4Py.
            marking = self.apply_hidden(t, marking, depth + 1, visited, fired);
        }
        marking
    }

    /// PM4Py's `enable_hidden_transitions` (its default, non-exhaustive form): walks the
    /// paths in turn, firing what is enabled, until `t` is enabled or a path fires nothing.
    fn enable_hidden(
        &self,
        t: u32,
        mut marking: OrderedMarking,
        groups: &[&Vec<u32>],
        visited: &mut FxHashSet<u32>,
        fired: &mut Vec<u32>,
    ) -> OrderedMarking {
        let net = self.net;
        let mut next_index = vec![0usize; groups.len()];
        let mut z = 0usize;
        loop {
            let g = z % groups.len();
            let mut changed = false;
            for _ in next_index[g]..groups[g].len() {
                let t3 = groups[g][next_index[g]];
                if t3 != t && net.enabled(t3, &marking) && !visited.contains(&t3) {
                    net.fire(t3, &mut marking);
                    fired.push(t3);
                    visited.insert(t3);
                    changed = true;
                }
                next_index[g] += 1;
                if net.enabled(t, &marking) {
                    break;
                }
            }
            if net.enabled(t, &marking) || !changed {
                return marking;
            }
            z += 1;
        }
    }

    /// The silent paths from every marked place to every place of `targets` (both sorted
    /// by name), shortest first: PM4Py's `get_hidden_transitions_to_enable`.
    fn paths_between(&self, marking: &OrderedMarking, targets: &[u32]) -> Vec<&Vec<u32>> {
        let rank = &self.net.place_rank;
        let mut from: Vec<u32> = marking.0.iter().map(|&(p, _)| p).collect();
        from.sort_by_key(|&p| rank[p as usize]);
        let mut to = targets.to_vec();
        to.sort_by_key(|&p| rank[p as usize]);
        let mut out = Vec::new();
        for &p1 in &from {
            for &p2 in &to {
                if let Some(path) = self.paths[p1 as usize].get(&p2) {
                    out.push(path);
                }
            }
        }
        out.sort_by_key(|path| path.len());
        out
    }

    /// PM4Py's attempt to reach the final marking through silent transitions.
    fn reach_final(&self, marking: &mut OrderedMarking, consumed: &mut u64, produced: &mut u64) {
        let net = self.net;
        let final_places: Vec<u32> = net.final_marking.iter().map(|&(p, _)| p).collect();
        let reached = |marking: &OrderedMarking| final_places.iter().all(|&p| marking.get(p) > 0);
        for _ in 0..FINAL_ROUNDS {
            if reached(marking) {
                break;
            }
            let groups: Vec<Vec<u32>> = self.paths_between(marking, &final_places).into_iter().cloned().collect();
            for group in &groups {
                for &t in group {
                    if net.enabled(t, marking) {
                        net.fire(t, marking);
                        *consumed += net.consumed(t);
                        *produced += net.produced(t);
                    }
                }
                if reached(marking) {
                    break;
                }
            }
        }
        if reached(marking) || final_places.len() != 1 {
            return;
        }
        let sink = final_places[0];
        let mut connections: Vec<Vec<u32>> =
            marking.0.iter().filter_map(|&(p, _)| self.paths[p as usize].get(&sink).cloned()).collect();
        connections.sort_by_key(Vec::len);
        for _ in 0..FINAL_ROUNDS {
            for path in &connections {
                for &t in path {
                    if !net.enabled(t, marking) {
                        break;
                    }
                    net.fire(t, marking);
                    *consumed += net.consumed(t);
                    *produced += net.produced(t);
                }
            }
        }
    }
}

/// PM4Py's `get_places_shortest_path_by_hidden`: a depth-first relaxation from every
/// place over silent transitions. Ties between paths of equal length go to the first one
/// found, consumers in transition order (PM4Py's order there is that of a set of objects
/// hashed by address).
pub(crate) fn silent_paths(net: &Compiled<'_>) -> SilentPaths {
    let mut paths: SilentPaths = vec![FxHashMap::default(); net.n_places()];
    for p in 0..net.n_places() as u32 {
        let mut found = FxHashMap::default();
        relax(net, p, &mut Vec::new(), 0, &mut found);
        paths[p as usize] = found;
    }
    paths
}

fn relax(net: &Compiled<'_>, current: u32, path: &mut Vec<u32>, depth: usize, found: &mut FxHashMap<u32, Vec<u32>>) {
    if depth > MAX_PATH_DEPTH {
        return;
    }
    for &t in &net.consumers[current as usize] {
        if !net.silent[t as usize] {
            continue;
        }
        for &(p2, _) in &net.outputs[t as usize] {
            let better = found.get(&p2).is_none_or(|known| path.len() + 1 < known.len());
            if better {
                path.push(t);
                found.insert(p2, path.clone());
                relax(net, p2, path, depth + 1, found);
                path.pop();
            }
        }
    }
}
