//! Optimal alignments by A* over the synchronous product of a trace and the net.
//!
//! A state is a marking of the net and a position in the trace. Moves: synchronous (the
//! event's activity fires a transition with its label, cost 0), log move (the event is
//! skipped, [`MOVE_COST`]), model move (a visible transition fires without an event,
//! [`MOVE_COST`]) and silent move (a silent transition fires, cost 1). These are PM4Py's
//! standard costs, so the optimal cost equals PM4Py's: deviations × 10000 plus the fewest
//! silent steps any alignment with that few deviations needs.
//!
//! The heuristic counts the remaining events whose activity no transition carries (each
//! must become a log move) and is therefore admissible and consistent.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use crate::conformance::net::Compiled;

/// The cost of a log move or a visible model move.
pub const MOVE_COST: u64 = 10_000;
/// The cost of a silent move.
pub const SILENT_COST: u64 = 1;

/// The default bound on the states one alignment may visit.
pub const DEFAULT_MAX_STATES: usize = 2_000_000;

/// One step of an alignment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Move {
    /// The event and a transition with its label, together.
    Sync {
        /// The activity.
        activity: String,
    },
    /// The event, which the model could not follow.
    Log {
        /// The activity.
        activity: String,
    },
    /// A visible transition the trace lacks.
    Model {
        /// The transition's label.
        activity: String,
    },
    /// A silent transition.
    Silent {
        /// The transition's name.
        transition: String,
    },
}

impl Move {
    /// Whether the move is a deviation (a log or a visible model move).
    #[must_use]
    pub fn is_deviation(&self) -> bool {
        matches!(self, Move::Log { .. } | Move::Model { .. })
    }
}

/// Why no alignment came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AlignFailure {
    /// The final marking cannot be reached.
    Unreachable,
    /// More states than allowed were visited.
    TooManyStates,
    /// A place would hold more than 255 tokens (the net is not bounded enough).
    Unbounded,
}

/// An optimal alignment: its raw cost and its moves.
pub(crate) struct Aligned {
    pub(crate) cost: u64,
    pub(crate) moves: Vec<Move>,
}

#[derive(Clone, Copy)]
enum Step {
    Start,
    Sync,
    Log,
    Model(u32),
}

struct Node {
    g: u64,
    parent: u32,
    step: Step,
    pos: u32,
    closed: bool,
}

/// The open and closed states of one search.
struct Search {
    // Remaining events no transition carries, from each position on.
    unmatched: Vec<u64>,
    index: FxHashMap<(Box<[u8]>, u32), u32>,
    nodes: Vec<Node>,
    markings: Vec<Box<[u8]>>,
    heap: BinaryHeap<Reverse<(u64, Reverse<u32>, u32)>>,
}

impl Search {
    fn push(&mut self, marking: &[u8], pos: u32, g: u64, parent: u32, step: Step) {
        let h = self.unmatched[pos as usize] * MOVE_COST;
        let key: (Box<[u8]>, u32) = (marking.into(), pos);
        match self.index.get(&key) {
            Some(&id) => {
                let node = &mut self.nodes[id as usize];
                if !node.closed && g < node.g {
                    node.g = g;
                    node.parent = parent;
                    node.step = step;
                    self.heap.push(Reverse((g + h, Reverse(pos), id)));
                }
            }
            None => {
                let id = self.nodes.len() as u32;
                self.nodes.push(Node { g, parent, step, pos, closed: false });
                self.markings.push(key.0.clone());
                self.index.insert(key, id);
                self.heap.push(Reverse((g + h, Reverse(pos), id)));
            }
        }
    }
}

/// Aligns `trace` (log activity ids) with the net.
pub(crate) fn align(
    net: &Compiled<'_>,
    trace: &[u32],
    names: &[String],
    max_states: usize,
) -> Result<Aligned, AlignFailure> {
    let n_places = net.n_places();
    let mut unmatched = vec![0u64; trace.len() + 1];
    for pos in (0..trace.len()).rev() {
        unmatched[pos] = unmatched[pos + 1] + u64::from(net.by_activity[trace[pos] as usize].is_empty());
    }
    let goal: Vec<u8> = dense(net.final_marking.iter().copied(), n_places)?;
    let start: Vec<u8> = dense(net.initial.iter().copied(), n_places)?;
    let mut search = Search {
        unmatched,
        index: FxHashMap::default(),
        nodes: Vec::new(),
        markings: Vec::new(),
        heap: BinaryHeap::new(),
    };
    search.push(&start, 0, 0, u32::MAX, Step::Start);
    let mut next = vec![0u8; n_places];
    while let Some(Reverse((_, _, id))) = search.heap.pop() {
        let node = &search.nodes[id as usize];
        if node.closed {
            continue;
        }
        let (g, pos) = (node.g, node.pos);
        search.nodes[id as usize].closed = true;
        let marking = search.markings[id as usize].clone();
        if pos as usize == trace.len() && *marking == *goal {
            return Ok(Aligned { cost: g, moves: moves(net, trace, names, &search.nodes, id) });
        }
        if search.nodes.len() > max_states {
            return Err(AlignFailure::TooManyStates);
        }
        if (pos as usize) < trace.len() {
            search.push(&marking, pos + 1, g + MOVE_COST, id, Step::Log);
        }
        for t in 0..net.n_transitions() as u32 {
            if !net.inputs[t as usize].iter().all(|&(p, w)| u32::from(marking[p as usize]) >= w) {
                continue;
            }
            next.copy_from_slice(&marking);
            for &(p, w) in &net.inputs[t as usize] {
                // Enabled, so the place holds at least `w` (<= 255) tokens.
                next[p as usize] -= w as u8;
            }
            for &(p, w) in &net.outputs[t as usize] {
                let sum = u32::from(next[p as usize]) + w;
                next[p as usize] = u8::try_from(sum).map_err(|_| AlignFailure::Unbounded)?;
            }
            if net.silent[t as usize] {
                search.push(&next, pos, g + SILENT_COST, id, Step::Model(t));
                continue;
            }
            if (pos as usize) < trace.len() && net.by_activity[trace[pos as usize] as usize].contains(&t) {
                search.push(&next, pos + 1, g, id, Step::Sync);
            }
            search.push(&next, pos, g + MOVE_COST, id, Step::Model(t));
        }
    }
    Err(AlignFailure::Unreachable)
}

fn dense(marking: impl Iterator<Item = (u32, u32)>, n_places: usize) -> Result<Vec<u8>, AlignFailure> {
    let mut out = vec![0u8; n_places];
    for (p, n) in marking {
        out[p as usize] = u8::try_from(u32::from(out[p as usize]) + n).map_err(|_| AlignFailure::Unbounded)?;
    }
    Ok(out)
}

fn moves(net: &Compiled<'_>, trace: &[u32], names: &[String], nodes: &[Node], mut id: u32) -> Vec<Move> {
    let mut out = Vec::new();
    while id != u32::MAX {
        let node = &nodes[id as usize];
        match node.step {
            Step::Start => {}
            Step::Sync => out.push(Move::Sync { activity: names[trace[node.pos as usize - 1] as usize].clone() }),
            Step::Log => out.push(Move::Log { activity: names[trace[node.pos as usize - 1] as usize].clone() }),
            Step::Model(t) => out.push(match net.label(t) {
                Some(label) => Move::Model { activity: label.to_owned() },
                None => Move::Silent { transition: net.net.transitions[t as usize].name.clone() },
            }),
        }
        id = node.parent;
    }
    out.reverse();
    out
}
