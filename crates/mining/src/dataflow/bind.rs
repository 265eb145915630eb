//! From a mined [`Dataflow`] to the skeleton's data: which tool depends on which, the
//! order that data imposes on parallel blocks, and the bindings of tool nodes.

use std::collections::{BTreeMap, HashMap, HashSet};

use flowmem_model::{ArgBinding, BindingSource, NodeKind, Pairing, Precondition, ValueSource, WorkflowGraph};
use serde_json::Value;

use crate::dataflow::{ArgumentFlow, Dataflow, Source, SourceSupport};
use crate::tree::{Operator, ProcessTree};

/// How a skeleton's bindings are chosen from a [`Dataflow`].
#[derive(Debug, Clone, PartialEq)]
pub struct BindingConfig {
    /// The most sources kept per argument, most supported first.
    pub max_sources: usize,
    /// The least share of an argument's observed values a source must explain to be kept,
    /// and to order a parallel block, in `[0, 1]`.
    pub min_share: f64,
}

impl BindingConfig {
    /// The skeleton's defaults: three sources per argument, each explaining at least a
    /// tenth of the argument's values.
    #[must_use]
    pub fn skeleton() -> BindingConfig {
        BindingConfig { max_sources: 3, min_share: 0.1 }
    }
}

/// The sources of `flow` that pass `cfg`'s share, most supported first.
fn kept<'f>(flow: &'f ArgumentFlow, cfg: &BindingConfig) -> impl Iterator<Item = &'f SourceSupport> + 'f {
    let least = cfg.min_share * flow.observed as f64;
    flow.sources.iter().filter(move |support| support.support > 0 && support.support as f64 >= least)
}

/// Tool → the tools whose results or arguments feed it, with the support summed.
fn dependencies<'d>(dataflow: &'d Dataflow, cfg: &BindingConfig) -> HashMap<&'d str, HashMap<&'d str, u64>> {
    let mut res: HashMap<&str, HashMap<&str, u64>> = HashMap::new();
    for flow in &dataflow.arguments {
        for kept in kept(flow, cfg) {
            if let Some(tool) = kept.source.tool()
                && tool != flow.tool
            {
                *res.entry(flow.tool.as_str()).or_default().entry(tool).or_default() += kept.support;
            }
        }
    }
    res
}

/// `tree` with every parallel block whose members feed each other ordered as the data
/// requires: member `j` runs after member `i` when a tool of `j` takes values from a tool
/// of `i`. Members then run in layers (each layer after the one it depends on, members
/// of a layer concurrently). When the data points both ways, the better supported
/// dependency wins.
pub(crate) fn order_parallels(tree: &ProcessTree, dataflow: &Dataflow, cfg: &BindingConfig) -> ProcessTree {
    let deps = dependencies(dataflow, cfg);
    order(tree, &deps)
}

fn order(tree: &ProcessTree, deps: &HashMap<&str, HashMap<&str, u64>>) -> ProcessTree {
    let ProcessTree::Operator { operator, children } = tree else {
        return tree.clone();
    };
    let children: Vec<ProcessTree> = children.iter().map(|child| order(child, deps)).collect();
    if *operator != Operator::Parallel {
        return ProcessTree::operator(*operator, children);
    }
    let labels: Vec<HashSet<&str>> = children.iter().map(|child| child.labels().into_iter().collect()).collect();
    // Candidate edges i -> j (j needs i), heaviest first.
    let mut candidates = Vec::new();
    for (j, needs) in labels.iter().enumerate() {
        for (i, offers) in labels.iter().enumerate().filter(|&(i, _)| i != j) {
            let weight: u64 = needs
                .iter()
                .filter_map(|tool| deps.get(tool))
                .flat_map(|from| from.iter().filter(|(source, _)| offers.contains(*source)).map(|(_, w)| *w))
                .sum();
            if weight > 0 {
                candidates.push((weight, i, j));
            }
        }
    }
    if candidates.is_empty() {
        return ProcessTree::operator(Operator::Parallel, children);
    }
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let n_children = children.len();
    let mut after: Vec<Vec<usize>> = vec![Vec::new(); n_children];
    for (_, i, j) in candidates {
        if !reaches(&after, j, i) {
            after[i].push(j);
        }
    }
    // Layer = longest chain of dependencies before the member.
    let mut layer = vec![0usize; n_children];
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..n_children {
            for &j in &after[i] {
                if layer[j] <= layer[i] {
                    layer[j] = layer[i] + 1;
                    changed = true;
                }
            }
        }
    }
    let n_layers = layer.iter().max().map_or(0, |max| max + 1);
    let mut stages = Vec::with_capacity(n_layers);
    let mut members: Vec<Option<ProcessTree>> = children.into_iter().map(Some).collect();
    for stage in 0..n_layers {
        let mut in_stage: Vec<ProcessTree> =
            (0..n_children).filter(|&idx| layer[idx] == stage).filter_map(|idx| members[idx].take()).collect();
        match in_stage.len() {
            0 => {}
            1 => stages.extend(in_stage.pop()),
            _ => stages.push(ProcessTree::operator(Operator::Parallel, in_stage)),
        }
    }
    ProcessTree::operator(Operator::Sequence, stages)
}

