//! `Valid(G, T)`: valid graphs pass, and every violation of an invalid graph is reported
//! with its node.

use flowmem_exec::{ToolCatalog, Violation, check, violations};
use flowmem_model::{NodeKind, WorkflowGraph};
use serde_json::json;

fn graph(value: serde_json::Value) -> WorkflowGraph {
    serde_json::from_value(value).expect("test graph parses")
}

fn tools() -> Vec<String> {
    vec!["echo".to_owned(), "add".to_owned()]
}

/// Every construct at once: plan, a parallel fan-out with a join, a retry loop whose body
/// branches on the tool outcome, and a judge branch before the answer.
pub fn full_graph() -> WorkflowGraph {
    graph(json!({
        "name": "everything",
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan"},
            {"id": "fan", "kind": "parallel"},
            {"id": "a", "kind": "tool", "hints": ["echo"], "instruction": "Echo the first item of {{ plan }}"},
            {"id": "b", "kind": "tool", "hints": ["add"]},
            {"id": "join", "kind": "join"},
            {"id": "retry", "kind": "loop", "max_iterations": 3, "until": {"type": "tool_succeeded"}},
            {"id": "attempt", "kind": "tool"},
            {"id": "check", "kind": "llm", "role": "verify"},
            {"id": "route", "kind": "branch", "condition": {"type": "judge", "question": "Is {{ query }} answered?"}},
            {"id": "more", "kind": "llm", "role": "reason"},
            {"id": "answer", "kind": "llm", "role": "synthesize"}
        ],
        "edges": [
            {"from": "plan", "to": "fan"},
            {"from": "fan", "to": "a"},
            {"from": "fan", "to": "b"},
            {"from": "a", "to": "join"},
            {"from": "b", "to": "join"},
            {"from": "join", "to": "retry"},
            {"from": "retry", "to": "attempt", "label": "body"},
            {"from": "attempt", "to": "retry", "kind": "back"},
            {"from": "retry", "to": "check", "label": "exit"},
            {"from": "check", "to": "route"},
            {"from": "route", "to": "more", "label": "no"},
            {"from": "route", "to": "answer", "label": "yes"},
            {"from": "more", "to": "answer"}
        ],
        "entry": "plan",
        "exit": "answer"
    }))
}

#[test]
fn a_graph_with_every_construct_is_valid() {
    let validated = check(full_graph(), ToolCatalog::Known(&tools())).expect("valid");
    assert_eq!(validated.graph().nodes.len(), 11);
    assert_eq!(validated.tool_names().map(|names| names.len()), Some(2));
}

#[test]
fn hints_must_name_available_tools() {
    let only_echo = vec!["echo".to_owned()];
    let err = check(full_graph(), ToolCatalog::Known(&only_echo)).unwrap_err();
    assert_eq!(err.violations, vec![Violation::UnknownToolHint { node: "b".into(), tool: "add".into() }]);
    // With no tools at all, the unhinted `attempt` cannot bind either.
    let err = check(full_graph(), ToolCatalog::Known(&[])).unwrap_err();
    let nodes: Vec<_> = err.violations.iter().map(|violation| violation.node().unwrap()).collect();
    assert_eq!(nodes, ["a", "b", "attempt"]);
    // Structure-only checking skips the binding.
    assert!(check(full_graph(), ToolCatalog::Unchecked).is_ok());
}

