//! Process tree → skeleton [`WorkflowGraph`], FlowScout's initial workflow.
//!
//! The mapping (see `graph.rs` in `flowmem-model` for execution semantics):
//! - a `plan` LLM node is the entry and a `synthesize` LLM node the exit;
//! - an activity becomes a tool node hinted with the activity (use
//!   [`Classifier::ToolName`](crate::Classifier) so that activities are tool names);
//! - `->` chains its children with ordered edges;
//! - `X` becomes a `branch` node (an LLM judge picks the route, unless the mined evidence
//!   it carries settles it) with one labelled route per child, all meeting at a `join`; a
//!   `tau` child is a direct route to the join, named `skip` and offered last;
//! - `+` becomes a `parallel` node whose children run concurrently and meet at a `join`;
//! - `*( do, redo )` means `do (redo do)*`. When `redo` is `tau` it is a `loop` node whose
//!   `body` is `do`, closed by a `back` edge: the body runs at least once and repeats
//!   until the judge says it is done. Otherwise `do` runs once, then a `branch` chooses
//!   between `done` and `retry`; `retry` enters a `loop` whose body is `redo` followed by
//!   a second copy of `do`. Both routes meet at a `join`. The language is exactly
//!   `do (redo do)*`, bounded by `max_iterations`.
//!
//! [`order_routes`] puts each choice's routes in the order the log supports them, most
//! taken first. [`tree_to_bound_skeleton`] adds the mined data flow: data orders parallel blocks whose
//! members feed each other, and every tool node carries its arguments' bindings.

use std::collections::{BTreeMap, BTreeSet};

use flowmem_model::{Condition, Edge, EdgeKind, GraphNode, LlmRole, NodeKind, WorkflowGraph};

use crate::dataflow::{BindingConfig, Dataflow, fill_bindings, order_parallels};
use crate::log::EventLog;
use crate::tree::{Operator, ProcessTree};

/// The fewest mined records reaching a branch for it to be decided by the nearest of
/// their queries.
pub const MIN_NEAREST_RECORDS: usize = 6;

/// The most body runs a mined loop allows.
pub const SKELETON_MAX_ITERATIONS: u32 = 5;

/// Builds the skeleton workflow graph of `tree`.
///
/// Node ids are `plan`, `synthesize`, `tool_<n>`, `branch_<n>`, `parallel_<n>`,
/// `loop_<n>` and `join_<n>`; they are unique.
///
/// # Example
///
/// ```
/// use flowmem_mining::{tree_to_skeleton, ProcessTree};
///
/// let tree = ProcessTree::parse("->( 'find_user', X( 'cancel_order', 'return_items' ) )")?;
/// let graph = tree_to_skeleton(&tree);
/// assert_eq!(graph.entry, "plan");
/// assert_eq!(graph.exit, "synthesize");
/// assert!(graph.node("branch_2").is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn tree_to_skeleton(tree: &ProcessTree) -> WorkflowGraph {
    let gaps = Gaps { feeds: &BTreeMap::new(), lacking: &[] };
    build_skeleton(tree, None, &[], &BTreeMap::new(), &gaps)
}

/// The cases of `log`, one per variant with its count and no query words.
fn log_cases(log: &EventLog) -> Vec<Case> {
    let names = log.activities();
    let case = |variant: &crate::log::TraceVariant| Case {
        names: variant.activities.iter().map(|&id| names[id as usize].clone()).collect(),
        count: variant.count,
        record: None,
    };
    log.variants().iter().map(case).collect()
}

/// What the mined data flow says of the records' logs that omit steps.
struct Gaps<'a> {
    /// Per tool, the tools it is a provider of ([`Dataflow`]'s `feeds`).
    feeds: &'a BTreeMap<String, BTreeSet<String>>,
    /// Per record, the providers it lacked ([`Dataflow`]'s `lacking`).
    lacking: &'a [BTreeSet<String>],
}

