//! Argument provenance mining: where every argument value of every reference call
//! comes from.
//!
//! For each scalar argument value (each element of an array argument, each field of an
//! object argument) of each call in a record's orchestration log, [`mine_dataflow`] looks
//! for sources in order of evidence and keeps the first kind that finds any:
//! 1. **query**: the value occurs verbatim in the record's query, as a whole token;
//! 2. **result**: the value is a leaf of an earlier call's result, at a JSON path whose
//!    array indices are generalised to `[*]` (`$.items[*].product_id`), and so are the
//!    keys of maps keyed by id (all-digit keys, or keys their child object repeats as a
//!    field: `$.variants[*].item_id`). A leaf equal to one of that call's own arguments
//!    is an echo (MCP servers often repeat the call) and is left to the argument source;
//! 3. **argument**: the value is a leaf of an earlier call's arguments;
//! 4. **constant**: none of the above, and the argument has this same value wherever it
//!    occurs, in at least two records;
//! 5. otherwise the value is **unexplained**.
//!
//! Within a kind every match counts (a value found in two earlier results has two
//! sources). Values are compared after normalisation: strings are trimmed, lose one
//! leading `#` and are lowercased; digit grouping (`1,000`, `1_000`, no-break or thin
//! spaces) is dropped; integral numbers compare equal to their integer text, so `19122`
//! matches `"19122"`; string results holding JSON are parsed. Booleans, nulls and empty
//! strings are never matched, so they are constants or unexplained. Results of failed
//! calls are not searched.
//!
//! The per-value findings are then aggregated per (tool, argument path) into a
//! distribution of sources with support counts ([`ArgumentFlow`]). Mining is pure: calls
//! without results (τ-bench and τ²-bench tasks record only the calls) simply offer no
//! result sources, so the caller replays such logs through the real tools first.
//!
//! Mining also reads what each argument's values always *were* ([`MinedPrecondition`]):
//! a result describes a value that stands at one of its paths without `[*]`, and its
//! other such fields are facts about the value. A fact every value of the argument had
//! (the latest earlier description of each), for at least [`MIN_PRECONDITION_SUPPORT`]
//! distinct values, and that chance explains poorly (a share `p` of the describing
//! tool's results hold it, so `n` values agree by chance with `p^n` ≤ [`MAX_CHANCE`]),
//! is a precondition: τ² retail returns only orders whose lookup said `delivered`.
//!
//! And it reads which words a tool's queries always held (`cues`): τ² retail exchanged
//! items only when the query said `exchange`.

mod bind;
mod cues;
mod preconditions;
mod values;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use flowmem_model::{Anchor, EachUse, Record, ToolCall, ValueShape, canonical_json};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::dataflow::bind::BindingConfig;
pub(crate) use crate::dataflow::bind::{fill_bindings, order_parallels};
pub use crate::dataflow::cues::{CUE_MAX_SHARE, CUE_RECALL, MAX_CUE_CHANCE, MIN_CUE_RECORDS};
pub use crate::dataflow::preconditions::{MAX_CHANCE, MIN_PRECONDITION_SUPPORT, MinedPrecondition};
use crate::dataflow::values::{argument_leaves, result_leaves};
use flowmem_model::{normalise_text as normalise_query, occurs_in as find_in_query, value_key as key};

/// The version of the [`Dataflow`] document.
pub const DATAFLOW_VERSION: u32 = 1;

/// The most example values an [`ArgumentFlow`] keeps.
const MAX_EXAMPLES: usize = 3;

/// The fewest query-sourced values a left context must precede to be an anchor: one
/// record's wording is no evidence.
pub const MIN_ANCHOR_SUPPORT: u64 = 2;

/// The most anchors an [`ArgumentFlow`] keeps.
pub const MAX_ANCHORS: usize = 8;

