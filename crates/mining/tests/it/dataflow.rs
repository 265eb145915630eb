//! Data-flow mining recovers a known data flow: logs are generated from a random flow
//! (random tools, random JSON results, values threaded from the query, from earlier
//! results and arguments, constants and free values), and every binding must come back.

use std::collections::{BTreeMap, HashSet};

use flowmem_mining::{
    BindingConfig, Classifier, Dataflow, EventLog, ProcessTree, Source, mine_dataflow, tree_to_bound_skeleton,
};
use flowmem_model::{EdgeKind, NodeKind, Record, ToolCall, canonical_json};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A small deterministic generator, seeded by proptest.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*; the seed is never zero (see `new`).
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }
}

/// The shape of a tool's result: the same in every record, with fresh leaves each time.
#[derive(Clone, Debug)]
enum Shape {
    Leaf { numeric: bool },
    Object(Vec<(String, Shape)>),
    Array { len: usize, item: Box<Shape> },
}

fn shape(rng: &mut Rng, depth: usize) -> Shape {
    match if depth == 0 { 0 } else { rng.below(4) } {
        0 | 1 => Shape::Leaf { numeric: rng.below(4) == 0 },
        2 => {
            let n_keys = 1 + rng.below(3);
            Shape::Object((0..n_keys).map(|idx| (format!("k{idx}"), shape(rng, depth - 1))).collect())
        }
        _ => Shape::Array { len: 1 + rng.below(3), item: Box::new(shape(rng, depth - 1)) },
    }
}

/// Where one generated argument value comes from.
#[derive(Clone, Debug)]
enum Origin {
    Query,
    /// A leaf of call `call`'s result at the generalised `path`.
    Result {
        call: usize,
        path: String,
    },
    /// The free value of call `call`'s argument `arg` (each is copied at most once).
    Argument {
        call: usize,
        arg: String,
    },
    Constant(String),
    /// A fresh value that appears nowhere else.
    Free,
}

#[derive(Clone, Debug)]
struct CallSpec {
    tool: String,
    result: Shape,
    // Argument name -> the origins of its elements; one origin is a scalar argument.
    args: Vec<(String, Vec<Origin>, bool)>,
}

/// Every generalised leaf path of a shape.
fn paths(shape: &Shape, prefix: &str, res: &mut Vec<String>) {
    match shape {
        Shape::Leaf { .. } => res.push(prefix.to_owned()),
        Shape::Object(fields) => fields.iter().for_each(|(key, child)| paths(child, &format!("{prefix}.{key}"), res)),
        Shape::Array { item, .. } => paths(item, &format!("{prefix}[*]"), res),
    }
}

/// A fresh instance of `shape`, with each leaf's generalised path and value collected.
fn instantiate(
    shape: &Shape,
    prefix: &str,
    fresh: &mut impl FnMut(bool) -> Value,
    leaves: &mut Vec<(String, Value)>,
) -> Value {
    match shape {
        Shape::Leaf { numeric } => {
            let value = fresh(*numeric);
            leaves.push((prefix.to_owned(), value.clone()));
            value
        }
        Shape::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(key, child)| (key.clone(), instantiate(child, &format!("{prefix}.{key}"), fresh, leaves)))
                .collect(),
        ),
        Shape::Array { len, item } => {
            Value::Array((0..*len).map(|_| instantiate(item, &format!("{prefix}[*]"), fresh, leaves)).collect())
        }
    }
}

fn flow_spec(rng: &mut Rng) -> Vec<CallSpec> {
    let n_tools = 2 + rng.below(4);
    let n_calls = 2 + rng.below(5);
    let mut calls: Vec<CallSpec> = Vec::new();
    let mut free_args: Vec<(usize, String)> = Vec::new();
    for call_idx in 0..n_calls {
        let tool = format!("tool_{}", rng.below(n_tools));
        let result = shape(rng, 3);
        let n_args = 1 + rng.below(3);
        let mut args = Vec::new();
        // This call's free arguments become copyable only by later calls.
        let mut new_free = Vec::new();
        for arg_idx in 0..n_args {
            // Argument names are unique per position, so each (tool, argument) pair has one origin spec.
            let name = format!("a{call_idx}_{arg_idx}");
            let is_array = rng.below(3) == 0;
            let n_elements = if is_array { 1 + rng.below(3) } else { 1 };
            let mut origins = Vec::new();
            for _ in 0..n_elements {
                let origin = match rng.below(if is_array { 2 } else { 5 }) {
                    0 => Origin::Query,
                    1 if call_idx > 0 => {
                        let source = rng.below(call_idx);
                        let mut leaf_paths = Vec::new();
                        paths(&calls[source].result, "$", &mut leaf_paths);
                        Origin::Result { call: source, path: leaf_paths[rng.below(leaf_paths.len())].clone() }
                    }
                    1 => Origin::Query,
                    2 if !free_args.is_empty() => {
                        let (call, arg) = free_args.remove(rng.below(free_args.len()));
                        Origin::Argument { call, arg }
                    }
                    2 | 3 => Origin::Constant(format!("const{call_idx}x{arg_idx}")),
                    _ => Origin::Free,
                };
                origins.push(origin);
            }
            if matches!(origins.as_slice(), [Origin::Free]) {
                new_free.push((call_idx, name.clone()));
            }
            args.push((name, origins, is_array));
        }
        free_args.extend(new_free);
        calls.push(CallSpec { tool, result, args });
    }
    calls
}