/// `queries` are the [`decision_words`](flowmem_model::decision_words) of the records
/// that `cases` name (empty for cases without records).
fn build_skeleton(
    tree: &ProcessTree,
    cases: Option<Vec<Case>>,
    queries: &[Vec<String>],
    cues: &BTreeMap<String, Vec<String>>,
    gaps: &Gaps<'_>,
) -> WorkflowGraph {
    let mut builder = Builder {
        nodes: Vec::new(),
        edges: Vec::new(),
        n_ids: 0,
        counting: cases.is_some(),
        cues: cues.clone(),
        queries,
        gaps,
        decided_by_nearest: false,
    };
    builder.nodes.push(node("plan", llm(LlmRole::Plan), "Parse the query into sub-tasks"));
    let cases = cases.unwrap_or_default();
    let end = builder.build(tree, Open { node: "plan".into(), label: None }, &cases);
    builder.nodes.push(node("synthesize", llm(LlmRole::Synthesize), "Write the final answer"));
    builder.connect(end, "synthesize");
    WorkflowGraph {
        name: Some("mined skeleton".into()),
        nodes: builder.nodes,
        edges: builder.edges,
        entry: "plan".into(),
        exit: "synthesize".into(),
        queries: if builder.decided_by_nearest { queries.to_vec() } else { Vec::new() },
    }
}

/// Builds the skeleton of `tree` with the control and data flow mined from the same logs:
/// `log`, the records' tool sequences, and `dataflow`, their arguments' sources.
///
/// Each branch counts, per route, the cases that reached it and took the route
/// (`taken`): those in which an activity of the route occurs, and for `skip` those in
/// which none of the other routes' activities does. Like [`order_routes`], this is a
/// proxy: an activity of a route may also occur elsewhere in a case. The cases are the
/// records `dataflow` was mined from (`log` is used only for a dataflow without them,
/// such as a deserialised one), so a branch also knows which records' queries took each
/// route: when, leaving each of them out in turn, the route most of its
/// [`NEAREST_VOTES`](flowmem_model::NEAREST_VOTES) nearest queries took is right for more
/// than half and more often than the most taken route (with at least
/// [`MIN_NEAREST_RECORDS`] records), the branch keeps them (`nearest`, indices into the
/// graph's `queries`) and its description says how often they were right.
///
/// A record that took no route of a branch is left out of its evidence when its log
/// omits steps a route leads to: a value its log holds with no source came, in the other
/// records, from a tool the route's tools feed, which it did not call (τ²-bench's
/// reference logs often hold a task's writes without the lookups their values came
/// from; such a record's skip is a gap in the log, not a decision).
///
/// A dependency found in the data overrides a concurrency found in the control flow:
/// members of a `+` block whose tools take values from each other's results (or
/// arguments) are ordered as the data requires, and members that are independent stay
/// parallel. Then each tool node gets the bindings of its tool's arguments (see
/// [`BindingConfig`]); a result or argument source names the nearest upstream node
/// hinted with the source's tool, and a source with no such node is left out.
///
/// # Example
///
/// ```
/// use flowmem_mining::{BindingConfig, Classifier, EventLog, ProcessTree, mine_dataflow, tree_to_bound_skeleton};
/// use flowmem_model::{NodeKind, Record, ToolCall, ValueSource};
/// use serde_json::json;
///
/// let mut order = ToolCall::new("get_order", json!({"order_id": "W1"}))?;
/// order.result = Some(json!({"items": [{"product_id": "p7"}]}));
/// let product = ToolCall::new("get_product", json!({"product_id": "p7"}))?;
/// let record: Record = serde_json::from_value(json!({"id": "0", "query": "Where is order W1?"}))?;
/// let records = [Record { orchestration: vec![order, product], ..record }];
/// let log = EventLog::from_records(&records, Classifier::ToolName);
/// let flow = mine_dataflow(&records);
///
/// let tree = ProcessTree::parse("+( 'get_order', 'get_product' )")?;
/// let graph = tree_to_bound_skeleton(&tree, &log, &flow, &BindingConfig::skeleton());
/// assert!(graph.node("parallel_1").is_none(), "the data orders the block");
/// let NodeKind::Tool { bindings, .. } = &graph.node("tool_2").unwrap().kind else { unreachable!() };
/// let source = &bindings["product_id"].sources[0].source;
/// assert_eq!(source, &ValueSource::Result { node: "tool_1".into(), path: "$.items[*].product_id".into() });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn tree_to_bound_skeleton(
    tree: &ProcessTree,
    log: &EventLog,
    dataflow: &Dataflow,
    cfg: &BindingConfig,
) -> WorkflowGraph {
    let ordered = order_parallels(tree, dataflow, cfg);
    let cases = if dataflow.cases.is_empty() {
        log_cases(log)
    } else {
        let case = |(record, (names, _)): (usize, &(BTreeSet<String>, Vec<String>))| Case {
            names: names.clone(),
            count: 1,
            record: Some(record),
        };
        dataflow.cases.iter().enumerate().map(case).collect()
    };
    let queries: Vec<Vec<String>> = dataflow.cases.iter().map(|(_, words)| words.clone()).collect();
    let gaps = Gaps { feeds: &dataflow.feeds, lacking: &dataflow.lacking };
    let mut graph = build_skeleton(&ordered, Some(cases), &queries, &dataflow.cues, &gaps);
    fill_bindings(&mut graph, dataflow, cfg);
    graph
}

