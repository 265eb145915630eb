//! Which conversation a chat request belongs to, and what each open conversation holds.
//!
//! A request belongs to, in order: the conversation named by its
//! `X-Flowmem-Conversation` header; the one keyed by its `user` field and a hash of its
//! first messages; else the open conversation whose transcript so far (requests and
//! the model's answers) is the longest prefix of its messages, so that turn n+1
//! extends turn n. Messages are compared in a normal form (role, text, tool calls,
//! tool-call id), because SDKs resend the model's answers with fields added or dropped.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, DefaultHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use serde_json::Value;
use serde_json::value::RawValue;

use flowmem_exec::CallChecker;
use flowmem_model::{Deviation, Scope};

/// Feeds `message` to `hasher` in the form used for matching: what the model and the
/// tools said (role, content text, each tool call's id, name and arguments, the id a
/// tool result answers), not how a client spelled it (a `developer` role is `system`,
/// content parts are their joined text, other fields are left out). Fed field by field,
/// each ended by a byte no UTF-8 text holds, so no JSON is built for it.
pub(crate) fn hash_normal_form(message: &Value, hasher: &mut impl Hasher) {
    let text = |hasher: &mut dyn Hasher, text: &str| {
        hasher.write(text.as_bytes());
        hasher.write_u8(0xff);
    };
    let role = message.get("role").and_then(Value::as_str).unwrap_or("");
    text(hasher, if role == "developer" { "system" } else { role });
    match message.get("content") {
        Some(Value::String(content)) => hasher.write(content.as_bytes()),
        Some(Value::Array(parts)) => {
            for part in parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)) {
                hasher.write(part.as_bytes());
            }
        }
        _ => {}
    }
    hasher.write_u8(0xff);
    let calls = message.get("tool_calls").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    hasher.write_usize(calls.len());
    for call in calls {
        text(hasher, call.get("id").and_then(Value::as_str).unwrap_or(""));
        text(hasher, call.pointer("/function/name").and_then(Value::as_str).unwrap_or(""));
        text(hasher, call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or(""));
    }
    text(hasher, message.get("tool_call_id").and_then(Value::as_str).unwrap_or(""));
}

/// The text of a message's `content`: a string, or the text parts of an array.
pub(crate) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}

/// The hash of each prefix of `messages`: `prefix_hashes(t, m)[k]` covers `m[..=k]`
/// (see [`TranscriptHash`]).
pub(crate) fn prefix_hashes(seed: Option<i64>, messages: &[Value]) -> Vec<u64> {
    TranscriptHash::new(seed).push_all(messages)
}

/// A transcript's hash as it grows, message by message, so that a turn's answer is
/// hashed onto its request's messages without hashing them again. The caller's token id
/// `seed` goes first, so one client never continues another's conversation. Keyed per
/// process (SipHash with a random key): a client that knows another's messages still
/// cannot make its own hash like them, as it could with an unkeyed hash, whose every
/// step can be inverted. No hash is stored: a restarted gateway hashes the open
/// conversations it reads back with its own key.
#[derive(Clone)]
pub(crate) struct TranscriptHash(DefaultHasher);

impl TranscriptHash {
    /// The empty transcript of `seed`'s conversations.
    pub(crate) fn new(seed: Option<i64>) -> TranscriptHash {
        static KEY: LazyLock<RandomState> = LazyLock::new(RandomState::new);
        TranscriptHash::keyed(&KEY, seed)
    }

    fn keyed(key: &RandomState, seed: Option<i64>) -> TranscriptHash {
        let mut hasher = key.build_hasher();
        seed.hash(&mut hasher);
        TranscriptHash(hasher)
    }

    /// Adds `message`, and returns the hash of the transcript so far.
    pub(crate) fn push(&mut self, message: &Value) -> u64 {
        hash_normal_form(message, &mut self.0);
        self.0.finish()
    }

    /// Adds `messages`, and returns the hash after each.
    pub(crate) fn push_all(&mut self, messages: &[Value]) -> Vec<u64> {
        messages.iter().map(|message| self.push(message)).collect()
    }
}

/// The key of a conversation named by the client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Named {
    /// By the `X-Flowmem-Conversation` header.
    Header(String),
    /// By the `user` field and the hash of the first two messages.
    User(String, u64),
}

