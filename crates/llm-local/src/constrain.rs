//! Constrained decoding with llguidance: the token environment, the shared parser
//! factory, and the schema preparation that keeps the small model's JSON compact and
//! bounded.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::earley::SlicedBiasComputer;
use llguidance::{Matcher, ParserFactory};
use serde_json::{Map, Value, json};
use toktrie::{InferenceCapabilities, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::error::LocalError;
use crate::tokenizer::GgufTokenizer;

/// The longest string the grammar allows where the schema sets no `maxLength`.
pub const DEFAULT_MAX_LENGTH: u64 = 48;
/// The longest array the grammar allows where the schema sets no `maxItems`.
pub const DEFAULT_MAX_ITEMS: u64 = 4;
/// The most properties the grammar allows in a free-form object (one whose schema lists
/// no properties and allows any others) where the schema sets no `maxProperties`.
pub const DEFAULT_MAX_PROPERTIES: u64 = 4;
/// The names a free-form object's properties may take: short identifiers.
const FREE_FORM_KEY: &str = "^[A-Za-z_][A-Za-z0-9_]{0,31}$";
/// The bound on an integer's magnitude where the schema sets none: JavaScript's largest
/// safe integer (2^53 − 1), so at most 16 digits, and every integer a JSON reader
/// keeps exactly.
pub const DEFAULT_MAX_INTEGER: i64 = 9_007_199_254_740_991;

/// Builds grammar matchers over the model's vocabulary.
pub(crate) struct Constrainer {
    factory: ParserFactory,
}

/// llguidance's view of our tokenizer.
struct Env {
    trie: TokTrie,
    tokenizer: Arc<GgufTokenizer>,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // The tokenizer cannot fail on UTF-8 text; an empty result would only make
        // llguidance fall back to its own greedy tokenization.
        self.tokenizer.encode(&String::from_utf8_lossy(s)).unwrap_or_default()
    }
}

impl Constrainer {
    /// Builds the token trie and the parser factory (about 0.1 s for SmolLM2's
    /// vocabulary). `stops` are the tokens that end a reply, the end of a turn first.
    pub(crate) fn new(tokenizer: Arc<GgufTokenizer>, stops: &[u32]) -> Result<Constrainer, LocalError> {
        let Some(&end_of_turn) = stops.first() else {
            return Err(LocalError::Tokenizer("no stop token".to_owned()));
        };
        let vocab = u32::try_from(tokenizer.vocab_size())
            .map_err(|_| LocalError::Tokenizer("vocabulary too large".to_owned()))?;
        let words: Vec<Vec<u8>> = (0..vocab)
            .map(|t| {
                let bytes = tokenizer.token_bytes(t);
                if tokenizer.is_control(t) {
                    // The marker byte never occurs in text, so text can never spell a
                    // control token.
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(bytes);
                    w
                } else {
                    bytes.to_vec()
                }
            })
            .collect();
        let mut info = TokRxInfo::new(vocab, end_of_turn);
        info.tok_end_of_turn = Some(end_of_turn);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(stops);
        let env: toktrie::TokEnv = Arc::new(Env { trie, tokenizer });
        let caps = InferenceCapabilities { ff_tokens: true, ..InferenceCapabilities::default() };
        let mut factory = ParserFactory::new(&env, caps, &SlicedBiasComputer::general_slices())
            .map_err(|e| LocalError::Grammar { what: "the vocabulary".to_owned(), problem: e.to_string() })?;
        factory.quiet();
        Ok(Constrainer { factory })
    }

    /// A matcher for output satisfying `schema` (already prepared with [`prepare`]).
    ///
    /// `what` names the schema in errors.
    pub(crate) fn matcher(&self, schema: Value, what: &str) -> Result<Matcher, LocalError> {
        let grammar_err = |problem: String| LocalError::Grammar { what: what.to_owned(), problem };
        let parser = self.factory.create_parser(TopLevelGrammar::from_json_schema(schema));
        let matcher = Matcher::new(parser);
        if let Some(problem) = matcher.get_error() {
            return Err(grammar_err(problem));
        }
        Ok(matcher)
    }
}

