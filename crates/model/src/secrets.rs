//! The secrets of this process (API keys and the like) and their redaction.
//!
//! The one home of redaction: whoever holds a configured secret registers it
//! ([`register_secret`]; `flowmem_llm::ApiKey` does so when it is made), and text from
//! outside (a server's error body, a model's reply, a tool's result) or on its way out (a
//! printed line, a log line) passes through [`redact`], which replaces every registered
//! secret with [`REDACTED`]. So a server that echoes the key it was sent cannot make
//! flowmem print, log or store it.

use std::borrow::Cow;
use std::sync::RwLock;

use serde_json::Value;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// The shortest text treated as a secret. Shorter "keys" (`EMPTY`, `none`, `dummy`, as
/// local servers take) are placeholders that would also match ordinary words.
pub const MIN_SECRET_CHARS: usize = 8;

/// The registered secrets, longest first (so a secret containing another is replaced
/// whole).
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers `secret` for redaction for the rest of the process, unless it is shorter
/// than [`MIN_SECRET_CHARS`] or already known.
///
/// # Example
///
/// ```
/// flowmem_model::register_secret("sk-example-secret-0042");
/// assert_eq!(flowmem_model::redact("key sk-example-secret-0042 rejected"), "key [redacted] rejected");
/// ```
pub fn register_secret(secret: &str) {
    let secret = secret.trim();
    if secret.chars().count() < MIN_SECRET_CHARS {
        return;
    }
    // A poisoned lock still holds a consistent list: every change is one insert.
    let mut secrets = SECRETS.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    if secrets.iter().any(|known| known == secret) {
        return;
    }
    let at = secrets.partition_point(|known| known.len() >= secret.len());
    secrets.insert(at, secret.to_owned());
}

/// `text` with every registered secret replaced by [`REDACTED`]; borrowed when there is
/// nothing to replace.
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut res = Cow::Borrowed(text);
    for secret in secrets.iter() {
        if res.contains(secret.as_str()) {
            res = Cow::Owned(res.replace(secret.as_str(), REDACTED));
        }
    }
    res
}

/// Redacts every string (and object key) inside `value`, in place.
pub fn redact_value(value: &mut Value) {
    if SECRETS.read().unwrap_or_else(std::sync::PoisonError::into_inner).is_empty() {
        return;
    }
    redact_in(value);
}

fn redact_in(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let Cow::Owned(redacted) = redact(text) {
                *text = redacted;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_in),
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().filter(|key| matches!(redact(key), Cow::Owned(_))).cloned().collect();
            for key in keys {
                if let Some(inner) = map.remove(&key) {
                    map.insert(redact(&key).into_owned(), inner);
                }
            }
            map.values_mut().for_each(redact_in);
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::secrets::{REDACTED, redact, redact_value, register_secret};

    #[test]
    fn registered_secrets_are_replaced_wherever_they_appear() {
        register_secret("issue27-secret-abcdef");
        register_secret("issue27-secret-abcdef-longer");
        register_secret("short");
        assert_eq!(redact("a issue27-secret-abcdef b"), format!("a {REDACTED} b"));
        assert_eq!(redact("issue27-secret-abcdef-longer"), REDACTED, "the longer one is replaced whole");
        assert_eq!(redact("short stays"), "short stays");
        let mut value = json!({"echo": ["x issue27-secret-abcdef"], "issue27-secret-abcdef": 1});
        redact_value(&mut value);
        assert_eq!(value, json!({"echo": [format!("x {REDACTED}")], REDACTED: 1}));
    }
}