/// One open conversation: what its next turn needs. Not its transcript: each request
/// carries the turns before it, and each finished turn's record, transcript included,
/// goes to the queue table, where the conversation's end finds it. A busy gateway holds
/// tens of thousands of open conversations, and on a virtual machine every fresh page of
/// memory they take costs the host's time (`bench/runs/2026-12-07-vm/gateway_latency.txt`).
/// Cheap to clone: a request takes a copy out of the lock, so its id, model, workflow
/// ids, memory and retrieval record are shared, not copied.
#[derive(Debug, Clone)]
pub(crate) struct Open {
    /// One copy, shared by the maps that find the conversation and by the requests
    /// that took it out of the lock.
    pub id: Arc<str>,
    pub named: Option<Named>,
    /// How many turns were answered.
    pub turns: u32,
    /// The hash of the whole transcript, for prefix matching.
    pub hash: Option<u64>,
    pub scope: Scope,
    pub model: Arc<str>,
    pub token_id: Option<i64>,
    /// Workflows put into the system message (mode `prompt`) or only retrieved
    /// (mode `shadow`), chosen on the first turn.
    pub shown: Arc<[String]>,
    pub shadow: Arc<[String]>,
    /// The rendered memory, injected again on every turn so the prompt stays the same.
    pub memory_text: Arc<str>,
    /// How the first turn's workflows were retrieved: the mode and each hit's scores
    /// (memory's `Retrieval::record`), `null` when nothing was retrieved. Kept as its
    /// JSON text, a tenth of the size of the parsed tree, since it is only written out.
    pub retrieval: Arc<RawValue>,
    /// Whether to record it (privacy settings of its token and scope).
    pub record: bool,
    /// The model answered without tool calls: the conversation ends after the quiet
    /// period unless a request extends it.
    pub answered: bool,
    pub last_activity: Instant,
    /// Where the conversation's tool calls are in its scope's skeleton, when the gateway
    /// guards that scope.
    pub guard: Option<CallChecker>,
    /// The tool calls that deviated from the skeleton so far, in order.
    pub deviations: Vec<Deviation>,
}

/// The retrieval record of a conversation that retrieved nothing: `null`, one copy
/// shared by all of them.
pub(crate) fn no_retrieval() -> Arc<RawValue> {
    static NULL: std::sync::LazyLock<Arc<RawValue>> = std::sync::LazyLock::new(|| Arc::from(RawValue::NULL.to_owned()));
    Arc::clone(&NULL)
}

/// A retrieval record as an [`Open`] keeps it.
pub(crate) fn retrieval_text(record: &Value) -> Arc<RawValue> {
    serde_json::value::to_raw_value(record).map_or_else(|_| no_retrieval(), Arc::from)
}

/// Checks the tool calls of an assistant `message` against the skeleton, in order, and
/// returns those that deviate, each with the model's call id.
pub(crate) fn check_calls(checker: &mut CallChecker, message: &Value) -> Vec<Deviation> {
    let calls = message.get("tool_calls").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let mut deviations = Vec::new();
    for call in calls {
        let tool = call.pointer("/function/name").and_then(Value::as_str).unwrap_or("");
        if let Some(mut deviation) = checker.check(tool) {
            deviation.call_id = call.get("id").and_then(Value::as_str).map(str::to_owned);
            deviations.push(deviation);
        }
    }
    deviations
}

/// The open conversations of the gateway.
#[derive(Debug, Default)]
pub(crate) struct Conversations {
    // Boxed: a busy gateway holds tens of thousands, and growing the map moves every
    // entry while the lock is held (a pause every request waits out).
    open: HashMap<Arc<str>, Box<Open>>,
    by_name: HashMap<Named, Arc<str>>,
    by_hash: HashMap<u64, Arc<str>>,
    // One copy of each injected text the open conversations hold: conversations shown
    // the same workflows share it (a few KiB each, held until they end).
    texts: HashSet<Arc<str>>,
}

impl Conversations {
    /// The id of the open conversation `messages` continues, if any.
    pub(crate) fn find(&self, named: Option<&Named>, hashes: &[u64]) -> Option<Arc<str>> {
        if let Some(named) = named {
            return self.by_name.get(named).cloned();
        }
        hashes.iter().rev().find_map(|hash| self.by_hash.get(hash).cloned())
    }

    pub(crate) fn get(&self, id: &str) -> Option<&Open> {
        self.open.get(id).map(Box::as_ref)
    }

    /// Adds `conversation`, its injected text shared with any open conversation that
    /// holds the same, and returns it as stored.
    pub(crate) fn insert(&mut self, mut conversation: Open) -> &Open {
        if !conversation.memory_text.is_empty() {
            match self.texts.get(&conversation.memory_text) {
                Some(shared) => conversation.memory_text = Arc::clone(shared),
                None => {
                    self.texts.insert(Arc::clone(&conversation.memory_text));
                }
            }
        }
        if let Some(named) = &conversation.named {
            self.by_name.insert(named.clone(), Arc::clone(&conversation.id));
        }
        if let Some(hash) = conversation.hash {
            self.by_hash.insert(hash, Arc::clone(&conversation.id));
        }
        let id = Arc::clone(&conversation.id);
        self.open.entry(id).insert_entry(Box::new(conversation)).into_mut()
    }

