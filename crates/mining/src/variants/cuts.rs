//! The four cuts, tried in PM4Py's order (xor, strict sequence, concurrency, loop), and
//! the log projection of each.

use crate::ActivityId;
use crate::tree::Operator;
use crate::variants::graph::{Graph, SubLog, SubLogBuilder, UnionFind};

/// A cut found on a graph: the operator and the groups as sets of global ids.
pub(crate) struct Cut {
    pub(crate) operator: Operator,
    pub(crate) groups: Vec<Vec<ActivityId>>,
}

/// The first cut that holds on `graph`, in PM4Py's order.
pub(crate) fn find_cut(graph: &Graph) -> Option<Cut> {
    let found = xor_cut(graph)
        .map(|groups| (Operator::Xor, groups))
        .or_else(|| strict_sequence_cut(graph).map(|groups| (Operator::Sequence, groups)))
        .or_else(|| concurrency_cut(graph).map(|groups| (Operator::Parallel, groups)))
        .or_else(|| loop_cut(graph).map(|groups| (Operator::Loop, groups)))?;
    let (operator, groups) = found;
    let groups = groups.into_iter().map(|group| group.into_iter().map(|a| graph.acts[a]).collect()).collect();
    Some(Cut { operator, groups })
}

/// Splits `log` by `cut` into one sub-log per group.
pub(crate) fn project(log: &SubLog, cut: &Cut, n_global: usize) -> Vec<SubLog> {
    let mut group_of = vec![NONE; n_global];
    for (idx, group) in cut.groups.iter().enumerate() {
        for &a in group {
            group_of[a as usize] = idx as u32;
        }
    }
    match cut.operator {
        Operator::Xor => project_xor(log, &group_of, cut.groups.len()),
        Operator::Sequence => project_sequence(log, &group_of, cut.groups.len()),
        Operator::Parallel => project_parallel(log, &group_of, cut.groups.len()),
        Operator::Loop => project_loop(log, &group_of),
    }
}

pub(crate) const NONE: u32 = u32::MAX;

/// Connected components of the undirected graph, ordered by their sorted member lists.
fn xor_cut(graph: &Graph) -> Option<Vec<Vec<usize>>> {
    let n = graph.n();
    let mut components = UnionFind::new(n);
    for a in 0..n {
        for b in 0..n {
            if graph.has_edge(a, b) {
                components.union(a, b);
            }
        }
    }
    let mut groups = components.groups();
    if groups.len() <= 1 {
        return None;
    }
    // Local order is name order, so this is PM4Py's sort by sorted label lists.
    groups.sort();
    Some(groups)
}

/// PM4Py's sequence cut: activities that are mutually reachable or mutually unreachable
/// share a group; groups are ordered by reachability.
fn sequence_cut(graph: &Graph) -> Option<Vec<Vec<usize>>> {
    let n = graph.n();
    if n == 0 {
        return None;
    }
    let reach = graph.reachability();
    let mut merged = UnionFind::new(n);
    for a in 0..n {
        for b in a + 1..n {
            let ab = reach[a * n + b];
            let ba = reach[b * n + a];
            if ab == ba {
                merged.union(a, b);
            }
        }
    }
    let groups = merged.groups();
    if groups.len() <= 1 {
        return None;
    }
    let n_pred = |a: usize| (0..n).filter(|&p| reach[p * n + a]).count();
    let n_succ = |a: usize| (0..n).filter(|&s| reach[a * n + s]).count();
    let mut keyed: Vec<(usize, Vec<usize>)> =
        groups.into_iter().map(|group| (n_pred(group[0]) + n - n_succ(group[0]), group)).collect();
    keyed.sort_by_key(|(key, _)| *key);
    Some(keyed.into_iter().map(|(_, group)| group).collect())
}

/// PM4Py's strict sequence cut: the sequence cut with skippable groups merged into their
/// neighbours. May return a single group, which PM4Py also counts as a cut.
fn strict_sequence_cut(graph: &Graph) -> Option<Vec<Vec<usize>>> {
    let mut groups = sequence_cut(graph)?;
    let n = graph.n();
    let k = groups.len();
    let mut cluster = vec![0usize; n];
    for (idx, group) in groups.iter().enumerate() {
        for &a in group {
            cluster[a] = idx;
        }
    }
    let is_start = |a: usize| graph.start[a] > 0;
    let is_end = |a: usize| graph.end[a] > 0;
    let mut mf: Vec<i64> =
        groups.iter().map(|g| if g.iter().any(|&a| is_start(a)) { -i64::MAX } else { i64::MAX }).collect();
    let mut mt: Vec<i64> =
        groups.iter().map(|g| if g.iter().any(|&a| is_end(a)) { i64::MAX } else { -i64::MAX }).collect();
    for a in 0..n {
        for b in 0..n {
            if graph.has_edge(a, b) {
                let (ca, cb) = (cluster[a], cluster[b]);
                mf[cb] = mf[cb].min(ca as i64);
                mt[ca] = mt[ca].max(cb as i64);
            }
        }
    }
    for p in 0..k {
        if !skippable(p, graph, &groups) {
            continue;
        }
        let mut q = p as i64 - 1;
        while q >= 0 && mt[q as usize] <= p as i64 {
            let moved = std::mem::take(&mut groups[q as usize]);
            groups[p].extend(moved);
            q -= 1;
        }
        let mut q = p + 1;
        while q < k && mf[q] >= p as i64 {
            let moved = std::mem::take(&mut groups[q]);
            groups[p].extend(moved);
            q += 1;
        }
    }
    groups.retain(|group| !group.is_empty());
    for group in &mut groups {
        group.sort_unstable();
    }
    Some(groups)
}

