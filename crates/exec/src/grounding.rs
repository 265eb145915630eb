//! Data-flow grounding of tool arguments: a tool node whose arguments carry mined
//! bindings ([`ArgBinding`]) takes their values from the run's context instead of
//! leaving them to the model.
//!
//! For each bound argument the sources are tried in order of support; the first that
//! yields values gives the candidates:
//! - an upstream node's latest result at a JSON path (`$.items[*].item_id` gives every
//!   element);
//! - the arguments an upstream node's latest tool call was given, at an argument path;
//! - the query's spans of the mined values' shape (ids, numbers, emails, names, quoted
//!   strings; [`ValueShape::spans`](flowmem_model::ValueShape::spans));
//! - a constant.
//!
//! Candidates an upstream result describes as failing one of the binding's mined
//! preconditions ([`Precondition`](flowmem_model::Precondition): an order to return must
//! be delivered) are dropped ([`meet_preconditions`]); when none is left, the next source
//! is tried, and its candidates must then be described as meeting them. An argument then
//! agrees with the upstream call another argument's values come from
//! ([`agree_with_sources`]), and query spans are narrowed by the words the mined values
//! followed ([`narrow_by_anchors`]).
//!
//! Candidates are converted to the argument's schema type where they can be (a number
//! span for an `integer` argument becomes a number). One candidate is used as it is;
//! several are offered to the model as a JSON Schema `enum` on that argument; none
//! leaves the argument to the model, marked ungrounded.

use serde_json::Value;

use flowmem_model::{Anchor, ArgBinding, Precondition, ValueSource, anchor_score, values_at};

use crate::node::value_text;

/// What a tool node can see of the nodes upstream of it.
pub(crate) trait Upstream {
    /// The latest output of node `id`.
    fn output(&self, id: &str) -> Option<&str>;
    /// The arguments of node `id`'s latest tool call.
    fn args(&self, id: &str) -> Option<&serde_json::Map<String, Value>>;
    /// Every successful output of node `id` with the arguments of its call, newest first
    /// (a loop's node has one per iteration).
    fn calls(&self, id: &str) -> Vec<(&str, Option<&serde_json::Map<String, Value>>)>;
}

/// An upstream view in which node `node`'s latest call is one given call of it.
struct Pinned<'u> {
    upstream: &'u dyn Upstream,
    node: &'u str,
    output: &'u str,
    args: Option<&'u serde_json::Map<String, Value>>,
}

impl Upstream for Pinned<'_> {
    fn output(&self, id: &str) -> Option<&str> {
        if id == self.node { Some(self.output) } else { self.upstream.output(id) }
    }

    fn args(&self, id: &str) -> Option<&serde_json::Map<String, Value>> {
        if id == self.node { self.args } else { self.upstream.args(id) }
    }

    fn calls(&self, id: &str) -> Vec<(&str, Option<&serde_json::Map<String, Value>>)> {
        if id == self.node { vec![(self.output, self.args)] } else { self.upstream.calls(id) }
    }
}

/// How a run grounds tool arguments.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Grounding {
    /// The model writes every argument.
    Off,
    /// The model writes every argument, but each value must occur in the query or in an
    /// earlier tool result, unless the argument is free text (its name or description
    /// speaks of a reason, summary, message, expression, note or comment); a call
    /// with values from nowhere is sent back to the model once, naming them. The same
    /// for ReAct and for workflows, whose bindings are then not used.
    Context,
    /// Bound arguments take their values from the context (the default). ReAct has no
    /// bindings, so under this mode it writes its arguments as under `Off`.
    #[default]
    Bindings,
}

/// Whether argument `arg` (with its schema `property`) is free text, which context
/// grounding does not check: its name or description speaks of a reason, a summary, a
/// message, an expression, a note, a comment, a description or free text.
#[must_use]
pub(crate) fn is_free_text(arg: &str, property: Option<&Value>) -> bool {
    const WORDS: &[&str] =
        &["reason", "summary", "message", "expression", "note", "comment", "description", "free text", "free-form"];
    let description = property.and_then(|property| property.get("description")).and_then(Value::as_str);
    let texts = [Some(arg), description];
    texts.into_iter().flatten().any(|text| {
        let text = text.to_lowercase();
        WORDS.iter().any(|word| text.contains(word))
    })
}

/// The values of `args` (every scalar leaf, array elements included) that occur neither
/// in `query` nor in any of `results`, as `(argument, value)`: the ones the model wrote
/// from nowhere. Free-text arguments, booleans and nulls are never counted. `query`
/// and `results` are normalised by [`flowmem_model::normalise_text`].
pub(crate) fn off_context(
    args: &serde_json::Map<String, Value>,
    schema: &Value,
    query: &str,
    results: &[String],
) -> Vec<(String, Value)> {
    fn leaves<'v>(value: &'v Value, res: &mut Vec<&'v Value>) {
        match value {
            Value::Array(items) => items.iter().for_each(|item| leaves(item, res)),
            Value::Object(map) => map.values().for_each(|item| leaves(item, res)),
            scalar => res.push(scalar),
        }
    }
    let mut res = Vec::new();
    for (arg, value) in args {
        let property = schema.get("properties").and_then(|properties| properties.get(arg));
        if is_free_text(arg, property) {
            continue;
        }
        let mut found = Vec::new();
        leaves(value, &mut found);
        for leaf in found {
            let Some(key) = flowmem_model::value_key(leaf) else { continue };
            let seen = flowmem_model::occurs_in(query, &key)
                || results.iter().any(|result| flowmem_model::occurs_in(result, &key));
            if !seen {
                res.push((arg.clone(), leaf.clone()));
            }
        }
    }
    res
}

/// What the model is told when its call holds values from nowhere.
pub(crate) fn off_context_message(tool: &str, found: &[(String, Value)]) -> String {
    let listed: Vec<String> = found.iter().map(|(arg, value)| format!("`{arg}` = {value}")).collect();
    format!(
        "In your call of `{tool}`, {} appear neither in the task nor in any tool result so far. Use only values \
         you have seen, or first call a tool that looks them up.",
        listed.join(", ")
    )
}