/// `tree` with the routes of every choice (`X`) in order of support in `log`, most
/// supported first: the cases (counted with their variants' counts) in which an activity
/// of the route occurs. Ties keep the miner's order, and `tau` keeps its place (the
/// skeleton offers it last, as `skip`, whatever its support). The language is unchanged.
///
/// A small model that picks routes leans to the first option it reads, so the skeleton
/// then offers the route the log took most often first. The count is a proxy: an
/// activity of a route may also occur elsewhere in a case.
///
/// # Example
///
/// ```
/// use flowmem_mining::{EventLogBuilder, ProcessTree, order_routes};
///
/// let mut log = EventLogBuilder::new();
/// log.push_trace(["find_user", "cancel_order"]);
/// log.push_trace(["find_user", "return_items"]);
/// log.push_trace(["find_user", "return_items"]);
/// let tree = ProcessTree::parse("->( 'find_user', X( 'cancel_order', 'return_items' ) )")?;
/// let ordered = order_routes(&tree, &log.build());
/// assert_eq!(ordered.to_string(), "->( 'find_user', X( 'return_items', 'cancel_order' ) )");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn order_routes(tree: &ProcessTree, log: &EventLog) -> ProcessTree {
    let ProcessTree::Operator { operator, children } = tree else {
        return tree.clone();
    };
    let mut children: Vec<ProcessTree> = children.iter().map(|child| order_routes(child, log)).collect();
    if *operator == Operator::Xor {
        let support = |child: &ProcessTree| -> u64 {
            let labels: Vec<&str> = child.labels();
            log.variants()
                .iter()
                .filter(|variant| {
                    variant.activities.iter().any(|&id| labels.contains(&log.activities()[id as usize].as_str()))
                })
                .map(|variant| variant.count)
                .sum()
        };
        // Stable: equal support keeps the miner's order; `tau` is placed by the builder.
        let mut keyed: Vec<(u64, ProcessTree)> = children
            .into_iter()
            .map(|child| (if child == ProcessTree::Tau { 0 } else { support(&child) }, child))
            .collect();
        keyed.sort_by_key(|(support, _)| std::cmp::Reverse(*support));
        children = keyed.into_iter().map(|(_, child)| child).collect();
    }
    ProcessTree::operator(*operator, children)
}

/// The open end of a built fragment: the node to continue from and the label the next
/// edge out of it must carry (a branch route, or a loop's `body` / `exit`).
struct Open {
    node: String,
    label: Option<String>,
}

/// A group of the log's cases with the same activities: a variant of the log, or one
/// mined record.
#[derive(Clone, PartialEq)]
struct Case {
    /// The activities.
    names: BTreeSet<String>,
    /// How many cases.
    count: u64,
    /// The record's index, for one record.
    record: Option<usize>,
}

/// The cases in which an activity of `tree` occurs.
fn cases_of(cases: &[Case], tree: &ProcessTree) -> Vec<Case> {
    let labels = tree.labels();
    cases.iter().filter(|case| labels.iter().any(|label| case.names.contains(*label))).cloned().collect()
}