fn skippable(p: usize, graph: &Graph, groups: &[Vec<usize>]) -> bool {
    for earlier in &groups[..p] {
        for later in &groups[p + 1..] {
            if earlier.iter().any(|&a| later.iter().any(|&b| graph.has_edge(a, b))) {
                return true;
            }
        }
    }
    if groups[p + 1..].iter().flatten().any(|&a| graph.start[a] > 0) {
        return true;
    }
    groups[..p].iter().flatten().any(|&a| graph.end[a] > 0)
}

/// PM4Py's concurrency cut: activities not connected in both directions share a group;
/// groups lacking a start or an end activity are merged into a neighbour.
fn concurrency_cut(graph: &Graph) -> Option<Vec<Vec<usize>>> {
    let n = graph.n();
    if n == 0 {
        return None;
    }
    let mut merged = UnionFind::new(n);
    for a in 0..n {
        for b in a + 1..n {
            if !(graph.has_edge(a, b) && graph.has_edge(b, a)) {
                merged.union(a, b);
            }
        }
    }
    // Ordered by smallest member, as PM4Py's merge loop leaves them; then a stable sort
    // by size.
    let mut groups = merged.groups();
    groups.sort_by_key(Vec::len);
    let mut i = 0;
    while i < groups.len() && groups.len() > 1 {
        let has_start = groups[i].iter().any(|&a| graph.start[a] > 0);
        let has_end = groups[i].iter().any(|&a| graph.end[a] > 0);
        if has_start && has_end {
            i += 1;
            continue;
        }
        let group = groups.remove(i);
        let target = if i == 0 { 0 } else { i - 1 };
        groups[target].extend(group);
    }
    if groups.len() <= 1 {
        return None;
    }
    for group in &mut groups {
        group.sort_unstable();
    }
    Some(groups)
}

/// PM4Py 2.7.23.11's loop cut: do = start ∪ end plus whatever the checks merge into it;
/// redo = every other component, merged into one group.
fn loop_cut(graph: &Graph) -> Option<Vec<Vec<usize>>> {
    let n = graph.n();
    if graph.n_edges() == 0 {
        return None;
    }
    let is_start = |a: usize| graph.start[a] > 0;
    let is_end = |a: usize| graph.end[a] > 0;
    let boundary = |a: usize| is_start(a) || is_end(a);
    // Component per inner activity, after removing start and end activities.
    let mut inner = UnionFind::new(n);
    for a in 0..n {
        for b in 0..n {
            if graph.has_edge(a, b) && !boundary(a) && !boundary(b) {
                inner.union(a, b);
            }
        }
    }
    // group[a]: 0 for the do part, otherwise the component's id + 1.
    let group_of_inner: Vec<usize> = (0..n).map(|a| if boundary(a) { 0 } else { inner.find(a) + 1 }).collect();
    let mut group_of = group_of_inner;
    let merge_into_do = |group_of: &mut Vec<usize>, g: usize| {
        if g != 0 {
            for slot in group_of.iter_mut() {
                if *slot == g {
                    *slot = 0;
                }
            }
        }
    };
    // Components reached directly from a start activity that is not an end activity.
    for a in (0..n).filter(|&a| is_start(a) && !is_end(a)) {
        for b in 0..n {
            if graph.has_edge(a, b) {
                let g = group_of[b];
                merge_into_do(&mut group_of, g);
            }
        }
    }
    // Components reaching directly an end activity that is not a start activity.
    for b in (0..n).filter(|&b| is_end(b) && !is_start(b)) {
        for a in 0..n {
            if graph.has_edge(a, b) {
                let g = group_of[a];
                merge_into_do(&mut group_of, g);
            }
        }
    }
    // Start completeness: a member with an edge to some start activity must reach all.
    let n_groups = n + 1;
    let mut to_do = vec![false; n_groups];
    for a in (0..n).filter(|&a| group_of[a] != 0) {
        let to_some_start = (0..n).any(|s| is_start(s) && graph.has_edge(a, s));
        if to_some_start && (0..n).any(|s| is_start(s) && !graph.has_edge(a, s)) {
            to_do[group_of[a]] = true;
        }
    }
    for a in 0..n {
        if to_do[group_of[a]] {
            group_of[a] = 0;
        }
    }
    // End completeness: a member reached from some end activity must be reached from all.
    let mut to_do = vec![false; n_groups];
    for a in (0..n).filter(|&a| group_of[a] != 0) {
        let from_some_end = (0..n).any(|e| is_end(e) && graph.has_edge(e, a));
        if from_some_end && (0..n).any(|e| is_end(e) && !graph.has_edge(e, a)) {
            to_do[group_of[a]] = true;
        }
    }
    for a in 0..n {
        if to_do[group_of[a]] {
            group_of[a] = 0;
        }
    }
    let do_part: Vec<usize> = (0..n).filter(|&a| group_of[a] == 0).collect();
    let redo: Vec<usize> = (0..n).filter(|&a| group_of[a] != 0).collect();
    if do_part.is_empty() || redo.is_empty() {
        return None;
    }
    Some(vec![do_part, redo])
}

