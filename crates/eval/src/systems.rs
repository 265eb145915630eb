//! The systems `flowmem eval` compares: a compiled workflow graph and the ReAct agent,
//! both on the executor of `flowmem-exec`, with per-run state isolation for stateful
//! tool servers.

use std::sync::Arc;

use flowmem_exec::{
    AgentConfig, ExecObserver, NoObserver, RunInput, Runtime, ToolBox, ValidatedGraph, compile, run, run_agent,
};
use flowmem_llm::{ChatModel, ToolDefinition};
use flowmem_model::{JsonObject, Record, ToolCall, Trace};

use crate::report::SystemRole;
use crate::run::{CountingModel, System, SystemRun};

/// Gives every run of a system a fresh state on a stateful tool server (the τ² servers)
/// and hides the state plumbing from the agent.
///
/// Before each run the reset tool is called with `{key_arg: key}`; during the run every
/// call gets `key_arg: key` added, and the calls recorded in the trace have it removed
/// again, so TC compares only what the agent chose. The state tools themselves (reset,
/// call log) are not offered to the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateIsolation {
    /// The argument that selects the state, `state_key` for τ².
    pub key_arg: String,
    /// The tool that resets a state, `reset_state` for τ².
    pub reset_tool: String,
    /// Tools never offered to the agent, such as τ²'s `get_call_log`.
    pub hidden_tools: Vec<String>,
    /// The state key of a run. Systems running several runs at once give the others
    /// `key/1`, `key/2`, ….
    pub key: String,
}

impl StateIsolation {
    /// The τ²-bench servers' conventions.
    #[must_use]
    pub fn tau2() -> StateIsolation {
        StateIsolation {
            key_arg: "state_key".to_string(),
            reset_tool: "reset_state".to_string(),
            hidden_tools: vec!["get_call_log".to_string()],
            key: "flowmem-eval/run".to_string(),
        }
    }
}

/// A [`ToolBox`] that injects a state key into every call and strips it from the record
/// (see [`StateIsolation`]).
pub struct IsolatedTools {
    inner: Arc<dyn ToolBox>,
    isolation: StateIsolation,
}

#[async_trait::async_trait]
impl ToolBox for IsolatedTools {
    fn definitions(&self) -> Vec<ToolDefinition> {
        let hidden =
            |name: &str| name == self.isolation.reset_tool || self.isolation.hidden_tools.iter().any(|h| h == name);
        self.inner
            .definitions()
            .into_iter()
            .filter(|def| !hidden(&def.name))
            .map(|mut def| {
                // The agent must not see (or set) the state key.
                if let Some(props) = def.parameters.get_mut("properties").and_then(|p| p.as_object_mut()) {
                    props.remove(&self.isolation.key_arg);
                }
                if let Some(required) = def.parameters.get_mut("required").and_then(|r| r.as_array_mut()) {
                    required.retain(|name| name.as_str() != Some(self.isolation.key_arg.as_str()));
                }
                def
            })
            .collect()
    }

    async fn call(&self, name: &str, mut args: JsonObject) -> ToolCall {
        let chosen = args.clone();
        args.insert(self.isolation.key_arg.clone(), self.isolation.key.clone().into());
        let mut call = self.inner.call(name, args).await;
        call.args = chosen;
        call.args.remove(&self.isolation.key_arg);
        call
    }
}

impl IsolatedTools {
    /// Wraps `inner` with `isolation`.
    #[must_use]
    pub fn new(inner: Arc<dyn ToolBox>, isolation: StateIsolation) -> IsolatedTools {
        IsolatedTools { inner, isolation }
    }

    /// Gives the isolation key a fresh state.
    ///
    /// # Errors
    ///
    /// A message naming the key and the reset tool when the reset fails.
    pub async fn reset(&self) -> Result<(), String> {
        let mut args = JsonObject::new();
        args.insert(self.isolation.key_arg.clone(), self.isolation.key.clone().into());
        let call = self.inner.call(&self.isolation.reset_tool, args).await;
        match call.error {
            None => Ok(()),
            Some(err) => {
                Err(format!("cannot reset state `{}` with `{}`: {err}", self.isolation.key, self.isolation.reset_tool))
            }
        }
    }
}

/// The tool names a system sees under `isolation`: all of `tools` but the reset tool and
/// the hidden tools. A workflow graph must bind to these.
#[must_use]
pub fn visible_tools(tools: Arc<dyn ToolBox>, isolation: Option<&StateIsolation>) -> Vec<String> {
    let definitions = match isolation {
        Some(isolation) => IsolatedTools::new(tools, isolation.clone()).definitions(),
        None => tools.definitions(),
    };
    definitions.into_iter().map(|def| def.name).collect()
}

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
    counting: Arc<CountingModel>,
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
    async fn prepare(&self) -> Result<Prepared<'_>, String> {
        let counting = Arc::new(CountingModel::new(self.runtime.executor.clone()));
        let mut runtime = self.runtime.clone();
        runtime.executor = counting.clone() as Arc<dyn ChatModel>;
        let Some(isolation) = &self.isolation else {
            return Ok(Prepared { runtime, counting, _slot: None });
        };
        let slot = take_slot(&self.slots);
        let mut isolation = isolation.clone();
        if slot.slot > 0 {
            isolation.key = format!("{}/{}", isolation.key, slot.slot);
        }
        let isolated = IsolatedTools::new(self.runtime.tools.clone(), isolation);
        isolated.reset().await?;
        runtime.tools = Arc::new(isolated) as Arc<dyn ToolBox>;
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
            Err(err) => return failed(record, err),
        };
        let input = RunInput { id: record.id.clone(), query: record.query.clone() };
        let trace = run_agent(&prepared.runtime, &self.cfg, &input, self.observer.as_ref()).await;
        SystemRun { trace, usage: prepared.counting.totals() }
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
            Err(err) => return failed(record, err),
        };
        // Compiling binds the counting model; it is cheap next to a run.
        let plan = match compile(&self.graph, prepared.runtime.clone()) {
            Ok(plan) => plan,
            Err(err) => return failed(record, format!("cannot compile the workflow: {err}")),
        };
        let input = RunInput { id: record.id.clone(), query: record.query.clone() };
        let trace = run(&plan, &input, self.observer.as_ref()).await;
        SystemRun { trace, usage: prepared.counting.totals() }
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
