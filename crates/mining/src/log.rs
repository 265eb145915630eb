//! Event logs as a multiset of variants over interned activities.

use rustc_hash::FxHashMap;

use flowmem_model::{Record, ToolCall, Trajectory};

/// An activity's id: its rank in the log's activity names sorted by bytes.
///
/// Because ids follow the sorted order of names, comparing ids compares names, which is
/// how PM4Py orders activities wherever order matters.
pub type ActivityId = u32;

/// One variant: a sequence of activities and how many cases followed it exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceVariant {
    /// The activities in order.
    pub activities: Vec<ActivityId>,
    /// The number of cases with this exact sequence.
    pub count: u64,
}

/// An event log reduced to what discovery needs: the multiset of activity sequences.
///
/// Cases that follow the same sequence are grouped into one [`TraceVariant`] with a count, as
/// PM4Py does before mining; every algorithm in this crate works on variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLog {
    // Invariant: sorted and unique; an `ActivityId` indexes this vector.
    activities: Vec<String>,
    // Invariant: sequences are unique; counts are positive.
    variants: Vec<TraceVariant>,
    n_cases: u64,
    n_events: u64,
}

/// How a tool call becomes an activity name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Classifier {
    /// The tool name alone: `get_order`.
    #[default]
    ToolName,
    /// The tool name plus its sorted argument keys: `get_order(order_id,user_id)`.
    ToolNameAndArgKeys,
}

impl Classifier {
    /// The activity name of `call` under this classifier.
    #[must_use]
    pub fn activity(self, call: &ToolCall) -> String {
        match self {
            Classifier::ToolName => call.tool.clone(),
            Classifier::ToolNameAndArgKeys => {
                let mut keys: Vec<&str> = call.args.keys().map(String::as_str).collect();
                keys.sort_unstable();
                format!("{}({})", call.tool, keys.join(","))
            }
        }
    }
}

/// Collects traces of activity names and builds an [`EventLog`].
///
/// # Example
///
/// ```
/// use flowmem_mining::EventLogBuilder;
///
/// let mut builder = EventLogBuilder::new();
/// builder.push_trace(["a", "b"]);
/// builder.push_trace(["a", "b"]);
/// builder.push_trace(["a", "c"]);
/// let log = builder.build();
/// assert_eq!((log.n_cases(), log.n_events(), log.variants().len()), (3, 6, 2));
/// ```
#[derive(Debug, Default)]
pub struct EventLogBuilder {
    names: FxHashMap<String, ActivityId>,
    names_in_order: Vec<String>,
    variants: FxHashMap<Vec<ActivityId>, u64>,
    scratch: Vec<ActivityId>,
    n_cases: u64,
    n_events: u64,
}

impl EventLogBuilder {
    /// An empty builder.
    #[must_use]
    pub fn new() -> EventLogBuilder {
        EventLogBuilder::default()
    }

    /// Adds one case whose activities are `trace`, in order.
    pub fn push_trace<I, S>(&mut self, trace: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.scratch.clear();
        for name in trace {
            let id = self.intern(name.as_ref());
            self.scratch.push(id);
        }
        self.push_scratch(1);
    }

    /// Interns `name`, returning a provisional id for [`EventLogBuilder::push_ids`].
    pub fn intern(&mut self, name: &str) -> ActivityId {
        if let Some(&id) = self.names.get(name) {
            return id;
        }
        // Ids are u32; a log with more than four billion distinct activities is not mined.
        let id = ActivityId::try_from(self.names_in_order.len()).unwrap_or(ActivityId::MAX);
        self.names.insert(name.to_owned(), id);
        self.names_in_order.push(name.to_owned());
        id
    }

    /// Adds `count` cases following the provisional ids `trace` (from [`EventLogBuilder::intern`]).
    pub fn push_ids(&mut self, trace: &[ActivityId], count: u64) {
        self.scratch.clear();
        self.scratch.extend_from_slice(trace);
        self.push_scratch(count);
    }

