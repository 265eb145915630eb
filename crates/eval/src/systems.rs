//! The systems `flowmem eval` compares: a compiled workflow graph and the ReAct agent,
//! both on the executor of `flowmem-exec`, with per-run state isolation for stateful
//! tool servers (`flowmem-exec`'s `IsolatedTools`, one state key per run in flight).

use std::sync::Arc;

use flowmem_exec::{
    AgentConfig, ExecObserver, NoObserver, RunInput, Runtime, ValidatedGraph, compile, isolated_runtime, run, run_agent,
};
use flowmem_llm::{AccountedModel, Accounting, ChatModel};
use flowmem_model::{Record, Trace, error_chain};
use flowmem_tools::{StateIsolation, StateResetError};

use crate::report::SystemRole;
use crate::run::{System, SystemRun};

/// What both systems share: the runtime, the optional isolation, the name.
struct Harness {
    name: String,
    runtime: Runtime,
    isolation: Option<StateIsolation>,
    // Slots of runs in flight; slot `n` owns the state key `key` (n = 0) or `key/n`, so
    // concurrent runs never share a state. Free slots are reused, so a run of any
    // length touches as many keys as it had runs at once.
    slots: std::sync::Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    free: Vec<usize>,
    n_made: usize,
}

/// A prepared run: its runtime, its LLM counter, and the state slot it holds until
/// dropped.
struct Prepared<'a> {
    runtime: Runtime,
    counting: AccountedModel,
    _slot: Option<SlotGuard<'a>>,
}

struct SlotGuard<'a> {
    slots: &'a std::sync::Mutex<Slots>,
    slot: usize,
}

/// A freed slot, or a new one.
fn take_slot(slots: &std::sync::Mutex<Slots>) -> SlotGuard<'_> {
    let mut guard = slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let slot = guard.free.pop().unwrap_or_else(|| {
        guard.n_made += 1;
        guard.n_made - 1
    });
    SlotGuard { slots, slot }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner).free.push(self.slot);
    }
}

impl Harness {
    fn new(name: String, runtime: Runtime, isolation: Option<StateIsolation>) -> Harness {
        Harness { name, runtime, isolation, slots: std::sync::Mutex::new(Slots::default()) }
    }

    /// A runtime for one run: a counting executor and, with isolation, a fresh state
    /// under a key no other run in flight uses.
    async fn prepare(&self) -> Result<Prepared<'_>, StateResetError> {
        let counting = AccountedModel::new(self.runtime.executor.clone(), Accounting::new());
        let mut runtime = self.runtime.clone();
        runtime.executor = Arc::new(counting.clone()) as Arc<dyn ChatModel>;
        let Some(isolation) = &self.isolation else {
            return Ok(Prepared { runtime, counting, _slot: None });
        };
        let slot = take_slot(&self.slots);
        let key = match slot.slot {
            0 => isolation.key.clone(),
            n => format!("{}/{n}", isolation.key),
        };
        let runtime = isolated_runtime(&runtime, Some(&isolation.with_key(key))).await?;
        Ok(Prepared { runtime, counting, _slot: Some(slot) })
    }
}

fn failed(record: &Record, error: String) -> SystemRun {
    SystemRun {
        trace: Trace {
            query_id: record.id.clone(),
            query: record.query.clone(),
            error: Some(error),
            ..Trace::default()
        },
        usage: Default::default(),
    }
}

/// The ReAct baseline of `flowmem-exec` as a [`System`].
pub struct ReactSystem {
    harness: Harness,
    cfg: AgentConfig,
    observer: Arc<dyn ExecObserver>,
}

impl ReactSystem {
    /// The agent with `cfg` on `runtime`, named `name` in reports.
    #[must_use]
    pub fn new(name: &str, runtime: Runtime, cfg: AgentConfig, isolation: Option<StateIsolation>) -> ReactSystem {
        ReactSystem { harness: Harness::new(name.to_string(), runtime, isolation), cfg, observer: Arc::new(NoObserver) }
    }

    /// The system with every run's events going to `observer` (a trace writer, say).
    #[must_use]
    pub fn with_observer(self, observer: Arc<dyn ExecObserver>) -> ReactSystem {
        ReactSystem { observer, ..self }
    }
}

#[async_trait::async_trait]
impl System for ReactSystem {
    fn name(&self) -> &str {
        &self.harness.name
    }

    fn role(&self) -> SystemRole {
        SystemRole::Baseline
    }

    async fn run(&self, record: &Record) -> SystemRun {
        let prepared = match self.harness.prepare().await {
            Ok(prepared) => prepared,
            Err(err) => return failed(record, error_chain(&err)),
        };
        let input = RunInput { id: record.id.clone(), query: record.query.clone() };
        let trace = run_agent(&prepared.runtime, &self.cfg, &input, self.observer.as_ref()).await;
        SystemRun { trace, usage: prepared.counting.accounting().snapshot().total }
    }
}

/// A validated workflow graph, compiled afresh for every run, as a [`System`].
pub struct WorkflowSystem {
    harness: Harness,
    graph: ValidatedGraph,
    observer: Arc<dyn ExecObserver>,
}

impl WorkflowSystem {
    /// The workflow `graph` on `runtime`, named `name` in reports.
    #[must_use]
    pub fn new(
        name: &str,
        runtime: Runtime,
        graph: ValidatedGraph,
        isolation: Option<StateIsolation>,
    ) -> WorkflowSystem {
        WorkflowSystem {
            harness: Harness::new(name.to_string(), runtime, isolation),
            graph,
            observer: Arc::new(NoObserver),
        }
    }

    /// The system with every run's events going to `observer` (a trace writer, say).
    #[must_use]
    pub fn with_observer(self, observer: Arc<dyn ExecObserver>) -> WorkflowSystem {
        WorkflowSystem { observer, ..self }
    }
}

#[async_trait::async_trait]
impl System for WorkflowSystem {
    fn name(&self) -> &str {
        &self.harness.name
    }

    fn role(&self) -> SystemRole {
        SystemRole::Workflow
    }

    async fn run(&self, record: &Record) -> SystemRun {
        let prepared = match self.harness.prepare().await {
            Ok(prepared) => prepared,
            Err(err) => return failed(record, error_chain(&err)),
        };
        // Compiling binds the counting model; it is cheap next to a run.
        let plan = match compile(&self.graph, prepared.runtime.clone()) {
            Ok(plan) => plan,
            Err(err) => return failed(record, format!("cannot compile the workflow: {err}")),
        };
        let input = RunInput { id: record.id.clone(), query: record.query.clone() };
        let trace = run(&plan, &input, self.observer.as_ref()).await;
        SystemRun { trace, usage: prepared.counting.accounting().snapshot().total }
    }
}

#[cfg(test)]
mod tests {
    use crate::systems::Slots;

    #[test]
    fn runs_in_flight_hold_distinct_slots_and_free_ones_are_reused() {
        let slots = std::sync::Mutex::new(Slots::default());
        let take = || crate::systems::take_slot(&slots);
        let first = take();
        let second = take();
        assert_eq!((first.slot, second.slot), (0, 1));
        drop(first);
        let third = take();
        assert_eq!(third.slot, 0, "a freed slot (and its state key) is reused");
        assert_eq!(take().slot, 2);
    }
}