/// The expected source of an origin, in the log's terms.
fn expected_source(calls: &[CallSpec], origin: &Origin) -> Option<Source> {
    match origin {
        Origin::Query => Some(Source::Query),
        Origin::Result { call, path } => Some(Source::Result { tool: calls[*call].tool.clone(), path: path.clone() }),
        Origin::Argument { call, arg } => Some(Source::Argument { tool: calls[*call].tool.clone(), arg: arg.clone() }),
        Origin::Constant(text) => Some(Source::Constant { value: canonical_json(&json!(text)) }),
        Origin::Free => None,
    }
}

/// One record of the flow, with fresh values everywhere but in constants.
fn record(calls: &[CallSpec], record_idx: usize, rng: &mut Rng) -> Record {
    let mut counter = 0u64;
    let mut query_words: Vec<String> = vec!["please".into(), "handle".into()];
    let mut results: Vec<Vec<(String, Value)>> = Vec::new();
    let mut free_values: BTreeMap<(usize, String), Value> = BTreeMap::new();
    let mut orchestration = Vec::new();
    for (call_idx, spec) in calls.iter().enumerate() {
        let mut args = serde_json::Map::new();
        for (name, origins, is_array) in &spec.args {
            let mut elements = Vec::new();
            for origin in origins {
                counter += 1;
                let value = match origin {
                    Origin::Query => {
                        // Numbers are written with digit grouping, as people write them.
                        if rng.below(3) == 0 {
                            let number = 7_000_000 + record_idx as u64 * 100_000 + counter;
                            let grouped =
                                format!("{},{:03},{:03}", number / 1_000_000, number / 1000 % 1000, number % 1000);
                            query_words.push(grouped);
                            json!(number)
                        } else {
                            let word = format!("Q{record_idx}x{call_idx}x{counter}");
                            query_words.push(format!("#{word}"));
                            json!(word.to_lowercase())
                        }
                    }
                    Origin::Result { call, path } => {
                        let candidates: Vec<&Value> =
                            results[*call].iter().filter(|(p, _)| p == path).map(|(_, v)| v).collect();
                        candidates[rng.below(candidates.len())].clone()
                    }
                    Origin::Argument { call, arg } => free_values[&(*call, arg.clone())].clone(),
                    Origin::Constant(text) => json!(text),
                    Origin::Free => {
                        let value = json!(format!("free{record_idx}x{call_idx}x{counter}"));
                        free_values.insert((call_idx, name.clone()), value.clone());
                        value
                    }
                };
                elements.push(value);
            }
            let value = if *is_array { Value::Array(elements) } else { elements.remove(0) };
            args.insert(name.clone(), value);
        }
        let mut leaves = Vec::new();
        let mut fresh = |numeric: bool| {
            counter += 1;
            if numeric {
                json!(9_000_000_000u64 + record_idx as u64 * 1_000_000 + counter)
            } else {
                json!(format!("r{record_idx}c{call_idx}l{counter}"))
            }
        };
        let result = instantiate(&spec.result, "$", &mut fresh, &mut leaves);
        results.push(leaves);
        let mut call = ToolCall::new(spec.tool.clone(), Value::Object(args)).unwrap();
        // MCP tools return JSON as text; mining must parse it.
        call.result = Some(match result {
            Value::Object(_) | Value::Array(_) => Value::String(result.to_string()),
            scalar => scalar,
        });
        orchestration.push(call);
    }
    query_words.push("thanks".into());
    Record {
        id: format!("r{record_idx}"),
        query: query_words.join(" "),
        reference_result: String::new(),
        required_outputs: Vec::new(),
        orchestration,
        meta: Default::default(),
    }
}

/// The expected (tool, argument) → source → support, and the expected count of values.
fn expected(calls: &[CallSpec], n_records: u64) -> BTreeMap<(String, String), (u64, BTreeMap<Source, u64>)> {
    let mut res: BTreeMap<(String, String), (u64, BTreeMap<Source, u64>)> = BTreeMap::new();
    for spec in calls {
        for (name, origins, is_array) in &spec.args {
            let arg = if *is_array { format!("{name}[*]") } else { name.clone() };
            let entry = res.entry((spec.tool.clone(), arg)).or_default();
            for origin in origins {
                entry.0 += n_records;
                if let Some(source) = expected_source(calls, origin) {
                    *entry.1.entry(source).or_default() += n_records;
                }
            }
        }
    }
    res
}

fn check_recovered(calls: &[CallSpec], records: &[Record], flow: &Dataflow) {
    // Every value's sources are exactly the one it was threaded from.
    for (record, found) in records.iter().zip(&flow.per_record) {
        assert_eq!(record.id, found.id);
        let mut values = found.values.iter();
        for (call_idx, spec) in calls.iter().enumerate() {
            for (name, origins, _) in &spec.args {
                for origin in origins {
                    let value = values.next().expect("one finding per value");
                    assert_eq!((value.call, value.arg.starts_with(name.as_str())), (call_idx, true), "{value:?}");
                    let expected: Vec<Source> = expected_source(calls, origin).into_iter().collect();
                    assert_eq!(
                        value.sources, expected,
                        "record {} call {call_idx} `{name}` from {origin:?}",
                        record.id
                    );
                }
            }
        }
        assert!(values.next().is_none());
    }
    // Aggregated per (tool, argument): the distribution is the generating one.
    let expected = expected(calls, records.len() as u64);
    let mined: BTreeMap<(String, String), (u64, BTreeMap<Source, u64>)> = flow
        .arguments
        .iter()
        .map(|arg| {
            let sources = arg.sources.iter().map(|s| (s.source.clone(), s.support)).collect();
            ((arg.tool.clone(), arg.arg.clone()), (arg.observed, sources))
        })
        .collect();
    assert_eq!(mined, expected);
    let n_values: u64 = expected.values().map(|(n, _)| n).sum();
    assert_eq!(flow.values, n_values);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn mining_recovers_every_binding_of_a_generated_flow(seed in any::<u64>(), n_records in 2usize..5) {
        let mut rng = Rng::new(seed);
        let calls = flow_spec(&mut rng);
        let records: Vec<Record> = (0..n_records).map(|idx| record(&calls, idx, &mut rng)).collect();
        let flow = mine_dataflow(&records);
        check_recovered(&calls, &records, &flow);
    }

    #[test]
    fn bound_skeletons_bind_only_upstream_nodes(seed in any::<u64>(), n_records in 2usize..4) {
        let mut rng = Rng::new(seed);
        let calls = flow_spec(&mut rng);
        let records: Vec<Record> = (0..n_records).map(|idx| record(&calls, idx, &mut rng)).collect();
        let flow = mine_dataflow(&records);
        // The control flow as a sequence, or everything in parallel: data must order the latter.
        let activities: Vec<ProcessTree> = calls.iter().map(|c| ProcessTree::activity(c.tool.clone())).collect();
        for operator in [flowmem_mining::Operator::Sequence, flowmem_mining::Operator::Parallel] {
            let tree = ProcessTree::operator(operator, activities.clone());
            let log = EventLog::from_records(&records, Classifier::ToolName);
            let graph =
                tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig { max_sources: 3, min_share: 0.0 });
            for node in &graph.nodes {
                let NodeKind::Tool { bindings, .. } = &node.kind else { continue };
                for binding in bindings.values() {
                    for source in binding.sources.iter().filter_map(|s| s.source.node()) {
                        prop_assert!(upstream(&graph, &node.id).contains(source), "{} reads {source}", node.id);
                    }
                }
            }
        }
    }
}