/// The observation of a call checked against the context: per argument, `context` when
/// all its values were found, else `model (not in the context)`.
pub(crate) fn context_observation(
    args: &serde_json::Map<String, Value>,
    off: &[(String, Value)],
) -> Vec<flowmem_model::ArgGrounding> {
    let mut res: Vec<flowmem_model::ArgGrounding> = args
        .keys()
        .map(|arg| {
            let grounded = !off.iter().any(|(name, _)| name == arg);
            flowmem_model::ArgGrounding {
                arg: arg.clone(),
                source: if grounded { "context" } else { "model (not in the context)" }.to_owned(),
                candidates: 0,
                grounded,
            }
        })
        .collect();
    res.sort_by(|a, b| a.arg.cmp(&b.arg));
    res
}

/// The candidates of one bound argument.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Candidates {
    pub arg: String,
    /// The source that gave them, for the observation.
    pub source: String,
    pub values: Vec<Value>,
    /// The argument is an array whose elements are bound (`item_ids[*]`): the model
    /// picks its elements among the values, so they are always offered.
    pub elements: bool,
    /// The values are a collection the mined logs usually took whole
    /// ([`EachUse::is_usual`](flowmem_model::EachUse::is_usual)): in a loop, the
    /// node goes through them "for each".
    pub each: bool,
    /// For query spans: the mined anchors that narrow them ([`narrow_by_anchors`]).
    pub anchors: Vec<Anchor>,
    /// The upstream node whose latest result or call gave the values, if one did.
    pub from_node: Option<String>,
    /// The values their source held more than once, with how often (an order with two
    /// lines of one item): an array argument takes each of these that often, and any
    /// other value once ([`Candidates::drop_repeats`]).
    pub repeated: Vec<(Value, usize)>,
}

impl Candidates {
    /// Whether `value` (the argument as sent) is made of the candidates: one of them, or
    /// for an array whose elements are bound, a non-empty array of them.
    pub(crate) fn admits(&self, value: &Value) -> bool {
        match (self.elements, value) {
            (true, Value::Array(items)) => !items.is_empty() && items.iter().all(|item| self.values.contains(item)),
            (true, _) => false,
            (false, value) => self.values.contains(value),
        }
    }

    /// For an array argument whose elements are bound: drops the elements `array`
    /// repeats more often than the source held them (a small model may write one item
    /// id twice), keeping the first ones. Returns how many it dropped.
    pub(crate) fn drop_repeats(&self, array: &mut Value) -> usize {
        let Value::Array(items) = array else { return 0 };
        let before = items.len();
        let mut seen: Vec<(Value, usize)> = Vec::new();
        items.retain(|item| {
            let allowed = self.repeated.iter().find(|(value, _)| value == item).map_or(1, |(_, times)| *times);
            match seen.iter_mut().find(|(value, _)| value == item) {
                Some((_, times)) if *times >= allowed => false,
                Some((_, times)) => {
                    *times += 1;
                    true
                }
                None => {
                    seen.push((item.clone(), 1));
                    true
                }
            }
        });
        before - items.len()
    }
}

/// The candidates `binding` gives for argument `arg` of a tool with parameters
/// `schema`, in a run of `query` that sees `upstream`; `None` when no source gives any.
pub(crate) fn candidates(
    arg: &str,
    binding: &ArgBinding,
    query: &str,
    schema: &Value,
    upstream: &dyn Upstream,
) -> Option<Candidates> {
    let mut emptied = false;
    for source in &binding.sources {
        let mut query_anchors = Vec::new();
        let from_node = source.source.node().map(str::to_owned);
        let (label, mut values) = match &source.source {
            ValueSource::Result { node, path } => {
                let Some(output) = upstream.output(node) else { continue };
                let Ok(result) = serde_json::from_str::<Value>(output) else { continue };
                (format!("result of {node} at {path}"), values_at(&result, path))
            }
            ValueSource::Argument { node, arg: path } => {
                let Some(args) = upstream.args(node) else { continue };
                let root = Value::Object(args.clone());
                let path = if path.starts_with('[') { format!("${path}") } else { format!("$.{path}") };
                (format!("argument {path} of {node}"), values_at(&root, &path))
            }
            ValueSource::Query { shape: Some(shape), anchors, lengths } => {
                let mut spans = shape.spans(query);
                let before = spans.len();
                let label = match lengths.and_then(|lengths| of_lengths(&mut spans, lengths)) {
                    Some(lengths) => format!("query ({shape} spans, {} of {before} {lengths})", spans.len()),
                    None => format!("query ({shape} spans)"),
                };
                query_anchors.clone_from(anchors);
                (label, spans.into_iter().map(Value::String).collect())
            }
            ValueSource::Query { shape: None, .. } => continue,
            ValueSource::Constant { value } => ("constant".to_owned(), vec![value.clone()]),
        };
        values.retain(|value| !value.is_null());
        let mut unique: Vec<Value> = Vec::with_capacity(values.len());
        let mut repeated: Vec<(Value, usize)> = Vec::new();
        for value in values {
            let value = as_argument_type(value, schema, arg);
            if !unique.contains(&value) {
                unique.push(value);
            } else if let Some((_, times)) = repeated.iter_mut().find(|(seen, _)| *seen == value) {
                *times += 1;
            } else {
                repeated.push((value, 2));
            }
        }
        let before = unique.len();
        let label = match meet_preconditions(&mut unique, &binding.requires, upstream, emptied) {
            Some(why) => format!("{label}, {why}"),
            None => label,
        };
        // A source whose values the preconditions all dropped said what the value cannot
        // be; a weaker source's value must then be known to meet them (a user id the
        // query holds is no pending order).
        emptied |= before > 0 && unique.is_empty();
        if !unique.is_empty() {
            // `Valid(G, T)` admits `each` on result paths over a collection only.
            let each = source.each.is_some_and(|each| each.is_usual());
            return Some(Candidates {
                arg: arg.to_owned(),
                source: label,
                values: unique,
                elements: false,
                each,
                anchors: query_anchors,
                from_node,
                repeated,
            });
        }
    }
    None
}