struct Builder<'a> {
    nodes: Vec<GraphNode>,
    edges: Vec<Edge>,
    n_ids: usize,
    /// Whether branches count the cases that took each route (a log was given).
    counting: bool,
    /// Per tool, its mined query cues ([`Dataflow::cues`]).
    cues: BTreeMap<String, Vec<String>>,
    /// The records' query words, by record index.
    queries: &'a [Vec<String>],
    /// The records whose logs omit steps, and where the steps lead.
    gaps: &'a Gaps<'a>,
    /// Whether a branch is decided by the nearest queries (the graph then keeps them).
    decided_by_nearest: bool,
}

impl Builder<'_> {
    fn id(&mut self, kind: &str) -> String {
        self.n_ids += 1;
        format!("{kind}_{}", self.n_ids)
    }

    fn connect(&mut self, from: Open, to: &str) {
        self.edges.push(Edge { from: from.node, to: to.to_owned(), kind: EdgeKind::Data, label: from.label });
    }

    fn add(&mut self, from: Open, node: GraphNode) -> String {
        let id = node.id.clone();
        self.nodes.push(node);
        self.connect(from, &id);
        id
    }

    /// Builds `tree` after `from`; `cases` are the log's cases that reach it.
    fn build(&mut self, tree: &ProcessTree, from: Open, cases: &[Case]) -> Open {
        match tree {
            ProcessTree::Tau => from,
            ProcessTree::Activity { label } => {
                let id = self.id("tool");
                let kind = NodeKind::Tool { hints: vec![label.clone()], instruction: None, bindings: BTreeMap::new() };
                let id = self.add(from, node(&id, kind, &format!("Call `{label}`")));
                Open { node: id, label: None }
            }
            ProcessTree::Operator { operator: Operator::Sequence, children } => {
                children.iter().fold(from, |open, child| self.build(child, open, cases))
            }
            ProcessTree::Operator { operator: Operator::Xor, children } => {
                // The routes that do something first, `skip` last: a small judge leans
                // to the first option it reads (on τ²-bench airline, SmolLM2 took a
                // leading `skip` on every branch, and the mined workflow called no tool).
                let mut children = children.clone();
                children.sort_by_key(|child| *child == ProcessTree::Tau);
                let children = &children;
                let routes = route_labels(children);
                let question = format!("Which route fits the query: {}?", routes.join(" | "));
                let mut gapped = 0;
                let route_cases: Vec<Vec<Case>> = children
                    .iter()
                    .map(|child| match child {
                        ProcessTree::Tau => {
                            let others: Vec<Vec<Case>> = children.iter().map(|other| cases_of(cases, other)).collect();
                            let elsewhere = |case: &Case| others.iter().any(|taken| taken.contains(case));
                            let skipped: Vec<Case> = cases.iter().filter(|case| !elsewhere(case)).cloned().collect();
                            let (gaps, kept): (Vec<Case>, Vec<Case>) =
                                skipped.into_iter().partition(|case| self.skipped_with_a_gap(case, children));
                            gapped = gaps.len();
                            kept
                        }
                        child => cases_of(cases, child),
                    })
                    .collect();
                let gap_why = if gapped == 0 {
                    String::new()
                } else {
                    format!(
                        "; {gapped} records that took no route are left out: values their logs hold with no source came, in other records, from tools a route leads to"
                    )
                };
                let taken = self.taken(&routes, &route_cases);
                let cues = self.route_cues(children, &routes);
                let (nearest, why) = self.nearest(&routes, &route_cases);
                let (cued, cued_why) = self.cued(&routes, &route_cases, &cues);
                let branch = self.id("branch");
                let kind = NodeKind::Branch { condition: Condition::Judge { question }, taken, cues, nearest, cued };
                let description = format!("Choose one alternative{gap_why}{why}{cued_why}");
                let branch = self.add(from, node(&branch, kind, &description));
                let join = self.id("join");
                let mut ends = Vec::new();
                for ((child, route), route_cases) in children.iter().zip(routes).zip(&route_cases) {
                    ends.push(self.build(child, Open { node: branch.clone(), label: Some(route) }, route_cases));
                }
                self.nodes.push(node(&join, NodeKind::Join {}, "Alternatives meet"));
                for end in ends {
                    self.connect(end, &join);
                }
                Open { node: join, label: None }
            }
            ProcessTree::Operator { operator: Operator::Parallel, children } => {
                let parallel = self.id("parallel");
                let parallel = self.add(from, node(&parallel, NodeKind::Parallel {}, "Run the members concurrently"));
                let join = self.id("join");
                let mut ends = Vec::new();
                for child in children {
                    ends.push(self.build(child, Open { node: parallel.clone(), label: None }, cases));
                }
                self.nodes.push(node(&join, NodeKind::Join {}, "Wait for every member"));
                for end in ends {
                    self.connect(end, &join);
                }
                Open { node: join, label: None }
            }
            ProcessTree::Operator { operator: Operator::Loop, children } => {
                let tau = ProcessTree::Tau;
                let body = children.first().unwrap_or(&tau);
                let redo = children.get(1).unwrap_or(&tau);
                if *redo == ProcessTree::Tau {
                    return self.build_repeat(body, None, from, cases);
                }
                let after_first = self.build(body, from, cases);
                let question = format!("Must {} be retried?", describe(redo));
                let retry_cases = cases_of(cases, redo);
                let done_cases: Vec<Case> = cases.iter().filter(|case| !retry_cases.contains(case)).cloned().collect();
                let routes = ["done".to_owned(), "retry".to_owned()];
                let route_cases = [done_cases, retry_cases.clone()];
                let taken = self.taken(&routes, &route_cases);
                let (nearest, why) = self.nearest(&routes, &route_cases);
                let branch = self.id("branch");
                let kind = NodeKind::Branch {
                    condition: Condition::Judge { question },
                    taken,
                    cues: BTreeMap::new(),
                    nearest,
                    cued: BTreeMap::new(),
                };
                let branch = self.add(after_first, node(&branch, kind, &format!("Decide whether to retry{why}")));
                let join = self.id("join");
                let open = Open { node: branch.clone(), label: Some("retry".into()) };
                let retried = self.build_repeat(redo, Some(body), open, &retry_cases);
                self.nodes.push(node(&join, NodeKind::Join {}, "Done or retried"));
                self.connect(Open { node: branch, label: Some("done".into()) }, &join);
                self.connect(retried, &join);
                Open { node: join, label: None }
            }
        }
    }

    /// The cues of a branch's routes: a route whose every tool has cues has them all (its
    /// query needs one of them); a route with a tool without cues, and `skip`, have none.
    fn route_cues(&self, children: &[ProcessTree], routes: &[String]) -> BTreeMap<String, Vec<String>> {
        let mut res = BTreeMap::new();
        for (child, route) in children.iter().zip(routes) {
            let labels = child.labels();
            if labels.is_empty() || !labels.iter().all(|label| self.cues.contains_key(*label)) {
                continue;
            }
            let words: BTreeSet<String> = labels.iter().flat_map(|label| self.cues[*label].iter().cloned()).collect();
            res.insert(route.clone(), words.into_iter().collect());
        }
        res
    }

    /// A branch's mined queries per route, for deciding it by the nearest of them
    /// ([`nearest_route`](flowmem_model::nearest_route)), with a note for its description;
    /// none unless, leaving each record that reached the branch out in turn, the route of
    /// its nearest was right for more than half of them and more often than the route
    /// most of the others took. Needs [`MIN_NEAREST_RECORDS`] records.
    fn nearest(&mut self, routes: &[String], route_cases: &[Vec<Case>]) -> (BTreeMap<String, Vec<usize>>, String) {
        let examples: Vec<(&str, usize)> = routes
            .iter()
            .zip(route_cases)
            .flat_map(|(route, cases)| cases.iter().filter_map(|case| Some((route.as_str(), case.record?))))
            .collect();
        let none = (BTreeMap::new(), String::new());
        if examples.len() < MIN_NEAREST_RECORDS {
            return none;
        }
        let queries = self.queries;
        let (mut by_nearest, mut by_most) = (0, 0);
        for (held, &(route, record)) in examples.iter().enumerate() {
            let others =
                || examples.iter().enumerate().filter(move |&(idx, _)| idx != held).map(|(_, example)| *example);
            let near = others().map(|(route, other)| (route, &queries[other][..]));
            if flowmem_model::nearest_route(&queries[record], near).is_some_and(|vote| vote.route == route) {
                by_nearest += 1;
            }
            let mut counts: Vec<(&str, usize)> = routes.iter().map(|route| (route.as_str(), 0)).collect();
            for (taken, _) in others() {
                if let Some(entry) = counts.iter_mut().find(|(label, _)| *label == taken) {
                    entry.1 += 1;
                }
            }
            // The first of the most taken: `max_by_key` would keep the last.
            let most = counts.iter().fold(counts[0], |best, &entry| if entry.1 > best.1 { entry } else { best });
            if most.0 == route {
                by_most += 1;
            }
        }
        if 2 * by_nearest <= examples.len() || by_nearest <= by_most {
            return none;
        }
        self.decided_by_nearest = true;
        let why = format!(
            "; by the nearest mined queries (right for {by_nearest} of {} records left out in turn, the most taken route for {by_most})",
            examples.len()
        );
        let mut res: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (route, record) in examples {
            res.entry(route.to_owned()).or_default().push(record);
        }
        (res, why)
    }

    /// Whether `case`, a record that took no route of a branch whose routes are
    /// `children`, has a log that omits steps a route leads to: walking the data flow
    /// (`feeds`, provider to provided) from a route's tools through tools the record did
    /// not call reaches a tool it lacked (the provider, in other records, of a value its
    /// log holds with no source). A route's tool the record lacks is not enough by itself:
    /// the record may not have wanted it (τ²-bench airline's bookings took their flights
    /// from a cancellation's result, and a booking without one is not a skipped cancel).
    /// Such a record says nothing of the branch: τ²-bench's reference logs often hold the
    /// writes of a task without the lookups its values came from.
    fn skipped_with_a_gap(&self, case: &Case, children: &[ProcessTree]) -> bool {
        let Some(lacking) = case.record.and_then(|record| self.gaps.lacking.get(record)) else { return false };
        if lacking.is_empty() {
            return false;
        }
        let mut stack: Vec<&str> =
            children.iter().flat_map(ProcessTree::labels).filter(|tool| !case.names.contains(*tool)).collect();
        let mut seen = BTreeSet::new();
        while let Some(tool) = stack.pop() {
            if !seen.insert(tool) {
                continue;
            }
            // Only a tool the route's tools feed: a record lacking a route's own tool may
            // simply not have wanted it.
            let fed = self.gaps.feeds.get(tool).into_iter().flatten();
            for next in fed.map(String::as_str).filter(|next| !case.names.contains(*next)) {
                if lacking.contains(next) {
                    return true;
                }
                stack.push(next);
            }
        }
        false
    }

    /// Per route with `cues`, of the mined records reaching the branch whose query holds
    /// one of them: how many took the route, and how many there were; with a note for
    /// the branch's description. Routes no such query reached are left out.
    fn cued(
        &self,
        routes: &[String],
        route_cases: &[Vec<Case>],
        cues: &BTreeMap<String, Vec<String>>,
    ) -> (BTreeMap<String, [u64; 2]>, String) {
        let mut res = BTreeMap::new();
        let mut notes = Vec::new();
        for (route, cases) in routes.iter().zip(route_cases) {
            let Some(words) = cues.get(route) else { continue };
            let holds = |record: &usize| self.queries[*record].iter().any(|word| words.contains(word));
            let holding: BTreeSet<usize> =
                route_cases.iter().flatten().filter_map(|case| case.record).filter(holds).collect();
            if holding.is_empty() {
                continue;
            }
            let took = cases.iter().filter_map(|case| case.record).filter(holds).count();
            notes.push(format!("`{route}` {took} of {}", holding.len()));
            res.insert(route.clone(), [took as u64, holding.len() as u64]);
        }
        let why = if notes.is_empty() {
            String::new()
        } else {
            format!("; of the mined queries holding a route's cue, took it: {}", notes.join(", "))
        };
        (res, why)
    }

    /// The counts of a branch's routes, or none when no log was given.
    fn taken(&self, routes: &[String], route_cases: &[Vec<Case>]) -> BTreeMap<String, u64> {
        if !self.counting {
            return BTreeMap::new();
        }
        let count = |cases: &Vec<Case>| cases.iter().map(|case| case.count).sum();
        routes.iter().cloned().zip(route_cases.iter().map(count)).collect()
    }

    /// A `loop` node whose body is `first` then `then` (when given), closed by a back edge.
    fn build_repeat(&mut self, first: &ProcessTree, then: Option<&ProcessTree>, from: Open, cases: &[Case]) -> Open {
        let id = self.id("loop");
        let question = format!("Is {} done, with no further repetition needed?", describe(first));
        let kind = NodeKind::Loop { max_iterations: SKELETON_MAX_ITERATIONS, until: Condition::Judge { question } };
        let id = self.add(from, node(&id, kind, "Repeat until done"));
        let mut end = self.build(first, Open { node: id.clone(), label: Some("body".into()) }, cases);
        if let Some(then) = then {
            end = self.build(then, end, cases);
        }
        self.edges.push(Edge { from: end.node, to: id.clone(), kind: EdgeKind::Back, label: end.label });
        Open { node: id, label: Some("exit".into()) }
    }
}

