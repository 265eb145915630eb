//! ToolBench DFSDT answer files, each read as one [`Trajectory`].
//!
//! A file is `{win, tree, forward_args, compare_candidates, answer_generation}`. The run
//! taken is the last conversation of `answer_generation.train_messages` (the earlier
//! ones are its prefixes) or, when that is absent, the winning path of the DFSDT `tree`:
//! the path to a `Finish` action marked `finished`. A file with neither is skipped.
//!
//! The id is the query id that starts the file name (`10` in
//! `10_ChatGPT_DFS_woFilter_w2.json`), `win` is the outcome, and the final answer is the
//! `final_answer` that `Finish` gave with `return_type: give_answer`. `Finish` stays in
//! the steps as ToolBench logged it. A call whose observation carries a non-empty
//! `error` is marked failed.

use serde_json::Value;

use crate::import::Imported;
use crate::import::input::Input;
use crate::import::json::{Node, Problem, Segment};
use crate::import::openai::conversation;
use crate::{Action, Item, Meta, Outcome, Step, ToolCall, Trajectory};

/// How a ToolBench run ended, read from the `Finish` call's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finish {
    /// `give_answer`, with the answer text.
    Answer(String),
    /// `give_up_and_restart`, or no usable answer.
    NoAnswer,
}

/// Imports one answer file.
pub(crate) fn run(input: &Input<'_>, out: &mut Imported) {
    let file_name = input.file.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
    let id = file_name.split('_').next().unwrap_or_default().trim_end_matches(".json").to_owned();
    let group = input
        .file
        .parent()
        .and_then(|parent| parent.file_name())
        .map(|parent| parent.to_string_lossy().trim_end_matches("_answer").to_owned());
    input.document(out, |node| trajectory(&node, &id, group.as_deref(), &input.source).map(Item::Trajectory));
}

fn trajectory(node: &Node<'_, '_>, id: &str, group: Option<&str>, source: &str) -> Result<Trajectory, Problem> {
    let answer = node.field("answer_generation")?;
    let query = answer.field("query")?.as_str()?.trim().to_owned();
    let mut steps = match answer.opt_field("train_messages")? {
        Some(train) if !train.as_array()?.is_empty() => {
            let conversations = train.as_array()?;
            let last = conversations.len() - 1;
            conversation(&train.child(last, &conversations[last]))?.steps
        }
        _ => {
            let outer_tree = node.field("tree")?;
            let tree = outer_tree.field("tree")?;
            match winning_path(&tree)? {
                Some(steps) => steps,
                None => {
                    return Err(answer.problem(
                        "no run to import: `answer_generation` has no `train_messages` and the tree has no finished `Finish`",
                    ));
                }
            }
        }
    };
    for step in &mut steps {
        if let Action::ToolCall(call) = &mut step.action {
            call.error = observation_error(call.result.as_ref());
        }
    }
    let final_answer = final_answer(&answer)?;
    let success = match node.opt_field("win")? {
        Some(win) => match win.value {
            Value::Bool(win) => Some(Outcome::Bool(*win)),
            _ => return Err(win.problem("expected a boolean")),
        },
        None => None,
    };
    let run = Run { id, group, source, query, steps, final_answer };
    Ok(run.into_trajectory(success))
}

/// The answer `Finish` gave in the `final_answer` field of `answer`, when it gave one.
pub(crate) fn final_answer(answer: &Node<'_, '_>) -> Result<Option<String>, Problem> {
    let Some(text) = answer.opt_field("final_answer")? else {
        return Ok(None);
    };
    Ok(match parse_finish(text.as_str()?) {
        Finish::Answer(answer) => Some(answer),
        Finish::NoAnswer => None,
    })
}

/// One run of a ToolBench-family file, as read.
pub(crate) struct Run<'a> {
    /// The query id.
    pub(crate) id: &'a str,
    /// The file's group (its directory or stem), which becomes the domain.
    pub(crate) group: Option<&'a str>,
    /// The import's source label.
    pub(crate) source: &'a str,
    /// The user's query.
    pub(crate) query: String,
    /// The steps of the run taken.
    pub(crate) steps: Vec<Step>,
    /// What `Finish` answered, if it gave an answer.
    pub(crate) final_answer: Option<String>,
}

impl Run<'_> {
    /// The run as a trajectory: no attempt and no reference, the group as the domain.
    pub(crate) fn into_trajectory(self, success: Option<Outcome>) -> Trajectory {
        Trajectory {
            id: self.id.to_owned(),
            attempt: None,
            query: self.query,
            steps: self.steps,
            final_answer: self.final_answer,
            reference: None,
            success,
            meta: Meta { site: None, domain: self.group.map(str::to_owned), source: Some(self.source.to_owned()) },
        }
    }
}