/// The ancestors of `id` over non-`back` edges.
/// The nodes upstream of `id`, worked out forwards: ancestors over data edges and over
/// the back edges of every loop whose body (what its `body` edge reaches before coming
/// back to it) does not hold `id`.
fn upstream(graph: &flowmem_model::WorkflowGraph, id: &str) -> HashSet<String> {
    let in_body_of = |loop_id: &str| {
        let mut body = HashSet::new();
        let mut stack: Vec<String> =
            graph.outgoing(loop_id).filter(|e| e.label.as_deref() == Some("body")).map(|e| e.to.clone()).collect();
        while let Some(at) = stack.pop() {
            if at != loop_id && body.insert(at.clone()) {
                stack.extend(graph.outgoing(&at).filter(|e| e.kind != EdgeKind::Back).map(|e| e.to.clone()));
            }
        }
        body.contains(id)
    };
    let mut seen = HashSet::new();
    let mut stack = vec![id.to_owned()];
    while let Some(at) = stack.pop() {
        for edge in graph.incoming(&at).filter(|edge| edge.kind != EdgeKind::Back || !in_body_of(&at)) {
            if seen.insert(edge.from.clone()) {
                stack.push(edge.from.clone());
            }
        }
    }
    seen.remove(id);
    seen
}

fn call(tool: &str, args: Value, result: Option<Value>) -> ToolCall {
    let mut call = ToolCall::new(tool, args).unwrap();
    call.result = result;
    call
}

fn records_of(logs: Vec<(&str, Vec<ToolCall>)>) -> Vec<Record> {
    logs.into_iter()
        .enumerate()
        .map(|(idx, (query, orchestration))| Record {
            id: idx.to_string(),
            query: query.to_owned(),
            reference_result: String::new(),
            required_outputs: Vec::new(),
            orchestration,
            meta: Default::default(),
        })
        .collect()
}

#[test]
fn data_orders_a_parallel_block_and_binds_the_dependent_member() {
    let records = records_of(vec![
        (
            "exchange items of order #W1",
            vec![
                call("get_order", json!({"order_id": "#W1"}), Some(json!("{\"items\": [{\"product_id\": \"p1\"}]}"))),
                call("get_user", json!({"user_id": "u1"}), Some(json!("{\"name\": \"a\"}"))),
                call("get_product", json!({"product_id": "p1"}), Some(json!("{}"))),
            ],
        ),
        (
            "order W2 please",
            vec![
                call("get_user", json!({"user_id": "u2"}), Some(json!("{\"name\": \"b\"}"))),
                call("get_order", json!({"order_id": "W2"}), Some(json!("{\"items\": [{\"product_id\": \"p2\"}]}"))),
                call("get_product", json!({"product_id": "p2"}), Some(json!("{}"))),
            ],
        ),
    ]);
    let flow = mine_dataflow(&records);
    assert_eq!(flow.by_kind.query, 2);
    assert_eq!(flow.by_kind.result, 2);
    assert_eq!(flow.by_kind.unexplained, 2, "the user ids come from nowhere");
    assert!((flow.coverage - 4.0 / 6.0).abs() < 1e-9);

    let tree = ProcessTree::parse("+( 'get_order', 'get_product', 'get_user' )").unwrap();
    let log = EventLog::from_records(&records, Classifier::ToolName);
    let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
    let hint = |id: &str| match &graph.node(id).unwrap().kind {
        NodeKind::Tool { hints, .. } => hints[0].clone(),
        other => panic!("{id} is {other:?}"),
    };
    // ->( +( get_order, get_user ), get_product ): the product waits for the order only.
    let product = graph
        .nodes
        .iter()
        .find(|n| matches!(&n.kind, NodeKind::Tool { hints, .. } if hints[0] == "get_product"))
        .unwrap();
    let order = graph
        .nodes
        .iter()
        .find(|n| matches!(&n.kind, NodeKind::Tool { hints, .. } if hints[0] == "get_order"))
        .unwrap();
    let user =
        graph.nodes.iter().find(|n| matches!(&n.kind, NodeKind::Tool { hints, .. } if hints[0] == "get_user")).unwrap();
    assert!(upstream(&graph, &product.id).contains(&order.id));
    assert!(!upstream(&graph, &user.id).contains(&order.id) && !upstream(&graph, &order.id).contains(&user.id));
    assert_eq!(hint(&order.id), "get_order");
    let NodeKind::Tool { bindings, .. } = &product.kind else { unreachable!() };
    let sources = &bindings["product_id"].sources;
    assert_eq!(sources.len(), 1);
    assert_eq!(sources[0].support, 2);
    assert_eq!(
        sources[0].source,
        flowmem_model::ValueSource::Result { node: order.id.clone(), path: "$.items[*].product_id".into() }
    );
    let NodeKind::Tool { bindings, .. } = &order.kind else { unreachable!() };
    assert_eq!(
        bindings["order_id"].sources[0].source,
        flowmem_model::ValueSource::Query {
            shape: Some(flowmem_model::ValueShape::Id),
            // Both queries put "order" before it.
            anchors: vec![flowmem_model::Anchor { words: vec!["order".into()], support: 2 }],
            // `#W1` and `W2` are keyed `w1` and `w2`.
            lengths: Some([2, 2]),
        }
    );
    let NodeKind::Tool { bindings, .. } = &user.kind else { unreachable!() };
    assert!(bindings.is_empty(), "unexplained arguments carry no binding: {bindings:?}");
}