#[test]
fn every_violation_of_a_broken_graph_is_reported_with_its_node() {
    let broken = graph(json!({
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan"},
            {"id": "plan", "kind": "llm", "role": "reason"},
            {"id": "t", "kind": "tool", "hints": ["nope"], "instruction": "use {{ later }} and {{ ghost }}"},
            {"id": "later", "kind": "llm", "role": "reason"},
            {"id": "pick", "kind": "branch", "condition": {"type": "tool_succeeded"}},
            {"id": "lp", "kind": "loop", "max_iterations": 0, "until": {"type": "always"}},
            {"id": "x", "kind": "llm", "role": "extract"},
            {"id": "y", "kind": "llm", "role": "extract"},
            {"id": "island", "kind": "join"},
            {"id": "bad", "kind": "llm", "role": "verify", "instruction": "{{ unclosed"}
        ],
        "edges": [
            {"from": "plan", "to": "t"},
            {"from": "t", "to": "later"},
            {"from": "later", "to": "pick"},
            {"from": "pick", "to": "x"},
            {"from": "pick", "to": "y", "label": "maybe"},
            {"from": "x", "to": "y", "label": "oops"},
            {"from": "y", "to": "x"},
            {"from": "x", "to": "ghost-node"},
            {"from": "later", "to": "later"},
            {"from": "y", "to": "t", "kind": "back"},
            {"from": "t", "to": "bad"}
        ],
        "entry": "plan",
        "exit": "finish"
    }));
    let err = check(broken, ToolCatalog::Known(&tools())).unwrap_err();
    let expected = [
        Violation::DuplicateId { node: "plan".into(), count: 2 },
        Violation::MissingEndpoint { node: "finish".into(), role: "exit" },
        Violation::DanglingEdge { from: "x".into(), to: "ghost-node".into(), missing: "ghost-node".into() },
        Violation::SelfEdge { node: "later".into() },
        Violation::BackEdgeNotToLoop { node: "y".into(), to: "t".into() },
        Violation::UnknownToolHint { node: "t".into(), tool: "nope".into() },
        Violation::UnlabelledRoute { node: "pick".into(), to: "x".into() },
        Violation::MissingRoute { node: "pick".into(), label: "ok".into() },
        Violation::MissingRoute { node: "pick".into(), label: "error".into() },
        Violation::UnreachableRoute { node: "pick".into(), label: "maybe".into(), condition: "tool_succeeded" },
        Violation::LoopZeroBound { node: "lp".into() },
        Violation::LoopEdge { node: "lp".into(), label: "body", found: 0 },
        Violation::LoopEdge { node: "lp".into(), label: "exit", found: 0 },
        Violation::LoopNotClosed { node: "lp".into() },
        Violation::StrayLabel { node: "x".into(), to: "y".into(), label: "oops".into() },
        Violation::Cycle { node: "x".into(), cycle: vec!["x".into(), "y".into(), "x".into()] },
        Violation::Unreachable { node: "lp".into(), entry: "plan".into() },
        Violation::Unreachable { node: "island".into(), entry: "plan".into() },
    ];
    for violation in &expected {
        assert!(err.violations.contains(violation), "missing {violation:?} in {:#?}", err.violations);
    }
    assert_eq!(err.violations.len(), expected.len(), "{:#?}", err.violations);
    assert!(err.violations.iter().all(|violation| violation.node().is_some()));
    let text = err.to_string();
    assert!(text.contains("(18 violations)"), "{text}");
    assert!(text.contains("node `t`: tool hint `nope` names no available tool"), "{text}");
}

#[test]
fn templates_may_use_only_the_query_and_upstream_nodes() {
    let g = graph(json!({
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan", "instruction": "Plan for {{ query }} using {{ answer }}"},
            {"id": "answer", "kind": "llm", "role": "synthesize", "instruction": "{{ plan }} {{ nowhere }}"},
            {"id": "bad", "kind": "llm", "role": "reason", "instruction": "{% if %}"}
        ],
        "edges": [{"from": "plan", "to": "answer"}, {"from": "plan", "to": "bad"}],
        "entry": "plan",
        "exit": "answer"
    }));
    let found = violations(&g, ToolCatalog::Known(&[]));
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(
        found[0],
        Violation::UndefinedVariable { node: "plan".into(), field: "instruction", variable: "answer".into() }
    );
    assert_eq!(
        found[1],
        Violation::UndefinedVariable { node: "answer".into(), field: "instruction", variable: "nowhere".into() }
    );
    assert!(matches!(&found[2], Violation::TemplateSyntax { node, .. } if node == "bad"));
}

#[test]
fn loop_bodies_are_closed_and_exits_reachable() {
    let g = graph(json!({
        "nodes": [
            {"id": "start", "kind": "llm", "role": "plan"},
            {"id": "lp", "kind": "loop", "max_iterations": 2, "until": {"type": "always"}},
            {"id": "inner", "kind": "tool"},
            {"id": "after", "kind": "llm", "role": "synthesize"},
            {"id": "side", "kind": "llm", "role": "reason"},
            {"id": "end", "kind": "llm", "role": "synthesize"}
        ],
        "edges": [
            {"from": "start", "to": "lp"},
            {"from": "lp", "to": "inner", "label": "body"},
            {"from": "inner", "to": "lp", "kind": "back"},
            {"from": "inner", "to": "after"},
            {"from": "lp", "to": "after", "label": "exit"},
            {"from": "start", "to": "inner"},
            {"from": "side", "to": "end", "kind": "back"}
        ],
        "entry": "start",
        "exit": "end"
    }));
    let found = violations(&g, ToolCatalog::Known(&tools()));
    let expected = [
        Violation::BackEdgeNotToLoop { node: "side".into(), to: "end".into() },
        Violation::NoCompletePath { entry: "start".into(), exit: "end".into() },
        Violation::Unreachable { node: "side".into(), entry: "start".into() },
        Violation::Unreachable { node: "end".into(), entry: "start".into() },
        Violation::LoopBodyEscape { node: "inner".into(), to: "after".into(), loop_node: "lp".into() },
        Violation::LoopBodyEntry { node: "inner".into(), from: "start".into(), loop_node: "lp".into() },
    ];
    assert_eq!(found, expected);
}

