//! The engine: runs one query through a [`Plan`] on tokio.
//!
//! A single scheduler loop owns all run state (node and edge states, contexts, the trace)
//! and is the only emitter of [`ExecEvent`]s; node work (model and tool calls) runs in a
//! [`JoinSet`], so independent nodes and the members of a `parallel` node overlap in
//! time. Control nodes without model calls are resolved inline, without a task.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use flowmem_model::{Condition, EdgeKind, NodeObservation, Trace};
use tokio::task::JoinSet;

use crate::event::{ExecEvent, ExecObserver, now_ms};
use crate::node::{self, Context, CtxEntry, NodeResult, NodeWork};
use crate::plan::{Op, Plan, PlanInner};
use crate::validate::{ROUTE_DEFAULT, ROUTE_ERROR, ROUTE_OK};

/// One query to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInput {
    /// The query's id (a record id), echoed in every event and the trace.
    pub id: String,
    /// The query text.
    pub query: String,
}

/// Runs `input` through `plan` and returns the complete trace.
///
/// Every event goes to `observer` as it happens. The run never fails as a whole: a node
/// that fails records its error in its observation, the run stops scheduling new nodes,
/// lets the nodes in flight finish, and returns the trace with [`Trace::error`] set and
/// every observation and tool call made so far.
///
/// A tool that *returns an error* is not a node failure: the error is the node's output
/// (and the call's `error`), so loops and `tool_succeeded` branches can react to it.
pub async fn run(plan: &Plan, input: &RunInput, observer: &dyn ExecObserver) -> Trace {
    let inner = &plan.inner;
    observer.on_event(&ExecEvent::RunStarted {
        query_id: input.id.clone(),
        query: input.query.clone(),
        runner: inner.name.clone(),
        at_ms: now_ms(),
    });
    let mut run = RunState::new(inner, input, observer);
    run.arrive(inner.entry);
    let mut tasks: JoinSet<NodeResult> = JoinSet::new();
    let mut in_flight: HashMap<tokio::task::Id, usize> = HashMap::new();
    loop {
        while let Some(ready) = run.ready.pop_front() {
            if run.trace.error.is_some() {
                run.ready.clear();
                break;
            }
            run.dispatch(ready);
        }
        for work in run.work.drain(..) {
            let node_idx = work.node_idx;
            let shared = plan.inner.clone();
            let query = run.query.clone();
            let handle = tasks.spawn(async move { node::execute(&shared, &query, work).await });
            in_flight.insert(handle.id(), node_idx);
        }
        let Some(joined) = tasks.join_next_with_id().await else {
            break;
        };
        match joined {
            Ok((task_id, result)) => {
                in_flight.remove(&task_id);
                run.complete(result);
            }
            Err(err) => {
                let node_idx = in_flight.remove(&err.id());
                let node_id = node_idx.map_or("?", |idx| inner.nodes[idx].id.as_str());
                run.fail(format!("node `{node_id}` panicked: {err}"));
            }
        }
    }
    run.finish()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeState {
    Pending,
    Queued,
    Running,
    Done,
    Skipped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EdgeState {
    Unresolved,
    Active,
    Skipped,
}

type Ctx = Arc<Context>;

struct RunState<'a> {
    plan: &'a PlanInner,
    query_id: String,
    query: Arc<str>,
    observer: &'a dyn ExecObserver,
    nodes: Vec<NodeState>,
    edges: Vec<EdgeState>,
    // The context each active edge carries.
    edge_ctx: Vec<Option<Ctx>>,
    // The context a loop entered with (its input), per loop node.
    loop_input: Vec<Option<Ctx>>,
    // Completed body runs, per loop node.
    loop_runs: Vec<u32>,
    // The sequence number at which the loop's current iteration began.
    loop_began: Vec<u64>,
    ready: VecDeque<usize>,
    // Node work waiting to be spawned.
    work: Vec<NodeWork>,
    next_seq: u64,
    trace: Trace,
    exit_output: Option<String>,
}

impl<'a> RunState<'a> {
    fn new(plan: &'a PlanInner, input: &RunInput, observer: &'a dyn ExecObserver) -> RunState<'a> {
        let n_nodes = plan.nodes.len();
        RunState {
            plan,
            query_id: input.id.clone(),
            query: Arc::from(input.query.as_str()),
            observer,
            nodes: vec![NodeState::Pending; n_nodes],
            edges: vec![EdgeState::Unresolved; plan.edges.len()],
            edge_ctx: vec![None; plan.edges.len()],
            loop_input: vec![None; n_nodes],
            loop_runs: vec![0; n_nodes],
            loop_began: vec![0; n_nodes],
            ready: VecDeque::new(),
            work: Vec::new(),
            next_seq: 0,
            trace: Trace { query_id: input.id.clone(), query: input.query.clone(), ..Trace::default() },
            exit_output: None,
        }
    }

    fn iteration(&self, node_idx: usize) -> u32 {
        self.plan.nodes[node_idx].enclosing_loop.map_or(0, |loop_idx| self.loop_runs[loop_idx])
    }

    /// Marks a node whose inputs may have changed: queue it, skip it, or keep waiting.
    fn arrive(&mut self, node_idx: usize) {
        if self.nodes[node_idx] != NodeState::Pending {
            return;
        }
        let incoming = &self.plan.nodes[node_idx].incoming;
        if incoming.iter().any(|&edge_idx| self.edges[edge_idx] == EdgeState::Unresolved) {
            return;
        }
        let any_active = incoming.iter().any(|&edge_idx| self.edges[edge_idx] == EdgeState::Active);
        if any_active || node_idx == self.plan.entry {
            self.nodes[node_idx] = NodeState::Queued;
            self.ready.push_back(node_idx);
        } else {
            self.skip(node_idx);
        }
    }

    fn skip(&mut self, node_idx: usize) {
        self.nodes[node_idx] = NodeState::Skipped;
        self.observer.on_event(&ExecEvent::NodeSkipped {
            query_id: self.query_id.clone(),
            node_id: self.plan.nodes[node_idx].id.clone(),
        });
        for &edge_idx in &self.plan.nodes[node_idx].outgoing {
            self.resolve(edge_idx, None);
        }
    }

    /// Resolves an edge: active with a context, or skipped.
    fn resolve(&mut self, edge_idx: usize, ctx: Option<Ctx>) {
        self.edges[edge_idx] = if ctx.is_some() { EdgeState::Active } else { EdgeState::Skipped };
        let edge = &self.plan.edges[edge_idx];
        // Control edges order only; they carry no context.
        self.edge_ctx[edge_idx] = if edge.kind == EdgeKind::Control { ctx.map(|_| Arc::default()) } else { ctx };
        let target = edge.to;
        if edge.kind == EdgeKind::Back {
            self.back_arrived(target);
        } else {
            self.arrive(target);
        }
    }

    /// The merged context of a node's active incoming edges (`back` ones when `back`).
    fn input_ctx(&self, edge_ids: &[usize]) -> Ctx {
        let mut contexts = edge_ids.iter().filter_map(|&edge_idx| self.edge_ctx[edge_idx].as_ref());
        let Some(first) = contexts.next() else {
            return Arc::default();
        };
        let rest: Vec<&Ctx> = contexts.collect();
        if rest.iter().all(|ctx| ctx.is_empty() || Arc::ptr_eq(ctx, first)) {
            return first.clone();
        }
        let mut all = rest;
        all.push(first);
        Arc::new(Context::merge(&all))
    }

    /// Starts a queued node: control nodes resolve inline, others become work for a task.
    fn dispatch(&mut self, node_idx: usize) {
        let node = &self.plan.nodes[node_idx];
        let ctx = self.input_ctx(&node.incoming);
        let iteration = self.iteration(node_idx);
        self.observer.on_event(&ExecEvent::NodeStarted {
            query_id: self.query_id.clone(),
            node_id: node.id.clone(),
            node_kind: node.kind_label.clone(),
            iteration,
            at_ms: now_ms(),
        });
        match &node.op {
            Op::Parallel | Op::Join => {
                self.record_control(node_idx, &ctx, None);
                self.nodes[node_idx] = NodeState::Done;
                self.finish_plain(node_idx, &ctx, None);
            }
            Op::Branch { condition: Condition::Always {}, .. } => {
                self.record_control(node_idx, &ctx, Some(ROUTE_DEFAULT.to_owned()));
                self.nodes[node_idx] = NodeState::Done;
                self.take_route(node_idx, &ctx, ROUTE_DEFAULT);
            }
            Op::Branch { condition: Condition::ToolSucceeded {}, .. } => {
                let route = if last_tool_succeeded(&ctx, 0) { ROUTE_OK } else { ROUTE_ERROR };
                self.record_control(node_idx, &ctx, Some(route.to_owned()));
                self.nodes[node_idx] = NodeState::Done;
                self.take_route(node_idx, &ctx, route);
            }
            Op::Loop { .. } => {
                self.loop_runs[node_idx] = 0;
                self.loop_began[node_idx] = self.next_seq;
                self.loop_input[node_idx] = Some(ctx.clone());
                self.record_control(node_idx, &ctx, Some("enter".to_owned()));
                self.nodes[node_idx] = NodeState::Running;
                self.start_body(node_idx, ctx);
            }
            Op::Branch { .. } | Op::Llm { .. } | Op::Tool { .. } => {
                self.nodes[node_idx] = NodeState::Running;
                self.work.push(NodeWork { node_idx, iteration, ctx, loop_check: false });
            }
        }
    }

    fn start_body(&mut self, loop_idx: usize, ctx: Ctx) {
        self.resolve_labelled(loop_idx, crate::validate::LOOP_BODY, &ctx);
    }

    /// Activates the outgoing edges of `node_idx` labelled `label` with `ctx`.
    fn resolve_labelled(&mut self, node_idx: usize, label: &str, ctx: &Ctx) {
        let chosen: Vec<usize> = self.plan.nodes[node_idx]
            .outgoing
            .iter()
            .copied()
            .filter(|&edge_idx| self.plan.edges[edge_idx].label.as_deref() == Some(label))
            .collect();
        for edge_idx in chosen {
            self.resolve(edge_idx, Some(ctx.clone()));
        }
    }

    /// A `back` edge into `loop_idx` resolved: when all have, one body run is over.
    fn back_arrived(&mut self, loop_idx: usize) {
        let back = &self.plan.nodes[loop_idx].back_incoming;
        if back.iter().any(|&edge_idx| self.edges[edge_idx] == EdgeState::Unresolved) {
            return;
        }
        // A skipped loop's body is skipped with it, and its back edges resolve skipped:
        // no body ran, so there is nothing to decide (its exit is skipped already).
        if self.trace.error.is_some() || self.nodes[loop_idx] == NodeState::Skipped {
            return;
        }
        self.loop_runs[loop_idx] += 1;
        let Op::Loop { until, .. } = &self.plan.nodes[loop_idx].op else {
            return;
        };
        let body_ctx = self.input_ctx(back);
        let ctx = if body_ctx.is_empty() { self.loop_input[loop_idx].clone().unwrap_or_default() } else { body_ctx };
        match until {
            Condition::Always {} => self.loop_decided(loop_idx, ctx, true, None),
            Condition::ToolSucceeded {} => {
                let holds = last_tool_succeeded(&ctx, self.loop_began[loop_idx]);
                self.loop_decided(loop_idx, ctx, holds, None);
            }
            Condition::Judge { .. } => {
                // A body that goes through a mined collection "for each" needs no judge.
                if let Some((holds, why)) = node::for_each_done(self.plan, &self.query, loop_idx, &ctx) {
                    let observation = self.control_observation(loop_idx, &ctx, Some(why));
                    self.loop_decided(loop_idx, ctx, holds, Some(observation));
                    return;
                }
                let work =
                    NodeWork { node_idx: loop_idx, iteration: self.loop_runs[loop_idx] - 1, ctx, loop_check: true };
                self.work.push(work);
            }
        }
    }

    /// The loop's condition was evaluated after a body run.
    fn loop_decided(&mut self, loop_idx: usize, ctx: Ctx, holds: bool, observation: Option<NodeObservation>) {
        let Op::Loop { max_iterations, body_nodes, body_edges, .. } = &self.plan.nodes[loop_idx].op else {
            return;
        };
        let runs = self.loop_runs[loop_idx];
        let stop = holds || runs >= *max_iterations;
        let decision = if stop { "exit" } else { "repeat" };
        let observation = observation.unwrap_or_else(|| self.control_observation(loop_idx, &ctx, None));
        // A reason the decision came with (a "for each" loop's) follows the summary.
        let why = observation.output.as_deref().map(|why| format!("; {why}")).unwrap_or_default();
        let observation = NodeObservation {
            iteration: runs - 1,
            output: Some(format!(
                "{decision} after {runs} of at most {max_iterations} runs (condition {}{why})",
                if holds { "holds" } else { "does not hold" }
            )),
            ..observation
        };
        self.emit_observation(observation, None);
        if stop {
            self.nodes[loop_idx] = NodeState::Done;
            if loop_idx == self.plan.exit {
                self.exit_output = ctx.last().map(|entry| entry.item.output.clone());
            }
            self.resolve_labelled(loop_idx, crate::validate::LOOP_EXIT, &ctx);
            return;
        }
        for &node_idx in body_nodes {
            self.nodes[node_idx] = NodeState::Pending;
        }
        for &edge_idx in body_edges {
            self.edges[edge_idx] = EdgeState::Unresolved;
            self.edge_ctx[edge_idx] = None;
        }
        self.loop_began[loop_idx] = self.next_seq;
        self.start_body(loop_idx, ctx);
    }

    /// Activates every outgoing edge of a finished node, with its output appended.
    fn finish_plain(&mut self, node_idx: usize, ctx: &Ctx, entry: Option<CtxEntry>) {
        let out = match entry {
            Some(entry) => Arc::new(Context::on(Some(ctx.clone()), vec![entry])),
            None => ctx.clone(),
        };
        if node_idx == self.plan.exit {
            self.exit_output = out.last().map(|entry| entry.item.output.clone());
        }
        for edge_idx in self.plan.nodes[node_idx].outgoing.clone() {
            self.resolve(edge_idx, Some(out.clone()));
        }
    }

    fn take_route(&mut self, node_idx: usize, ctx: &Ctx, route: &str) {
        if node_idx == self.plan.exit {
            self.exit_output = ctx.last().map(|entry| entry.item.output.clone());
        }
        for edge_idx in self.plan.nodes[node_idx].outgoing.clone() {
            let chosen = self.plan.edges[edge_idx].label.as_deref() == Some(route);
            self.resolve(edge_idx, chosen.then(|| ctx.clone()));
        }
    }

    /// Handles a finished task.
    fn complete(&mut self, result: NodeResult) {
        let NodeResult { node_idx, ctx, observation, model, tool_call, outcome } = result;
        if let Some((started_at_ms, call)) = tool_call {
            self.trace.tool_calls.push(call.clone());
            self.observer.on_event(&ExecEvent::ToolCalled {
                query_id: self.query_id.clone(),
                node_id: self.plan.nodes[node_idx].id.clone(),
                started_at_ms,
                call,
            });
        }
        match outcome {
            Err(message) => {
                self.emit_observation(observation, model);
                self.nodes[node_idx] = NodeState::Done;
                let node_id = &self.plan.nodes[node_idx].id;
                self.fail(format!("node `{node_id}` failed: {message}"));
            }
            Ok(node::Outcome::Output { output, failed }) => {
                let args = observation.tool_call.as_ref().map(|call| call.args.clone());
                let seq = self.next_seq;
                self.next_seq += 1;
                // Later inputs name the output by this number instead of copying it.
                self.emit_observation(NodeObservation { entry: Some(seq), ..observation }, model);
                self.nodes[node_idx] = NodeState::Done;
                let node = &self.plan.nodes[node_idx];
                let entry = CtxEntry::new(seq, node, self.iteration(node_idx), output, failed, args);
                self.finish_plain(node_idx, &ctx, Some(entry));
            }
            Ok(node::Outcome::Route(route)) => {
                self.emit_observation(observation, model);
                self.nodes[node_idx] = NodeState::Done;
                self.take_route(node_idx, &ctx, &route);
            }
            Ok(node::Outcome::LoopStop(holds)) => {
                self.loop_decided(node_idx, ctx, holds, Some(observation));
            }
        }
    }

    fn fail(&mut self, message: String) {
        if self.trace.error.is_none() {
            self.trace.error = Some(message);
        }
    }

    fn emit_observation(&mut self, observation: NodeObservation, model: Option<String>) {
        // Show the event to the observer, then move the observation back out of it:
        // a clone would copy the node's whole input context and prompt.
        let event = ExecEvent::NodeFinished { query_id: self.query_id.clone(), model, observation };
        self.observer.on_event(&event);
        if let ExecEvent::NodeFinished { observation, .. } = event {
            self.trace.observations.push(observation);
        }
    }

    fn control_observation(&self, node_idx: usize, ctx: &Ctx, output: Option<String>) -> NodeObservation {
        let node = &self.plan.nodes[node_idx];
        NodeObservation {
            node_id: node.id.clone(),
            node_kind: node.kind_label.clone(),
            iteration: self.iteration(node_idx),
            input: ctx.input(),
            output,
            started_at_ms: now_ms(),
            ..NodeObservation::default()
        }
    }

    fn record_control(&mut self, node_idx: usize, ctx: &Ctx, output: Option<String>) {
        let observation = self.control_observation(node_idx, ctx, output);
        self.emit_observation(observation, None);
    }

    fn finish(mut self) -> Trace {
        if self.trace.error.is_none() {
            match self.nodes[self.plan.exit] {
                NodeState::Done => self.trace.result = self.exit_output.take(),
                NodeState::Skipped => {
                    let exit = &self.plan.nodes[self.plan.exit].id;
                    self.trace.error = Some(format!("exit node `{exit}` was skipped: no route reached it"));
                }
                _ => {
                    let exit = &self.plan.nodes[self.plan.exit].id;
                    self.trace.error = Some(format!("exit node `{exit}` never ran"));
                }
            }
        }
        let trace = Arc::new(self.trace);
        self.observer.on_event(&ExecEvent::RunFinished {
            query_id: self.query_id.clone(),
            at_ms: now_ms(),
            trace: trace.clone(),
        });
        Arc::try_unwrap(trace).unwrap_or_else(|shared| shared.as_ref().clone())
    }
}

/// Whether the most recent tool call in `ctx` (at or after sequence `since`) succeeded.
fn last_tool_succeeded(ctx: &Context, since: u64) -> bool {
    ctx.iter_rev()
        .take_while(|entry| entry.seq >= since)
        .find(|entry| entry.is_tool)
        .is_some_and(|entry| !entry.item.failed)
}
