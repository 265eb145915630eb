//! The net as the conformance algorithms read it: arcs per transition, silent flags,
//! place names ranked for PM4Py's sorting, the transitions of each log activity, and
//! markings that keep PM4Py's insertion order.

use rustc_hash::FxHashMap;

use crate::{EventLog, PetriNet};

/// A net prepared for replay against one log's activities.
pub(crate) struct Compiled<'n> {
    pub(crate) net: &'n PetriNet,
    /// `place_rank[p]`: the rank of place `p`'s name among all place names.
    pub(crate) place_rank: Vec<u32>,
    /// `name_rank[t]`: the rank of transition `t`'s name among all transition names.
    pub(crate) name_rank: Vec<u32>,
    /// `inputs[t]`: (place, weight) per input arc.
    pub(crate) inputs: Vec<Vec<(u32, u32)>>,
    pub(crate) outputs: Vec<Vec<(u32, u32)>>,
    pub(crate) silent: Vec<bool>,
    /// `consumers[p]`: transitions with an input arc from `p`, by transition id.
    pub(crate) consumers: Vec<Vec<u32>>,
    /// `by_activity[a]`: the transitions labelled with log activity `a`, by name.
    pub(crate) by_activity: Vec<Vec<u32>>,
    pub(crate) initial: Vec<(u32, u32)>,
    pub(crate) final_marking: Vec<(u32, u32)>,
}

impl<'n> Compiled<'n> {
    pub(crate) fn new(net: &'n PetriNet, log: &EventLog) -> Compiled<'n> {
        let n_places = net.places.len();
        let place_rank = ranks(net.places.iter().map(String::as_str));
        let name_rank = ranks(net.transitions.iter().map(|t| t.name.as_str()));
        let arcs = |list: &[crate::Arc]| list.iter().map(|a| (a.place as u32, a.weight)).collect::<Vec<_>>();
        let inputs: Vec<Vec<(u32, u32)>> = net.transitions.iter().map(|t| arcs(&t.inputs)).collect();
        let outputs = net.transitions.iter().map(|t| arcs(&t.outputs)).collect();
        let silent = net.transitions.iter().map(|t| t.label.is_none()).collect();
        let mut consumers = vec![Vec::new(); n_places];
        for (t, ins) in inputs.iter().enumerate() {
            for &(p, _) in ins {
                if !consumers[p as usize].contains(&(t as u32)) {
                    consumers[p as usize].push(t as u32);
                }
            }
        }
        let mut labels: FxHashMap<&str, Vec<u32>> = FxHashMap::default();
        for (t, transition) in net.transitions.iter().enumerate() {
            if let Some(label) = &transition.label {
                labels.entry(label.as_str()).or_default().push(t as u32);
            }
        }
        let by_activity = log
            .activities()
            .iter()
            .map(|name| {
                let mut ts = labels.get(name.as_str()).cloned().unwrap_or_default();
                ts.sort_by_key(|&t| name_rank[t as usize]);
                ts
            })
            .collect();
        let marking = |m: &[(usize, u32)]| m.iter().map(|&(p, n)| (p as u32, n)).collect();
        Compiled {
            net,
            place_rank,
            name_rank,
            inputs,
            outputs,
            silent,
            consumers,
            by_activity,
            initial: marking(&net.initial_marking),
            final_marking: marking(&net.final_marking),
        }
    }

    pub(crate) fn n_places(&self) -> usize {
        self.place_rank.len()
    }

    pub(crate) fn n_transitions(&self) -> usize {
        self.silent.len()
    }

    pub(crate) fn consumed(&self, t: u32) -> u64 {
        self.inputs[t as usize].iter().map(|&(_, w)| u64::from(w)).sum()
    }

    pub(crate) fn produced(&self, t: u32) -> u64 {
        self.outputs[t as usize].iter().map(|&(_, w)| u64::from(w)).sum()
    }

    pub(crate) fn label(&self, t: u32) -> Option<&'n str> {
        self.net.transitions[t as usize].label.as_deref()
    }
}

fn ranks<'a>(names: impl Iterator<Item = &'a str>) -> Vec<u32> {
    let names: Vec<&str> = names.collect();
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| names[a].cmp(names[b]).then(a.cmp(&b)));
    let mut rank = vec![0; names.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r as u32;
    }
    rank
}