#[test]
fn an_entry_with_inputs_and_an_empty_graph_are_rejected() {
    assert_eq!(
        violations(&graph(json!({"nodes": [], "entry": "a", "exit": "a"})), ToolCatalog::Unchecked),
        [Violation::Empty]
    );
    let g = graph(json!({
        "nodes": [{"id": "a", "kind": "llm", "role": "plan"}, {"id": "b", "kind": "llm", "role": "synthesize"}],
        "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "a", "kind": "control"}],
        "entry": "a",
        "exit": "b"
    }));
    let found = violations(&g, ToolCatalog::Unchecked);
    assert!(found.contains(&Violation::EntryHasInput { node: "a".into(), from: "b".into() }), "{found:#?}");
    assert!(found.iter().any(|violation| matches!(violation, Violation::Cycle { .. })), "{found:#?}");
}

/// `plan` → `order` → `product`, and `user` on a branch of its own beside `order`.
fn bound_graph(product_bindings: serde_json::Value) -> WorkflowGraph {
    graph(json!({
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan"},
            {"id": "order", "kind": "tool", "hints": ["echo"],
             "bindings": {"order_id": {"observed": 2, "sources": [{"from": "query", "support": 2}]}}},
            {"id": "user", "kind": "tool", "hints": ["echo"]},
            {"id": "product", "kind": "tool", "hints": ["add"], "bindings": product_bindings},
            {"id": "answer", "kind": "llm", "role": "synthesize"}
        ],
        "edges": [
            {"from": "plan", "to": "order"},
            {"from": "plan", "to": "user"},
            {"from": "order", "to": "product"},
            {"from": "product", "to": "answer"},
            {"from": "user", "to": "answer"}
        ],
        "entry": "plan",
        "exit": "answer"
    }))
}

