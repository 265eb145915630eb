//! The observation hooks: one closed [`ExecEvent`] enum that traces, progress bars and
//! OpenTelemetry export all consume.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use flowmem_model::{Deviation, NodeObservation, ToolCall, Trace};

/// Something that happened while running a workflow graph or the ReAct agent.
///
/// Events of one run arrive in order; events of concurrent runs interleave, so each
/// carries its `query_id`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ExecEvent {
    /// A run began.
    RunStarted {
        /// The query's id.
        query_id: String,
        /// The query text.
        query: String,
        /// What runs: the graph's name, or `react` for the agent.
        runner: String,
        /// Start time in milliseconds since the Unix epoch.
        at_ms: f64,
    },
    /// A node began.
    NodeStarted {
        /// The query's id.
        query_id: String,
        /// The node's id.
        node_id: String,
        /// The node kind, such as `llm:plan`.
        node_kind: String,
        /// The loop iteration, counting from 0.
        iteration: u32,
        /// Start time in milliseconds since the Unix epoch.
        at_ms: f64,
    },
    /// A node finished or failed; the observation holds its input, prompt, output, error,
    /// latency, tokens and tool call.
    NodeFinished {
        /// The query's id.
        query_id: String,
        /// The model the node called, if it called one.
        model: Option<String>,
        /// What the node saw and did.
        observation: NodeObservation,
    },
    /// A node was skipped because no active edge reached it (a route not taken).
    NodeSkipped {
        /// The query's id.
        query_id: String,
        /// The node's id.
        node_id: String,
    },
    /// A tool was invoked (every invocation, successful or not).
    ToolCalled {
        /// The query's id.
        query_id: String,
        /// The node that made the call (or the agent step).
        node_id: String,
        /// Start time in milliseconds since the Unix epoch.
        started_at_ms: f64,
        /// The call with its result or error and latency.
        call: ToolCall,
    },
    /// The run-time guard found a call off its skeleton, before the call ran (or instead
    /// of it, when blocked), or a final answer where the skeleton cannot end.
    ToolDeviated {
        /// The query's id.
        query_id: String,
        /// The agent step that made the call.
        node_id: String,
        /// What deviated and what the skeleton expected.
        deviation: Deviation,
    },
    /// A run ended; the trace is complete.
    RunFinished {
        /// The query's id.
        query_id: String,
        /// End time in milliseconds since the Unix epoch.
        at_ms: f64,
        /// The whole trace of the run.
        trace: Arc<Trace>,
    },
}

impl ExecEvent {
    /// The id of the query the event belongs to.
    #[must_use]
    pub fn query_id(&self) -> &str {
        match self {
            ExecEvent::RunStarted { query_id, .. }
            | ExecEvent::NodeStarted { query_id, .. }
            | ExecEvent::NodeFinished { query_id, .. }
            | ExecEvent::NodeSkipped { query_id, .. }
            | ExecEvent::ToolCalled { query_id, .. }
            | ExecEvent::ToolDeviated { query_id, .. }
            | ExecEvent::RunFinished { query_id, .. } => query_id,
        }
    }
}

/// A consumer of [`ExecEvent`]s. Called synchronously from the engine, so it must be
/// quick (buffer, send to a channel, or update a counter).
pub trait ExecObserver: Send + Sync {
    /// Handles one event.
    fn on_event(&self, event: &ExecEvent);
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl ExecObserver for NoObserver {
    fn on_event(&self, _event: &ExecEvent) {}
}

/// Fans events out to several observers, in order.
#[derive(Clone, Default)]
pub struct Observers(pub Vec<Arc<dyn ExecObserver>>);

impl ExecObserver for Observers {
    fn on_event(&self, event: &ExecEvent) {
        for observer in &self.0 {
            observer.on_event(event);
        }
    }
}

/// Keeps every event in memory, for tests and small tools.
#[derive(Debug, Default)]
pub struct RecordingObserver {
    events: Mutex<Vec<ExecEvent>>,
}

impl RecordingObserver {
    /// A copy of the events so far.
    #[must_use]
    pub fn events(&self) -> Vec<ExecEvent> {
        // A poisoned lock still holds every event pushed before the panic.
        self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl ExecObserver for RecordingObserver {
    fn on_event(&self, event: &ExecEvent) {
        self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(event.clone());
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |elapsed| elapsed.as_secs_f64() * 1000.0)
}
