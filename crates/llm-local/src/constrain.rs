//! Constrained decoding with llguidance: the token environment, the shared parser
//! factory, and the schema preparation that keeps the small model's JSON compact and
//! bounded.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::earley::SlicedBiasComputer;
use llguidance::{Matcher, ParserFactory};
use serde_json::{Map, Value, json};
use toktrie::{InferenceCapabilities, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::engine::{ENDOFTEXT, IM_END};
use crate::error::LocalError;
use crate::tokenizer::GgufTokenizer;

/// The longest string the grammar allows where the schema sets no `maxLength`.
pub const DEFAULT_MAX_LENGTH: u64 = 48;
/// The longest array the grammar allows where the schema sets no `maxItems`.
pub const DEFAULT_MAX_ITEMS: u64 = 4;

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
    /// Builds the token trie and the parser factory (about 0.1 s).
    pub(crate) fn new(tokenizer: Arc<GgufTokenizer>) -> Result<Constrainer, LocalError> {
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
        let mut info = TokRxInfo::new(vocab, IM_END);
        info.tok_end_of_turn = Some(IM_END);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&[IM_END, ENDOFTEXT]);
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
/// bound gets `maxLength`, every array `maxItems`, every object with listed properties
/// and no `additionalProperties` gets `additionalProperties: false`, and the top level
/// asks llguidance for compact whitespace. Anything valid against the result is valid
/// against the input.
#[must_use]
pub fn prepare(schema: &Value) -> Value {
    let mut schema = schema.clone();
    tighten(&mut schema);
    if let Value::Object(map) = &mut schema {
        map.insert(
            "x-guidance".to_owned(),
            json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    schema
}

fn tighten(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    let has = |map: &Map<String, Value>, k: &str| map.contains_key(k);
    let is_type = |map: &Map<String, Value>, t: &str| match map.get("type") {
        Some(Value::String(s)) => s == t,
        Some(Value::Array(a)) => a.iter().any(|v| v.as_str() == Some(t)),
        _ => false,
    };
    if is_type(map, "string") && !has(map, "maxLength") && !has(map, "enum") && !has(map, "const") && !has(map, "pattern") && !has(map, "format") {
        map.insert("maxLength".to_owned(), json!(DEFAULT_MAX_LENGTH));
    }
    if is_type(map, "array") && !has(map, "maxItems") {
        map.insert("maxItems".to_owned(), json!(DEFAULT_MAX_ITEMS));
    }
    if is_type(map, "object") && !has(map, "additionalProperties") && !has(map, "patternProperties") {
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
        map.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(tighten);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = map.get_mut(key) {
            tighten(child);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(tighten);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::prepare;

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
}