    fn push_scratch(&mut self, count: u64) {
        if count == 0 {
            return;
        }
        self.n_cases += count;
        self.n_events += self.scratch.len() as u64 * count;
        if let Some(existing) = self.variants.get_mut(self.scratch.as_slice()) {
            *existing += count;
        } else {
            self.variants.insert(self.scratch.clone(), count);
        }
    }

    /// Builds the log, renumbering activities by sorted name.
    #[must_use]
    pub fn build(self) -> EventLog {
        let mut order: Vec<ActivityId> = (0..self.names_in_order.len() as ActivityId).collect();
        order.sort_unstable_by(|&a, &b| self.names_in_order[a as usize].cmp(&self.names_in_order[b as usize]));
        let mut rank = vec![0; order.len()];
        for (new_id, &old_id) in order.iter().enumerate() {
            rank[old_id as usize] = new_id as ActivityId;
        }
        let mut names_in_order = self.names_in_order;
        let activities: Vec<String> =
            order.iter().map(|&old| std::mem::take(&mut names_in_order[old as usize])).collect();
        let mut variants: Vec<TraceVariant> = self
            .variants
            .into_iter()
            .map(|(mut trace, count)| {
                for id in &mut trace {
                    *id = rank[*id as usize];
                }
                TraceVariant { activities: trace, count }
            })
            .collect();
        // Most frequent first, then by sequence, so output is deterministic.
        variants.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.activities.cmp(&b.activities)));
        EventLog { activities, variants, n_cases: self.n_cases, n_events: self.n_events }
    }
}

impl EventLog {
    /// A log with one case per record: the tool names of its orchestration, in order.
    #[must_use]
    pub fn from_records(records: &[Record], classifier: Classifier) -> EventLog {
        let mut builder = EventLogBuilder::new();
        for record in records {
            builder.push_trace(record.orchestration.iter().map(|call| classifier.activity(call)));
        }
        builder.build()
    }

    /// A log with one case per trajectory: its tool calls, in order (messages are ignored).
    #[must_use]
    pub fn from_trajectories(trajectories: &[Trajectory], classifier: Classifier) -> EventLog {
        let mut builder = EventLogBuilder::new();
        for trajectory in trajectories {
            builder.push_trace(trajectory.tool_calls().map(|call| classifier.activity(call)));
        }
        builder.build()
    }

    /// The activity names, sorted; an [`ActivityId`] indexes this slice.
    #[must_use]
    pub fn activities(&self) -> &[String] {
        &self.activities
    }

    /// The name of activity `id`.
    ///
    /// # Panics
    ///
    /// When `id` is not an id of this log.
    #[must_use]
    pub fn activity(&self, id: ActivityId) -> &str {
        &self.activities[id as usize]
    }

    /// The variants, most frequent first.
    #[must_use]
    pub fn variants(&self) -> &[TraceVariant] {
        &self.variants
    }

    /// The number of cases.
    #[must_use]
    pub fn n_cases(&self) -> u64 {
        self.n_cases
    }

    /// The number of events.
    #[must_use]
    pub fn n_events(&self) -> u64 {
        self.n_events
    }
}

#[cfg(test)]
mod tests {
    use flowmem_model::ToolCall;
    use serde_json::json;

    use crate::{Classifier, EventLogBuilder};

    #[test]
    fn ids_follow_sorted_names_and_variants_group_cases() {
        let mut builder = EventLogBuilder::new();
        builder.push_trace(["z", "a"]);
        builder.push_trace(["z", "a"]);
        builder.push_trace(Vec::<&str>::new());
        let log = builder.build();
        assert_eq!(log.activities(), ["a", "z"]);
        assert_eq!(log.variants()[0].activities, vec![1, 0]);
        assert_eq!(log.variants()[0].count, 2);
        assert_eq!(log.variants()[1].activities, Vec::<u32>::new());
        assert_eq!((log.n_cases(), log.n_events()), (3, 4));
    }

    #[test]
    fn classifier_with_argument_keys_sorts_them() {
        let call = ToolCall::new("get", json!({"b": 1, "a": 2})).unwrap();
        assert_eq!(Classifier::ToolName.activity(&call), "get");
        assert_eq!(Classifier::ToolNameAndArgKeys.activity(&call), "get(a,b)");
    }
}