/// Whether `to` can be reached from `from` over `after` edges.
fn reaches(after: &[Vec<usize>], from: usize, to: usize) -> bool {
    let mut stack = vec![from];
    let mut seen = vec![false; after.len()];
    while let Some(idx) = stack.pop() {
        if idx == to {
            return true;
        }
        if !std::mem::replace(&mut seen[idx], true) {
            stack.extend(after[idx].iter().copied());
        }
    }
    false
}

/// Fills the bindings of every tool node of `graph` from `dataflow`: for each argument of
/// the node's (single) hinted tool, its kept sources, a result or argument source bound
/// to the nearest upstream node hinted with the source's tool. A source with no such
/// node upstream is dropped, so the bindings always satisfy `Valid(G, T)`.
pub(crate) fn fill_bindings(graph: &mut WorkflowGraph, dataflow: &Dataflow, cfg: &BindingConfig) {
    let upstream = graph.upstream();
    let hints: Vec<Option<String>> = graph
        .nodes
        .iter()
        .map(|node| match &node.kind {
            NodeKind::Tool { hints, .. } if hints.len() == 1 => Some(hints[0].clone()),
            _ => None,
        })
        .collect();
    let ids: Vec<String> = graph.nodes.iter().map(|node| node.id.clone()).collect();
    for (node_idx, node) in graph.nodes.iter_mut().enumerate() {
        let (Some(tool), NodeKind::Tool { bindings, .. }) = (&hints[node_idx], &mut node.kind) else {
            continue;
        };
        // The nearest upstream node per tool: the latest in node order, which follows the tree.
        let nearest = |source_tool: &str| {
            (0..ids.len())
                .filter(|&idx| upstream[node_idx][idx] && hints[idx].as_deref() == Some(source_tool))
                .max()
                .map(|idx| ids[idx].clone())
        };
        let mut res = BTreeMap::new();
        for flow in dataflow.arguments.iter().filter(|flow| &flow.tool == tool) {
            let sources: Vec<BindingSource> = kept(flow, cfg)
                .filter_map(|kept| {
                    let source = match &kept.source {
                        Source::Query => ValueSource::Query {
                            shape: flow.query_shape,
                            anchors: flow.query_anchors.clone(),
                            lengths: flow.query_lengths,
                        },
                        Source::Constant { value } => {
                            ValueSource::Constant { value: serde_json::from_str(value).unwrap_or(Value::Null) }
                        }
                        Source::Result { tool, path } => {
                            ValueSource::Result { node: nearest(tool)?, path: path.clone() }
                        }
                        Source::Argument { tool, arg } => {
                            ValueSource::Argument { node: nearest(tool)?, arg: arg.clone() }
                        }
                    };
                    Some(BindingSource { source, support: kept.support, each: kept.each })
                })
                .take(cfg.max_sources)
                .collect();
            let requires = flow
                .requires
                .iter()
                .filter_map(|mined| {
                    Some(Precondition {
                        node: nearest(&mined.tool)?,
                        key: mined.key.clone(),
                        field: mined.field.clone(),
                        value: mined.value.clone(),
                        support: mined.support,
                    })
                })
                .collect();
            if !sources.is_empty() {
                let same_length_as = flow.same_length_as.clone();
                let paired_with = flow.paired_with.as_ref().and_then(|mined| {
                    Some(Pairing {
                        arg: mined.arg.clone(),
                        node: nearest(&mined.tool)?,
                        path: mined.path.clone(),
                        support: mined.support,
                    })
                });
                let binding = ArgBinding { observed: flow.observed, sources, requires, same_length_as, paired_with };
                res.insert(flow.arg.clone(), binding);
            }
        }
        *bindings = res;
    }
}
