//! Walking parsed JSON with a path, and finding the line a JSON path sits on.
//!
//! Importers read a `serde_json::Value` through [`Node`], which remembers how it was
//! reached, so every problem names its JSON path (`$.actions[2].kwargs`). The path is a
//! chain of borrowed links and is only turned into owned segments when a problem is
//! reported, so the happy path allocates nothing for it.
//!
//! `serde_json::Value` forgets where it came from. To name a line, [`locate`] walks the
//! source text again along the problem's path, one level at a time, using borrowed
//! `RawValue` slices whose addresses give byte offsets into the text.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::{ArgsError, ToolCall};

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// An object member.
    Key(String),
    /// An array element.
    Index(usize),
}

/// A JSON path as a chain of links to the parent's path.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PathLink<'p> {
    /// The document (or item) root, `$`.
    Root,
    /// A member of the object at the parent path.
    Key(&'p PathLink<'p>, &'p str),
    /// An element of the array at the parent path.
    Index(&'p PathLink<'p>, usize),
}

/// What is wrong with one item, and where in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The JSON path of the offending value, relative to the item.
    pub(crate) segments: Vec<Segment>,
    /// What is wrong, as a sentence fragment without a trailing period.
    pub(crate) message: String,
}

/// A JSON value together with the path that reached it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node<'v, 'p> {
    pub(crate) value: &'v Value,
    pub(crate) path: PathLink<'p>,
}

/// The direct children of a JSON array or object, as slices of the source text.
enum RawChildren<'a> {
    Array(Vec<&'a RawValue>),
    Object(Vec<(String, &'a RawValue)>),
}

impl PathLink<'_> {
    /// The path as owned segments, root first.
    pub(crate) fn segments(&self) -> Vec<Segment> {
        let mut segments = Vec::new();
        self.push_segments(&mut segments);
        segments
    }

    fn push_segments(&self, out: &mut Vec<Segment>) {
        match self {
            PathLink::Root => {}
            PathLink::Key(parent, key) => {
                parent.push_segments(out);
                out.push(Segment::Key((*key).to_owned()));
            }
            PathLink::Index(parent, idx) => {
                parent.push_segments(out);
                out.push(Segment::Index(*idx));
            }
        }
    }
}

/// Renders segments as a JSONPath such as `$.actions[2]["odd key"]`.
pub(crate) fn render_path(prefix: &[Segment], segments: &[Segment]) -> String {
    let mut out = String::from("$");
    for segment in prefix.iter().chain(segments) {
        match segment {
            Segment::Key(key) if is_plain_key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Segment::Key(key) => {
                out.push('[');
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(']');
            }
            Segment::Index(idx) => {
                out.push('[');
                out.push_str(&idx.to_string());
                out.push(']');
            }
        }
    }
    out
}

fn is_plain_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl<'v> Node<'v, 'static> {
    /// The root node of an item.
    pub(crate) fn root(value: &'v Value) -> Node<'v, 'static> {
        Node { value, path: PathLink::Root }
    }
}

impl<'v, 'p> Node<'v, 'p> {
    /// A problem located at this node.
    pub(crate) fn problem(&self, message: impl Into<String>) -> Problem {
        Problem { segments: self.path.segments(), message: message.into() }
    }

