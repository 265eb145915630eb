//! A run-time guard: checks a trace one event at a time against a net.
//!
//! The guard keeps the set of markings the net can be in after the events so far,
//! closed under silent transitions. An event conforms when some marking of the set
//! enables a transition with its label; the set then becomes the markings reached by
//! firing those transitions (and silent ones after them). An event that does not conform
//! is a deviation: it is reported with the labels the net expected, and the set stays as
//! it was, so the guard goes on as if the event had been a log move. No step replays the
//! prefix: a step costs the size of the set times the net's transitions.
//!
//! A trace deviates from the net (its optimal alignment has a log or model move) exactly
//! when some step deviates or, at the end, no marking of the set is the final one.

use std::collections::VecDeque;

use rustc_hash::FxHashSet;

use crate::PetriNet;

/// The most markings the guard keeps; a larger set is cut (the guard then may flag a
/// conforming call, never miss a deviation it could see in the kept markings).
const MAX_MARKINGS: usize = 10_000;

/// Incremental conformance of one running trace against a net.
#[derive(Debug, Clone)]
pub struct Guard {
    net: PetriNet,
    // Invariant: closed under silent transitions, never empty.
    markings: Vec<Box<[u8]>>,
    goal: Box<[u8]>,
}

/// What one event did to the guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardStep {
    /// Whether the net could follow the event.
    pub conforms: bool,
    /// The labels the net allowed before the event, sorted.
    pub expected: Vec<String>,
}

impl Guard {
    /// A guard at the start of a trace.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_mining::{Guard, ProcessTree, tree_to_petri_net};
    ///
    /// let net = tree_to_petri_net(&ProcessTree::parse("->( 'find_user', X( 'cancel', 'refund' ) )")?);
    /// let mut guard = Guard::new(net);
    /// assert!(guard.step("find_user").conforms);
    /// let step = guard.step("delete_account");
    /// assert!(!step.conforms);
    /// assert_eq!(step.expected, ["cancel", "refund"]);
    /// assert!(guard.step("refund").conforms && guard.can_finish());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn new(net: PetriNet) -> Guard {
        let start: Box<[u8]> = net.dense(&net.initial_marking).iter().map(|&n| n.min(255) as u8).collect();
        let goal: Box<[u8]> = net.dense(&net.final_marking).iter().map(|&n| n.min(255) as u8).collect();
        let mut guard = Guard { net, markings: Vec::new(), goal };
        guard.markings = guard.closure(vec![start]);
        guard
    }

    /// The net the guard checks against.
    #[must_use]
    pub fn net(&self) -> &PetriNet {
        &self.net
    }

    /// The labels of the visible transitions enabled in some current marking, sorted.
    #[must_use]
    pub fn expected(&self) -> Vec<String> {
        let mut labels: Vec<String> = self
            .net
            .transitions
            .iter()
            .filter(|t| self.markings.iter().any(|m| enabled(t, m)))
            .filter_map(|t| t.label.clone())
            .collect();
        labels.sort();
        labels.dedup();
        labels
    }

    /// Checks one event (its activity) and moves on.
    pub fn step(&mut self, activity: &str) -> GuardStep {
        let expected = self.expected();
        let mut next = Vec::new();
        for marking in &self.markings {
            for t in &self.net.transitions {
                if t.label.as_deref() == Some(activity)
                    && enabled(t, marking)
                    && let Some(fired) = fire(t, marking)
                {
                    next.push(fired);
                }
            }
        }
        if next.is_empty() {
            return GuardStep { conforms: false, expected };
        }
        self.markings = self.closure(next);
        GuardStep { conforms: true, expected }
    }

    /// Whether the trace may end here: some current marking is the final one.
    #[must_use]
    pub fn can_finish(&self) -> bool {
        self.markings.contains(&self.goal)
    }

    fn closure(&self, seeds: Vec<Box<[u8]>>) -> Vec<Box<[u8]>> {
        let mut seen: FxHashSet<Box<[u8]>> = FxHashSet::default();
        let mut queue: VecDeque<Box<[u8]>> = VecDeque::new();
        for seed in seeds {
            if seen.insert(seed.clone()) {
                queue.push_back(seed);
            }
        }
        let mut out = Vec::new();
        while let Some(marking) = queue.pop_front() {
            for t in self.net.transitions.iter().filter(|t| t.label.is_none()) {
                if seen.len() >= MAX_MARKINGS || !enabled(t, &marking) {
                    continue;
                }
                if let Some(next) = fire(t, &marking)
                    && seen.insert(next.clone())
                {
                    queue.push_back(next);
                }
            }
            out.push(marking);
        }
        out
    }
}

fn enabled(t: &crate::Transition, marking: &[u8]) -> bool {
    t.inputs.iter().all(|arc| u32::from(marking[arc.place]) >= arc.weight)
}

fn fire(t: &crate::Transition, marking: &[u8]) -> Option<Box<[u8]>> {
    let mut next = marking.to_vec();
    for arc in &t.inputs {
        next[arc.place] = u8::try_from(u32::from(next[arc.place]) - arc.weight).ok()?;
    }
    for arc in &t.outputs {
        next[arc.place] = u8::try_from(u32::from(next[arc.place]) + arc.weight).ok()?;
    }
    Some(next.into_boxed_slice())
}