#[test]
fn bindings_must_read_from_upstream_nodes() {
    let upstream = bound_graph(json!({
        "product_id": {"observed": 2, "sources": [
            {"from": "result", "node": "order", "path": "$.items[*].product_id", "support": 2},
            {"from": "argument", "node": "plan", "arg": "x", "support": 1},
            {"from": "constant", "value": 7, "support": 1}
        ]}
    }));
    assert!(check(upstream, ToolCatalog::Known(&tools())).is_ok());

    let wrong = bound_graph(json!({
        "item_ids[*]": {"observed": 2, "sources": [
            {"from": "result", "node": "user", "path": "$.orders[*]", "support": 2},
            {"from": "result", "node": "answer", "path": "$", "support": 1},
            {"from": "argument", "node": "product", "arg": "product_id", "support": 1},
            {"from": "result", "node": "ghost", "path": "$", "support": 1}
        ]}
    }));
    let found = violations(&wrong, ToolCatalog::Known(&tools()));
    let bad: Vec<(&str, &str, &str)> = found
        .iter()
        .map(|violation| match violation {
            Violation::BindingNotUpstream { node, arg, source_node } => {
                (node.as_str(), arg.as_str(), source_node.as_str())
            }
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        bad,
        [
            ("product", "item_ids[*]", "user"),
            ("product", "item_ids[*]", "answer"),
            ("product", "item_ids[*]", "product"),
            ("product", "item_ids[*]", "ghost"),
        ]
    );
    assert_eq!(
        found[0].to_string(),
        "node `product`: argument `item_ids[*]` is bound to `user`, which is not an upstream node"
    );
    assert_eq!(found[0].node(), Some("product"));
}

/// A precondition reads the results of its node, so that node must be upstream too.
#[test]
fn a_precondition_reads_an_upstream_node() {
    let requiring = |node: &str| {
        bound_graph(json!({"product_id": {"observed": 3,
            "sources": [{"from": "result", "node": "order", "path": "$.items[*].product_id", "support": 3}],
            "requires": [{"node": node, "key": "$.order_id", "field": "$.status", "value": "delivered", "support": 3}]}}))
    };
    assert!(check(requiring("order"), ToolCatalog::Known(&tools())).is_ok());
    let found = violations(&requiring("answer"), ToolCatalog::Known(&tools()));
    assert!(
        matches!(&found[..], [Violation::BindingNotUpstream { node, source_node, .. }] if node == "product" && source_node == "answer"),
        "{found:?}"
    );
}

/// A pairing reads the results of its node, so that node must be upstream too.
#[test]
fn a_pairing_reads_an_upstream_node() {
    let pairing = |node: &str| {
        bound_graph(json!({"product_id": {"observed": 3,
            "sources": [{"from": "result", "node": "order", "path": "$.items[*].product_id", "support": 3}],
            "paired_with": {"arg": "item_ids", "node": node, "path": "$.items[*].product_id", "support": 3}}}))
    };
    assert!(check(pairing("order"), ToolCatalog::Known(&tools())).is_ok());
    let found = violations(&pairing("answer"), ToolCatalog::Known(&tools()));
    assert!(
        matches!(&found[..], [Violation::BindingNotUpstream { node, source_node, .. }] if node == "product" && source_node == "answer"),
        "{found:?}"
    );
}

#[test]
fn each_evidence_belongs_on_result_paths_over_a_collection() {
    let each = json!({"records": 3, "all": 2});
    let over = |source: serde_json::Value| bound_graph(json!({"product_id": {"observed": 3, "sources": [source]}}));
    let collection =
        over(json!({"from": "result", "node": "order", "path": "$.items[*].product_id", "support": 3, "each": each}));
    assert!(check(collection, ToolCatalog::Known(&tools())).is_ok());
    let cases = [
        (json!({"from": "result", "node": "order", "path": "$.product_id", "support": 3, "each": each}), "result"),
        (json!({"from": "query", "shape": "id", "support": 3, "each": each}), "query"),
        (json!({"from": "constant", "value": 7, "support": 3, "each": each}), "constant"),
    ];
    for (source, kind) in cases {
        let found = violations(&over(source), ToolCatalog::Known(&tools()));
        assert!(
            matches!(&found[..], [Violation::EachNotACollection { node, arg, kind: found }] if node == "product" && arg == "product_id" && *found == kind),
            "{found:?}"
        );
        assert!(found[0].to_string().contains("has `each` on a"), "{}", found[0]);
    }
}

#[test]
fn graph_files_without_bindings_still_load_and_keep_their_shape() {
    let legacy = json!({
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan"},
            {"id": "t", "kind": "tool", "hints": ["echo"], "instruction": "Echo it"},
            {"id": "answer", "kind": "llm", "role": "synthesize"}
        ],
        "edges": [{"from": "plan", "to": "t", "kind": "data"}, {"from": "t", "to": "answer", "kind": "data"}],
        "entry": "plan",
        "exit": "answer"
    });
    let parsed = graph(legacy.clone());
    let flowmem_model::NodeKind::Tool { bindings, .. } = &parsed.nodes[1].kind else { panic!("a tool node") };
    assert!(bindings.is_empty());
    assert!(check(parsed.clone(), ToolCatalog::Known(&tools())).is_ok());
    // Written back, a graph without bindings is the file it was read from.
    let written = serde_json::to_value(&parsed).unwrap();
    assert_eq!(flowmem_model::canonical_json(&written), flowmem_model::canonical_json(&legacy));
}

