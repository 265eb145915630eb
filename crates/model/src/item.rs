//! One line of a flowmem JSONL file: a [`Record`] or a [`Trajectory`].

use std::fmt;

use serde::Serialize;

use crate::{Record, ToolCall, Trajectory};

/// One item of a flowmem JSONL file: a FlowScout record or an agent run.
///
/// It serialises as the bare record or trajectory, so a file of items reads back with
/// [`read_records`](crate::read_records) or [`read_trajectories`](crate::read_trajectories).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Item {
    /// A historical record `(query, reference result, tool-call log)`.
    Record(Record),
    /// An agent run.
    Trajectory(Trajectory),
}

/// Which kind of [`Item`] a value or file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// [`Item::Record`].
    Record,
    /// [`Item::Trajectory`].
    Trajectory,
}

impl Item {
    /// Which kind of item this is.
    #[must_use]
    pub fn kind(&self) -> ItemKind {
        match self {
            Item::Record(_) => ItemKind::Record,
            Item::Trajectory(_) => ItemKind::Trajectory,
        }
    }

    /// The source id, verbatim.
    #[must_use]
    pub fn id(&self) -> &str {
        match self {
            Item::Record(record) => &record.id,
            Item::Trajectory(trajectory) => &trajectory.id,
        }
    }

    /// The query.
    #[must_use]
    pub fn query(&self) -> &str {
        match self {
            Item::Record(record) => &record.query,
            Item::Trajectory(trajectory) => &trajectory.query,
        }
    }

    /// The tool calls in order: a record's orchestration log, or a run's tool steps.
    pub fn tool_calls(&self) -> Box<dyn Iterator<Item = &ToolCall> + '_> {
        match self {
            Item::Record(record) => Box::new(record.orchestration.iter()),
            Item::Trajectory(trajectory) => Box::new(trajectory.tool_calls()),
        }
    }
}

impl ItemKind {
    /// The kind's name in singular, `record` or `trajectory`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ItemKind::Record => "record",
            ItemKind::Trajectory => "trajectory",
        }
    }

    /// The kind's name in plural, `records` or `trajectories`.
    #[must_use]
    pub fn plural(self) -> &'static str {
        match self {
            ItemKind::Record => "records",
            ItemKind::Trajectory => "trajectories",
        }
    }
}

impl fmt::Display for ItemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Record> for Item {
    fn from(record: Record) -> Item {
        Item::Record(record)
    }
}

impl From<Trajectory> for Item {
    fn from(trajectory: Trajectory) -> Item {
        Item::Trajectory(trajectory)
    }
}
