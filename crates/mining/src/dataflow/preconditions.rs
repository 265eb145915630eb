//! Decision mining on argument values: what an argument's values always were, as the
//! results that describe them show.
//!
//! A result *describes* a value when the value stands at a path of it with no `[*]`
//! (`get_order_details` → `$.order_id`); the result's other fields at such paths are then
//! facts about the value (`$.status` = `"delivered"`). For every argument value of every
//! call, [`mine_preconditions`] reads the facts of the latest earlier result of each tool
//! that describes it. A fact that held for every value of an argument, read for at least
//! [`MIN_PRECONDITION_SUPPORT`] distinct values, is a precondition of the argument when chance
//! explains it poorly: if a share `p` of that tool's results hold the value at the field,
//! `n` distinct values all hold it by chance with probability `p^n`, which must be at most
//! [`MAX_CHANCE`]. (A field every result holds alike is no condition at all.) τ² retail
//! returns only delivered orders and modifies only pending ones, and the logs say so
//! without being told.

use std::collections::{BTreeMap, HashMap, HashSet};

use flowmem_model::{Record, canonical_json, value_key as key};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dataflow::values::{argument_leaves, result_leaves};

/// The fewest argument values a precondition must have been read for.
pub const MIN_PRECONDITION_SUPPORT: u64 = 3;

/// The largest probability that the readings agree by chance (see the module
/// documentation).
pub const MAX_CHANCE: f64 = 0.05;

/// The most preconditions an argument keeps.
const MAX_PRECONDITIONS: usize = 3;

/// The most fields a result may have outside its collections to be read as a
/// description: every such field may be a key, so the work grows with its square.
const MAX_DESCRIBED_FIELDS: usize = 64;

/// A condition every value of an argument met, in the terms of the log (a tool, not a
/// graph node); the graph's [`Precondition`](flowmem_model::Precondition) binds the tool
/// to a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MinedPrecondition {
    /// The tool whose results describe the values.
    pub tool: String,
    /// Where the value stands in such a result (`$.order_id`).
    pub key: String,
    /// The field read (`$.status`).
    pub field: String,
    /// The value the field held every time.
    pub value: Value,
    /// How many distinct argument values it was read for. (τ² tasks share users: three
    /// tasks with one user read one address three times, which is one reading.)
    pub support: u64,
}

/// One result's facts about a value it describes.
struct Description<'r> {
    tool: &'r str,
    key_path: String,
    /// The result's fields outside its collections.
    fields: std::rc::Rc<Vec<(String, Value)>>,
}

/// What the values of one (tool, argument) showed for one (describing tool, key, field).
#[derive(Default)]
struct Reading {
    /// The distinct argument values (their keys) it was read for.
    described: HashSet<String>,
    /// The one value seen, or `None` once two differed.
    value: Option<Value>,
    mixed: bool,
}

/// The preconditions of every (tool, argument path) of `records` that has any, most
/// supported first. See the [module documentation](self).
pub(crate) fn mine_preconditions(records: &[Record]) -> HashMap<(String, String), Vec<MinedPrecondition>> {
    // Per (describing tool, field): how often the field held each key in that tool's results.
    let mut spread: HashMap<(String, String), HashMap<String, u64>> = HashMap::new();
    // Per (tool, argument, describing tool, key path, field): what the values showed.
    let mut readings: BTreeMap<(String, String, String, String, String), Reading> = BTreeMap::new();
    for record in records {
        // Per value key: the latest description of it by each (tool, key path).
        let mut described: HashMap<String, Vec<Description<'_>>> = HashMap::new();
        for call in &record.orchestration {
            for leaf in argument_leaves(&call.args) {
                let Some(value_key) = key(leaf.value) else { continue };
                for description in described.get(&value_key).into_iter().flatten() {
                    for (field, held) in description.fields.iter().filter(|(field, _)| *field != description.key_path) {
                        let reading = readings
                            .entry((
                                call.tool.clone(),
                                leaf.path.clone(),
                                description.tool.to_owned(),
                                description.key_path.clone(),
                                field.clone(),
                            ))
                            .or_default();
                        reading.described.insert(value_key.clone());
                        match &reading.value {
                            None if !reading.mixed => reading.value = Some(held.clone()),
                            Some(seen) if key(seen) != key(held) => {
                                reading.value = None;
                                reading.mixed = true;
                            }
                            _ => {}
                        }
                    }
                }
            }
            let (Some(result), None) = (&call.result, &call.error) else { continue };
            let fields: Vec<(String, Value)> =
                result_leaves(result).into_iter().filter(|(path, _)| !path.contains("[*]")).collect();
            if fields.len() > MAX_DESCRIBED_FIELDS {
                continue;
            }
            for (path, value) in &fields {
                if let Some(value_key) = key(value) {
                    *spread.entry((call.tool.clone(), path.clone())).or_default().entry(value_key).or_default() += 1;
                }
            }
            let fields = std::rc::Rc::new(fields);
            for (path, value) in fields.iter() {
                let Some(value_key) = key(value) else { continue };
                let descriptions = described.entry(value_key).or_default();
                descriptions.retain(|description| description.tool != call.tool || description.key_path != *path);
                descriptions.push(Description { tool: &call.tool, key_path: path.clone(), fields: fields.clone() });
            }
        }
    }
    let mut res: HashMap<(String, String), Vec<MinedPrecondition>> = HashMap::new();
    for ((tool, arg, by, key_path, field), reading) in readings {
        let (Some(value), false) = (reading.value, reading.mixed) else { continue };
        let Some(value_key) = key(&value) else { continue };
        let Some(held) = spread.get(&(by.clone(), field.clone())) else { continue };
        let share = held.get(&value_key).copied().unwrap_or(0) as f64 / held.values().sum::<u64>().max(1) as f64;
        let support = reading.described.len() as u64;
        let chance = share.powi(i32::try_from(support).unwrap_or(i32::MAX));
        if support < MIN_PRECONDITION_SUPPORT || chance > MAX_CHANCE {
            continue;
        }
        res.entry((tool, arg)).or_default().push(MinedPrecondition { tool: by, key: key_path, field, value, support });
    }
    for found in res.values_mut() {
        // Stable over the sorted readings: equal supports keep a fixed order.
        found.sort_by_key(|found| std::cmp::Reverse(found.support));
        // One fact read through two keys of one result is one fact.
        let mut seen: Vec<(String, String, String)> = Vec::new();
        found.retain(|found| {
            let fact = (found.tool.clone(), found.field.clone(), canonical_json(&found.value));
            let new = !seen.contains(&fact);
            seen.push(fact);
            new
        });
        found.truncate(MAX_PRECONDITIONS);
    }
    res
}