/// Drops the candidates that a successful result of a precondition's node describes (the
/// newest such result) as not meeting it; when `strict`, also those no result describes.
/// Says what it dropped, for the label, when it dropped anything.
fn meet_preconditions(
    values: &mut Vec<Value>,
    requires: &[Precondition],
    upstream: &dyn Upstream,
    strict: bool,
) -> Option<String> {
    let mut why = Vec::new();
    for precondition in requires {
        let results = results_of(upstream, &precondition.node);
        if results.is_empty() {
            continue;
        }
        let before = values.len();
        values.retain(|value| results.iter().find_map(|result| precondition.check(result, value)).unwrap_or(!strict));
        if values.len() < before {
            let unknown = if strict { ", or is not known" } else { "" };
            why.push(format!(
                "{} of {before} dropped: {} {} is not {}{unknown}",
                before - values.len(),
                precondition.node,
                precondition.field,
                precondition.value
            ));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// When every mined value had one length (`[5, 5]`, a zip code; in characters of their
/// keys), keeps the spans of that length, unless none or all have it; then says so, for
/// the label. A range of lengths (names of 3 to 8 letters) narrows nothing: a longer
/// name than any mined is still a name.
fn of_lengths(spans: &mut Vec<String>, [shortest, longest]: [usize; 2]) -> Option<String> {
    if shortest != longest {
        return None;
    }
    let fits = |span: &String| {
        flowmem_model::value_key(&Value::String(span.clone())).is_some_and(|key| key.chars().count() == shortest)
    };
    let fitting = spans.iter().filter(|span| fits(span)).count();
    if fitting == 0 || fitting == spans.len() {
        return None;
    }
    spans.retain(fits);
    Some(format!("of the mined length {shortest}"))
}

/// Makes arguments agree with the call whose result another argument comes from: when
/// argument `B`'s values come from node `N`'s result (or call), and a call of `N` was
/// given `K = v` where `v` is one of the node's own candidates for `K`, then `K` takes
/// `v`, for the newest such call. The items of an order then go with that order's id,
/// not with another order the model might pick.
///
/// When that call is not `N`'s latest (a loop looked up every order, and the one order
/// that meets the return's preconditions was not the last), the arguments whose values
/// come from `N` are taken again from that call (`rebuild` over a [`Pinned`] view), so
/// the items are that order's. Arguments a loop goes through "for each"
/// are left to the loop.
pub(crate) fn agree_with_sources(
    found: &mut [Candidates],
    upstream: &dyn Upstream,
    rebuild: &dyn Fn(&str, &dyn Upstream) -> Option<Candidates>,
) {
    let mut sources: Vec<String> = Vec::new();
    for node in found.iter().filter_map(|candidates| candidates.from_node.as_ref()) {
        if !sources.contains(node) {
            sources.push(node.clone());
        }
    }
    for node in sources {
        let calls = upstream.calls(&node);
        for k in 0..found.len() {
            let candidates = &found[k];
            if candidates.values.is_empty()
                || candidates.elements
                || candidates.each
                || candidates.from_node.as_deref() == Some(node.as_str())
            {
                continue;
            }
            let agreeing = calls.iter().enumerate().find_map(|(call_idx, (_, args))| {
                let key = flowmem_model::value_key(args.as_ref()?.get(&candidates.arg)?)?;
                let value =
                    candidates.values.iter().find(|value| flowmem_model::value_key(value).as_ref() == Some(&key))?;
                Some((call_idx, value.clone()))
            });
            let Some((call_idx, value)) = agreeing else { continue };
            if call_idx == 0 && candidates.values.len() < 2 {
                continue;
            }
            let (output, args) = calls[call_idx];
            let n = found[k].values.len();
            let which = if call_idx == 0 { "the one" } else { "an earlier one" };
            found[k].source = format!(
                "{}, 1 of {n}: {which} `{node}` was called with, whose result gives another argument",
                found[k].source
            );
            found[k].values = vec![value];
            if call_idx == 0 {
                continue;
            }
            let settled = found[k].arg.clone();
            let pinned = Pinned { upstream, node: &node, output, args };
            for other in found.iter_mut().filter(|other| other.from_node.as_deref() == Some(node.as_str())) {
                if let Some(again) = rebuild(&other.arg, &pinned) {
                    let source = format!("{} (its call with that `{settled}`)", again.source);
                    *other = Candidates { source, ..again };
                }
            }
            break;
        }
    }
}

/// Offers the elements of an array argument paired with another array argument
/// ([`ArgBinding::paired_with`]: a new item is a variant of the old item's product) from
/// every result of the pairing's node that holds one of the other argument's candidates
/// at the pairing's path, not only from the node's latest result: the variants of the
/// order's products, whichever lookup found them. Candidates no such result holds are
/// dropped; when no result holds any of the other's candidates, nothing changes.
pub(crate) fn pair_elements(
    found: &mut [Candidates],
    bindings: &[(String, ArgBinding)],
    schema: &Value,
    upstream: &dyn Upstream,
) {
    for (path, binding) in bindings {
        let (Some(arg), Some(pairing)) = (path.strip_suffix("[*]"), &binding.paired_with) else { continue };
        let Some(partner) = found.iter().find(|other| other.arg == pairing.arg).map(|other| other.values.clone())
        else {
            continue;
        };
        let Some(own) = found
            .iter_mut()
            .find(|own| own.arg == arg && own.elements && own.from_node.as_deref() == Some(pairing.node.as_str()))
        else {
            continue;
        };
        let results = results_of(upstream, &pairing.node);
        let mut values: Vec<Value> = Vec::new();
        for value in partner.iter().flat_map(|value| pairing.partners(&results, value)) {
            let value = as_argument_type(value, schema, arg);
            if !values.contains(&value) {
                values.push(value);
            }
        }
        if values.is_empty() || values == own.values {
            continue;
        }
        own.source = format!(
            "{}; {} value(s) beside one of `{}`'s in a result of {} at {}",
            own.source,
            values.len(),
            pairing.arg,
            pairing.node,
            pairing.path
        );
        own.values = values;
    }
}

/// An array argument whose elements do not all stand beside the other array's, as
/// [`unpaired`] finds it.
pub(crate) struct Unpaired {
    /// The argument (`new_item_ids`).
    pub arg: String,
    /// The array it is paired with (`item_ids`).
    pub other: String,
    /// Per index whose element does not fit: the values that would.
    pub wrong: Vec<(usize, Vec<Value>)>,
}

/// The first array argument of `args` whose elements come first from the results of the
/// node they are paired through ([`ArgBinding::paired_with`]) and whose element `i` does
/// not stand beside the other array's element `i` in any of those results. An element
/// whose partner no result holds is not judged.
pub(crate) fn unpaired(
    bindings: &[(String, ArgBinding)],
    args: &serde_json::Map<String, Value>,
    upstream: &dyn Upstream,
) -> Option<Unpaired> {
    bindings.iter().find_map(|(path, binding)| {
        let (arg, pairing) = (path.strip_suffix("[*]")?, binding.paired_with.as_ref()?);
        // Mining pairs both arrays; the one judged is the one whose values come from the
        // pairing's results (the new items, not the old ones the order holds).
        if binding.sources.first().and_then(|source| source.source.node()) != Some(pairing.node.as_str()) {
            return None;
        }
        let (own, other) = (args.get(arg)?.as_array()?, args.get(&pairing.arg)?.as_array()?);
        let results = results_of(upstream, &pairing.node);
        let wrong: Vec<(usize, Vec<Value>)> = own
            .iter()
            .zip(other)
            .enumerate()
            .filter_map(|(idx, (element, partner))| {
                let allowed = pairing.partners(&results, partner);
                let sent = flowmem_model::value_key(element);
                let fits = sent.is_some() && allowed.iter().any(|value| flowmem_model::value_key(value) == sent);
                (!allowed.is_empty() && !fits).then_some((idx, allowed))
            })
            .collect();
        (!wrong.is_empty()).then(|| Unpaired { arg: arg.to_owned(), other: pairing.arg.clone(), wrong })
    })
}

/// Every successful result of node `id`, parsed, newest first.
fn results_of(upstream: &dyn Upstream, id: &str) -> Vec<Value> {
    upstream.calls(id).into_iter().filter_map(|(output, _)| serde_json::from_str(output).ok()).collect()
}

/// Narrows query-span candidates by their mined anchors
/// ([`anchor_score`](flowmem_model::anchor_score)): of an argument's spans, only those
/// with the highest score stay, when it is above 0. An anchor naming another argument
/// (`{first_name}`) counts once that argument has a single value, so the pass repeats
/// while it narrows something. When no pass narrows anything, arguments an anchor joins
/// are paired ([`pair_by_anchors`]) and the passes go on. Each argument is narrowed once
/// by its anchors and once by pairing, and never to nothing.
pub(crate) fn narrow_by_anchors(found: &mut [Candidates], query: &str) {
    let mut narrowed = vec![false; found.len()];
    let mut paired = vec![false; found.len()];
    loop {
        let resolved: Vec<(String, String)> = found
            .iter()
            .filter(|candidates| candidates.values.len() == 1 && !candidates.elements)
            .map(|candidates| (candidates.arg.clone(), value_text(&candidates.values[0])))
            .collect();
        let mut changed = false;
        for (idx, candidates) in found.iter_mut().enumerate() {
            if narrowed[idx] || candidates.anchors.is_empty() || candidates.values.len() < 2 || candidates.elements {
                continue;
            }
            let others: Vec<(&str, &str)> = resolved
                .iter()
                .filter(|(arg, _)| *arg != candidates.arg)
                .map(|(arg, text)| (arg.as_str(), text.as_str()))
                .collect();
            let scores: Vec<u64> = candidates
                .values
                .iter()
                .map(|value| anchor_score(query, &value_text(value), &candidates.anchors, &others))
                .collect();
            let best = scores.iter().copied().max().unwrap_or(0);
            if best == 0 {
                continue;
            }
            let before = candidates.values.len();
            let mut kept = scores.iter().map(|score| *score == best);
            candidates.values.retain(|_| kept.next().unwrap_or(false));
            candidates.source =
                format!("{}, {} of {before} by the words before them", candidates.source, candidates.values.len());
            narrowed[idx] = true;
            changed = true;
        }
        if !changed && !pair_by_anchors(found, query, &mut paired) {
            break;
        }
    }
}

/// Pairs two arguments that an anchor joins: when argument `B`'s anchors name argument
/// `A` (a last name's `{first_name}`) and either has several spans, `A` keeps the spans
/// that a span of `B` follows as the anchors say, and `B` the spans that follow one of
/// `A`'s. In "a guy called Noah Patel, back to Seattle", the first name is `Noah`, not
/// `Seattle`, though no anchor of its own points at it. Narrows one pair at a time;
/// `false` when no pair narrows anything.
fn pair_by_anchors(found: &mut [Candidates], query: &str, paired: &mut [bool]) -> bool {
    for b_idx in 0..found.len() {
        for a_idx in (0..found.len()).filter(|&a_idx| a_idx != b_idx) {
            let (a, b) = (&found[a_idx], &found[b_idx]);
            let placeholder = format!("{{{}}}", a.arg);
            let anchors: Vec<Anchor> =
                b.anchors.iter().filter(|anchor| anchor.words.contains(&placeholder)).cloned().collect();
            let open = |idx: usize| !paired[idx] && found[idx].values.len() > 1;
            let (a_open, b_open) = (open(a_idx), open(b_idx));
            if anchors.is_empty() || !(a_open || b_open) || a.elements || b.elements {
                continue;
            }
            let a_texts: Vec<String> = a.values.iter().map(value_text).collect();
            let b_texts: Vec<String> = b.values.iter().map(value_text).collect();
            let joined: Vec<(usize, usize)> = (0..a_texts.len())
                .flat_map(|a_pos| (0..b_texts.len()).map(move |b_pos| (a_pos, b_pos)))
                .filter(|&(a_pos, b_pos)| {
                    anchor_score(query, &b_texts[b_pos], &anchors, &[(a.arg.as_str(), a_texts[a_pos].as_str())]) > 0
                })
                .collect();
            if joined.is_empty() {
                continue;
            }
            let a_arg = a.arg.clone();
            let b_arg = b.arg.clone();
            let mut changed = false;
            for (idx, is_open, mut keep, why) in [
                (
                    a_idx,
                    a_open,
                    joined.iter().map(|pair| pair.0).collect::<Vec<_>>(),
                    format!("with a `{b_arg}` after them"),
                ),
                (b_idx, b_open, joined.iter().map(|pair| pair.1).collect(), format!("after a `{a_arg}`")),
            ] {
                keep.sort_unstable();
                keep.dedup();
                let candidates = &mut found[idx];
                if !is_open || keep.len() >= candidates.values.len() {
                    continue;
                }
                let before = candidates.values.len();
                let mut pos = 0..;
                candidates.values.retain(|_| pos.next().is_some_and(|pos| keep.contains(&pos)));
                candidates.source =
                    format!("{}, {} of {before} {why} by the mined words", candidates.source, candidates.values.len());
                changed = true;
            }
            if changed {
                paired[a_idx] = true;
                paired[b_idx] = true;
                return true;
            }
        }
    }
    false
}

/// `value` converted to the type that argument `arg` of a tool with parameters `schema`
/// declares ([`as_schema_type`]); unchanged when the schema does not declare `arg`.
pub(crate) fn as_argument_type(value: Value, schema: &Value, arg: &str) -> Value {
    match schema.get("properties").and_then(|properties| properties.get(arg)) {
        Some(property) => as_schema_type(value, property),
        None => value,
    }
}

/// `value` converted to the type `property` declares, when it converts without loss: a
/// numeric string for a number or integer, a number for a string. Anything else stays.
fn as_schema_type(value: Value, property: &Value) -> Value {
    let declared = |name: &str| match property.get("type") {
        Some(Value::String(kind)) => kind == name,
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == name),
        _ => false,
    };
    match &value {
        Value::String(text) if declared("integer") && !declared("string") => {
            text.trim().parse::<i64>().map_or(value, Value::from)
        }
        Value::String(text) if declared("number") && !declared("string") => {
            match text.trim().parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                Some(number) => Value::Number(number),
                None => value,
            }
        }
        Value::Number(number) if declared("string") && !declared("number") && !declared("integer") => {
            Value::String(number.to_string())
        }
        _ => value,
    }
}

/// `schema` (a tool's parameters) with each argument of `fixed` removed (the executor
/// fills it) and each argument of `offered` limited to its candidates. An array
/// argument's elements are limited through `items`, and the array holds at least one
/// (an empty one grounds nothing) and at most as many as the source holds, repeats
/// included, unless the schema's own bounds are tighter.
pub(crate) fn constrained_schema(schema: &Value, fixed: &[&Candidates], offered: &[&Candidates]) -> Value {
    let mut schema = schema.clone();
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for candidates in fixed {
            properties.remove(&candidates.arg);
        }
        for candidates in offered {
            let Some(property) = properties.get_mut(&candidates.arg).and_then(Value::as_object_mut) else {
                continue;
            };
            let enumerated = Value::Array(candidates.values.clone());
            if candidates.elements {
                let items = property.entry("items").or_insert_with(|| Value::Object(serde_json::Map::new()));
                if let Some(items) = items.as_object_mut() {
                    items.insert("enum".to_owned(), enumerated);
                }
                let least = property.entry("minItems").or_insert_with(|| Value::from(1)).as_u64().unwrap_or(1);
                let repeats: usize = candidates.repeated.iter().map(|(_, times)| times.saturating_sub(1)).sum();
                // Never below the schema's own minimum: that would admit no array at all.
                let most = ((candidates.values.len() + repeats) as u64).max(least);
                if property.get("maxItems").and_then(Value::as_u64).is_none_or(|max| max > most) {
                    property.insert("maxItems".to_owned(), Value::from(most));
                }
            } else {
                property.insert("enum".to_owned(), enumerated);
            }
        }
    }
    if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|name| !fixed.iter().any(|candidates| name.as_str() == Some(candidates.arg.as_str())));
    }
    schema
}