/// One unique route label per child: the first activity's name, `skip` for `tau`.
fn route_labels(children: &[ProcessTree]) -> Vec<String> {
    let mut labels: Vec<String> = Vec::with_capacity(children.len());
    for (idx, child) in children.iter().enumerate() {
        let base = match child.labels().first() {
            None => "skip".to_owned(),
            Some(first) => (*first).to_owned(),
        };
        let label = if labels.contains(&base) { format!("{base}#{idx}") } else { base };
        labels.push(label);
    }
    labels
}

fn describe(tree: &ProcessTree) -> String {
    match tree.labels().as_slice() {
        [] => "the step".to_owned(),
        [only] => format!("`{only}`"),
        [first, ..] => format!("the steps starting with `{first}`"),
    }
}

fn llm(role: LlmRole) -> NodeKind {
    NodeKind::Llm { role, instruction: None, model: None }
}

fn node(id: &str, kind: NodeKind, description: &str) -> GraphNode {
    GraphNode { id: id.to_owned(), kind, description: Some(description.to_owned()) }
}

/// A workflow graph that [`skeleton_to_tree`] cannot read as a block-structured process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read workflow graph node `{node}` as a process: {reason}")]
pub struct GraphShapeError {
    /// The node where reading stopped.
    pub node: String,
    /// What is wrong there.
    pub reason: &'static str,
}

