//! What the gateway records, and how: recording can be turned off for the whole
//! gateway, a domain, or a token; configured fields and patterns are redacted before
//! anything is stored, as is every secret the process registered, and every stored
//! string is bounded.

use std::borrow::Cow;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;

use flowmem_model::{REDACTED, Scope};

/// The privacy settings of the gateway.
#[derive(Debug, Clone)]
pub struct Privacy {
    /// Whether conversations are recorded at all.
    pub record: bool,
    /// Domains whose conversations are not recorded.
    pub unrecorded_domains: Vec<String>,
    /// Token ids whose conversations are not recorded.
    pub unrecorded_tokens: Vec<i64>,
    /// JSON field names whose values are replaced by `[redacted]`, wherever they appear
    /// (also inside tool arguments and results that are JSON text).
    pub redact_fields: Vec<String>,
    /// Patterns whose matches in any stored string are replaced by `[redacted]`.
    pub redact_patterns: Vec<regex::Regex>,
    /// The most characters kept of one stored string; the rest is cut with a note.
    pub max_field_chars: usize,
}

impl Default for Privacy {
    /// Record everything, redact nothing, keep strings up to 20,000 characters.
    fn default() -> Privacy {
        Privacy {
            record: true,
            unrecorded_domains: Vec::new(),
            unrecorded_tokens: Vec::new(),
            redact_fields: Vec::new(),
            redact_patterns: Vec::new(),
            max_field_chars: 20_000,
        }
    }
}

impl Privacy {
    /// Whether a conversation in `scope`, by token `token_id`, is recorded.
    #[must_use]
    pub fn records(&self, scope: &Scope, token_id: Option<i64>) -> bool {
        self.record
            && !scope.domain.as_ref().is_some_and(|domain| self.unrecorded_domains.contains(domain))
            && !token_id.is_some_and(|id| self.unrecorded_tokens.contains(&id))
    }

    /// `value` as it may be stored: redacted and bounded.
    #[must_use]
    pub fn clean(&self, value: &Value) -> Value {
        // A `Value`'s keys are strings, so its cleaned form always converts.
        serde_json::to_value(self.cleaned(value)).unwrap_or(Value::Null)
    }

    /// `value` as it may be stored, redacted and bounded as it is serialized: nothing is
    /// copied but the strings that change. A gateway records a turn per request, and a
    /// cleaned copy of every message would be built only to be written out.
    #[must_use]
    pub(crate) fn cleaned<'a>(&'a self, value: &'a Value) -> Cleaned<'a> {
        Cleaned { privacy: self, value }
    }

    fn clean_text<'t>(&self, text: &'t str) -> Cow<'t, str> {
        // The process's secrets (API keys) first: a model may have been shown one.
        let mut cleaned = flowmem_model::redact(text);
        // Tool arguments and results are JSON inside a string: redact their fields too.
        let trimmed = cleaned.trim_start();
        if !self.redact_fields.is_empty()
            && (trimmed.starts_with('{') || trimmed.starts_with('['))
            && let Ok(inner) = serde_json::from_str::<Value>(&cleaned)
            && let Ok(text) = serde_json::to_string(&self.cleaned(&inner))
        {
            cleaned = Cow::Owned(text);
        }
        for pattern in &self.redact_patterns {
            if pattern.is_match(&cleaned) {
                cleaned = Cow::Owned(pattern.replace_all(&cleaned, REDACTED).into_owned());
            }
        }
        // A string of no more bytes than the bound has no more characters either.
        if cleaned.len() > self.max_field_chars {
            let n_chars = cleaned.chars().count();
            if n_chars > self.max_field_chars {
                let kept: String = cleaned.chars().take(self.max_field_chars).collect();
                cleaned = Cow::Owned(format!("{kept}…[cut {} characters]", n_chars - self.max_field_chars));
            }
        }
        cleaned
    }
}

/// A JSON value as [`Privacy`] lets it be stored, made by [`Privacy::cleaned`].
pub(crate) struct Cleaned<'a> {
    privacy: &'a Privacy,
    value: &'a Value,
}