#[test]
fn constants_need_the_same_value_in_two_records() {
    let one = records_of(vec![("q", vec![call("pay", json!({"method": "card", "amount": 3}), None)])]);
    assert_eq!(mine_dataflow(&one).by_kind.unexplained, 2);
    let two = records_of(vec![
        ("q", vec![call("pay", json!({"method": "card", "amount": 3, "urgent": true}), None)]),
        ("q", vec![call("pay", json!({"method": "card", "amount": 4, "urgent": true}), None)]),
    ]);
    let flow = mine_dataflow(&two);
    assert_eq!(
        flow.argument("pay", "method").unwrap().sources[0].source,
        Source::Constant { value: "\"card\"".into() }
    );
    assert_eq!(flow.argument("pay", "urgent").unwrap().sources[0].source, Source::Constant { value: "true".into() });
    assert!(flow.argument("pay", "amount").unwrap().sources.is_empty());
}

#[test]
fn query_beats_results_and_results_beat_arguments() {
    let records = records_of(vec![(
        "user ada",
        vec![
            call("log", json!({"token": "t9"}), None),
            call("find", json!({"name": "ada"}), Some(json!("{\"user\": \"ada\", \"token\": \"t9\"}"))),
            call("get", json!({"name": "ada", "token": "t9"}), None),
        ],
    )]);
    let flow = mine_dataflow(&records);
    assert_eq!(flow.argument("get", "name").unwrap().sources[0].source, Source::Query);
    let token = &flow.argument("get", "token").unwrap().sources;
    assert_eq!(token.len(), 1, "the earlier argument is weaker evidence than the result: {token:?}");
    assert_eq!(token[0].source, Source::Result { tool: "find".into(), path: "$.token".into() });
    // A failed call's result is not searched.
    let mut failed = records.clone();
    failed[0].orchestration[1].error = Some("boom".into());
    let flow = mine_dataflow(&failed);
    let token = &flow.argument("get", "token").unwrap().sources;
    assert_eq!(token[0].source, Source::Argument { tool: "log".into(), arg: "token".into() });
}

/// The words before a query-sourced value are mined as its anchors; a word that is
/// another argument's value is named by that argument, and wording seen once is no
/// anchor.
#[test]
fn the_words_before_query_values_are_mined_as_anchors() {
    let find = |first: &str, last: &str, zip: &str| {
        call("find_user", json!({"first_name": first, "last_name": last, "zip": zip}), None)
    };
    let records = records_of(vec![
        ("Known info: You are Yusuf Rossi in zipcode 19122.", vec![find("Yusuf", "Rossi", "19122")]),
        ("Hi. You are Mei Davis, in zipcode 80,217 (Denver).", vec![find("Mei", "Davis", "80217")]),
        ("Your name is Ana Li and you live in Paris, 75001.", vec![find("Ana", "Li", "75001")]),
    ]);
    let flow = mine_dataflow(&records);
    let anchors = |arg: &str| -> Vec<(String, u64)> {
        flow.argument("find_user", arg)
            .unwrap()
            .query_anchors
            .iter()
            .map(|anchor| (anchor.words.join(" "), anchor.support))
            .collect()
    };
    assert_eq!(anchors("first_name"), [("are".to_owned(), 2), ("you are".to_owned(), 2)]);
    assert_eq!(anchors("last_name"), [("{first_name}".to_owned(), 3), ("are {first_name}".to_owned(), 2)]);
    // `in zipcode` twice (digit grouping dropped); `paris` once is no anchor.
    assert_eq!(anchors("zip"), [("zipcode".to_owned(), 2), ("in zipcode".to_owned(), 2)]);
    let first = &flow.record("0").unwrap().values[0];
    assert_eq!(first.anchors, [vec!["are".to_owned()], vec!["you".to_owned(), "are".to_owned()]]);
    // The bound skeleton carries them on the query source.
    let graph = serde_json::to_value(&flow.argument("find_user", "last_name").unwrap().query_anchors).unwrap();
    assert_eq!(graph[0], json!({"words": ["{first_name}"], "support": 3}));
    // The lengths of the values found in the query (`80,217` as `80217`); one value
    // gives none.
    let lengths = |records: &[flowmem_model::Record], arg: &str| {
        mine_dataflow(records).argument("find_user", arg).unwrap().query_lengths
    };
    assert_eq!(lengths(&records, "zip"), Some([5, 5]));
    assert_eq!(lengths(&records, "last_name"), Some([2, 5]));
    assert_eq!(lengths(&records[..1], "zip"), None);
}