    /// The member `key` of this object. A missing or null member is a problem.
    pub(crate) fn field<'s>(&'s self, key: &'s str) -> Result<Node<'v, 's>, Problem> {
        match self.opt_field(key)? {
            Some(node) => Ok(node),
            None => {
                let missing = Node { value: &Value::Null, path: PathLink::Key(&self.path, key) };
                Err(missing.problem(format!("missing field `{key}`")))
            }
        }
    }

    /// The member `key` of this object, or `None` when it is missing or null.
    pub(crate) fn opt_field<'s>(&'s self, key: &'s str) -> Result<Option<Node<'v, 's>>, Problem> {
        let Value::Object(map) = self.value else {
            return Err(self.problem(format!("expected an object, found {}", type_name(self.value))));
        };
        Ok(match map.get(key) {
            None | Some(Value::Null) => None,
            Some(value) => Some(Node { value, path: PathLink::Key(&self.path, key) }),
        })
    }

    /// The node for element `idx` of this array, whose value is `value`.
    pub(crate) fn child<'s>(&'s self, idx: usize, value: &'v Value) -> Node<'v, 's> {
        Node { value, path: PathLink::Index(&self.path, idx) }
    }

    /// This value as a string.
    pub(crate) fn as_str(&self) -> Result<&'v str, Problem> {
        match self.value {
            Value::String(text) => Ok(text),
            other => Err(self.problem(format!("expected a string, found {}", type_name(other)))),
        }
    }

    /// This value as an array.
    pub(crate) fn as_array(&self) -> Result<&'v [Value], Problem> {
        match self.value {
            Value::Array(items) => Ok(items),
            other => Err(self.problem(format!("expected an array, found {}", type_name(other)))),
        }
    }

    /// This value as an id: a string as is, or an integer's decimal text.
    pub(crate) fn id_text(&self) -> Result<String, Problem> {
        match self.value {
            Value::String(text) => Ok(text.clone()),
            Value::Number(number) if number.is_i64() || number.is_u64() => Ok(number.to_string()),
            other => Err(self.problem(format!("expected an id (a string or an integer), found {}", type_name(other)))),
        }
    }

    /// This value as an array of strings.
    pub(crate) fn strings(&self) -> Result<Vec<String>, Problem> {
        let items = self.as_array()?;
        let mut res = Vec::with_capacity(items.len());
        for (idx, item) in items.iter().enumerate() {
            res.push(self.child(idx, item).as_str()?.to_owned());
        }
        Ok(res)
    }

    /// A tool call named `name` whose arguments are this object's member `key`; a
    /// missing or null member means no arguments. With `wire`, arguments may also be a
    /// JSON string holding an object (the OpenAI form).
    pub(crate) fn tool_call(&self, name: &str, key: &str, wire: bool) -> Result<ToolCall, Problem> {
        let Some(args) = self.opt_field(key)? else {
            // Null arguments always convert to an empty object; the error arm is for form.
            return ToolCall::new(name, Value::Null).map_err(|err| self.problem(err.to_string()));
        };
        let res =
            if wire { ToolCall::from_wire(name, args.value.clone()) } else { ToolCall::new(name, args.value.clone()) };
        res.map_err(|err| args.problem(args_message(&err)))
    }

    /// This value as text: a string as is, anything else as compact JSON.
    #[allow(dead_code, reason = "used by the ToolBench and OpenAI importers, which come next")]
    pub(crate) fn text(&self) -> String {
        match self.value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        }
    }
}

fn args_message(err: &ArgsError) -> String {
    match err {
        ArgsError::NotJson(source) => {
            format!("arguments are a string that is not valid JSON: {source}")
        }
        other => other.to_string(),
    }
}

/// The JSON type name of `value`, for messages.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The byte offset within `raw` of the deepest value along `segments` that exists.
///
/// `raw` must be the text of one JSON value. A missing member stops the walk at its
/// parent, so a "missing field" problem points at the object that lacks it.
pub(crate) fn locate(raw: &str, segments: &[Segment]) -> usize {
    let mut current = raw.trim_start();
    for segment in segments {
        let Some(child) = raw_child(current, segment) else {
            break;
        };
        current = child;
    }
    current.as_ptr() as usize - raw.as_ptr() as usize
}

fn raw_child<'a>(raw: &'a str, segment: &Segment) -> Option<&'a str> {
    let children: RawChildren<'a> = serde_json::from_str(raw).ok()?;
    let child = match (segment, children) {
        (Segment::Key(key), RawChildren::Object(entries)) => {
            entries.into_iter().find(|(name, _)| name == key).map(|(_, value)| value)
        }
        (Segment::Index(idx), RawChildren::Array(items)) => items.into_iter().nth(*idx),
        _ => None,
    };
    child.map(RawValue::get)
}