/// The first pair of array arguments in `args` that the mined calls always sent at one
/// length ([`ArgBinding::same_length_as`]) and that `args` sends at two: the two names and
/// the length to hold both to (the shorter, unless it is 0).
pub(crate) fn unequal_lengths(
    bindings: &[(String, ArgBinding)],
    args: &serde_json::Map<String, Value>,
) -> Option<(String, String, usize)> {
    bindings.iter().find_map(|(path, binding)| {
        let a = path.strip_suffix("[*]")?;
        let b = binding.same_length_as.as_deref()?;
        let (a_len, b_len) = (args.get(a)?.as_array()?.len(), args.get(b)?.as_array()?.len());
        let length = if a_len.min(b_len) == 0 { a_len.max(b_len) } else { a_len.min(b_len) };
        (a_len != b_len).then(|| (a.to_owned(), b.to_owned(), length))
    })
}

/// `schema` with array properties `names` held to `length` elements (`minItems` =
/// `maxItems`), or to the least `maxItems` they already have when that is smaller.
/// Returns the schema and the length it holds them to.
pub(crate) fn hold_to_length(schema: &Value, names: &[&str], length: usize) -> (Value, usize) {
    let mut schema = schema.clone();
    let property = |schema: &Value, name: &str| schema.get("properties").and_then(|p| p.get(name)).cloned();
    let cap = names
        .iter()
        .filter_map(|name| property(&schema, name)?.get("maxItems")?.as_u64())
        .min()
        .map_or(length, |cap| length.min(cap as usize));
    if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for name in names {
            if let Some(property) = properties.get_mut(*name).and_then(Value::as_object_mut) {
                property.insert("minItems".to_owned(), Value::from(cap));
                property.insert("maxItems".to_owned(), Value::from(cap));
            }
        }
    }
    (schema, cap)
}