    /// Forgets the injected texts no open conversation (nor a request still answering)
    /// holds any more. The quiet-period ender calls it on each tick.
    pub(crate) fn forget_unused_texts(&mut self) {
        self.texts.retain(|text| Arc::strong_count(text) > 1);
    }

    /// Records a finished turn: the model's `answer` is appended to the request's
    /// `messages`, which then are the transcript; `transcript` has hashed `messages`.
    /// Returns the updated conversation.
    pub(crate) fn record_turn(
        &mut self,
        id: &str,
        messages: &mut Vec<Value>,
        mut transcript: TranscriptHash,
        answer: Value,
    ) -> Option<Open> {
        let conversation = self.open.get_mut(id)?;
        if let Some(checker) = &mut conversation.guard {
            let deviations = check_calls(checker, &answer);
            for deviation in &deviations {
                tracing::info!(conversation = %id, tool = ?deviation.tool, expected = ?deviation.expected,
                    "gateway: a tool call deviates from the scope's skeleton");
            }
            conversation.deviations.extend(deviations);
        }
        if let Some(old) = conversation.hash.take() {
            self.by_hash.remove(&old);
        }
        conversation.answered = answer.get("tool_calls").and_then(Value::as_array).is_none_or(Vec::is_empty);
        conversation.hash = Some(transcript.push(&answer));
        messages.push(answer);
        conversation.turns += 1;
        conversation.last_activity = Instant::now();
        if let Some(hash) = conversation.hash {
            self.by_hash.insert(hash, Arc::clone(&conversation.id));
        }
        Some(Open::clone(conversation))
    }

    /// Marks a request on the conversation as started: it is not quiet now.
    pub(crate) fn touch(&mut self, id: &str) {
        if let Some(conversation) = self.open.get_mut(id) {
            conversation.answered = false;
            conversation.last_activity = Instant::now();
        }
    }

    /// Removes and returns the conversation `id`.
    pub(crate) fn end(&mut self, id: &str) -> Option<Open> {
        let conversation = self.open.remove(id)?;
        if let Some(named) = &conversation.named {
            self.by_name.remove(named);
        }
        if let Some(hash) = conversation.hash {
            self.by_hash.remove(&hash);
        }
        Some(*conversation)
    }

    /// The ids of the conversations to end: answered and then quiet for `quiet`, or
    /// silent for `abandon` whatever their state (a client that went away mid-loop).
    pub(crate) fn ended(&self, quiet: std::time::Duration, abandon: std::time::Duration) -> Vec<Arc<str>> {
        let now = Instant::now();
        self.open
            .values()
            .filter(|conversation| {
                let idle = now.saturating_duration_since(conversation.last_activity);
                (conversation.answered && idle >= quiet) || idle >= abandon
            })
            .map(|conversation| Arc::clone(&conversation.id))
            .collect()
    }

    /// How many conversations are open.
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::hash::Hasher;

    use serde_json::Value;

    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use flowmem_model::Scope;

    use std::hash::RandomState;

    use super::{Conversations, Open, TranscriptHash, hash_normal_form, prefix_hashes};

    fn open(id: &str, memory_text: &str) -> Open {
        Open {
            id: id.into(),
            named: None,
            turns: 0,
            hash: None,
            scope: Scope::default(),
            model: "m".into(),
            token_id: None,
            shown: Arc::default(),
            shadow: Arc::default(),
            memory_text: memory_text.into(),
            retrieval: super::no_retrieval(),
            record: true,
            answered: false,
            last_activity: Instant::now(),
            guard: None,
            deviations: Vec::new(),
        }
    }

