//! Skeleton graphs mined from τ²-bench retail's reference orchestrations are sane.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::path::Path;

use flowmem_mining::{EventLogBuilder, ProcessTree, Variant, discover, tree_to_skeleton};
use flowmem_model::{EdgeKind, NodeKind, WorkflowGraph};

/// The tool names of each τ²-bench retail task's reference actions, in order.
fn retail_traces() -> Vec<Vec<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/tau2-bench/retail/tasks.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let tasks: serde_json::Value = serde_json::from_str(&text).expect("tasks.json is JSON");
    tasks
        .as_array()
        .expect("a list of tasks")
        .iter()
        .map(|task| {
            task["evaluation_criteria"]["actions"]
                .as_array()
                .map(|actions| actions.iter().filter_map(|a| a["name"].as_str().map(str::to_owned)).collect())
                .unwrap_or_default()
        })
        .collect()
}

/// Panics with the reason when `graph` is not structurally sane.
fn check_sane(graph: &WorkflowGraph, tools: &BTreeSet<String>) {
    let ids: HashSet<&str> = graph.nodes.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids.len(), graph.nodes.len(), "duplicate node ids");
    for edge in &graph.edges {
        assert!(ids.contains(edge.from.as_str()) && ids.contains(edge.to.as_str()), "dangling edge {edge:?}");
        if edge.kind == EdgeKind::Back {
            let target = graph.node(&edge.to).expect("checked above");
            assert!(matches!(target.kind, NodeKind::Loop { .. }), "back edge into non-loop {edge:?}");
        }
    }
    // Everything is reachable from the entry, including the exit.
    let mut seen = HashSet::from([graph.entry.as_str()]);
    let mut queue = VecDeque::from([graph.entry.as_str()]);
    while let Some(id) = queue.pop_front() {
        for edge in graph.outgoing(id) {
            if seen.insert(edge.to.as_str()) {
                queue.push_back(edge.to.as_str());
            }
        }
    }
    assert_eq!(seen.len(), ids.len(), "unreachable nodes: {:?}", ids.difference(&seen).collect::<Vec<_>>());
    assert!(seen.contains(graph.exit.as_str()));
    // Without back edges the graph is acyclic (Kahn's algorithm removes every node).
    let mut indegree: HashMap<&str, usize> = ids.iter().map(|id| (*id, 0)).collect();
    for edge in graph.edges.iter().filter(|e| e.kind != EdgeKind::Back) {
        *indegree.get_mut(edge.to.as_str()).expect("checked above") += 1;
    }
    let mut ready: Vec<&str> = indegree.iter().filter(|(_, d)| **d == 0).map(|(id, _)| *id).collect();
    let mut removed = 0;
    while let Some(id) = ready.pop() {
        removed += 1;
        for edge in graph.outgoing(id).filter(|e| e.kind != EdgeKind::Back) {
            let degree = indegree.get_mut(edge.to.as_str()).expect("checked above");
            *degree -= 1;
            if *degree == 0 {
                ready.push(edge.to.as_str());
            }
        }
    }
    assert_eq!(removed, ids.len(), "a cycle does not go through a back edge");
    // Branches and loops label their outgoing edges; tool hints are real tools.
    for node in &graph.nodes {
        match &node.kind {
            NodeKind::Tool { hints, .. } => {
                assert_eq!(hints.len(), 1);
                assert!(tools.contains(&hints[0]), "hint {} is not a tool of the log", hints[0]);
            }
            NodeKind::Branch { .. } => {
                let labels: Vec<_> = graph.outgoing(&node.id).map(|e| e.label.clone()).collect();
                assert!(labels.len() >= 2 && labels.iter().all(Option::is_some), "{}: {labels:?}", node.id);
                let unique: HashSet<_> = labels.iter().collect();
                assert_eq!(unique.len(), labels.len(), "{}: duplicate routes", node.id);
            }
            NodeKind::Loop { .. } => {
                let mut labels: Vec<_> = graph.outgoing(&node.id).filter_map(|e| e.label.clone()).collect();
                labels.sort();
                assert_eq!(labels, ["body", "exit"], "{}", node.id);
            }
            _ => {}
        }
    }
}

#[test]
fn retail_orchestrations_become_sane_skeletons() {
    let traces = retail_traces();
    assert_eq!(traces.len(), 114);
    let tools: BTreeSet<String> = traces.iter().flatten().cloned().collect();
    let mut builder = EventLogBuilder::new();
    for trace in &traces {
        builder.push_trace(trace);
    }
    let log = builder.build();
    for variant in [Variant::Im, Variant::ImF { noise: 0.2 }] {
        let tree = discover(&log, variant);
        let graph = tree_to_skeleton(&tree);
        check_sane(&graph, &tools);
        let hinted: BTreeSet<String> = graph
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Tool { hints, .. } => hints.first().cloned(),
                _ => None,
            })
            .collect();
        let in_tree: BTreeSet<String> = tree.labels().into_iter().map(str::to_owned).collect();
        assert_eq!(hinted, in_tree, "every activity of {tree} has a tool position");
    }
}