/// The elements of a top-level JSON array or the members of a top-level object, each as
/// its key (for objects) and its raw text, a slice of `text`.
///
/// # Errors
///
/// The parse error when `text` is not a JSON array or object.
pub(crate) fn top_level_children(text: &str) -> Result<Vec<(Option<String>, &str)>, serde_json::Error> {
    let children: RawChildren<'_> = serde_json::from_str(text)?;
    Ok(match children {
        RawChildren::Array(items) => items.into_iter().map(|raw| (None, raw.get())).collect(),
        RawChildren::Object(entries) => entries.into_iter().map(|(key, raw)| (Some(key), raw.get())).collect(),
    })
}

/// Counts lines incrementally while offsets only grow, so locating every item of a large
/// file costs one pass over it.
pub(crate) struct LineCounter<'t> {
    text: &'t str,
    offset: usize,
    line: usize,
}

impl<'t> LineCounter<'t> {
    /// A counter at the start of `text`, line 1.
    pub(crate) fn new(text: &'t str) -> LineCounter<'t> {
        LineCounter { text, offset: 0, line: 1 }
    }

    /// The 1-based line of byte `offset`, which must not be less than the previous one.
    pub(crate) fn line_at(&mut self, offset: usize) -> usize {
        let offset = offset.min(self.text.len());
        if offset < self.offset {
            // Offsets normally grow; restart rather than miscount if one does not.
            self.offset = 0;
            self.line = 1;
        }
        self.line += self.text.as_bytes()[self.offset..offset].iter().filter(|b| **b == b'\n').count();
        self.offset = offset;
        self.line
    }
}

/// The byte offset of `inner` within `outer`; `inner` must be a slice of `outer`.
pub(crate) fn offset_in(outer: &str, inner: &str) -> usize {
    inner.as_ptr() as usize - outer.as_ptr() as usize
}

impl<'de> Deserialize<'de> for RawChildren<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawChildrenVisitor)
    }
}

struct RawChildrenVisitor;

impl<'de> Visitor<'de> for RawChildrenVisitor {
    type Value = RawChildren<'de>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON array or object")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(raw) = seq.next_element::<&'de RawValue>()? {
            items.push(raw);
        }
        Ok(RawChildren::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, raw)) = map.next_entry::<String, &'de RawValue>()? {
            entries.push((key, raw));
        }
        Ok(RawChildren::Object(entries))
    }
}

#[cfg(test)]
mod tests {
    use crate::import::json::{Segment, locate, render_path, top_level_children};

    fn line_of(text: &str, segments: &[Segment]) -> usize {
        let offset = locate(text, segments);
        1 + text[..offset].matches('\n').count()
    }

    #[test]
    fn locate_finds_nested_members_and_stops_at_missing_ones() {
        let text = "{\n\"a\": [\n1,\n{\"b\":\n 2}\n]\n}";
        let key = |k: &str| Segment::Key(k.to_owned());
        assert_eq!(line_of(text, &[key("a"), Segment::Index(1), key("b")]), 5);
        assert_eq!(line_of(text, &[key("a"), Segment::Index(0)]), 3);
        assert_eq!(line_of(text, &[key("a"), Segment::Index(1), key("zzz")]), 4);
        assert_eq!(line_of(text, &[key("nope")]), 1);
    }

    #[test]
    fn paths_render_odd_keys_in_brackets() {
        let segments = [Segment::Key("a".into()), Segment::Index(3), Segment::Key("1103".into())];
        assert_eq!(render_path(&[], &segments), "$.a[3][\"1103\"]");
    }

    #[test]
    fn top_level_children_keep_keys_and_order() {
        let children = top_level_children("{\"z\": 1, \"a\": [2]}").unwrap();
        assert_eq!(children, vec![(Some("z".to_owned()), "1"), (Some("a".to_owned()), "[2]")]);
        assert!(top_level_children("3").is_err());
    }
}
