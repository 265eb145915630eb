//! The Inductive Miner framework with its IM and IMf variants, following PM4Py 2.7.23.11
//! (`pm4py/algo/discovery/inductive/variants/{abc,im,imf}.py`).
//!
//! Each step works on a multiset of variants ([`SubLog`]) and its trace-weighted
//! directly-follows graph:
//! 1. empty traces: `X( tau, … )` (IMf: only when they exceed `noise · #traces`,
//!    otherwise they are dropped);
//! 2. base cases: the empty log is `tau`; a log of one variant of length ≤ 1 is a leaf;
//! 3. cuts on the graph, in the order xor, strict sequence, concurrency, loop;
//! 4. IMf only: the same cuts on the noise-filtered graph, once;
//! 5. fall-throughs (see [`fall_through`]).

mod cuts;
mod fall_through;
mod graph;

use crate::tree::{Operator, ProcessTree};
use crate::variants::cuts::{find_cut, project};
use crate::variants::graph::{Graph, SubLog, SubLogBuilder};
use crate::{ActivityId, EventLog};

/// Which inductive miner to run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Variant {
    /// The Inductive Miner: perfect fitness on the log.
    Im,
    /// The Inductive Miner – infrequent: filters directly-follows edges below `noise`
    /// times their source's strongest outgoing edge when no cut holds (PM4Py's
    /// `noise_threshold`).
    ImF {
        /// The noise threshold in `[0, 1]`; PM4Py's usual value is 0.2.
        noise: f64,
    },
}

/// Discovers a process tree from `log`, folded and sorted as PM4Py prints it.
///
/// Equal logs give equal trees. Compare trees from different sources through
/// [`ProcessTree::canonical`].
///
/// # Example
///
/// ```
/// use flowmem_mining::{discover, EventLogBuilder, Variant};
///
/// let mut builder = EventLogBuilder::new();
/// builder.push_trace(["a", "b", "d"]);
/// builder.push_trace(["a", "c", "d"]);
/// let tree = discover(&builder.build(), Variant::Im);
/// assert_eq!(tree.canonical().to_string(), "->( 'a', X( 'b', 'c' ), 'd' )");
/// ```
#[must_use]
pub fn discover(log: &EventLog, variant: Variant) -> ProcessTree {
    let mut builder = SubLogBuilder::default();
    for v in log.variants() {
        builder.add(&v.activities, v.count);
    }
    let miner = Miner { n_global: log.activities().len(), noise: noise_of(variant) };
    let tree = miner.mine(builder.build());
    let mut tree = miner.to_tree(tree, log).fold();
    tree.pm4py_sort();
    tree
}

fn noise_of(variant: Variant) -> Option<f64> {
    match variant {
        Variant::Im => None,
        Variant::ImF { noise } => Some(noise),
    }
}

/// A tree over interned activities, as the recursion builds it.
enum Node {
    Tau,
    Leaf(ActivityId),
    Op(Operator, Vec<Node>),
}

struct Miner {
    n_global: usize,
    // `None` for IM.
    noise: Option<f64>,
}

impl Miner {
    fn mine(&self, mut log: SubLog) -> Node {
        let n_empty: u64 = log.traces.iter().filter(|(t, _)| t.is_empty()).map(|(_, n)| n).sum();
        if n_empty > 0 {
            let total = log.total();
            let rest = SubLog { traces: log.traces.iter().filter(|(t, _)| !t.is_empty()).cloned().collect() };
            match self.noise {
                None if rest.traces.is_empty() => return Node::Tau,
                None => return Node::Op(Operator::Xor, vec![Node::Tau, self.mine(rest)]),
                Some(_) if rest.traces.is_empty() => {}
                Some(noise) => {
                    if n_empty as f64 > noise * total as f64 {
                        return Node::Op(Operator::Xor, vec![Node::Tau, self.mine(rest)]);
                    }
                    log = rest;
                }
            }
        }
        if let Some(leaf) = base_case(&log) {
            return leaf;
        }
        let graph = Graph::from_log(&log, self.n_global);
        if let Some(node) = self.try_cut(&log, &graph) {
            return node;
        }
        if let Some(noise) = self.noise {
            let filtered = graph.filter_noise(noise);
            if let Some(node) = self.try_cut(&log, &filtered) {
                return node;
            }
        }
        let fall = fall_through::fall_through(&log, self.n_global);
        Node::Op(fall.operator, fall.logs.into_iter().map(|sub| self.mine(sub)).collect())
    }

    fn try_cut(&self, log: &SubLog, graph: &Graph) -> Option<Node> {
        let cut = find_cut(graph)?;
        // A single group would project the log onto itself and recurse forever (PM4Py
        // would too); treat it as no cut.
        if cut.groups.len() <= 1 {
            return None;
        }
        let children = project(log, &cut, self.n_global).into_iter().map(|sub| self.mine(sub)).collect();
        Some(Node::Op(cut.operator, children))
    }

    fn to_tree(&self, node: Node, log: &EventLog) -> ProcessTree {
        match node {
            Node::Tau => ProcessTree::Tau,
            Node::Leaf(a) => ProcessTree::activity(log.activity(a)),
            Node::Op(operator, children) => ProcessTree::Operator {
                operator,
                children: children.into_iter().map(|child| self.to_tree(child, log)).collect(),
            },
        }
    }
}

fn base_case(log: &SubLog) -> Option<Node> {
    match log.traces.as_slice() {
        [] => Some(Node::Tau),
        [(trace, _)] if trace.is_empty() => Some(Node::Tau),
        [(trace, _)] if trace.len() == 1 => Some(Node::Leaf(trace[0])),
        _ => None,
    }
}