#[test]
fn a_result_echoing_its_own_call_is_left_to_the_argument_source() {
    let records = records_of(vec![(
        "q",
        vec![
            call("find", json!({"token": "t9"}), Some(json!({"arguments": {"token": "t9"}, "user": "u1"}))),
            call("get", json!({"token": "t9", "user": "u1"}), None),
        ],
    )]);
    let flow = mine_dataflow(&records);
    let token = &flow.argument("get", "token").unwrap().sources;
    assert_eq!(token.len(), 1, "{token:?}");
    assert_eq!(token[0].source, Source::Argument { tool: "find".into(), arg: "token".into() });
    let user = &flow.argument("get", "user").unwrap().sources;
    assert_eq!(user[0].source, Source::Result { tool: "find".into(), path: "$.user".into() });
}

/// IM wraps repeatable activities in loops, `*( 'get_user', tau )`: what follows the loop
/// reads the body's results, so it binds to the body node.
#[test]
fn a_tool_after_a_loop_binds_to_the_loop_body() {
    let records = records_of(vec![
        (
            "user u1",
            vec![
                call("get_user", json!({"user_id": "u1"}), Some(json!({"orders": ["#W1", "#W2"]}))),
                call("get_order", json!({"order_id": "#W2"}), Some(json!({}))),
            ],
        ),
        (
            "user u2",
            vec![
                call("get_user", json!({"user_id": "u2"}), Some(json!({"orders": ["#W3"]}))),
                call("get_user", json!({"user_id": "u2"}), Some(json!({"orders": ["#W3"]}))),
                call("get_order", json!({"order_id": "#W3"}), Some(json!({}))),
            ],
        ),
    ]);
    let flow = mine_dataflow(&records);
    let tree = ProcessTree::parse("->( *( 'get_user', tau ), 'get_order' )").unwrap();
    let log = EventLog::from_records(&records, Classifier::ToolName);
    let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
    let tool_node = |tool: &str| {
        graph.nodes.iter().find(|n| matches!(&n.kind, NodeKind::Tool { hints, .. } if hints[0] == tool)).unwrap()
    };
    let (user, order) = (tool_node("get_user"), tool_node("get_order"));
    let NodeKind::Tool { bindings, .. } = &order.kind else { unreachable!() };
    assert_eq!(
        bindings["order_id"].sources[0].source,
        flowmem_model::ValueSource::Result { node: user.id.clone(), path: "$.orders[*]".into() },
        "{bindings:?}"
    );
    assert!(upstream(&graph, &order.id).contains(&user.id));
}

/// Whether the calls took every element of a collection is counted per record, from
/// the argument's values whatever source each was credited to, and carried into the
/// binding.
#[test]
fn each_counts_the_records_that_took_every_value_of_a_collection() {
    let user = |orders: Value| call("get_user", json!({"user_id": "u1"}), Some(json!({"orders": orders})));
    let order = |id: &str| call("get_order", json!({"order_id": id}), Some(json!({"status": "ok"})));
    let records = records_of(vec![
        // Every order, in two calls.
        ("user u1", vec![user(json!(["#W1", "#W2"])), order("#W1"), order("#W2")]),
        // Every order, though the query names one (the query is its source).
        ("user u1 about W4", vec![user(json!(["#W3", "#W4"])), order("#W3"), order("#W4")]),
        // One of three.
        ("user u1", vec![user(json!(["#W5", "#W6", "#W7"])), order("#W6")]),
        // An order from nowhere: the collection is not this argument's source here.
        ("user u1", vec![user(json!(["#W8", "#W10"])), order("#W9")]),
        // The one order of a collection of one: no evidence of going through it.
        ("user u1", vec![user(json!(["#W11"])), order("#W11")]),
    ]);
    let flow = mine_dataflow(&records);
    let order_id = flow.argument("get_order", "order_id").unwrap();
    let collection = Source::Result { tool: "get_user".into(), path: "$.orders[*]".into() };
    let support = order_id.sources.iter().find(|support| support.source == collection).unwrap();
    assert_eq!(support.support, 5, "{order_id:?}");
    assert_eq!(support.each, Some(flowmem_model::EachUse { records: 3, all: 2 }), "{order_id:?}");
    assert!(support.each.unwrap().is_usual());
    // A source that is no collection has no such count.
    let user_id = flow.argument("get_user", "user_id").unwrap();
    assert!(user_id.sources.iter().all(|support| support.each.is_none()), "{user_id:?}");

    let tree = ProcessTree::parse("->( 'get_user', *( 'get_order', tau ) )").unwrap();
    let log = EventLog::from_records(&records, Classifier::ToolName);
    let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
    let NodeKind::Tool { bindings, .. } = &graph
        .nodes
        .iter()
        .find(|n| matches!(&n.kind, NodeKind::Tool { hints, .. } if hints[0] == "get_order"))
        .unwrap()
        .kind
    else {
        unreachable!()
    };
    assert_eq!(bindings["order_id"].sources[0].each, Some(flowmem_model::EachUse { records: 3, all: 2 }));
}