/// The steps along the first path (in child order) from the root to a `Finish` action
/// marked `finished`, or `None` when there is none.
fn winning_path(root: &Node<'_, '_>) -> Result<Option<Vec<Step>>, Problem> {
    // `path[k]` is the k-th node from the root; `indices[k]` is its position among its
    // parent's children (unused for the root).
    let mut path: Vec<&Value> = Vec::new();
    let mut indices: Vec<usize> = Vec::new();
    if !find_finished(root.value, 0, &mut path, &mut indices) {
        return Ok(None);
    }
    let mut steps = Vec::new();
    let mut reasoning = None;
    let mut pending_tool: Option<&str> = None;
    for (depth, node) in path.iter().enumerate() {
        let kind = node.get("node_type").and_then(Value::as_str).unwrap_or_default();
        let description = node.get("description").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "Thought" => reasoning = Some(description.to_owned()),
            "Action" => pending_tool = Some(description),
            "Action Input" => {
                let Some(tool) = pending_tool.take() else {
                    continue;
                };
                let mut call = ToolCall::from_wire(tool, Value::String(description.to_owned())).map_err(|err| {
                    let mut segments = root.path.segments();
                    for idx in &indices[1..=depth] {
                        segments.push(Segment::Key("children".to_owned()));
                        segments.push(Segment::Index(*idx));
                    }
                    segments.push(Segment::Key("description".to_owned()));
                    Problem { segments, message: err.to_string() }
                })?;
                call.result = node.get("observation").cloned();
                steps.push(Step { observation: None, reasoning: reasoning.take(), action: Action::ToolCall(call) });
            }
            _ => {}
        }
    }
    Ok(Some(steps))
}

fn find_finished<'v>(node: &'v Value, idx: usize, path: &mut Vec<&'v Value>, indices: &mut Vec<usize>) -> bool {
    path.push(node);
    indices.push(idx);
    let children = node.get("children").and_then(Value::as_array);
    let is_finish = node.get("node_type").and_then(Value::as_str) == Some("Action")
        && node.get("description").and_then(Value::as_str) == Some("Finish")
        && node.get("finished").and_then(Value::as_bool) == Some(true);
    if is_finish {
        // The `Action Input` under `Finish` carries its arguments.
        if let Some(input) = children.and_then(|children| children.first()) {
            path.push(input);
            indices.push(0);
        }
        return true;
    }
    for (child_idx, child) in children.into_iter().flatten().enumerate() {
        if find_finished(child, child_idx, path, indices) {
            return true;
        }
    }
    path.pop();
    indices.pop();
    false
}

/// ToolBench observations are JSON text `{"error": "...", "response": ...}`; a
/// non-empty `error` means the call failed.
fn observation_error(result: Option<&Value>) -> Option<String> {
    let text = result?.as_str()?;
    let parsed: Value = serde_json::from_str(text).ok()?;
    let error = parsed.get("error")?.as_str()?;
    (!error.is_empty()).then(|| error.to_owned())
}

/// Reads `Finish`'s arguments, JSON text `{"return_type": ..., "final_answer": ...}`.
///
/// Logs often hold it with raw newlines or cut short, which is not valid JSON; then the
/// answer is whatever follows `"final_answer": "`, with JSON escapes undone.
pub(crate) fn parse_finish(text: &str) -> Finish {
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) {
        return match (map.get("return_type").and_then(Value::as_str), map.get("final_answer")) {
            (Some("give_answer"), Some(Value::String(answer))) => Finish::Answer(answer.clone()),
            (Some("give_answer"), _) => Finish::Answer(String::new()),
            _ => Finish::NoAnswer,
        };
    }
    let compact: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if !compact.contains("\"return_type\": \"give_answer\"") {
        return Finish::NoAnswer;
    }
    let marker = "\"final_answer\": \"";
    let Some(start) = text.find(marker) else {
        return Finish::Answer(String::new());
    };
    let rest = text[start + marker.len()..].trim_end();
    let rest = rest.strip_suffix('}').map_or(rest, str::trim_end);
    let rest = rest.strip_suffix('"').unwrap_or(rest);
    Finish::Answer(unescape_json_lenient(rest))
}

/// Undoes JSON string escapes, keeping anything malformed as it is.
fn unescape_json_lenient(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some('/') => out.push('/'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(decoded) => out.push(decoded),
                    None => {
                        out.push_str("\\u");
                        out.push_str(&hex);
                    }
                }
            }
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::import::toolbench::{Finish, parse_finish};

    #[test]
    fn finish_arguments_parse_strictly_or_leniently() {
        assert_eq!(
            parse_finish("{\"return_type\": \"give_answer\", \"final_answer\": \"a\\nb\"}"),
            Finish::Answer("a\nb".into())
        );
        assert_eq!(parse_finish("{\n  \"return_type\": \"give_up_and_restart\"\n}"), Finish::NoAnswer);
        assert_eq!(
            parse_finish("{\n  \"return_type\": \"give_answer\",\n  \"final_answer\": \"raw\nnewline \\\"q\\\"\"\n}"),
            Finish::Answer("raw\nnewline \"q\"".into())
        );
        assert_eq!(
            parse_finish("{\n  \"return_type\": \"give_answer\",\n  \"final_answer\": \"cut sh"),
            Finish::Answer("cut sh".into())
        );
        assert_eq!(parse_finish(""), Finish::NoAnswer);
    }
}