/// What [`mine_dataflow`] found: the `--json` document of `flowmem mine --output dataflow`.
///
/// Shape (version 1): `{"version": 1, "records", "calls", "calls_with_results", "values",
/// "explained", "coverage", "by_kind": {"query", "result", "argument", "constant",
/// "unexplained"}, "arguments": [ArgumentFlow], "per_record": [RecordFlow]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dataflow {
    /// Always [`DATAFLOW_VERSION`].
    pub version: u32,
    /// Records mined.
    pub records: usize,
    /// Calls in their logs.
    pub calls: usize,
    /// Calls that carry a result (their results were searched for sources).
    pub calls_with_results: usize,
    /// Argument values (scalar leaves) in all calls.
    pub values: u64,
    /// Values with at least one source.
    pub explained: u64,
    /// `explained / values`, 0 when there are no values.
    pub coverage: f64,
    /// Values per kind of their sources.
    pub by_kind: KindCounts,
    /// One entry per (tool, argument path), sorted by tool then argument.
    pub arguments: Vec<ArgumentFlow>,
    /// What each record's values come from, in input order.
    pub per_record: Vec<RecordFlow>,
    /// Per tool, the words without which the records' queries never called it (see
    /// [`MIN_CUE_RECORDS`], [`CUE_RECALL`], [`CUE_MAX_SHARE`], [`MAX_CUE_CHANCE`]): the skeleton's branches
    /// carry them as their routes' cues.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cues: BTreeMap<String, Vec<String>>,
    /// Per record, in input order: the tools its log called and its query's
    /// [`decision_words`](flowmem_model::decision_words). The skeleton decides branches by
    /// them ([`tree_to_bound_skeleton`](crate::tree_to_bound_skeleton)); not part of the
    /// document.
    #[serde(skip)]
    pub(crate) cases: Vec<(BTreeSet<String>, Vec<String>)>,
    /// Per tool, the tools whose arguments' values its results most often gave (it is
    /// their provider). Not part of the document.
    #[serde(skip)]
    pub(crate) feeds: BTreeMap<String, BTreeSet<String>>,
    /// Per record, in input order: the tools it did not call that, in the other records,
    /// provided values its log holds with no source (a log that omits a lookup). Not part
    /// of the document.
    #[serde(skip)]
    pub(crate) lacking: Vec<BTreeSet<String>>,
}

/// How many values each kind of source explained.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindCounts {
    /// Found in the query.
    pub query: u64,
    /// Found in an earlier call's result.
    pub result: u64,
    /// Found in an earlier call's arguments.
    pub argument: u64,
    /// The same in every record.
    pub constant: u64,
    /// No source found.
    pub unexplained: u64,
}

/// The sources of one argument of one tool, over all records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgumentFlow {
    /// The tool.
    pub tool: String,
    /// The argument path: `order_id`, `item_ids[*]`, `passengers[*].first_name`.
    pub arg: String,
    /// How many values of it the logs hold.
    pub observed: u64,
    /// How many of them have a source.
    pub explained: u64,
    /// The sources, most supported first; a value with several sources counts for each.
    pub sources: Vec<SourceSupport>,
    /// Up to three distinct values seen, in log order.
    pub examples: Vec<Value>,
    /// The most common [shape](ValueShape) of the values found in the query, if any
    /// were: the executor offers the query's spans of this shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_shape: Option<ValueShape>,
    /// The left contexts that preceded at least [`MIN_ANCHOR_SUPPORT`] of the values
    /// found in the query, most supported first (at most [`MAX_ANCHORS`]): the executor
    /// prefers the spans they precede.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_anchors: Vec<Anchor>,
    /// The shortest and the longest value found in the query, in characters of its
    /// [`value_key`](flowmem_model::value_key), when at least two were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_lengths: Option<[usize; 2]>,
    /// What every value was, as earlier results describing it showed (`get_order_details`
    /// → `$.status` = `"delivered"`), most supported first
    /// ([`MinedPrecondition`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<MinedPrecondition>,
    /// For the elements of an array argument (`new_item_ids[*]`): the other array
    /// argument of the tool (`item_ids`) that had as many elements in every call holding
    /// both, at least [`MIN_SAME_LENGTH_CALLS`] of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_length_as: Option<String>,
    /// For the elements of an array argument (`new_item_ids[*]`): the other array argument
    /// whose element of the same index stood beside each of its elements in one earlier
    /// result, at one path, in every call that could show it ([`MinedPairing`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired_with: Option<MinedPairing>,
}