/// What follows a loop may read its body (the loop leaves with the body's last
/// results); a body node may not read a later body node.
#[test]
fn a_loop_body_is_upstream_of_what_follows_the_loop_but_not_of_itself() {
    let looped = |bound_node: &str, source_node: &str| {
        let binding =
            json!({"observed": 1, "sources": [{"from": "result", "node": source_node, "path": "$", "support": 1}]});
        let node = |id: &str, hint: &str| {
            let mut node = json!({"id": id, "kind": "tool", "hints": [hint]});
            if id == bound_node {
                node["bindings"] = json!({"product_id": binding.clone()});
            }
            node
        };
        serde_json::from_value::<WorkflowGraph>(json!({
            "name": "looped",
            "nodes": [
                {"id": "again", "kind": "loop", "max_iterations": 3, "until": {"type": "tool_succeeded"}},
                node("order", "echo"), node("user", "echo"),
                node("product", "add")
            ],
            "edges": [
                {"from": "again", "to": "order", "label": "body"}, {"from": "order", "to": "user"},
                {"from": "user", "to": "again", "kind": "back"},
                {"from": "again", "to": "product", "label": "exit"}
            ],
            "entry": "again",
            "exit": "product"
        }))
        .unwrap()
    };
    assert!(check(looped("product", "user"), ToolCatalog::Known(&tools())).is_ok());
    assert!(check(looped("product", "order"), ToolCatalog::Known(&tools())).is_ok());
    assert!(check(looped("user", "order"), ToolCatalog::Known(&tools())).is_ok());
    let found = violations(&looped("order", "user"), ToolCatalog::Known(&tools()));
    assert!(
        matches!(&found[..], [Violation::BindingNotUpstream { node, source_node, .. }] if node == "order" && source_node == "user"),
        "{found:?}"
    );
}

fn loops_in_sequence(count: usize, closed: bool) -> WorkflowGraph {
    serde_json::from_value(flowmem_testsupport::loops_in_sequence(count, closed)).unwrap()
}

/// Runs `check` on another thread, failing the test if it takes longer than `limit`
/// (a watchdog far above the expected time, not a benchmark: the benchmark is
/// `benches/graph_check.rs`).
fn check_within(graph: WorkflowGraph, limit: std::time::Duration) -> Result<(), Vec<Violation>> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let res = check(graph, ToolCatalog::Unchecked).map(|_| ()).map_err(|err| err.violations);
        let _ = sender.send(res);
    });
    receiver.recv_timeout(limit).expect("`check` did not finish: it is not near-linear")
}

/// Issue 27 (12): 10,001 nodes of loops in sequence check in well under the watchdog's
/// 20 s (they took a minute), valid or not (invalid ones grew as n³).
#[test]
fn long_sequences_of_loops_check_in_near_linear_time() {
    let limit = std::time::Duration::from_secs(20);
    assert_eq!(check_within(loops_in_sequence(5000, true), limit), Ok(()));
    let violations = check_within(loops_in_sequence(5000, false), limit).unwrap_err();
    assert_eq!(violations.iter().filter(|v| matches!(v, Violation::LoopNotClosed { .. })).count(), 5000);
}

/// A loop inside another loop's body: the inner body is part of the outer body too (it
/// returns to the outer loop through the inner loop node), so the graph is valid and the
/// inner body's nodes count as the outer loop's when it is compiled.
#[test]
fn a_loop_nested_in_a_loop_body_is_valid() {
    let nested = graph(json!({
        "nodes": [
            {"id": "plan", "kind": "llm", "role": "plan"},
            {"id": "outer", "kind": "loop", "max_iterations": 2, "until": {"type": "tool_succeeded"}},
            {"id": "a", "kind": "tool"},
            {"id": "inner", "kind": "loop", "max_iterations": 2, "until": {"type": "tool_succeeded"}},
            {"id": "b", "kind": "tool"},
            {"id": "c", "kind": "tool"},
            {"id": "answer", "kind": "llm", "role": "synthesize"}
        ],
        "edges": [
            {"from": "plan", "to": "outer"},
            {"from": "outer", "to": "a", "label": "body"},
            {"from": "a", "to": "inner"},
            {"from": "inner", "to": "b", "label": "body"},
            {"from": "b", "to": "inner", "kind": "back"},
            {"from": "inner", "to": "c", "label": "exit"},
            {"from": "c", "to": "outer", "kind": "back"},
            {"from": "outer", "to": "answer", "label": "exit"}
        ],
        "entry": "plan",
        "exit": "answer"
    }));
    assert_eq!(violations(&nested, ToolCatalog::Unchecked), Vec::<Violation>::new());
    // The inner loop may even be the outer body's first node.
    let mut first = nested.clone();
    first.edges.retain(|edge| !matches!((edge.from.as_str(), edge.to.as_str()), ("outer", "a") | ("a", "inner")));
    first.nodes.retain(|node| node.id != "a");
    first.edges.push(serde_json::from_value(json!({"from": "outer", "to": "inner", "label": "body"})).unwrap());
    assert_eq!(violations(&first, ToolCatalog::Unchecked), Vec::<Violation>::new());
}