/// Reads a workflow graph's tool positions as a process tree, the inverse of
/// [`tree_to_skeleton`] up to loop bounds: a tool node is its hinted tools (a choice when
/// it hints several, any of `all_tools` when it hints none), LLM and join nodes are silent,
/// a `branch` is a choice and a `parallel` node a parallel block between it and the node
/// where its routes meet, a `loop` is `*( body, tau )` (its `max_iterations` is not
/// modelled). Conditions are not modelled either: every route may be taken.
///
/// # Errors
///
/// [`GraphShapeError`] naming the node when an edge names a missing node, a node other
/// than a branch or parallel node has several outgoing edges, the routes of a branch or
/// parallel node never meet, or a loop has no `body` edge.
///
/// # Example
///
/// ```
/// use flowmem_mining::{ProcessTree, skeleton_to_tree, tree_to_skeleton};
///
/// let tree = ProcessTree::parse("->( 'find_user', X( 'cancel', *( 'refund', tau ) ) )")?;
/// let back = skeleton_to_tree(&tree_to_skeleton(&tree), &[])?;
/// assert_eq!(back.canonical(), tree.canonical());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn skeleton_to_tree(graph: &WorkflowGraph, all_tools: &[String]) -> Result<ProcessTree, GraphShapeError> {
    let reader = GraphReader { graph, all_tools };
    let steps = reader.walk(&graph.entry, None, 0)?;
    Ok(ProcessTree::operator(Operator::Sequence, steps).fold())
}