/// Two array arguments whose elements go in pairs through one result: in every mined call
/// holding both whose earlier results of `tool` held all their elements at `path` (at
/// least [`MIN_SAME_LENGTH_CALLS`] such calls), element `i` of each stood there in one
/// result. τ² retail exchanges an item only for a variant of the same product:
/// `item_ids[i]` and `new_item_ids[i]` are both in one `get_product_details` result's
/// `variants[*].item_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MinedPairing {
    /// The other array argument (`item_ids`).
    pub arg: String,
    /// The tool whose results held both elements.
    pub tool: String,
    /// Where both stood in such a result (`$.parsed_content.variants[*].item_id`).
    pub path: String,
    /// How many calls paired every element so.
    pub support: u64,
}

/// A source and the number of values it explained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceSupport {
    /// The source.
    #[serde(flatten)]
    pub source: Source,
    /// How many values it explained.
    pub support: u64,
    /// For a result path over a collection (with `[*]`): in how many records it held at
    /// least two values and gave the argument one, and in how many of those the tool's
    /// calls took every value of the collection (every element at the path, over all
    /// calls of the source tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each: Option<EachUse>,
}

/// Where one argument value came from, in the terms of the log (tools, not graph nodes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum Source {
    /// The record's query.
    Query,
    /// An earlier call's result.
    Result {
        /// The earlier call's tool.
        tool: String,
        /// The JSON path in its result, array indices as `[*]`.
        path: String,
    },
    /// An earlier call's arguments.
    Argument {
        /// The earlier call's tool.
        tool: String,
        /// The argument path in that call.
        arg: String,
    },
    /// The same value wherever the argument occurs.
    Constant {
        /// The value, as canonical JSON text (so sources order and compare).
        value: String,
    },
}

impl Source {
    /// The kind's name: `query`, `result`, `argument` or `constant`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Query => "query",
            Source::Result { .. } => "result",
            Source::Argument { .. } => "argument",
            Source::Constant { .. } => "constant",
        }
    }

    /// The tool this source reads from, for result and argument sources.
    #[must_use]
    pub fn tool(&self) -> Option<&str> {
        match self {
            Source::Result { tool, .. } | Source::Argument { tool, .. } => Some(tool),
            Source::Query | Source::Constant { .. } => None,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Query => f.write_str("query"),
            Source::Result { tool, path } => write!(f, "{tool} → {path}"),
            Source::Argument { tool, arg } => write!(f, "{tool}({arg})"),
            Source::Constant { value } => write!(f, "constant {value}"),
        }
    }
}

/// The findings of one record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordFlow {
    /// The record's id.
    pub id: String,
    /// Every argument value of its calls, in log order.
    pub values: Vec<ValueFlow>,
}

/// One argument value and its sources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValueFlow {
    /// The call's position in the log, from 0.
    pub call: usize,
    /// The call's tool.
    pub tool: String,
    /// The argument path.
    pub arg: String,
    /// The value.
    pub value: Value,
    /// Its sources, all of the strongest kind found; empty when unexplained.
    pub sources: Vec<Source>,
    /// For a value found in the query: the left contexts of its occurrences there
    /// ([`left_contexts`](flowmem_model::left_contexts)), the call's other query-sourced
    /// values written `{argument}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub anchors: Vec<Vec<String>>,
}

impl Dataflow {
    /// The flow of `tool`'s argument `arg`, if the logs hold it.
    #[must_use]
    pub fn argument(&self, tool: &str, arg: &str) -> Option<&ArgumentFlow> {
        self.arguments.iter().find(|flow| flow.tool == tool && flow.arg == arg)
    }

    /// The findings of the record with `id`, if it was mined.
    #[must_use]
    pub fn record(&self, id: &str) -> Option<&RecordFlow> {
        self.per_record.iter().find(|record| record.id == id)
    }
}