/// Tightens a JSON Schema for generation without loosening it: every string without a
/// bound gets `maxLength`, every array `maxItems` (the defaults, or the schema's own
/// `minLength`/`minItems` when larger), every integer without a bound on a side gets
/// [`DEFAULT_MAX_INTEGER`] there (a small model otherwise runs digits until its token
/// budget ends, and the reply is cut), every object with listed properties
/// and no `additionalProperties` gets `additionalProperties: false`, and the top level
/// asks llguidance for compact whitespace. An object that allows any other properties
/// (`additionalProperties: true`) is closed when it lists its properties, and otherwise
/// becomes a free-form object of at most [`DEFAULT_MAX_PROPERTIES`] identifier-named
/// properties with bounded scalar values: unbounded, a small model nests objects in it
/// until the token budget cuts the reply. Anything valid against the result is valid
/// against the input.
///
/// An object whose properties are split between itself and its `oneOf`/`anyOf`
/// branches (serde's flattened enums: `{id}` beside `oneOf: [{kind: "llm", role}, …]`)
/// would become unsatisfiable if each part were closed alone, so the parent's
/// properties are first copied into every branch, which is the same schema.
#[must_use]
pub fn prepare(schema: &Value) -> Value {
    let mut schema = schema.clone();
    let defs = schema.get("$defs").or_else(|| schema.get("definitions")).cloned().unwrap_or(Value::Null);
    inline_branch_refs(&mut schema, &defs);
    tighten(&mut schema, true);
    if let Value::Object(map) = &mut schema {
        map.insert(
            "x-guidance".to_owned(),
            json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
}

/// Tightens `schema`; closes it (when it is an object) only if `closable`: a part of a
/// composition may see only some of the object's properties.
fn tighten(schema: &mut Value, closable: bool) {
    let Value::Object(map) = schema else { return };
    let has = |map: &Map<String, Value>, k: &str| map.contains_key(k);
    let is_type = |map: &Map<String, Value>, t: &str| match map.get("type") {
        Some(Value::String(s)) => s == t,
        Some(Value::Array(a)) => a.iter().any(|v| v.as_str() == Some(t)),
        _ => false,
    };
    // A default bound never falls below the schema's own lower bound, which would make
    // the schema unsatisfiable rather than tighter.
    let at_least = |map: &Map<String, Value>, min: &str, default: u64| {
        map.get(min).and_then(Value::as_u64).unwrap_or(0).max(default)
    };
    if is_type(map, "string")
        && !has(map, "maxLength")
        && !has(map, "enum")
        && !has(map, "const")
        && !has(map, "pattern")
        && !has(map, "format")
    {
        let bound = at_least(map, "minLength", DEFAULT_MAX_LENGTH);
        map.insert("maxLength".to_owned(), json!(bound));
    }
    if is_type(map, "integer") && !has(map, "enum") && !has(map, "const") {
        if !has(map, "maximum") && !has(map, "exclusiveMaximum") {
            let floor = map.get("minimum").and_then(Value::as_i64).unwrap_or(i64::MIN);
            map.insert("maximum".to_owned(), json!(DEFAULT_MAX_INTEGER.max(floor)));
        }
        if !has(map, "minimum") && !has(map, "exclusiveMinimum") {
            let ceiling = map.get("maximum").and_then(Value::as_i64).unwrap_or(i64::MAX);
            map.insert("minimum".to_owned(), json!((-DEFAULT_MAX_INTEGER).min(ceiling)));
        }
    }
    if is_type(map, "array") && !has(map, "maxItems") {
        let bound = at_least(map, "minItems", DEFAULT_MAX_ITEMS);
        map.insert("maxItems".to_owned(), json!(bound));
    }
    let branches_closable = distribute_into_branches(map);
    let composed = ["anyOf", "oneOf", "allOf"].iter().any(|k| has(map, k));
    let open = map.get("additionalProperties").is_some_and(|a| a == &Value::Bool(true) || a == &json!({}));
    if closable && !composed && is_type(map, "object") && open && !has(map, "patternProperties") {
        let listed = map.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
        if listed {
            map.insert("additionalProperties".to_owned(), Value::Bool(false));
        } else if !has(map, "required") {
            // Required names the key pattern might not allow are left open.
            let bound = at_least(map, "minProperties", DEFAULT_MAX_PROPERTIES);
            map.entry("maxProperties").or_insert_with(|| json!(bound));
            map.insert("patternProperties".to_owned(), json!({ FREE_FORM_KEY: free_form_value() }));
            map.insert("additionalProperties".to_owned(), Value::Bool(false));
        }
    }
    if closable
        && !composed
        && is_type(map, "object")
        && !has(map, "additionalProperties")
        && !has(map, "patternProperties")
    {
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
        map.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(|child| tighten(child, true));
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = map.get_mut(key) {
            tighten(child, true);
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(|child| tighten(child, branches_closable));
        }
    }
    // Each conjunct of `allOf` sees only part of the object: none may be closed.
    for key in ["allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(|child| tighten(child, key == "prefixItems"));
        }
    }
}

/// The value of a free-form object's property: a scalar with the default bounds.
fn free_form_value() -> Value {
    json!({
        "type": ["string", "integer", "number", "boolean", "null"],
        "maxLength": DEFAULT_MAX_LENGTH,
        "minimum": -DEFAULT_MAX_INTEGER,
        "maximum": DEFAULT_MAX_INTEGER
    })
}

/// Replaces `{"$ref": "#/$defs/X"}` branches of objects that also list their own
/// properties with a copy of `X`, so that [`distribute_into_branches`] can merge them.
fn inline_branch_refs(schema: &mut Value, defs: &Value) {
    match schema {
        Value::Object(map) => {
            if map.contains_key("properties") {
                for key in ["oneOf", "anyOf"] {
                    let Some(Value::Array(branches)) = map.get_mut(key) else { continue };
                    for branch in branches.iter_mut() {
                        let target = branch.get("$ref").and_then(Value::as_str).and_then(|r| {
                            let name = r.strip_prefix("#/$defs/").or_else(|| r.strip_prefix("#/definitions/"))?;
                            defs.get(name)
                        });
                        if let Some(target) = target {
                            *branch = target.clone();
                        }
                    }
                }
            }
            map.values_mut().for_each(|child| inline_branch_refs(child, defs));
        }
        Value::Array(items) => items.iter_mut().for_each(|child| inline_branch_refs(child, defs)),
        _ => {}
    }
}

/// Moves an object's own `properties` and `required` into each of its `oneOf`/`anyOf`
/// branches, when every branch is an inline object schema. Returns whether the
/// branches now describe whole objects, so that closing them loses nothing.
fn distribute_into_branches(map: &mut Map<String, Value>) -> bool {
    let own_properties = map.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    let own_required = map.get("required").and_then(Value::as_array).cloned().unwrap_or_default();
    if own_properties.is_empty() && own_required.is_empty() {
        return true;
    }
    let branch_keys: Vec<&str> = ["oneOf", "anyOf"].into_iter().filter(|k| map.contains_key(*k)).collect();
    if branch_keys.is_empty() || map.contains_key("allOf") {
        return false;
    }
    let inline_objects = branch_keys.iter().all(|k| {
        map.get(*k).and_then(Value::as_array).is_some_and(|branches| {
            branches.iter().all(|b| b.as_object().is_some_and(|b| !b.contains_key("$ref") && !b.contains_key("allOf")))
        })
    });
    if !inline_objects {
        return false;
    }
    for key in branch_keys {
        let Some(Value::Array(branches)) = map.get_mut(key) else { continue };
        for branch in branches.iter_mut().filter_map(Value::as_object_mut) {
            let properties = branch.entry("properties").or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(properties) = properties {
                for (name, schema) in &own_properties {
                    properties.entry(name.clone()).or_insert_with(|| schema.clone());
                }
            }
            let required = branch.entry("required").or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(required) = required {
                for name in &own_required {
                    if !required.contains(name) {
                        required.push(name.clone());
                    }
                }
            }
            branch.entry("type").or_insert_with(|| json!("object"));
        }
    }
    map.remove("properties");
    map.remove("required");
    true
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::prepare;

    fn valid(schema: &serde_json::Value, value: &serde_json::Value) -> bool {
        jsonschema::validator_for(schema).expect("a valid schema").is_valid(value)
    }

    /// serde's flattened tagged enum, as in the optimizer's edit plan: `id` on the
    /// parent, the kind's fields in `oneOf` branches.
    #[test]
    fn flattened_enums_stay_satisfiable_and_closed() {
        let node = json!({
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
            "oneOf": [
                {"type": "object", "properties": {"kind": {"const": "llm"}, "role": {"type": "string"}}, "required": ["kind", "role"]},
                {"type": "object", "properties": {"kind": {"const": "join"}}, "required": ["kind"]}
            ]
        });
        let p = prepare(&node);
        assert!(valid(&p, &json!({"id": "a", "kind": "llm", "role": "plan"})));
        assert!(valid(&p, &json!({"id": "b", "kind": "join"})));
        assert!(!valid(&p, &json!({"kind": "join"})), "id stays required");
        assert!(!valid(&p, &json!({"id": "b", "kind": "join", "extra": 1})), "branches are closed");
        assert!(!valid(&p, &json!({"id": "b", "kind": "join", "role": "plan"})), "a branch allows only its own fields");
        for value in [json!({"id": "a", "kind": "llm", "role": "plan"}), json!({"id": "b", "kind": "join"})] {
            assert!(valid(&node, &value), "the original accepts what the prepared schema accepts");
        }
    }

    /// A branch that is a reference is inlined, then merged like any other.
    #[test]
    fn referenced_branches_are_inlined_and_merged() {
        let schema = json!({
            "$defs": {"Join": {"type": "object", "properties": {"kind": {"const": "join"}}, "required": ["kind"]}},
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
            "oneOf": [{"$ref": "#/$defs/Join"}]
        });
        let p = prepare(&schema);
        assert!(valid(&p, &json!({"id": "b", "kind": "join"})));
        assert!(!valid(&p, &json!({"id": "b", "kind": "join", "extra": 1})));
    }

    #[test]
    fn bounds_are_added_where_missing_only() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "b": {"type": "string", "maxLength": 5},
            "c": {"type": "array", "items": {"type": "string", "enum": ["x"]}}
        }});
        let p = prepare(&schema);
        assert_eq!(p["properties"]["a"]["maxLength"], json!(super::DEFAULT_MAX_LENGTH));
        assert_eq!(p["properties"]["b"]["maxLength"], json!(5));
        assert_eq!(p["properties"]["c"]["maxItems"], json!(super::DEFAULT_MAX_ITEMS));
        assert!(p["properties"]["c"]["items"].get("maxLength").is_none());
        assert_eq!(p["additionalProperties"], json!(false));
        assert_eq!(p["x-guidance"]["whitespace_flexible"], json!(false));
    }

    #[test]
    fn free_form_objects_are_bounded_and_listed_ones_closed() {
        let schema = json!({"type": "object", "properties": {
            "flights": {"type": "array", "items": {"type": "object", "additionalProperties": true}},
            "payment": {"type": "object", "properties": {"id": {"type": "string"}}, "additionalProperties": true},
            "many": {"type": "object", "additionalProperties": {}, "minProperties": 6},
            "typed": {"type": "object", "additionalProperties": {"type": "integer"}}
        }});
        let p = prepare(&schema);
        let flights = &p["properties"]["flights"];
        let flight = json!({"flights": [{"flight_number": "HAT170", "date": "2024-05-24", "seats": 2, "paid": true}]});
        assert!(valid(&p, &flight));
        for rejected in [
            json!({"flights": [{"flight": {"number": "HAT170"}}]}),
            json!({"flights": [{"numbers": ["HAT170"]}]}),
            json!({"flights": [{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}]}),
            json!({"flights": [{"flight number": "HAT170"}]}),
            json!({"flights": [{"flight": "H".repeat(49)}]}),
        ] {
            assert!(!valid(&p, &rejected), "{rejected} in {flights}");
            assert!(valid(&schema, &rejected), "the original accepts {rejected}");
        }
        assert_eq!(p["properties"]["payment"]["additionalProperties"], json!(false));
        assert!(p["properties"]["payment"].get("patternProperties").is_none());
        assert_eq!(p["properties"]["many"]["maxProperties"], json!(6), "never below the lower bound");
        assert!(p["properties"]["typed"].get("maxProperties").is_none(), "a typed map is left to its schema");
        let named = json!({"type": "object", "additionalProperties": true, "required": ["flight number"]});
        assert_eq!(prepare(&named)["additionalProperties"], json!(true), "required names stay possible");
        assert!(valid(&schema, &flight));
    }

    #[test]
    fn a_default_bound_never_falls_below_the_lower_bound() {
        let schema = json!({"type": "object", "properties": {
            "long": {"type": "string", "minLength": 200},
            "many": {"type": "array", "items": {"type": "integer"}, "minItems": 9},
            "short": {"type": "string", "minLength": 2}
        }});
        let p = prepare(&schema);
        assert_eq!(p["properties"]["long"]["maxLength"], json!(200));
        assert_eq!(p["properties"]["many"]["maxItems"], json!(9));
        assert_eq!(p["properties"]["short"]["maxLength"], json!(super::DEFAULT_MAX_LENGTH));
    }

    #[test]
    fn integers_get_the_missing_side_of_a_bound_only() {
        let max = super::DEFAULT_MAX_INTEGER;
        let schema = json!({"type": "object", "properties": {
            "free": {"type": "integer"},
            "age": {"type": "integer", "minimum": 0},
            "huge": {"type": "integer", "minimum": 9_007_199_254_740_999_i64},
            "below": {"type": "integer", "exclusiveMaximum": 10},
            "choice": {"type": "integer", "enum": [1, 2]},
            "ratio": {"type": "number"}
        }});
        let p = prepare(&schema);
        let field = |name: &str| p["properties"][name].clone();
        assert_eq!(field("free"), json!({"type": "integer", "minimum": -max, "maximum": max}));
        assert_eq!(field("age"), json!({"type": "integer", "minimum": 0, "maximum": max}));
        // A default never contradicts the schema's own bound.
        assert_eq!(field("huge")["maximum"], json!(9_007_199_254_740_999_i64));
        assert_eq!(field("below"), json!({"type": "integer", "exclusiveMaximum": 10, "minimum": -max}));
        assert_eq!(field("choice"), json!({"type": "integer", "enum": [1, 2]}));
        assert_eq!(field("ratio"), json!({"type": "number"}));
    }
}