struct GraphReader<'g> {
    graph: &'g WorkflowGraph,
    all_tools: &'g [String],
}

impl<'g> GraphReader<'g> {
    fn error(node: &str, reason: &'static str) -> GraphShapeError {
        GraphShapeError { node: node.to_owned(), reason }
    }

    fn forward(&self, id: &'g str) -> Vec<&'g Edge> {
        self.graph.edges.iter().filter(|e| e.from == id && e.kind != EdgeKind::Back).collect()
    }

    fn single(&self, id: &'g str) -> Result<Option<&'g str>, GraphShapeError> {
        match self.forward(id).as_slice() {
            [] => Ok(None),
            [edge] => Ok(Some(edge.to.as_str())),
            _ => Err(Self::error(id, "several outgoing edges, but it is not a branch or parallel node")),
        }
    }

    /// The steps from `start` until `stop` (excluded) or the end.
    fn walk(&self, start: &'g str, stop: Option<&str>, depth: usize) -> Result<Vec<ProcessTree>, GraphShapeError> {
        if depth > self.graph.nodes.len() {
            return Err(Self::error(start, "a cycle without a `back` edge"));
        }
        let mut out = Vec::new();
        let mut current = Some(start);
        let mut visited = 0;
        while let Some(id) = current {
            if Some(id) == stop {
                break;
            }
            visited += 1;
            if visited > self.graph.nodes.len() {
                return Err(Self::error(id, "a cycle without a `back` edge"));
            }
            let node =
                self.graph.node(id).ok_or_else(|| Self::error(id, "an edge names a node that does not exist"))?;
            current = match &node.kind {
                NodeKind::Tool { hints, .. } => {
                    let tools = if hints.is_empty() { self.all_tools } else { hints.as_slice() };
                    let mut choice: Vec<ProcessTree> = tools.iter().map(ProcessTree::activity).collect();
                    out.push(match choice.len() {
                        0 => ProcessTree::Tau,
                        1 => choice.remove(0),
                        _ => ProcessTree::operator(Operator::Xor, choice),
                    });
                    self.single(id)?
                }
                NodeKind::Llm { .. } | NodeKind::Join {} => self.single(id)?,
                NodeKind::Branch { .. } | NodeKind::Parallel {} => {
                    let routes = self.forward(id);
                    let join = self.meeting_point(id, &routes)?;
                    let mut children = Vec::new();
                    for route in routes {
                        children.push(if route.to == join {
                            ProcessTree::Tau
                        } else {
                            ProcessTree::operator(Operator::Sequence, self.walk(&route.to, Some(join), depth + 1)?)
                        });
                    }
                    let operator =
                        if matches!(node.kind, NodeKind::Parallel {}) { Operator::Parallel } else { Operator::Xor };
                    out.push(ProcessTree::operator(operator, children));
                    Some(join)
                }
                NodeKind::Loop { .. } => {
                    let edges = self.forward(id);
                    let body = edges
                        .iter()
                        .find(|e| e.label.as_deref() == Some("body"))
                        .ok_or_else(|| Self::error(id, "a loop without a `body` edge"))?;
                    let steps = self.walk(&body.to, Some(id), depth + 1)?;
                    out.push(ProcessTree::operator(
                        Operator::Loop,
                        vec![ProcessTree::operator(Operator::Sequence, steps), ProcessTree::Tau],
                    ));
                    edges.iter().find(|e| e.label.as_deref() == Some("exit")).map(|e| e.to.as_str())
                }
            };
        }
        Ok(out)
    }

    /// The first node, in breadth-first order from the first route, that every route
    /// reaches (a route reaches its own target).
    fn meeting_point(&self, id: &str, routes: &[&'g Edge]) -> Result<&'g str, GraphShapeError> {
        let reach = |start: &'g str| {
            let mut order = vec![start];
            let mut idx = 0;
            while idx < order.len() {
                for edge in self.forward(order[idx]) {
                    if !order.contains(&edge.to.as_str()) {
                        order.push(&edge.to);
                    }
                }
                idx += 1;
            }
            order
        };
        let sets: Vec<Vec<&'g str>> = routes.iter().map(|e| reach(&e.to)).collect();
        let Some(first) = sets.first() else { return Err(Self::error(id, "no outgoing routes")) };
        first
            .iter()
            .copied()
            .find(|node| sets.iter().all(|set| set.contains(node)))
            .ok_or_else(|| Self::error(id, "its routes never meet"))
    }
}