impl Serialize for Cleaned<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let privacy = self.privacy;
        match self.value {
            Value::Object(map) => {
                let mut out = serializer.serialize_map(Some(map.len()))?;
                for (key, item) in map {
                    if privacy.redact_fields.iter().any(|field| field == key) {
                        out.serialize_entry(key, REDACTED)?;
                    } else {
                        out.serialize_entry(key, &privacy.cleaned(item))?;
                    }
                }
                out.end()
            }
            Value::Array(items) => serializer.collect_seq(items.iter().map(|item| privacy.cleaned(item))),
            Value::String(text) => serializer.serialize_str(&privacy.clean_text(text)),
            other => other.serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Privacy;
    use flowmem_model::Scope;

    #[test]
    fn fields_and_patterns_are_redacted_even_inside_json_text_and_strings_are_bounded() {
        let privacy = Privacy {
            redact_fields: vec!["email".to_owned()],
            redact_patterns: vec![regex::Regex::new(r"\b\d{4}-\d{4}-\d{4}-\d{4}\b").unwrap()],
            max_field_chars: 200,
            ..Privacy::default()
        };
        let message = json!({"role": "tool", "email": "a@b.c",
            "content": "{\"email\": \"x@y.z\", \"card\": \"1234-5678-9012-3456\"}"});
        let cleaned = privacy.clean(&message);
        assert_eq!(cleaned["email"], "[redacted]");
        let inner: serde_json::Value = serde_json::from_str(cleaned["content"].as_str().unwrap()).unwrap();
        assert_eq!(inner["email"], "[redacted]");
        assert_eq!(inner["card"], "[redacted]");
        let long = privacy.clean(&json!("a".repeat(300)));
        assert!(long.as_str().unwrap().ends_with("…[cut 100 characters]"), "{long}");
    }

    /// Serialized as it is walked, a cleaned value is the cleaned copy's text, and a
    /// string that needs no change is written as it is.
    #[test]
    fn a_value_serialized_clean_is_the_text_of_its_cleaned_copy() {
        let privacy = Privacy {
            redact_fields: vec!["email".to_owned()],
            redact_patterns: vec![regex::Regex::new(r"\bpin \d+").unwrap()],
            max_field_chars: 40,
            ..Privacy::default()
        };
        let message = json!({"role": "tool", "zeta": [1, null, true, "my pin 1234"], "email": "a@b.c",
            "content": "{\"email\": \"x@y.z\", \"n\": 2.5}", "long": "b".repeat(50), "alpha": "as it is"});
        let stored = serde_json::to_string(&privacy.cleaned(&message)).unwrap();
        assert_eq!(stored, privacy.clean(&message).to_string());
        let expected = json!({"role": "tool", "zeta": [1, null, true, "my [redacted]"], "email": "[redacted]",
            "content": "{\"email\":\"[redacted]\",\"n\":2.5}",
            "long": format!("{}…[cut 10 characters]", "b".repeat(40)), "alpha": "as it is"});
        assert_eq!(serde_json::from_str::<serde_json::Value>(&stored).unwrap(), expected);
    }

    #[test]
    fn recording_can_be_off_per_domain_and_token() {
        let privacy =
            Privacy { unrecorded_domains: vec!["health".into()], unrecorded_tokens: vec![7], ..Privacy::default() };
        let health = Scope { site: None, domain: Some("health".into()) };
        assert!(!privacy.records(&health, None));
        assert!(!privacy.records(&Scope::default(), Some(7)));
        assert!(privacy.records(&Scope::default(), Some(8)));
        assert!(!Privacy { record: false, ..Privacy::default() }.records(&Scope::default(), None));
    }

    /// A registered secret (an API key) is never recorded, even where a model or tool
    /// echoed it inside a message, with no redaction configured.
    #[test]
    fn the_process_secrets_are_redacted_from_every_recorded_string() {
        flowmem_model::register_secret("gateway-privacy-secret-3141");
        let message = json!({"role": "assistant", "content": "your key is gateway-privacy-secret-3141"});
        let cleaned = Privacy::default().clean(&message);
        assert_eq!(cleaned["content"], "your key is [redacted]");
    }
}