/// `schema` with the elements of array property `name` held to `values` (an `enum` on
/// its `items`).
pub(crate) fn elements_among(schema: &Value, name: &str, values: &[Value]) -> Value {
    let mut schema = schema.clone();
    let property = schema.get_mut("properties").and_then(|properties| properties.get_mut(name));
    if let Some(property) = property.and_then(Value::as_object_mut) {
        let items = property.entry("items").or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(items) = items.as_object_mut() {
            items.insert("enum".to_owned(), Value::Array(values.to_vec()));
        }
    }
    schema
}

/// The required parameters of a tool schema.
pub(crate) fn required(schema: &Value) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use flowmem_model::{ArgBinding, BindingSource, ValueShape, ValueSource};

    use super::{Upstream, candidates, constrained_schema};

    /// Upstream nodes for tests: (id, output, arguments).
    struct Seen(Vec<(&'static str, String, serde_json::Value)>);

    impl Upstream for Seen {
        fn output(&self, id: &str) -> Option<&str> {
            self.0.iter().find(|seen| seen.0 == id).map(|seen| seen.1.as_str())
        }
        fn args(&self, id: &str) -> Option<&serde_json::Map<String, serde_json::Value>> {
            self.0.iter().find(|seen| seen.0 == id).and_then(|seen| seen.2.as_object())
        }
        fn calls(&self, id: &str) -> Vec<(&str, Option<&serde_json::Map<String, serde_json::Value>>)> {
            self.0.iter().filter(|seen| seen.0 == id).map(|seen| (seen.1.as_str(), seen.2.as_object())).collect()
        }
    }

    fn string_schema(arg: &str) -> serde_json::Value {
        json!({"type": "object", "properties": {arg: {"type": "string"}}})
    }

    /// Of the user's orders none is pending, so the modification's order id must not come
    /// from the query's other ids unless a lookup says that order is pending.
    #[test]
    fn after_preconditions_empty_a_source_a_weaker_one_must_be_known_to_meet_them() {
        let binding = ArgBinding {
            observed: 9,
            sources: vec![
                BindingSource {
                    source: ValueSource::Result { node: "user".into(), path: "$.orders[*]".into() },
                    support: 5,
                    each: None,
                },
                BindingSource {
                    source: ValueSource::Query { shape: Some(ValueShape::Id), anchors: Vec::new(), lengths: None },
                    support: 2,
                    each: None,
                },
            ],
            requires: vec![flowmem_model::Precondition {
                node: "order".into(),
                key: "$.order_id".into(),
                field: "$.status".into(),
                value: json!("pending"),
                support: 8,
            }],
            same_length_as: None,
            paired_with: None,
        };
        let order = |id: &str, status: &str| json!({"order_id": id, "status": status}).to_string();
        let seen = Seen(vec![
            ("user", json!({"orders": ["#W1", "#W2"]}).to_string(), json!({})),
            ("order", order("#W2", "delivered"), json!({"order_id": "#W2"})),
            ("order", order("#W1", "delivered"), json!({"order_id": "#W1"})),
            ("order", order("#W9", "pending"), json!({"order_id": "#W9"})),
        ]);
        let schema = string_schema("order_id");
        let found =
            candidates("order_id", &binding, "I am mia_garcia_4516 and order #W9 is mine", &schema, &seen).unwrap();
        assert_eq!(found.values, [json!("#W9")], "{}", found.source);
        assert!(found.source.contains("is not \"pending\", or is not known"), "{}", found.source);
        assert!(candidates("order_id", &binding, "I am mia_garcia_4516", &schema, &seen).is_none());
        // A pending order of the user's is taken from the first source, as before.
        let seen = Seen(vec![
            ("user", json!({"orders": ["#W1", "#W2"]}).to_string(), json!({})),
            ("order", order("#W2", "pending"), json!({"order_id": "#W2"})),
            ("order", order("#W1", "delivered"), json!({"order_id": "#W1"})),
        ]);
        let found = candidates("order_id", &binding, "I am mia_garcia_4516", &schema, &seen).unwrap();
        assert_eq!(found.values, [json!("#W2")]);
    }

    #[test]
    fn the_first_source_with_values_gives_deduplicated_candidates() {
        let binding = ArgBinding {
            requires: Vec::new(),
            same_length_as: None,
            paired_with: None,
            observed: 4,
            sources: vec![
                BindingSource {
                    source: ValueSource::Result { node: "absent".into(), path: "$.x".into() },
                    support: 3,
                    each: None,
                },
                BindingSource {
                    source: ValueSource::Result { node: "order".into(), path: "$.items[*].product_id".into() },
                    support: 2,
                    each: None,
                },
                BindingSource { source: ValueSource::Constant { value: json!("c") }, support: 1, each: None },
            ],
        };
        let output = json!({"items": [{"product_id": "p1"}, {"product_id": "p1"}, {"product_id": "p2"}]}).to_string();
        let seen = Seen(vec![("order", output, json!({}))]);
        let schema = string_schema("product_id");
        let found = candidates("product_id", &binding, "q", &schema, &seen).unwrap();
        assert_eq!(found.values, vec![json!("p1"), json!("p2")]);
        assert_eq!(found.source, "result of order at $.items[*].product_id");
        let constant = candidates("product_id", &binding, "q", &schema, &Seen(Vec::new())).unwrap();
        assert_eq!(constant.values, vec![json!("c")]);
        let schema = json!({"type": "object", "properties": {"product_id": {"type": "string"}, "order_id": {"type": "string"}},
            "required": ["product_id", "order_id"]});
        let fixed = candidates(
            "order_id",
            &ArgBinding {
                requires: Vec::new(),
                same_length_as: None,
                paired_with: None,
                observed: 1,
                sources: vec![BindingSource {
                    source: ValueSource::Constant { value: json!("#W1") },
                    support: 1,
                    each: None,
                }],
            },
            "q",
            &schema,
            &Seen(Vec::new()),
        )
        .unwrap();
        let constrained = constrained_schema(&schema, &[&fixed], &[&found]);
        assert_eq!(constrained["properties"]["product_id"]["enum"], json!(["p1", "p2"]));
        assert!(constrained["properties"].get("order_id").is_none());
        assert_eq!(constrained["required"], json!(["product_id"]));
    }

    /// A mined length keeps the spans as long as every mined value was: the zip code, not
    /// the item number, unless no span (or every span) has it. A range narrows nothing.
    #[test]
    fn spans_of_the_mined_lengths_are_kept() {
        let zip = |lengths| ArgBinding {
            requires: Vec::new(),
            same_length_as: None,
            paired_with: None,
            observed: 12,
            sources: vec![BindingSource {
                source: ValueSource::Query { shape: Some(ValueShape::Number), anchors: Vec::new(), lengths },
                support: 12,
                each: None,
            }],
        };
        let schema = json!({"type": "object", "properties": {"zip": {"type": "string"}}});
        let none = Seen(Vec::new());
        let query = "Change the laptop to item 9844888101. Your zip code is 77159.";
        let found = candidates("zip", &zip(Some([5, 5])), query, &schema, &none).unwrap();
        assert_eq!(found.values, [json!("77159")]);
        assert_eq!(found.source, "query (number spans, 1 of 2 of the mined length 5)");
        for lengths in [None, Some([3, 3]), Some([4, 6]), Some([5, 10])] {
            let found = candidates("zip", &zip(lengths), query, &schema, &none).unwrap();
            assert_eq!(found.values, [json!("9844888101"), json!("77159")], "{lengths:?}");
            assert_eq!(found.source, "query (number spans)");
        }
    }

    #[test]
    fn query_spans_and_upstream_arguments_give_candidates_of_the_schema_type() {
        let bind = |source: ValueSource| ArgBinding {
            requires: Vec::new(),
            same_length_as: None,
            paired_with: None,
            observed: 2,
            sources: vec![BindingSource { source, support: 2, each: None }],
        };
        let query = "I am Yusuf Rossi, zip 19122, and my orders are #W1 and #W2.";
        let schema = json!({"type": "object", "properties": {
            "order_id": {"type": "string"}, "zip": {"type": "integer"}, "first_name": {"type": "string"}}});
        let none = Seen(Vec::new());
        let ids = candidates(
            "order_id",
            &bind(ValueSource::Query { shape: Some(ValueShape::Id), anchors: Vec::new(), lengths: None }),
            query,
            &schema,
            &none,
        );
        assert_eq!(ids.unwrap().values, [json!("#W1"), json!("#W2")]);
        let zip = candidates(
            "zip",
            &bind(ValueSource::Query { shape: Some(ValueShape::Number), anchors: Vec::new(), lengths: None }),
            query,
            &schema,
            &none,
        );
        let zip = zip.unwrap();
        assert_eq!((zip.values, zip.source.as_str()), (vec![json!(19122)], "query (number spans)"));
        let names = candidates(
            "first_name",
            &bind(ValueSource::Query { shape: Some(ValueShape::Name), anchors: Vec::new(), lengths: None }),
            query,
            &schema,
            &none,
        );
        assert_eq!(names.unwrap().values, [json!("Yusuf"), json!("Rossi")]);
        assert!(
            candidates(
                "first_name",
                &bind(ValueSource::Query { shape: None, anchors: Vec::new(), lengths: None }),
                query,
                &schema,
                &none
            )
            .is_none()
        );
        assert!(
            candidates(
                "first_name",
                &bind(ValueSource::Query { shape: Some(ValueShape::Email), anchors: Vec::new(), lengths: None }),
                query,
                &schema,
                &none
            )
            .is_none()
        );

        let seen = Seen(vec![("lookup", "ok".to_owned(), json!({"order_id": "#W9", "item_ids": ["1", "2"]}))]);
        let from_args = |arg: &str| ValueSource::Argument { node: "lookup".into(), arg: arg.into() };
        let found = candidates("order_id", &bind(from_args("order_id")), query, &schema, &seen).unwrap();
        assert_eq!((found.values, found.source.as_str()), (vec![json!("#W9")], "argument $.order_id of lookup"));
        let items = candidates("item_ids", &bind(from_args("item_ids[*]")), query, &schema, &seen).unwrap();
        assert_eq!(items.values, [json!("1"), json!("2")]);
        assert!(candidates("order_id", &bind(from_args("order_id")), query, &schema, &none).is_none());
    }

    /// An array argument takes an element at most as often as its source holds it: once,
    /// or twice for an order with two lines of one item. The first ones stay.
    #[test]
    fn an_array_repeats_an_element_no_more_often_than_its_source_holds_it() {
        let binding = ArgBinding {
            requires: Vec::new(),
            same_length_as: None,
            paired_with: None,
            observed: 3,
            sources: vec![BindingSource {
                source: ValueSource::Result { node: "order".into(), path: "$.items[*].item_id".into() },
                support: 3,
                each: None,
            }],
        };
        let order = json!({"items": [{"item_id": "i7"}, {"item_id": "i8"}, {"item_id": "i7"}]}).to_string();
        let seen = Seen(vec![("order", order, json!({}))]);
        let schema = json!({"type": "object", "properties": {"item_ids": {"type": "array"}}});
        let found = candidates("item_ids", &binding, "q", &schema, &seen).unwrap();
        assert_eq!(found.values, [json!("i7"), json!("i8")]);
        let mut sent = json!(["i8", "i7", "i8", "i7", "i7", "i8"]);
        assert_eq!(found.drop_repeats(&mut sent), 3);
        assert_eq!(sent, json!(["i8", "i7", "i7"]));
        let mut scalar = json!("i8");
        assert_eq!(found.drop_repeats(&mut scalar), 0);

        // The array the model may write: one element at least, three at most (`i7`
        // twice), unless the schema bounds it more tightly; empty, it grounds nothing.
        let elements = super::Candidates { elements: true, ..found };
        let bounds = |property: serde_json::Value| {
            let schema = json!({"type": "object", "properties": {"item_ids": property}});
            let constrained = constrained_schema(&schema, &[], &[&elements]);
            let item_ids = &constrained["properties"]["item_ids"];
            assert_eq!(item_ids["items"]["enum"], json!(["i7", "i8"]));
            (item_ids["minItems"].clone(), item_ids["maxItems"].clone())
        };
        assert_eq!(bounds(json!({"type": "array"})), (json!(1), json!(3)));
        assert_eq!(bounds(json!({"type": "array", "maxItems": 2})), (json!(1), json!(2)));
        assert_eq!(bounds(json!({"type": "array", "minItems": 4})), (json!(4), json!(4)));
        assert!(!elements.admits(&json!([])) && elements.admits(&json!(["i8"])));
    }

    /// An order's items come from the order looked up last: the order id agrees with
    /// that lookup, unless the lookup's id is no candidate or the id is gone through
    /// "for each".
    #[test]
    fn an_argument_agrees_with_the_call_whose_result_gives_another_argument() {
        let from = |node: &str, path: &str| ArgBinding {
            requires: Vec::new(),
            same_length_as: None,
            paired_with: None,
            observed: 5,
            sources: vec![BindingSource {
                source: ValueSource::Result { node: node.into(), path: path.into() },
                support: 5,
                each: None,
            }],
        };
        let user = json!({"orders": ["#W1", "#W2", "#W3"]}).to_string();
        let order = json!({"order_id": "#W2", "items": [{"item_id": "i7"}, {"item_id": "i8"}]}).to_string();
        let schema =
            json!({"type": "object", "properties": {"order_id": {"type": "string"}, "item_ids": {"type": "array"}}});
        let found = |called: serde_json::Value| {
            let seen = Seen(vec![("user", user.clone(), json!({"user_id": "u1"})), ("order", order.clone(), called)]);
            let mut found = vec![
                candidates("order_id", &from("user", "$.orders[*]"), "q", &schema, &seen).unwrap(),
                super::Candidates {
                    elements: true,
                    ..candidates("item_ids", &from("order", "$.items[*].item_id"), "q", &schema, &seen).unwrap()
                },
            ];
            super::agree_with_sources(&mut found, &seen, &|_: &str, _: &dyn Upstream| None);
            found
        };
        let agreed = found(json!({"order_id": "#W2"}));
        assert_eq!(agreed[0].values, [json!("#W2")]);
        assert!(
            agreed[0].source.ends_with("1 of 3: the one `order` was called with, whose result gives another argument")
        );
        assert_eq!(agreed[1].values, [json!("i7"), json!("i8")], "the items are left as they were");
        // Normalised like the mined values: a lookup by `W2` agrees with `#W2`.
        assert_eq!(found(json!({"order_id": "W2"}))[0].values, [json!("#W2")]);
        assert_eq!(found(json!({"order_id": "#W9"}))[0].values.len(), 3, "no candidate to agree with");
        assert_eq!(found(json!({"other": "#W2"}))[0].values.len(), 3);
        let seen = Seen(vec![("user", user.clone(), json!({})), ("order", order.clone(), json!({"order_id": "#W2"}))]);
        let mut each = vec![
            super::Candidates {
                each: true,
                ..candidates("order_id", &from("user", "$.orders[*]"), "q", &schema, &seen).unwrap()
            },
            candidates("item_ids", &from("order", "$.items[*].item_id"), "q", &schema, &seen).unwrap(),
        ];
        super::agree_with_sources(&mut each, &seen, &|_: &str, _: &dyn Upstream| None);
        assert_eq!(each[0].values.len(), 3, "a for-each argument is the loop's to choose");
    }

    /// The mined words before each value pick the spans: the first name after "you
    /// are", then the last name after the chosen first name; an argument whose anchors
    /// precede no span keeps all of them.
    #[test]
    fn anchors_narrow_query_spans_and_an_anchor_naming_an_argument_waits_for_its_value() {
        let anchor = |words: &[&str], support| flowmem_model::Anchor {
            words: words.iter().map(|word| (*word).to_owned()).collect(),
            support,
        };
        let bind = |anchors: Vec<flowmem_model::Anchor>| ArgBinding {
            requires: Vec::new(),
            same_length_as: None,
            paired_with: None,
            observed: 20,
            sources: vec![BindingSource {
                source: ValueSource::Query { shape: Some(ValueShape::Name), anchors, lengths: None },
                support: 20,
                each: None,
            }],
        };
        let query = "Reason for call: Ship the lamp to Texas. Known info: You are Isabella Johansson, \
                     and you live in Austin, Texas.";
        let schema = json!({"type": "object", "properties": {
            "first_name": {"type": "string"}, "last_name": {"type": "string"}, "city": {"type": "string"}}});
        let none = Seen(Vec::new());
        let first = bind(vec![anchor(&["you", "are"], 22), anchor(&["name", "is"], 5)]);
        let last = bind(vec![anchor(&["{first_name}"], 24)]);
        let city = bind(vec![anchor(&["zip", "code"], 3)]);
        // The last name first: its anchor names the first name, which is resolved later
        // in the same pass.
        let mut found: Vec<super::Candidates> = [("last_name", &last), ("first_name", &first), ("city", &city)]
            .into_iter()
            .map(|(arg, binding)| candidates(arg, binding, query, &schema, &none).unwrap())
            .collect();
        let all = found[2].values.clone();
        assert!(all.len() > 3, "{all:?}");
        super::narrow_by_anchors(&mut found, query);
        assert_eq!(found[1].values, [json!("Isabella")]);
        assert_eq!(found[0].values, [json!("Johansson")]);
        assert!(
            found[0].source.ends_with(&format!("1 of {} by the words before them", all.len())),
            "{}",
            found[0].source
        );
        assert_eq!(found[2].values, all, "no span follows `zip code`");
        // Without anchors nothing changes.
        let mut plain = vec![candidates("first_name", &bind(Vec::new()), query, &schema, &none).unwrap()];
        super::narrow_by_anchors(&mut plain, query);
        assert_eq!(plain[0].values, all);

        // No anchor of its own points at the first name, but the last name's anchor
        // joins them: the first names a last name follows, and the last names after them.
        let query = "You ordered hiking items for Seattle. Known info: You are an interesting guy called \
                     Noah Patel, living in the Big Apple in 10108.";
        let mut found: Vec<super::Candidates> = [("first_name", &first), ("last_name", &last)]
            .into_iter()
            .map(|(arg, binding)| candidates(arg, binding, query, &schema, &none).unwrap())
            .collect();
        let all = found[0].values.len();
        assert_eq!(all, 5, "{:?}", found[0].values);
        super::narrow_by_anchors(&mut found, query);
        assert_eq!(found[0].values, [json!("Noah"), json!("Big")]);
        assert_eq!(found[1].values, [json!("Patel"), json!("Apple")]);
        assert!(found[0].source.ends_with("2 of 5 with a `last_name` after them by the mined words"));
        assert!(found[1].source.ends_with("2 of 5 after a `first_name` by the mined words"));
        // Without the joining anchor, nothing pairs them.
        let mut unjoined: Vec<super::Candidates> = [("first_name", &first), ("last_name", &city)]
            .into_iter()
            .map(|(arg, binding)| candidates(arg, binding, query, &schema, &none).unwrap())
            .collect();
        super::narrow_by_anchors(&mut unjoined, query);
        assert_eq!((unjoined[0].values.len(), unjoined[1].values.len()), (5, 5));
    }

    #[test]
    fn context_grounding_finds_values_in_the_query_or_earlier_results_and_skips_free_text() {
        let schema = json!({"type": "object", "properties": {
            "order_id": {"type": "string"}, "item_ids": {"type": "array"},
            "why": {"type": "string", "description": "The reason for the cancellation"}}});
        let query = flowmem_model::normalise_text("Cancel order #W1, please.");
        let results = vec![flowmem_model::normalise_text(r#"{"items": [{"item_id": "100"}]}"#)];
        let args = json!({"order_id": "#W1", "item_ids": ["100", "999"], "why": "no longer needed", "confirm": true});
        let off = super::off_context(args.as_object().unwrap(), &schema, &query, &results);
        assert_eq!(off, [("item_ids".to_owned(), json!("999"))]);
        let observed = super::context_observation(args.as_object().unwrap(), &off);
        let item_ids = observed.iter().find(|arg| arg.arg == "item_ids").unwrap();
        assert_eq!((item_ids.source.as_str(), item_ids.grounded), ("model (not in the context)", false));
        assert!(observed.iter().find(|arg| arg.arg == "order_id").unwrap().grounded);
        assert!(
            super::is_free_text("summary", None)
                && !super::is_free_text("order_id", Some(&schema["properties"]["order_id"]))
        );
        let message = super::off_context_message("cancel", &off);
        assert!(message.contains("`item_ids` = \"999\""), "{message}");
    }
}