/// Mines where every argument value of every call in `records` comes from.
///
/// See the [module documentation](self) for the order of evidence and the
/// normalisation. Equal inputs give equal documents.
///
/// # Example
///
/// ```
/// use flowmem_mining::{Source, mine_dataflow};
/// use flowmem_model::{Record, ToolCall};
/// use serde_json::json;
///
/// let mut find = ToolCall::new("find_user", json!({"zip": "19122"}))?;
/// find.result = Some(json!("yusuf_rossi_9620"));
/// let details = ToolCall::new("get_user", json!({"user_id": "yusuf_rossi_9620"}))?;
/// let record: Record = serde_json::from_value(json!({"id": "0", "query": "I live in 19122."}))?;
/// let record = Record { orchestration: vec![find, details], ..record };
/// let flow = mine_dataflow(&[record]);
/// assert_eq!(flow.argument("find_user", "zip").unwrap().sources[0].source, Source::Query);
/// let user_id = &flow.argument("get_user", "user_id").unwrap().sources[0].source;
/// assert_eq!(user_id, &Source::Result { tool: "find_user".into(), path: "$".into() });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn mine_dataflow(records: &[Record]) -> Dataflow {
    let (mut per_record, each): (Vec<RecordFlow>, Vec<EachFindings>) = records.iter().map(mine_record).unzip();
    mark_constants(&mut per_record);
    let mut dataflow = aggregate(records, per_record, &each);
    let mut requires = preconditions::mine_preconditions(records);
    for flow in &mut dataflow.arguments {
        flow.requires = requires.remove(&(flow.tool.clone(), flow.arg.clone())).unwrap_or_default();
    }
    dataflow.cases = records
        .iter()
        .map(|record| {
            let tools = record.orchestration.iter().map(|call| call.tool.clone()).collect();
            (tools, flowmem_model::decision_words(&record.query))
        })
        .collect();
    dataflow.cues = cues::mine_cues(&dataflow.cases);
    dataflow.feeds = feeds(&dataflow.arguments);
    dataflow.lacking = lacking(&dataflow);
    let same_lengths = same_lengths(records);
    for flow in &mut dataflow.arguments {
        flow.same_length_as = same_lengths.get(&(flow.tool.clone(), flow.arg.clone())).cloned();
    }
    let mut pairings = pairings(records);
    for flow in &mut dataflow.arguments {
        flow.paired_with = pairings.remove(&(flow.tool.clone(), flow.arg.clone()));
    }
    dataflow
}

/// The fewest values a result source must have given an argument for its tool to count
/// as the argument's provider ([`Dataflow`]'s `feeds` and `lacking`).
const MIN_PROVIDER_SUPPORT: u64 = 2;

/// The tools whose results are the best supported source of `argument`'s values (at
/// least [`MIN_PROVIDER_SUPPORT`]): its providers. An argument source is no provider: a
/// call repeating an earlier call's argument took nothing from it the query did not give.
fn providers(argument: &ArgumentFlow) -> impl Iterator<Item = &str> {
    let results = || {
        argument.sources.iter().filter_map(|found| match &found.source {
            Source::Result { tool, .. } if *tool != argument.tool => Some((tool.as_str(), found.support)),
            _ => None,
        })
    };
    let best = results().map(|(_, support)| support).max().unwrap_or(0).max(MIN_PROVIDER_SUPPORT);
    results().filter(move |&(_, support)| support == best).map(|(tool, _)| tool)
}

/// Per tool, the tools it is a provider of ([`providers`]).
fn feeds(arguments: &[ArgumentFlow]) -> BTreeMap<String, BTreeSet<String>> {
    let mut res: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for argument in arguments {
        for tool in providers(argument) {
            res.entry(tool.to_owned()).or_default().insert(argument.tool.clone());
        }
    }
    res
}