#[test]
fn every_operator_maps_to_a_sane_graph() {
    let tools: BTreeSet<String> = ["a", "b", "c", "d"].map(String::from).into();
    for text in [
        "tau",
        "a",
        "->( 'a', X( 'b', tau ), +( 'c', 'd' ) )",
        "*( 'a', tau )",
        "*( ->( 'a', 'b' ), 'c' )",
        "*( tau, X( 'a', 'b' ) )",
        "X( *( 'a', 'b' ), *( 'c', tau ) )",
    ] {
        let graph = tree_to_skeleton(&ProcessTree::parse(text).unwrap());
        check_sane(&graph, &tools);
    }
}

/// A small judge leans to the first option it reads, so a branch offers the routes that
/// call something first and `skip` last, whatever the order in the tree.
#[test]
fn a_branch_offers_skip_last() {
    let tools: BTreeSet<String> = ["a", "b"].map(String::from).into();
    for text in ["X( tau, 'a' )", "X( 'a', tau )", "X( tau, 'a', 'b' )"] {
        let graph = tree_to_skeleton(&ProcessTree::parse(text).unwrap());
        check_sane(&graph, &tools);
        let branch = graph.nodes.iter().find(|node| matches!(node.kind, NodeKind::Branch { .. })).unwrap();
        let NodeKind::Branch { condition: flowmem_model::Condition::Judge { question }, .. } = &branch.kind else {
            panic!("{text}: the branch has no judge");
        };
        assert!(question.ends_with("| skip?"), "{text}: {question}");
        let routes: Vec<&str> =
            graph.edges.iter().filter(|edge| edge.from == branch.id).filter_map(|edge| edge.label.as_deref()).collect();
        assert_eq!(routes.last(), Some(&"skip"), "{text}: {routes:?}");
        assert_eq!(routes.len(), text.matches(',').count() + 1, "{text}: every route stays");
    }
}

#[test]
fn a_loop_with_redo_runs_do_first_then_retries() {
    let graph = tree_to_skeleton(&ProcessTree::parse("*( 'a', 'b' )").unwrap());
    let edges: Vec<(String, String, Option<String>, EdgeKind)> =
        graph.edges.iter().map(|e| (e.from.clone(), e.to.clone(), e.label.clone(), e.kind)).collect();
    let expect = [
        ("plan", "tool_1", None, EdgeKind::Data),
        ("tool_1", "branch_2", None, EdgeKind::Data),
        ("branch_2", "loop_4", Some("retry"), EdgeKind::Data),
        ("loop_4", "tool_5", Some("body"), EdgeKind::Data),
        ("tool_5", "tool_6", None, EdgeKind::Data),
        ("tool_6", "loop_4", None, EdgeKind::Back),
        ("branch_2", "join_3", Some("done"), EdgeKind::Data),
        ("loop_4", "join_3", Some("exit"), EdgeKind::Data),
        ("join_3", "synthesize", None, EdgeKind::Data),
    ]
    .map(|(f, t, l, k)| (f.to_owned(), t.to_owned(), l.map(str::to_owned), k));
    assert_eq!(edges, expect);
}

#[test]
fn a_bound_skeleton_counts_the_cases_that_reached_each_branch_and_took_each_route() {
    let mut log = EventLogBuilder::new();
    log.push_trace(["find", "lookup"]);
    log.push_trace(["find", "lookup"]);
    log.push_trace(["find", "cancel", "lookup"]);
    log.push_trace(["find"]);
    let log = log.build();
    // The outer route is labelled by its first activity, `cancel`, though `lookup` is
    // what its cases have in common.
    let tree = ProcessTree::parse("->( 'find', X( ->( X( 'cancel', tau ), 'lookup' ), tau ) )").unwrap();
    let graph = flowmem_mining::tree_to_bound_skeleton(
        &tree,
        &log,
        &flowmem_mining::mine_dataflow(&[]),
        &flowmem_mining::BindingConfig::skeleton(),
    );
    let taken = |id: &str| {
        let Some(NodeKind::Branch { taken, .. }) = graph.node(id).map(|node| &node.kind) else {
            panic!("no branch {id}: {graph:?}")
        };
        taken.iter().map(|(label, count)| (label.as_str(), *count)).collect::<Vec<_>>()
    };
    assert_eq!(taken("branch_2"), [("cancel", 3), ("skip", 1)]);
    // The inner branch sees only the three cases that took the outer route.
    assert_eq!(taken("branch_4"), [("cancel", 1), ("skip", 2)]);
    // With no log there is nothing to count.
    let plain = tree_to_skeleton(&tree);
    assert!(plain.nodes.iter().all(|node| match &node.kind {
        NodeKind::Branch { taken, .. } => taken.is_empty(),
        _ => true,
    }));
}
