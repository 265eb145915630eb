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

/// Redacts a byte stream that arrives in pieces, such as a streamed HTTP body, where a
/// secret may be cut between two pieces. Each piece comes out redacted at once, except
/// for a tail that could be the start of a secret: that is held until the next piece
/// (or [`StreamRedactor::finish`]) tells. A stream that holds no secret is passed on
/// unchanged and undelayed, byte for byte.
///
/// # Example
///
/// ```
/// use flowmem_model::{StreamRedactor, register_secret};
///
/// register_secret("sk-stream-secret-7731");
/// let mut redactor = StreamRedactor::default();
/// let mut out = redactor.push(b"data: key sk-stream-");
/// assert_eq!(out, b"data: key ");
/// out.extend(redactor.push(b"secret-7731 rejected\n\n"));
/// out.extend(redactor.finish());
/// assert_eq!(out, b"data: key [redacted] rejected\n\n");
/// ```
#[derive(Debug, Default)]
pub struct StreamRedactor {
    held: Vec<u8>,
}

impl StreamRedactor {
    /// Takes the next piece and returns what may be passed on now.
    pub fn push(&mut self, piece: &[u8]) -> Vec<u8> {
        let secrets = SECRETS.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if secrets.is_empty() && self.held.is_empty() {
            return piece.to_vec();
        }
        self.held.extend_from_slice(piece);
        let mut text = std::mem::take(&mut self.held);
        for secret in secrets.iter() {
            text = replace_bytes(&text, secret.as_bytes(), REDACTED.as_bytes());
        }
        // Hold back the longest tail that a secret starts with.
        let keep = secrets
            .iter()
            .filter_map(|secret| {
                let secret = secret.as_bytes();
                (1..secret.len().min(text.len() + 1)).rev().find(|&n| text.ends_with(&secret[..n]))
            })
            .max()
            .unwrap_or(0);
        self.held = text.split_off(text.len() - keep);
        text
    }

    /// Ends the stream: what was held back, which was no secret after all.
    #[must_use]
    pub fn finish(self) -> Vec<u8> {
        self.held
    }
}

/// `haystack` with every `needle` replaced by `with`.
fn replace_bytes(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return haystack.to_vec();
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut at = 0;
    while at < haystack.len() {
        if haystack[at..].starts_with(needle) {
            out.extend_from_slice(with);
            at += needle.len();
        } else {
            out.push(haystack[at]);
            at += 1;
        }
    }
    out
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

    use crate::secrets::{REDACTED, StreamRedactor, redact, redact_value, register_secret};

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

    /// Cut anywhere, in two or in single bytes, a stream comes out as the whole text
    /// redacted; a stream without a secret comes out piece for piece, undelayed.
    #[test]
    fn a_stream_is_redacted_however_it_is_cut() {
        let secret = "issue27-stream-secret-99";
        register_secret(secret);
        let text = format!("data: {{\"echo\": \"{secret}\"}}\n\nissue27-stream-tail");
        let whole = redact(&text).into_owned();
        assert!(!whole.contains(secret));
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut redactor = StreamRedactor::default();
            let mut out = redactor.push(&bytes[..cut]);
            out.extend(redactor.push(&bytes[cut..]));
            out.extend(redactor.finish());
            assert_eq!(String::from_utf8(out).unwrap(), whole, "cut at {cut}");
        }
        let mut redactor = StreamRedactor::default();
        let mut out = Vec::new();
        for byte in bytes {
            out.extend(redactor.push(std::slice::from_ref(byte)));
        }
        out.extend(redactor.finish());
        assert_eq!(String::from_utf8(out).unwrap(), whole, "byte by byte");
        let mut redactor = StreamRedactor::default();
        assert_eq!(redactor.push(b"no secret here\n"), b"no secret here\n");
        assert_eq!(redactor.finish(), b"");
    }
}