/// Per record: the tools it did not call that are, in the other records, providers
/// ([`providers`]) of a value its log holds with no source.
fn lacking(dataflow: &Dataflow) -> Vec<BTreeSet<String>> {
    dataflow
        .per_record
        .iter()
        .zip(&dataflow.cases)
        .map(|(flow, (called, _))| {
            flow.values
                .iter()
                .filter(|value| value.sources.is_empty())
                .filter_map(|value| dataflow.argument(&value.tool, &value.arg))
                .flat_map(providers)
                .filter(|&tool| !called.contains(tool))
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

/// The fewest calls holding two array arguments that must have had equal lengths for
/// [`ArgumentFlow::same_length_as`].
pub const MIN_SAME_LENGTH_CALLS: usize = 3;

/// Per (tool, `name[*]`): the tool's other top-level array argument that had as many
/// elements in every call holding both, in at least [`MIN_SAME_LENGTH_CALLS`] calls (the
/// first such, by name).
fn same_lengths(records: &[Record]) -> HashMap<(String, String), String> {
    // Per (tool, array a, array b), a < b: calls holding both, and those of equal length.
    let mut pairs: BTreeMap<(String, String, String), (usize, usize)> = BTreeMap::new();
    for call in records.iter().flat_map(|record| &record.orchestration) {
        let arrays: Vec<(&String, usize)> =
            call.args.iter().filter_map(|(name, value)| Some((name, value.as_array()?.len()))).collect();
        for (idx, &(a, a_len)) in arrays.iter().enumerate() {
            for &(b, b_len) in &arrays[idx + 1..] {
                let (a, b) = if a < b { (a, b) } else { (b, a) };
                let counts = pairs.entry((call.tool.clone(), a.clone(), b.clone())).or_default();
                counts.0 += 1;
                counts.1 += usize::from(a_len == b_len);
            }
        }
    }
    let mut res = HashMap::new();
    for ((tool, a, b), (both, equal)) in pairs {
        if both >= MIN_SAME_LENGTH_CALLS && equal == both {
            res.entry((tool.clone(), format!("{a}[*]"))).or_insert_with(|| b.clone());
            res.entry((tool, format!("{b}[*]"))).or_insert(a);
        }
    }
    res
}

/// Per (tool, `name[*]`): the [`MinedPairing`] of the array argument, for both arrays of
/// each pair of one tool. A call holding both at one length *tests* a (result tool, path)
/// when every element of both stood at that path in some earlier result of that tool,
/// and *pairs* there when each element `i` of one stood beside element `i` of the other in
/// one such result. A pairing is mined when at least [`MIN_SAME_LENGTH_CALLS`] calls
/// tested it and every one paired (the best supported, then the first by name). Calls
/// without such results say nothing: τ² reference solutions often skip the lookups.
fn pairings(records: &[Record]) -> HashMap<(String, String), MinedPairing> {
    /// (tool, array a, array b, result tool, path), a < b.
    type Place = (String, String, String, String, String);
    // Per place: the calls that tested it and those of them that paired.
    let mut counts: BTreeMap<Place, (u64, u64)> = BTreeMap::new();
    let two_arrays = |call: &ToolCall| call.args.values().filter(|value| value.is_array()).count() >= 2;
    // Only records with a call of two array arguments can pair; the others' results are
    // not walked.
    for record in records.iter().filter(|record| record.orchestration.iter().any(two_arrays)) {
        // Each earlier successful result's keys per path.
        let mut seen: Vec<(&str, HashMap<String, HashSet<String>>)> = Vec::new();
        for call in &record.orchestration {
            let arrays: Vec<(&String, &Vec<Value>)> =
                call.args.iter().filter_map(|(name, value)| Some((name, value.as_array()?))).collect();
            for (idx, &(a, a_items)) in arrays.iter().enumerate() {
                for &(b, b_items) in &arrays[idx + 1..] {
                    if a_items.len() != b_items.len() || a_items.is_empty() {
                        continue;
                    }
                    let (a, b) = if a < b { (a, b) } else { (b, a) };
                    let keys: Option<Vec<(String, String)>> =
                        a_items.iter().zip(b_items).map(|(x, y)| Some((key(x)?, key(y)?))).collect();
                    let Some(keys) = keys else { continue };
                    // The (result tool, path)s every element stood at, and whether each pair
                    // stood there in one result.
                    let mut places: BTreeMap<(&str, &str), (bool, bool)> = BTreeMap::new();
                    for (tool, paths) in &seen {
                        for path in paths.keys() {
                            places.entry((tool, path.as_str())).or_insert((true, true));
                        }
                    }
                    for ((tool, path), (tested, paired)) in &mut places {
                        let results = || {
                            seen.iter()
                                .filter(|(seen_tool, _)| seen_tool == tool)
                                .filter_map(|(_, paths)| paths.get(*path))
                        };
                        for (x, y) in &keys {
                            let held = |value: &String| results().any(|keys| keys.contains(value));
                            *tested &= held(x) && held(y);
                            *paired &= results().any(|keys| keys.contains(x) && keys.contains(y));
                        }
                    }
                    for ((tool, path), (_, paired)) in places.into_iter().filter(|(_, (tested, _))| *tested) {
                        let entry = (call.tool.clone(), a.clone(), b.clone(), tool.to_owned(), path.to_owned());
                        let counts = counts.entry(entry).or_default();
                        counts.0 += 1;
                        counts.1 += u64::from(paired);
                    }
                }
            }
            if call.error.is_none()
                && let Some(result) = &call.result
            {
                let mut paths: HashMap<String, HashSet<String>> = HashMap::new();
                for (path, value) in result_leaves(result) {
                    if let Some(value) = key(&value) {
                        paths.entry(path).or_default().insert(value);
                    }
                }
                seen.push((call.tool.as_str(), paths));
            }
        }
    }
    let mut best: Vec<(Place, u64)> = counts
        .into_iter()
        .filter(|(_, (tested, paired))| *tested >= MIN_SAME_LENGTH_CALLS as u64 && paired == tested)
        .map(|(entry, (_, paired))| (entry, paired))
        .collect();
    best.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    let mut res: HashMap<(String, String), MinedPairing> = HashMap::new();
    for ((tool, a, b, result_tool, path), support) in best {
        let pairing =
            |arg: &str| MinedPairing { arg: arg.to_owned(), tool: result_tool.clone(), path: path.clone(), support };
        res.entry((tool.clone(), format!("{a}[*]"))).or_insert_with(|| pairing(&b));
        res.entry((tool, format!("{b}[*]"))).or_insert_with(|| pairing(&a));
    }
    res
}

/// What one record says of the collections its arguments drew from: per (tool,
/// argument) and result source over a collection of at least two values that explained
/// one of its values, whether the argument's values in the record hold every value of
/// the collection.
type EachFindings = Vec<((String, String), Source, bool)>;

/// The findings of one record, before constants are known.
fn mine_record(record: &Record) -> (RecordFlow, EachFindings) {
    let query = normalise_query(&record.query);
    // Per earlier call: normalised key -> the (tool, path) sources it offers.
    let mut offered_results: HashMap<String, Vec<Source>> = HashMap::new();
    // Per result source over a collection (a path with `[*]`): the keys it holds.
    let mut collections: HashMap<Source, HashSet<String>> = HashMap::new();
    let mut offered_args: HashMap<String, Vec<Source>> = HashMap::new();
    let mut values = Vec::new();
    for (call_idx, call) in record.orchestration.iter().enumerate() {
        let leaves = argument_leaves(&call.args);
        for leaf in &leaves {
            let sources = match key(leaf.value) {
                None => Vec::new(),
                Some(key) if find_in_query(&query, &key) => vec![Source::Query],
                Some(key) => offered_results.get(&key).or_else(|| offered_args.get(&key)).cloned().unwrap_or_default(),
            };
            values.push(ValueFlow {
                call: call_idx,
                tool: call.tool.clone(),
                arg: leaf.path.clone(),
                value: leaf.value.clone(),
                sources,
                anchors: Vec::new(),
            });
        }
        add_anchors(&record.query, values.iter_mut().filter(|value| value.call == call_idx));
        // What this call offers to later calls.
        for leaf in &leaves {
            if let Some(key) = key(leaf.value) {
                offer(&mut offered_args, key, Source::Argument { tool: call.tool.clone(), arg: leaf.path.clone() });
            }
        }
        if let (Some(result), None) = (&call.result, &call.error) {
            let own: Vec<String> = leaves.iter().filter_map(|leaf| key(leaf.value)).collect();
            for (path, value) in result_leaves(result) {
                // A result echoing the call's own argument offers what the argument does.
                if let Some(key) = key(&value)
                    && !own.contains(&key)
                {
                    let over_collection = path.contains("[*]");
                    let source = Source::Result { tool: call.tool.clone(), path };
                    if over_collection {
                        collections.entry(source.clone()).or_default().insert(key.clone());
                    }
                    offer(&mut offered_results, key, source);
                }
            }
        }
    }
    let each = each_findings(&values, &collections);
    (RecordFlow { id: record.id.clone(), values }, each)
}

/// Fills the left contexts of one call's values found in the query, naming the call's
/// other query-sourced values.
fn add_anchors<'v>(query: &str, values: impl Iterator<Item = &'v mut ValueFlow>) {
    let mut from_query: Vec<&mut ValueFlow> =
        values.filter(|value| value.sources.first() == Some(&Source::Query)).collect();
    let texts: Vec<(String, String)> =
        from_query.iter().filter_map(|value| Some((value.arg.clone(), key(&value.value)?))).collect();
    for value in &mut from_query {
        let Some(text) = key(&value.value) else { continue };
        let others: Vec<(&str, &str)> = texts
            .iter()
            .filter(|(arg, _)| *arg != value.arg)
            .map(|(arg, text)| (arg.as_str(), text.as_str()))
            .collect();
        value.anchors = flowmem_model::left_contexts(query, &text, &others);
    }
}

/// For [`EachFindings`]: the values of an argument count whatever their sources (one
/// also found in the query still takes its element of the collection).
fn each_findings(values: &[ValueFlow], collections: &HashMap<Source, HashSet<String>>) -> EachFindings {
    // Per (tool, argument): the keys of its values, and the collections that explained any.
    type Used<'s> = (HashSet<String>, Vec<&'s Source>);
    let mut used: BTreeMap<(String, String), Used<'_>> = BTreeMap::new();
    for value in values {
        let (keys, sources) = used.entry((value.tool.clone(), value.arg.clone())).or_default();
        keys.extend(key(&value.value));
        for source in value.sources.iter().filter(|source| collections.contains_key(*source)) {
            if !sources.contains(&source) {
                sources.push(source);
            }
        }
    }
    let mut res = Vec::new();
    for (tool_arg, (keys, sources)) in used {
        for source in sources {
            let collection = &collections[source];
            // Taking the one value of a collection of one says nothing of going through it.
            if collection.len() >= 2 {
                res.push((tool_arg.clone(), source.clone(), collection.is_subset(&keys)));
            }
        }
    }
    res
}

fn offer(offered: &mut HashMap<String, Vec<Source>>, key: String, source: Source) {
    let sources = offered.entry(key).or_default();
    if !sources.contains(&source) {
        sources.push(source);
    }
}

/// Marks unexplained values of arguments that have one value everywhere, in at least two
/// records, as constants.
fn mark_constants(per_record: &mut [RecordFlow]) {
    // (tool, arg) -> (the one canonical value so far, or None once two differ; records seen).
    let mut seen: HashMap<(String, String), (Option<String>, usize)> = HashMap::new();
    for record in per_record.iter() {
        let mut in_record: Vec<(&str, &str)> = Vec::new();
        for value in &record.values {
            let text = canonical_json(&value.value);
            let entry = seen.entry((value.tool.clone(), value.arg.clone())).or_insert_with(|| (Some(text.clone()), 0));
            if entry.0.as_deref() != Some(text.as_str()) {
                entry.0 = None;
            }
            if !in_record.contains(&(value.tool.as_str(), value.arg.as_str())) {
                in_record.push((value.tool.as_str(), value.arg.as_str()));
                entry.1 += 1;
            }
        }
    }
    for record in per_record.iter_mut() {
        for value in record.values.iter_mut().filter(|value| value.sources.is_empty()) {
            if let Some((Some(text), n_records)) = seen.get(&(value.tool.clone(), value.arg.clone()))
                && *n_records >= 2
            {
                value.sources.push(Source::Constant { value: text.clone() });
            }
        }
    }
}

fn aggregate(records: &[Record], per_record: Vec<RecordFlow>, each: &[EachFindings]) -> Dataflow {
    let mut each_counts: HashMap<(&(String, String), &Source), EachUse> = HashMap::new();
    for (tool_arg, source, all) in each.iter().flatten() {
        let counts = each_counts.entry((tool_arg, source)).or_insert(EachUse { records: 0, all: 0 });
        counts.records += 1;
        counts.all += u64::from(*all);
    }
    let mut by_kind = KindCounts::default();
    type Counts = (BTreeMap<Source, u64>, BTreeMap<ValueShape, u64>, Vec<Anchor>);
    let mut flows: BTreeMap<(String, String), (ArgumentFlow, Counts)> = BTreeMap::new();
    let (mut n_values, mut n_explained) = (0u64, 0u64);
    for value in per_record.iter().flat_map(|record| &record.values) {
        n_values += 1;
        let counter = match value.sources.first() {
            None => &mut by_kind.unexplained,
            Some(Source::Query) => &mut by_kind.query,
            Some(Source::Result { .. }) => &mut by_kind.result,
            Some(Source::Argument { .. }) => &mut by_kind.argument,
            Some(Source::Constant { .. }) => &mut by_kind.constant,
        };
        *counter += 1;
        let (flow, (supports, shapes, anchors)) =
            flows.entry((value.tool.clone(), value.arg.clone())).or_insert_with(|| {
                let flow = ArgumentFlow {
                    tool: value.tool.clone(),
                    arg: value.arg.clone(),
                    observed: 0,
                    explained: 0,
                    sources: Vec::new(),
                    examples: Vec::new(),
                    query_shape: None,
                    query_anchors: Vec::new(),
                    query_lengths: None,
                    requires: Vec::new(),
                    same_length_as: None,
                    paired_with: None,
                };
                (flow, Default::default())
            });
        flow.observed += 1;
        if !value.sources.is_empty() {
            flow.explained += 1;
            n_explained += 1;
        }
        for source in &value.sources {
            *supports.entry(source.clone()).or_default() += 1;
        }
        if value.sources.first() == Some(&Source::Query)
            && let Some(shape) = ValueShape::of(&value.value)
        {
            *shapes.entry(shape).or_default() += 1;
            if let Some(key) = flowmem_model::value_key(&value.value) {
                let length = key.chars().count();
                let [shortest, longest] = flow.query_lengths.get_or_insert([length, length]);
                *shortest = (*shortest).min(length);
                *longest = (*longest).max(length);
            }
        }
        for words in &value.anchors {
            match anchors.iter_mut().find(|anchor| &anchor.words == words) {
                Some(anchor) => anchor.support += 1,
                None => anchors.push(Anchor { words: words.clone(), support: 1 }),
            }
        }
        if flow.examples.len() < MAX_EXAMPLES && !flow.examples.contains(&value.value) {
            flow.examples.push(value.value.clone());
        }
    }
    let arguments = flows
        .into_values()
        .map(|(mut flow, (supports, shapes, mut anchors))| {
            // Stable: equal supports keep the order they were first seen in.
            anchors.retain(|anchor| anchor.support >= MIN_ANCHOR_SUPPORT);
            anchors.sort_by_key(|anchor| std::cmp::Reverse(anchor.support));
            anchors.truncate(MAX_ANCHORS);
            flow.query_anchors = anchors;
            // One value says nothing of how long the others are.
            if shapes.values().sum::<u64>() < 2 {
                flow.query_lengths = None;
            }
            // The most common shape; a tie goes to the first in `ValueShape`'s order.
            flow.query_shape = shapes
                .into_iter()
                .max_by_key(|&(shape, count)| (count, std::cmp::Reverse(shape)))
                .map(|(shape, _)| shape);
            let tool_arg = (flow.tool.clone(), flow.arg.clone());
            flow.sources = supports
                .into_iter()
                .map(|(source, support)| {
                    let each = each_counts.get(&(&tool_arg, &source)).copied();
                    SourceSupport { source, support, each }
                })
                .collect();
            // Stable: equal supports keep the sources' own order.
            flow.sources.sort_by_key(|source| std::cmp::Reverse(source.support));
            flow
        })
        .collect();
    Dataflow {
        version: DATAFLOW_VERSION,
        records: records.len(),
        calls: records.iter().map(|record| record.orchestration.len()).sum(),
        calls_with_results: records
            .iter()
            .flat_map(|record| &record.orchestration)
            .filter(|call| call.result.is_some())
            .count(),
        values: n_values,
        explained: n_explained,
        coverage: if n_values == 0 { 0.0 } else { n_explained as f64 / n_values as f64 },
        by_kind,
        arguments,
        per_record,
        cues: BTreeMap::new(),
        cases: Vec::new(),
        feeds: BTreeMap::new(),
        lacking: Vec::new(),
    }
}
