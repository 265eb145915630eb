//! Assembling a streamed chat completion (server-sent events of `chat.completion.chunk`
//! objects) into the one assistant message it amounts to, while the bytes pass through
//! to the client untouched.

use serde_json::{Map, Value, json};

/// Feeds on the raw bytes of an SSE stream, in whatever pieces they arrive.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    pending: Vec<u8>,
    content: String,
    // Tool calls by their `index`, each with id, name and the arguments so far.
    calls: Vec<(String, String, String)>,
    done: bool,
    malformed: usize,
}

impl Assembler {
    /// Takes the next piece of the stream.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(data) = line.strip_prefix("data:") {
                self.data(data.trim_start());
            }
        }
    }

    fn data(&mut self, data: &str) {
        if data == "[DONE]" {
            self.done = true;
            return;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            self.malformed += 1;
            return;
        };
        let Some(delta) = chunk.pointer("/choices/0/delta") else { return };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.content.push_str(text);
        }
        for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            while self.calls.len() <= index {
                self.calls.push(Default::default());
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.0.push_str(id);
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                slot.1.push_str(name);
            }
            if let Some(arguments) = call.pointer("/function/arguments").and_then(Value::as_str) {
                slot.2.push_str(arguments);
            }
        }
    }

    /// Whether the stream ended with `data: [DONE]`.
    pub(crate) fn finished(&self) -> bool {
        self.done
    }

    /// The assistant message the stream amounts to.
    pub(crate) fn message(&self) -> Value {
        let mut message = Map::new();
        message.insert("role".to_owned(), json!("assistant"));
        message.insert(
            "content".to_owned(),
            if self.content.is_empty() && !self.calls.is_empty() { Value::Null } else { json!(self.content) },
        );
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .iter()
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            message.insert("tool_calls".to_owned(), Value::Array(calls));
        }
        Value::Object(message)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Assembler;

    #[test]
    fn chunks_split_anywhere_assemble_into_one_message() {
        let events = [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "lo"}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{\"order"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "_id\": \"#W1\"}"}}]}}]}),
        ];
        let mut stream = String::new();
        for event in &events {
            stream.push_str(&format!("data: {event}\r\n\r\n"));
        }
        stream.push_str("data: [DONE]\n\n");
        let mut assembler = Assembler::default();
        for piece in stream.as_bytes().chunks(7) {
            assembler.feed(piece);
        }
        assert!(assembler.finished());
        let message = assembler.message();
        assert_eq!(message["content"], "Hello");
        assert_eq!(message["tool_calls"][0]["id"], "c1");
        assert_eq!(message["tool_calls"][0]["function"]["name"], "get_order");
        assert_eq!(message["tool_calls"][0]["function"]["arguments"], "{\"order_id\": \"#W1\"}");
    }
}
