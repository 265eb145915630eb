//! The JSONL trace writer: one [`TraceEvent`] per line.
//!
//! Each run is written as one contiguous block when it finishes: its node lines, a
//! `"kind": "tool_call"` line for every invocation (in the order the calls finished),
//! a `"kind": "deviation"` line for every call the run-time guard flagged or blocked
//! (before the call's own line), and a closing `"kind": "final"` line. Runs that execute concurrently therefore never
//! interleave in the file, and a failed run still writes everything it observed.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

use flowmem_model::TraceEvent;

use crate::event::{ExecEvent, ExecObserver};

/// Writes every finished run's trace as JSONL lines to a writer.
pub struct JsonlTraceWriter<W: Write + Send> {
    state: Mutex<WriterState<W>>,
}

struct WriterState<W> {
    out: W,
    // Lines of runs still in flight, by query id, in event order.
    pending: HashMap<String, Vec<TraceEvent>>,
    // The first write error, kept so that `finish` can report it.
    error: Option<std::io::Error>,
}

impl<W: Write + Send> JsonlTraceWriter<W> {
    /// A writer that appends to `out`.
    pub fn new(out: W) -> JsonlTraceWriter<W> {
        JsonlTraceWriter { state: Mutex::new(WriterState { out, pending: HashMap::new(), error: None }) }
    }

    /// Flushes and gives the writer back.
    ///
    /// # Errors
    ///
    /// The first I/O error met while writing or flushing.
    pub fn finish(self) -> std::io::Result<W> {
        let mut state = self.state.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(err) = state.error.take() {
            return Err(err);
        }
        state.out.flush()?;
        Ok(state.out)
    }
}

impl<W: Write + Send> ExecObserver for JsonlTraceWriter<W> {
    fn on_event(&self, event: &ExecEvent) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            ExecEvent::NodeFinished { query_id, observation, .. } => {
                state.pending.entry(query_id.clone()).or_default().push(TraceEvent::Node(observation.clone()));
            }
            ExecEvent::ToolCalled { query_id, node_id, call, .. } => {
                state.pending.entry(query_id.clone()).or_default().push(TraceEvent::ToolCall {
                    query_id: query_id.clone(),
                    node_id: Some(node_id.clone()),
                    call: call.clone(),
                });
            }
            ExecEvent::ToolDeviated { query_id, node_id, deviation } => {
                state.pending.entry(query_id.clone()).or_default().push(TraceEvent::Deviation {
                    query_id: query_id.clone(),
                    node_id: Some(node_id.clone()),
                    deviation: deviation.clone(),
                });
            }
            ExecEvent::RunFinished { query_id, trace, .. } => {
                let mut lines = state.pending.remove(query_id).unwrap_or_default();
                lines.push(TraceEvent::Final {
                    query_id: query_id.clone(),
                    result: trace.result.clone(),
                    error: trace.error.clone(),
                });
                let mut block = String::new();
                for line in &lines {
                    // Model types always serialise: their maps have string keys.
                    if let Ok(text) = serde_json::to_string(line) {
                        block.push_str(&text);
                        block.push('\n');
                    }
                }
                let res = state.out.write_all(block.as_bytes()).and_then(|()| state.out.flush());
                if let Err(err) = res {
                    state.error.get_or_insert(err);
                }
            }
            _ => {}
        }
    }
}