/// Decision mining on values: every returned order was delivered, as the order's
/// lookup said, while the looked-up orders were of several statuses; the precondition
/// comes out, is bound to the lookup's node, and a field every order holds alike or a
/// fact read for one value only is none.
#[test]
fn what_every_value_was_is_mined_as_a_precondition() {
    let order = |id: &str, status: &str| {
        call(
            "get_order",
            json!({"order_id": id}),
            Some(json!({"order_id": id, "status": status, "country": "USA", "items": [{"id": "i1"}]})),
        )
    };
    let ret = |id: &str| call("return_items", json!({"order_id": id}), Some(json!("ok")));
    let records = records_of(vec![
        ("return", vec![order("#W1", "pending"), order("#W2", "delivered"), ret("#W2")]),
        ("return", vec![order("#W3", "delivered"), order("#W4", "cancelled"), ret("#W3")]),
        ("return", vec![order("#W5", "pending"), order("#W6", "delivered"), ret("#W6")]),
        ("return", vec![order("#W7", "pending"), order("#W8", "delivered"), ret("#W8"), ret("#W8")]),
        ("cancel", vec![order("#W9", "pending"), call("cancel", json!({"order_id": "#W9"}), Some(json!("ok")))]),
    ]);
    let flow = mine_dataflow(&records);
    let requires = &flow.argument("return_items", "order_id").unwrap().requires;
    assert_eq!(requires.len(), 1, "{requires:?}");
    let found = &requires[0];
    assert_eq!(
        (found.tool.as_str(), found.key.as_str(), found.field.as_str(), &found.value),
        ("get_order", "$.order_id", "$.status", &json!("delivered"))
    );
    assert_eq!(found.support, 4, "four distinct orders; #W8 returned twice counts once");
    // One cancel is no evidence, and `get_order`'s own order ids vary in status.
    assert!(flow.argument("cancel", "order_id").unwrap().requires.is_empty());
    assert!(flow.argument("get_order", "order_id").unwrap().requires.is_empty());

    let tree = ProcessTree::parse("->( *( 'get_order', tau ), 'return_items' )").unwrap();
    let log = EventLog::from_records(&records[..4], Classifier::ToolName);
    let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
    let node = |tool: &str| {
        graph.nodes.iter().find(|n| matches!(&n.kind, NodeKind::Tool { hints, .. } if hints[0] == tool)).unwrap()
    };
    let NodeKind::Tool { bindings, .. } = &node("return_items").kind else { unreachable!() };
    let bound = &bindings["order_id"].requires;
    assert_eq!(bound.len(), 1, "{bindings:?}");
    assert_eq!((bound[0].node.as_str(), &bound[0].value), (node("get_order").id.as_str(), &json!("delivered")));
}

/// Three readings that chance explains are no precondition: when nine in ten looked-up
/// orders were delivered, three delivered returns say little.
#[test]
fn a_precondition_chance_explains_is_not_mined() {
    let order = |id: &str, status: &str| {
        call("get_order", json!({"order_id": id}), Some(json!({"order_id": id, "status": status})))
    };
    let ret = |id: &str| call("return_items", json!({"order_id": id}), Some(json!("ok")));
    let mut logs = Vec::new();
    for idx in 0..3 {
        let id = format!("#R{idx}");
        logs.push(("return", vec![order(&id, "delivered"), ret(&id)]));
    }
    let statuses: Vec<(String, &str)> =
        (0..10).map(|idx| (format!("#L{idx}"), if idx == 0 { "pending" } else { "delivered" })).collect();
    logs.push(("look", statuses.iter().map(|(id, status)| order(id, status)).collect()));
    let flow = mine_dataflow(&records_of(logs));
    // 12 of 13 results say delivered: (12/13)^3 ≈ 0.79, far above 5%.
    assert!(flow.argument("return_items", "order_id").unwrap().requires.is_empty());
}