fn project_xor(log: &SubLog, group_of: &[u32], k: usize) -> Vec<SubLog> {
    let mut logs: Vec<SubLogBuilder> = (0..k).map(|_| SubLogBuilder::default()).collect();
    let mut counts = vec![0usize; k];
    let mut projected = Vec::new();
    for (trace, count) in &log.traces {
        counts.iter_mut().for_each(|c| *c = 0);
        for &a in trace {
            let g = group_of[a as usize];
            if g != NONE {
                counts[g as usize] += 1;
            }
        }
        // The group with most events; ties go to the higher index, as in PM4Py.
        let mut best = 0;
        for g in 0..k {
            if counts[g] >= counts[best] {
                best = g;
            }
        }
        projected.clear();
        projected.extend(trace.iter().copied().filter(|&a| group_of[a as usize] == best as u32));
        logs[best].add(&projected, *count);
    }
    logs.into_iter().map(SubLogBuilder::build).collect()
}

fn project_sequence(log: &SubLog, group_of: &[u32], k: usize) -> Vec<SubLog> {
    let mut logs: Vec<SubLogBuilder> = (0..k).map(|_| SubLogBuilder::default()).collect();
    let mut projected = Vec::new();
    for (trace, count) in &log.traces {
        let mut split_point = 0;
        for (g, sub) in logs.iter_mut().enumerate() {
            let g = g as u32;
            // Where this group's part ends: the position after which the balance of
            // in-group events over events of later groups is lowest. Events of earlier
            // groups are ignored.
            let mut least_cost = 0i64;
            let mut new_split = split_point;
            let mut cost = 0i64;
            for (i, &a) in trace.iter().enumerate().skip(split_point) {
                let owner = group_of[a as usize];
                if owner == g {
                    cost -= 1;
                } else if owner == NONE || owner > g {
                    cost += 1;
                }
                if cost < least_cost {
                    least_cost = cost;
                    new_split = i + 1;
                }
            }
            projected.clear();
            projected.extend(trace[split_point..new_split].iter().copied().filter(|&a| group_of[a as usize] == g));
            sub.add(&projected, *count);
            split_point = new_split;
        }
    }
    logs.into_iter().map(SubLogBuilder::build).collect()
}

fn project_parallel(log: &SubLog, group_of: &[u32], k: usize) -> Vec<SubLog> {
    let mut logs: Vec<SubLogBuilder> = (0..k).map(|_| SubLogBuilder::default()).collect();
    let mut projected = Vec::new();
    for (g, sub) in logs.iter_mut().enumerate() {
        for (trace, count) in &log.traces {
            projected.clear();
            projected.extend(trace.iter().copied().filter(|&a| group_of[a as usize] == g as u32));
            sub.add(&projected, *count);
        }
    }
    logs.into_iter().map(SubLogBuilder::build).collect()
}

fn project_loop(log: &SubLog, group_of: &[u32]) -> Vec<SubLog> {
    let mut do_log = SubLogBuilder::default();
    let mut redo_log = SubLogBuilder::default();
    let mut do_trace: Vec<ActivityId> = Vec::new();
    let mut redo_trace: Vec<ActivityId> = Vec::new();
    for (trace, count) in &log.traces {
        do_trace.clear();
        redo_trace.clear();
        for &a in trace {
            match group_of[a as usize] {
                0 => {
                    do_trace.push(a);
                    if !redo_trace.is_empty() {
                        redo_log.add(&redo_trace, *count);
                        redo_trace.clear();
                    }
                }
                1 => {
                    redo_trace.push(a);
                    if !do_trace.is_empty() {
                        do_log.add(&do_trace, *count);
                        do_trace.clear();
                    }
                }
                _ => {
                    if !do_trace.is_empty() {
                        do_log.add(&do_trace, *count);
                        do_trace.clear();
                    }
                    if !redo_trace.is_empty() {
                        redo_log.add(&redo_trace, *count);
                        redo_trace.clear();
                    }
                }
            }
        }
        if !redo_trace.is_empty() {
            redo_log.add(&redo_trace, *count);
        }
        // PM4Py keeps the final do slice even when it is empty.
        do_log.add(&do_trace, *count);
    }
    vec![do_log.build(), redo_log.build()]
}