    /// Conversations shown the same workflows hold one copy of the injected text, and
    /// the copy is forgotten once no open conversation holds it.
    #[test]
    fn open_conversations_share_one_copy_of_an_injected_text() {
        let mut conversations = Conversations::default();
        let first = conversations.insert(open("c1", "Workflow: cancel an order")).clone();
        let second = conversations.insert(open("c2", "Workflow: cancel an order")).clone();
        let other = conversations.insert(open("c3", "Workflow: return an item")).clone();
        assert!(Arc::ptr_eq(&first.memory_text, &second.memory_text), "the same text is stored twice");
        assert!(!Arc::ptr_eq(&first.memory_text, &other.memory_text));
        assert_eq!(&*conversations.get("c2").unwrap().memory_text, "Workflow: cancel an order");
        drop((first, second, other));

        conversations.end("c1");
        conversations.forget_unused_texts();
        assert_eq!(conversations.texts.len(), 2, "c2 still holds its text");
        conversations.end("c2");
        conversations.end("c3");
        conversations.forget_unused_texts();
        assert!(conversations.texts.is_empty(), "{:?}", conversations.texts);
        // A new conversation with an earlier text stores it again.
        let again = conversations.insert(open("c4", "Workflow: return an item")).memory_text.clone();
        assert_eq!(conversations.texts.len(), 1);
        assert_eq!(&*again, "Workflow: return an item");
        // No text, nothing shared.
        conversations.insert(open("c5", ""));
        assert_eq!(conversations.texts.len(), 1);
    }

    /// A conversation ends when it was answered and then quiet for the quiet period, or
    /// silent for the abandon period whatever its state; one in the middle of a turn, or
    /// answered but not yet quiet for long enough, stays open.
    #[test]
    fn ended_lists_the_quiet_answered_and_the_abandoned_conversations() {
        let (quiet, abandon) = (Duration::from_secs(30), Duration::from_secs(600));
        let ago = |secs: u64| Instant::now().checked_sub(Duration::from_secs(secs)).expect("an uptime of 20 minutes");
        let mut conversations = Conversations::default();
        for (id, answered, idle) in [
            ("quiet", true, 31),
            ("recent", true, 5),
            ("mid-turn", false, 120),
            ("abandoned", false, 601),
            ("answered-long-ago", true, 1200),
        ] {
            let mut conversation = open(id, "");
            conversation.answered = answered;
            conversation.last_activity = ago(idle);
            conversations.insert(conversation);
        }
        let mut ended: Vec<String> = conversations.ended(quiet, abandon).iter().map(|id| id.to_string()).collect();
        ended.sort();
        assert_eq!(ended, ["abandoned", "answered-long-ago", "quiet"]);
        // A touch (a new request) makes a quiet conversation active again.
        conversations.touch("quiet");
        assert!(!conversations.ended(quiet, abandon).iter().any(|id| &**id == "quiet"));
    }

    fn normal_hash(message: &Value) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        hash_normal_form(message, &mut hasher);
        hasher.finish()
    }

    #[test]
    fn a_resent_answer_matches_the_answer_the_model_gave() {
        let from_model = json!({"role": "assistant", "content": null, "refusal": null, "annotations": [],
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        let resent = json!({"role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        assert_eq!(normal_hash(&from_model), normal_hash(&resent));
        let parts = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
        assert_eq!(normal_hash(&parts), normal_hash(&json!({"role": "user", "content": "hi"})));
        let developer = json!({"role": "developer", "content": "be brief"});
        assert_eq!(normal_hash(&developer), normal_hash(&json!({"role": "system", "content": "be brief"})));
        // Where one field ends and the next begins counts.
        let shifted = json!({"role": "user", "content": "", "tool_call_id": "hi"});
        assert_ne!(normal_hash(&shifted), normal_hash(&json!({"role": "user", "content": "hi"})));
        let other =
            json!({"role": "assistant", "tool_calls": [{"id": "c2", "function": {"name": "f", "arguments": "{}"}}]});
        assert_ne!(normal_hash(&from_model), normal_hash(&other));
    }

    #[test]
    fn prefix_hashes_extend_and_differ() {
        let a = vec![json!({"role": "user", "content": "a"}), json!({"role": "assistant", "content": "b"})];
        let mut longer = a.clone();
        longer.push(json!({"role": "user", "content": "c"}));
        let short = prefix_hashes(None, &a);
        let long = prefix_hashes(None, &longer);
        assert_eq!(short[..], long[..2]);
        assert_ne!(long[1], long[2]);
        assert_ne!(prefix_hashes(None, &[json!({"role": "user", "content": "x"})])[0], short[0]);
        assert_ne!(prefix_hashes(Some(1), &a), short, "another token, another conversation");
    }

    /// The hashes are keyed: the same messages hash alike under one key, and otherwise
    /// under another, so no one can work out a conversation's hash from its messages.
    #[test]
    fn prefix_hashes_depend_on_the_key() {
        let messages = [json!({"role": "user", "content": "a"}), json!({"role": "assistant", "content": "b"})];
        let (one, other) = (RandomState::new(), RandomState::new());
        let keyed = |key: &RandomState| TranscriptHash::keyed(key, None).push_all(&messages);
        assert_eq!(keyed(&one), keyed(&one));
        assert_ne!(keyed(&one), keyed(&other));
    }
}