#[test]
fn mined_route_counts_must_name_the_branchs_routes() {
    let branch = |taken: serde_json::Value| {
        graph(json!({
            "nodes": [
                {"id": "pick", "kind": "branch", "condition": {"type": "judge", "question": "Echo?"}, "taken": taken},
                {"id": "t", "kind": "tool", "hints": ["echo"]},
                {"id": "end", "kind": "join"}
            ],
            "edges": [
                {"from": "pick", "to": "t", "label": "echo"},
                {"from": "pick", "to": "end", "label": "skip"},
                {"from": "t", "to": "end"}
            ],
            "entry": "pick",
            "exit": "end"
        }))
    };
    assert!(check(branch(json!({"echo": 4, "skip": 1})), ToolCatalog::Known(&tools())).is_ok());
    let found = violations(&branch(json!({"echo": 4, "skipp": 1})), ToolCatalog::Known(&tools()));
    assert!(
        matches!(&found[..], [Violation::MinedUnknownRoute { node, field: "taken", label }] if node == "pick" && label == "skipp"),
        "{found:?}"
    );
    assert!(found[0].to_string().contains("`taken` names route `skipp`"), "{}", found[0]);

    // Mined cues, likewise.
    let mut cued = branch(json!({"echo": 4, "skip": 1}));
    let NodeKind::Branch { cues, .. } = &mut cued.nodes[0].kind else { unreachable!() };
    cues.insert("echo".into(), vec!["repeat".into()]);
    assert!(check(cued.clone(), ToolCatalog::Known(&tools())).is_ok());
    let NodeKind::Branch { cues, .. } = &mut cued.nodes[0].kind else { unreachable!() };
    cues.insert("ech".into(), vec!["repeat".into()]);
    let found = violations(&cued, ToolCatalog::Known(&tools()));
    assert!(
        matches!(&found[..], [Violation::MinedUnknownRoute { node, field: "cues", label }] if node == "pick" && label == "ech"),
        "{found:?}"
    );

    // And the nearest mined queries: their routes, and their indices into `queries`.
    let mut near = branch(json!({"echo": 4, "skip": 1}));
    near.queries = vec![vec!["repeat".into()], vec!["nothing".into()]];
    let NodeKind::Branch { nearest, .. } = &mut near.nodes[0].kind else { unreachable!() };
    nearest.extend([("echo".to_owned(), vec![0]), ("skip".to_owned(), vec![1])]);
    assert!(check(near.clone(), ToolCatalog::Known(&tools())).is_ok());
    let mut beyond = near.clone();
    beyond.queries.pop();
    let found = violations(&beyond, ToolCatalog::Known(&tools()));
    assert!(
        matches!(&found[..], [Violation::NearestUnknownQuery { node, label, index: 1, queries: 1 }] if node == "pick" && label == "skip"),
        "{found:?}"
    );
    let NodeKind::Branch { nearest, .. } = &mut near.nodes[0].kind else { unreachable!() };
    nearest.insert("eko".into(), vec![0]);
    let found = violations(&near, ToolCatalog::Known(&tools()));
    assert!(
        matches!(&found[..], [Violation::MinedUnknownRoute { node, field: "nearest", label }] if node == "pick" && label == "eko"),
        "{found:?}"
    );

    // And the counts of the queries holding a route's cue: a route it has, at most as
    // many took it as held a cue, and at least one held one.
    let with_cued = |label: &str, counts: [u64; 2]| {
        let mut graph = branch(json!({"echo": 4, "skip": 1}));
        let NodeKind::Branch { cued, .. } = &mut graph.nodes[0].kind else { unreachable!() };
        cued.insert(label.into(), counts);
        graph
    };
    assert!(check(with_cued("echo", [3, 4]), ToolCatalog::Known(&tools())).is_ok());
    let found = violations(&with_cued("eco", [3, 4]), ToolCatalog::Known(&tools()));
    assert!(
        matches!(&found[..], [Violation::MinedUnknownRoute { node, field: "cued", label }] if node == "pick" && label == "eco"),
        "{found:?}"
    );
    for counts in [[5, 4], [0, 0]] {
        let found = violations(&with_cued("echo", counts), ToolCatalog::Known(&tools()));
        assert!(
            matches!(&found[..], [Violation::CuedCounts { node, label, took, held }] if node == "pick" && label == "echo" && [*took, *held] == counts),
            "{found:?}"
        );
        assert!(found[0].to_string().contains("`cued` for route `echo`"), "{}", found[0]);
    }
}