/// A marking as PM4Py's `Marking` (a `Counter`) holds it: places with a positive count,
/// in the order they first received tokens, since several of PM4Py's choices follow that
/// order.
#[derive(Debug, Clone, Default)]
pub(crate) struct OrderedMarking(pub(crate) Vec<(u32, u32)>);

impl OrderedMarking {
    pub(crate) fn get(&self, place: u32) -> u32 {
        self.0.iter().find(|&&(p, _)| p == place).map_or(0, |&(_, n)| n)
    }

    pub(crate) fn add(&mut self, place: u32, n: u32) {
        match self.0.iter_mut().find(|(p, _)| *p == place) {
            Some(entry) => entry.1 += n,
            None => self.0.push((place, n)),
        }
    }

    fn sub(&mut self, place: u32, n: u32) {
        if let Some(idx) = self.0.iter().position(|&(p, _)| p == place) {
            let left = self.0[idx].1.saturating_sub(n);
            if left == 0 {
                self.0.remove(idx);
            } else {
                self.0[idx].1 = left;
            }
        }
    }

    /// Equal as multisets, whatever the order (PM4Py's `Marking.__eq__`).
    pub(crate) fn same(&self, other: &OrderedMarking) -> bool {
        self.0.len() == other.0.len() && self.0.iter().all(|&(p, n)| other.get(p) == n)
    }

    /// The order Python's `Counter.__repr__` lists entries in: by count, descending,
    /// stable on insertion order.
    pub(crate) fn repr_key(&self) -> Vec<(u32, u32)> {
        let mut entries = self.0.clone();
        entries.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        entries
    }
}

impl Compiled<'_> {
    pub(crate) fn enabled(&self, t: u32, marking: &OrderedMarking) -> bool {
        self.inputs[t as usize].iter().all(|&(p, w)| marking.get(p) >= w)
    }

    /// Fires `t` (which must be enabled), as PM4Py's `semantics.execute`.
    pub(crate) fn fire(&self, t: u32, marking: &mut OrderedMarking) {
        for &(p, w) in &self.inputs[t as usize] {
            marking.sub(p, w);
        }
        for &(p, w) in &self.outputs[t as usize] {
            marking.add(p, w);
        }
    }

    pub(crate) fn initial_marking(&self) -> OrderedMarking {
        let mut marking = OrderedMarking::default();
        for &(p, n) in &self.initial {
            marking.add(p, n);
        }
        marking
    }

    /// The transitions enabled in `marking`, sorted by name.
    pub(crate) fn enabled_by_name(&self, marking: &OrderedMarking) -> Vec<u32> {
        let mut out: Vec<u32> = (0..self.n_transitions() as u32).filter(|&t| self.enabled(t, marking)).collect();
        out.sort_by_key(|&t| self.name_rank[t as usize]);
        out
    }

    /// The labels of the visible transitions reachable from `marking` through silent
    /// transitions, as PM4Py's `get_visible_transitions_eventually_enabled_by_marking`
    /// explores them (a worklist where a transition keeps the marking it was last
    /// reached with).
    pub(crate) fn visible_eventually_enabled(&self, marking: &OrderedMarking) -> Vec<u32> {
        let mut list = self.enabled_by_name(marking);
        let mut reached_with: Vec<Option<OrderedMarking>> = vec![None; self.n_transitions()];
        for &t in &list {
            reached_with[t as usize] = Some(marking.clone());
        }
        let mut visible = Vec::new();
        let mut visited: rustc_hash::FxHashSet<(u32, Vec<(u32, u32)>)> = rustc_hash::FxHashSet::default();
        let mut i = 0;
        while i < list.len() {
            let t = list[i];
            let current = reached_with[t as usize].clone().unwrap_or_default();
            let key = (t, current.repr_key());
            if !visited.contains(&key) {
                if !self.silent[t as usize] {
                    if !visible.contains(&t) {
                        visible.push(t);
                    }
                } else if self.enabled(t, &current) {
                    let mut next = current.clone();
                    self.fire(t, &mut next);
                    for t2 in self.enabled_by_name(&next) {
                        list.push(t2);
                        reached_with[t2 as usize] = Some(next.clone());
                    }
                }
            }
            visited.insert(key);
            i += 1;
        }
        visible
    }
}