/// Decision mining on queries: a tool the logs called only when the query said
/// `exchange` gets that cue (9 of 23 queries hold it: 9 of 9 by chance has probability
/// (9/23)^9 ≈ 0.0002), a word every query holds is none, and a tool called in fewer than
/// five records has none; the skeleton's branch carries the cue on its route.
#[test]
fn words_without_which_a_tool_was_never_called_are_its_cues() {
    let exchange = || call("exchange", json!({"order_id": "#W1"}), Some(json!("ok")));
    let cancel = || call("cancel", json!({"order_id": "#W1"}), Some(json!("ok")));
    let look = || call("get_order", json!({"order_id": "#W1"}), Some(json!({"status": "delivered"})));
    let mut logs = Vec::new();
    for idx in 0..9 {
        // The cue in every exchange query, in its several spellings of case and punctuation.
        let query = ["Please EXCHANGE my lamp.", "exchange/return the kettle", "I want to exchange it"][idx % 3];
        logs.push((query, vec![look(), exchange()]));
    }
    for _ in 0..4 {
        logs.push(("Please cancel it, my order", vec![look(), cancel()]));
    }
    for _ in 0..10 {
        logs.push(("Please tell me about my order", vec![look()]));
    }
    let records = records_of(logs);
    let flow = mine_dataflow(&records);
    assert_eq!(flow.cues.get("exchange"), Some(&vec!["exchange".to_owned()]), "{:?}", flow.cues);
    assert!(!flow.cues.contains_key("cancel"), "four records are too few: {:?}", flow.cues);
    assert!(!flow.cues.contains_key("get_order"), "`please` is in every query: {:?}", flow.cues);

    let tree = ProcessTree::parse("->( 'get_order', X( 'exchange', 'cancel', tau ) )").unwrap();
    let log = EventLog::from_records(&records, Classifier::ToolName);
    let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
    let cues = graph
        .nodes
        .iter()
        .find_map(|node| match &node.kind {
            NodeKind::Branch { cues, .. } => Some(cues.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(cues.into_iter().collect::<Vec<_>>(), [("exchange".to_owned(), vec!["exchange".to_owned()])]);
}

/// Of the mined queries that reached a branch holding a route's cue, how many took the
/// route: nine exchange queries exchanged, two more that said `exchange` only asked
/// about the order, so the branch's `cued` is 9 of 11 (and its description says so).
#[test]
fn a_branch_counts_the_queries_holding_a_routes_cue_that_took_it() {
    let exchange = || call("exchange", json!({"order_id": "#W1"}), Some(json!("ok")));
    let look = || call("get_order", json!({"order_id": "#W1"}), Some(json!({"status": "delivered"})));
    let mut logs = Vec::new();
    for idx in 0..9 {
        let query = ["I want to exchange my lamp", "Please exchange the kettle", "An exchange for the mug"][idx % 3];
        logs.push((query, vec![look(), exchange()]));
    }
    for _ in 0..2 {
        logs.push(("Can I exchange it later? Where is my order", vec![look()]));
    }
    for _ in 0..16 {
        logs.push(("Where is my order", vec![look()]));
    }
    let records = records_of(logs);
    let flow = mine_dataflow(&records);
    assert_eq!(flow.cues.get("exchange"), Some(&vec!["exchange".to_owned()]), "{:?}", flow.cues);
    let tree = ProcessTree::parse("->( 'get_order', X( 'exchange', tau ) )").unwrap();
    let log = EventLog::from_records(&records, Classifier::ToolName);
    let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
    let node = graph.nodes.iter().find(|node| matches!(node.kind, NodeKind::Branch { .. })).unwrap();
    let NodeKind::Branch { cued, .. } = &node.kind else { unreachable!() };
    assert_eq!(cued.iter().collect::<Vec<_>>(), [(&"exchange".to_owned(), &[9, 11])]);
    let description = node.description.clone().unwrap();
    assert!(description.contains("holding a route's cue, took it: `exchange` 9 of 11"), "{description}");

    // Without a dataflow's records (a skeleton from the tree alone) nothing is counted.
    let plain = flowmem_mining::tree_to_skeleton(&tree);
    assert!(plain.nodes.iter().all(|node| match &node.kind {
        NodeKind::Branch { cued, .. } => cued.is_empty(),
        _ => true,
    }));
}

/// A record whose log omits the lookups a branch's route makes says nothing of the
/// branch: six records find the user, list her orders and cancel one; four cancel with
/// no lookup (their order ids come from nowhere in their logs, where the other records
/// took them from the order list, which the user lookup feeds); four do nothing. The
/// lookup branch counts 6 against the 4 that did nothing, not against 8, and says why.
#[test]
fn records_whose_logs_omit_a_routes_lookups_are_left_out_of_the_branch() {
    let mut logs: Vec<(String, Vec<ToolCall>)> = Vec::new();
    for idx in 0..6 {
        let user = format!("u{idx}");
        let order = format!("#W{idx}");
        logs.push((
            format!("I am user {idx}, cancel my order"),
            vec![
                call("find_user", json!({"name": format!("name{idx}")}), Some(json!({"user_id": user}))),
                call("get_orders", json!({"user_id": user}), Some(json!({"orders": [order]}))),
                call("cancel", json!({"order_id": order}), Some(json!("ok"))),
            ],
        ));
    }
    for idx in 10..14 {
        logs.push((
            format!("Cancel an order for me {idx}"),
            vec![call("cancel", json!({"order_id": format!("#W{idx}")}), Some(json!("ok")))],
        ));
    }
    for _ in 0..4 {
        logs.push(("What are your opening hours".to_owned(), Vec::new()));
    }
    let records = records_of(logs.iter().map(|(query, calls)| (query.as_str(), calls.clone())).collect());
    let flow = mine_dataflow(&records);
    let tree = ProcessTree::parse("->( X( ->( 'find_user', 'get_orders' ), tau ), X( 'cancel', tau ) )").unwrap();
    let log = EventLog::from_records(&records, Classifier::ToolName);
    let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
    let branches: Vec<_> = graph.nodes.iter().filter(|node| matches!(node.kind, NodeKind::Branch { .. })).collect();
    let NodeKind::Branch { taken, .. } = &branches[0].kind else { unreachable!() };
    assert_eq!(
        taken.iter().map(|(route, n)| (route.as_str(), *n)).collect::<Vec<_>>(),
        [("find_user", 6), ("skip", 4)]
    );
    let description = branches[0].description.clone().unwrap();
    assert!(description.contains("4 records that took no route are left out"), "{description}");
    // The cancel branch has no lookup to lack: the four that did nothing count.
    let NodeKind::Branch { taken, .. } = &branches[1].kind else { unreachable!() };
    assert_eq!(taken.iter().map(|(route, n)| (route.as_str(), *n)).collect::<Vec<_>>(), [("cancel", 10), ("skip", 4)]);
}

/// Decision mining on queries, by their nearest: a refund the logs made when the query
/// said `broken` or `damaged` (neither word in nine of ten refund queries, so no cue),
/// and skipped for queries about tracking. Left out in turn, each record's five nearest
/// name its route (18 of 18), where the most taken route, `skip`, is right for 10: the
/// branch keeps its mined queries by route, and the graph their words. When the words
/// say nothing (every query the same), the branch keeps none.
#[test]
fn a_branch_whose_nearest_mined_queries_name_its_route_keeps_them() {
    let look = || call("get_order", json!({"order_id": "#W1"}), Some(json!({"status": "delivered"})));
    let refund = || call("refund", json!({"order_id": "#W1"}), Some(json!("ok")));
    let mut logs = Vec::new();
    for query in ["My lamp arrived broken", "The kettle came damaged"] {
        for _ in 0..4 {
            logs.push((query, vec![look(), refund()]));
        }
    }
    for query in ["Where is my parcel today", "Track the parcel please"] {
        for _ in 0..5 {
            logs.push((query, vec![look()]));
        }
    }
    let records = records_of(logs);
    let tree = ProcessTree::parse("->( 'get_order', X( 'refund', tau ) )").unwrap();
    let branch = |records: &[Record]| {
        let flow = mine_dataflow(records);
        assert!(flow.cues.is_empty(), "{:?}", flow.cues);
        let log = EventLog::from_records(records, Classifier::ToolName);
        let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
        let node = graph.nodes.iter().find(|node| matches!(node.kind, NodeKind::Branch { .. })).unwrap().clone();
        (graph, node)
    };
    let (graph, node) = branch(&records);
    let NodeKind::Branch { nearest, .. } = &node.kind else { unreachable!() };
    assert_eq!(nearest["refund"], [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(nearest["skip"], [8, 9, 10, 11, 12, 13, 14, 15, 16, 17]);
    assert_eq!(graph.queries.len(), 18);
    assert_eq!(graph.queries[0], ["arrived", "broken", "lamp"]);
    let description = node.description.unwrap();
    assert!(
        description.contains("right for 18 of 18 records left out in turn, the most taken route for 10"),
        "{description}"
    );

    let same: Vec<Record> =
        records.into_iter().map(|record| Record { query: "Please help with my order".to_owned(), ..record }).collect();
    let (graph, node) = branch(&same);
    let NodeKind::Branch { nearest, .. } = &node.kind else { unreachable!() };
    assert!(nearest.is_empty(), "{nearest:?}");
    assert!(graph.queries.is_empty());
}

/// Two array arguments sent at one length in every call holding both (three at least)
/// name each other; a pair that once differed, or seen twice only, does not.
#[test]
fn array_arguments_always_sent_at_one_length_name_each_other() {
    let swap = |old: Value, new: Value, extra: Value| {
        call("exchange", json!({"item_ids": old, "new_item_ids": new, "notes": extra}), Some(json!("ok")))
    };
    let records = records_of(vec![
        ("a", vec![swap(json!(["1"]), json!(["2"]), json!(["x", "y"]))]),
        ("b", vec![swap(json!(["3", "4"]), json!(["5", "6"]), json!(["z", "w"]))]),
        ("c", vec![swap(json!(["7"]), json!(["8"]), json!(["v", "u"]))]),
    ]);
    let flow = mine_dataflow(&records);
    let same = |arg: &str| flow.argument("exchange", arg).unwrap().same_length_as.clone();
    assert_eq!(same("item_ids[*]").as_deref(), Some("new_item_ids"));
    assert_eq!(same("new_item_ids[*]").as_deref(), Some("item_ids"));
    assert_eq!(same("notes[*]"), None, "`notes` had two elements against one in two calls");
    let flow = mine_dataflow(&records[..2]);
    assert_eq!(flow.argument("exchange", "item_ids[*]").unwrap().same_length_as, None, "two calls are too few");
}

/// Elements of two arrays that stood side by side in one earlier result, in every call
/// (a new item is a variant of the old item's product), are mined as a pairing and bound
/// to the node of that tool; a call that took a variant of another product breaks it.
#[test]
fn array_elements_from_one_result_each_are_paired() {
    let product = |id: &str, variants: &[&str]| {
        let variants: serde_json::Map<String, Value> =
            variants.iter().map(|item| ((*item).to_owned(), json!({"item_id": item, "available": true}))).collect();
        call("get_product", json!({"product_id": id}), Some(json!({"product_id": id, "variants": variants})))
    };
    let swap =
        |old: Value, new: Value| call("exchange", json!({"item_ids": old, "new_item_ids": new}), Some(json!("ok")));
    let lamp = || product("lamp", &["11", "12", "13"]);
    let desk = || product("desk", &["21", "22"]);
    let mut logs = vec![
        ("a", vec![lamp(), desk(), swap(json!(["11"]), json!(["12"]))]),
        ("b", vec![desk(), lamp(), swap(json!(["21", "13"]), json!(["22", "11"]))]),
        ("c", vec![lamp(), swap(json!(["13"]), json!(["12"]))]),
    ];
    let flow = mine_dataflow(&records_of(logs.clone()));
    let paired = flow.argument("exchange", "new_item_ids[*]").unwrap().paired_with.clone().unwrap();
    assert_eq!((paired.arg.as_str(), paired.tool.as_str()), ("item_ids", "get_product"));
    assert_eq!((paired.path.as_str(), paired.support), ("$.variants[*].item_id", 3));
    assert_eq!(flow.argument("exchange", "item_ids[*]").unwrap().paired_with.as_ref().unwrap().arg, "new_item_ids");

    let tree = ProcessTree::parse("->( 'get_product', 'exchange' )").unwrap();
    let records = records_of(logs.clone());
    let log = EventLog::from_records(&records, Classifier::ToolName);
    let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
    let bound = graph
        .nodes
        .iter()
        .find_map(|node| match &node.kind {
            NodeKind::Tool { bindings, hints, .. } if hints == &["exchange"] => {
                bindings.get("new_item_ids[*]").cloned()
            }
            _ => None,
        })
        .unwrap();
    let pairing = bound.paired_with.unwrap();
    assert_eq!(pairing.arg, "item_ids");
    let product_node = graph
        .nodes
        .iter()
        .find(|node| matches!(&node.kind, NodeKind::Tool { hints, .. } if hints == &["get_product"]))
        .unwrap();
    assert_eq!(pairing.node, product_node.id);

    // One exchange for a variant of another product: no pairing is left.
    logs.push(("d", vec![lamp(), desk(), swap(json!(["11"]), json!(["21"]))]));
    let flow = mine_dataflow(&records_of(logs.clone()));
    assert_eq!(flow.argument("exchange", "new_item_ids[*]").unwrap().paired_with, None);
    // Two calls are too few.
    let flow = mine_dataflow(&records_of(logs[..2].to_vec()));
    assert_eq!(flow.argument("exchange", "new_item_ids[*]").unwrap().paired_with, None);
}
