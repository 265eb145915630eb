//! StableToolBench evaluation-set files: a JSON object keyed by query id, each value read
//! as one [`Trajectory`].
//!
//! A value is `{query, available_tools, answer: {method, total_steps, final_answer,
//! answer_details}}`. `answer_details` is a chain of `{role, message, next: [...]}` nodes
//! (the last child is followed if a node ever has several). A `tool` node's message is a
//! Python dict repr `{'name': ..., 'arguments': '<json>', 'response': ...}`; an
//! `assistant` node's message is the reasoning for the next call.
//!
//! **Every message is truncated to 100 characters at the source.** Tool names survive;
//! arguments cut short cannot be parsed and are imported as empty, and responses are
//! kept as the cut text. [`Truncation`] counts the damage for the import's notes. The id
//! is the query id, verbatim; the group (file stem, such as `G1_tool`) is the domain.

use serde_json::Value;

use crate::import::Imported;
use crate::import::input::Input;
use crate::import::json::{Node, Problem};
use crate::import::toolbench::{Run, final_answer};
use crate::{Action, Item, Step, ToolCall, Trajectory};

/// How many tool calls lost their arguments to the source's truncation.
#[derive(Debug, Default)]
pub(crate) struct Truncation {
    n_calls: usize,
    n_cut_arguments: usize,
}

impl Truncation {
    /// The note for [`Imported::notes`].
    pub(crate) fn note(&self) -> String {
        format!(
            "StableToolBench truncates every logged message to 100 characters: {} of {} tool calls had their arguments cut off and were imported with empty arguments, and tool results are cut short",
            self.n_cut_arguments, self.n_calls
        )
    }
}

/// Imports every run of an evaluation-set file.
pub(crate) fn run(input: &Input<'_>, out: &mut Imported, truncation: &mut Truncation) {
    let group = input.file.file_stem().map(|stem| stem.to_string_lossy().into_owned());
    input.each_element(out, |key, node| {
        let Some(id) = key else {
            return Err(node.problem(
                "expected an evaluation set (an object keyed by query id), found an array; `solvable_queries` files hold queries without runs",
            ));
        };
        trajectory(&node, id, group.as_deref(), &input.source, truncation).map(Item::Trajectory)
    });
}

fn trajectory(
    node: &Node<'_, '_>,
    id: &str,
    group: Option<&str>,
    source: &str,
    truncation: &mut Truncation,
) -> Result<Trajectory, Problem> {
    let query = node.field("query")?.as_str()?.to_owned();
    let answer = node.field("answer")?;
    let final_answer = final_answer(&answer)?;
    let mut walk = Walk { steps: Vec::new(), reasoning: None, truncation };
    walk.level(&answer.field("answer_details")?)?;
    let Walk { mut steps, reasoning, .. } = walk;
    if let Some(text) = reasoning {
        steps.push(Step { observation: None, reasoning: None, action: Action::Message { content: text } });
    }
    Ok(Run { id, group, source, query, steps, final_answer }.into_trajectory(None))
}

/// The state of a walk down the `answer_details` chain.
struct Walk<'t> {
    steps: Vec<Step>,
    /// An assistant message waiting for the tool call it explains.
    reasoning: Option<String>,
    truncation: &'t mut Truncation,
}

impl Walk<'_> {
    /// Reads one level of the chain (a list of nodes) and, through the last node's
    /// `next`, the levels below it. serde_json caps nesting at 128, which bounds the
    /// recursion.
    fn level(&mut self, level: &Node<'_, '_>) -> Result<(), Problem> {
        let nodes = level.as_array()?;
        let Some(last) = nodes.len().checked_sub(1) else {
            return Ok(());
        };
        let node = level.child(last, &nodes[last]);
        let role = node.field("role")?.as_str()?;
        let message = match node.opt_field("message")? {
            Some(message) => message.as_str()?,
            None => "",
        };
        match role {
            "tool" => {
                let call = tool_call(&node, message, self.truncation)?;
                let reasoning = self.reasoning.take();
                self.steps.push(Step { observation: None, reasoning, action: Action::ToolCall(call) });
            }
            "assistant" if !message.trim().is_empty() => {
                if let Some(previous) = self.reasoning.replace(message.to_owned()) {
                    let action = Action::Message { content: previous };
                    self.steps.push(Step { observation: None, reasoning: None, action });
                }
            }
            _ => {}
        }
        match node.opt_field("next")? {
            Some(next) => self.level(&next),
            None => Ok(()),
        }
    }
}

fn tool_call(node: &Node<'_, '_>, message: &str, truncation: &mut Truncation) -> Result<ToolCall, Problem> {
    let fields = python_dict_prefix(message);
    let name = match fields.iter().find(|field| field.key == "name") {
        Some(PyField { value, complete: true, .. }) => value.as_str(),
        _ => {
            return Err(node.problem(format!(
                "the tool name is missing or cut off in `message`: expected a Python dict repr starting `{{'name': '...'`, found `{message}`"
            )));
        }
    };
    truncation.n_calls += 1;
    let arguments = fields.iter().find(|field| field.key == "arguments");
    let parsed = match arguments {
        Some(PyField { value, complete: true, .. }) => ToolCall::from_wire(name, Value::String(value.clone())).ok(),
        _ => None,
    };
    let mut call = match parsed {
        Some(call) => call,
        None => {
            truncation.n_cut_arguments += 1;
            ToolCall::new(name, Value::Null).map_err(|err| node.problem(err.to_string()))?
        }
    };
    if let Some(response) = fields.iter().find(|field| field.key == "response") {
        call.result = Some(Value::String(response.value.clone()));
    }
    Ok(call)
}

/// One `'key': 'value'` pair of a Python dict repr; `complete` is false when the text
/// ended inside the value.
#[derive(Debug, PartialEq, Eq)]
struct PyField {
    key: String,
    value: String,
    complete: bool,
}

/// Reads the string-valued pairs at the start of a Python dict repr, stopping at the
/// first thing that is not one (such as where the text was cut off).
fn python_dict_prefix(text: &str) -> Vec<PyField> {
    let mut fields = Vec::new();
    let mut rest = text.trim_start();
    let Some(after_brace) = rest.strip_prefix('{') else {
        return fields;
    };
    rest = after_brace;
    loop {
        rest = rest.trim_start();
        let Some((key, true, after_key)) = python_string(rest) else {
            return fields;
        };
        let Some(after_colon) = after_key.trim_start().strip_prefix(':') else {
            return fields;
        };
        let Some((value, complete, after_value)) = python_string(after_colon.trim_start()) else {
            return fields;
        };
        fields.push(PyField { key, value, complete });
        if !complete {
            return fields;
        }
        let Some(after_comma) = after_value.trim_start().strip_prefix(',') else {
            return fields;
        };
        rest = after_comma;
    }
}

/// Reads one Python string literal at the start of `text`: its value, whether its closing
/// quote was found, and the text after it.
fn python_string(text: &str) -> Option<(String, bool, &str)> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let mut value = String::new();
    let mut chars = text[1..].char_indices();
    while let Some((idx, c)) = chars.next() {
        if c == quote {
            return Some((value, true, &text[1 + idx + 1..]));
        }
        if c != '\\' {
            value.push(c);
            continue;
        }
        let Some((_, escaped)) = chars.next() else {
            break;
        };
        match escaped {
            'n' => value.push('\n'),
            't' => value.push('\t'),
            'r' => value.push('\r'),
            '\\' | '\'' | '"' => value.push(escaped),
            'x' | 'u' | 'U' => {
                let width = match escaped {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let hex: String = chars.by_ref().take(width).map(|(_, h)| h).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(decoded) if hex.len() == width => value.push(decoded),
                    _ => break,
                }
            }
            other => {
                value.push('\\');
                value.push(other);
            }
        }
    }
    Some((value, false, ""))
}

#[cfg(test)]
mod tests {
    use crate::import::stabletoolbench::{PyField, python_dict_prefix};

    fn field(key: &str, value: &str, complete: bool) -> PyField {
        PyField { key: key.into(), value: value.into(), complete }
    }

    #[test]
    fn python_reprs_parse_up_to_the_cut() {
        assert_eq!(
            python_dict_prefix(r#"{'name': 'f', 'arguments': '{\n  "id": "it\'s"\n}', 'response': 'cut "#),
            vec![
                field("name", "f", true),
                field("arguments", "{\n  \"id\": \"it's\"\n}", true),
                field("response", "cut ", false)
            ]
        );
        assert_eq!(python_dict_prefix(r#"{'name': "o'k", 'arg"#), vec![field("name", "o'k", true)]);
        assert_eq!(python_dict_prefix(r"{'name': 'caf\xe9\u00e9'}"), vec![field("name", "caféé", true)]);
        assert_eq!(python_dict_prefix("not a dict"), vec![]);
        assert_eq!(python_dict_prefix("{'name': 'abc"), vec![field("name", "abc", false)]);
    }
}
