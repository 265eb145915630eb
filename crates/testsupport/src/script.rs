//! What the scripted server answers: [`Script`], [`Reply`] and [`Match`].

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

/// The replies a [`ScriptedLlmServer`](crate::ScriptedLlmServer) gives, in order or
/// matched on the request's content.
///
/// For each chat request the server tries, in this order:
/// 1. the content rules added with [`Script::when`] and [`Script::when_seq`], first
///    match wins;
/// 2. the next reply of the in-order queue ([`Script::in_order`], [`Script::then`]);
/// 3. the fallback reply ([`Script::otherwise`]);
/// 4. otherwise it answers HTTP 400 saying the script is exhausted (400 is not retried,
///    so a test that sends more requests than it scripted fails fast).
///
/// # Example
///
/// ```
/// use flowmem_testsupport::{Match, Reply, Script};
/// use serde_json::json;
///
/// let script = Script::in_order([
///     Reply::rate_limited(1),
///     Reply::tool_call("get_order", json!({"order_id": "#W42"})),
///     Reply::text("Your order has shipped."),
/// ])
/// .when(Match::system_contains("You are a judge"), Reply::json(json!({"score": 1})))
/// .models(["gpt-test"]);
/// # let _ = script;
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Script {
    pub(crate) rules: Vec<Rule>,
    pub(crate) queue: VecDeque<Reply>,
    pub(crate) fallback: Option<Reply>,
    pub(crate) models: Vec<String>,
    pub(crate) embedding_faults: VecDeque<Reply>,
}

#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub(crate) matcher: Match,
    pub(crate) replies: VecDeque<Reply>,
    // A rule made by `when` answers forever; one made by `when_seq` is used up.
    pub(crate) repeat: bool,
}

impl Default for Script {
    fn default() -> Script {
        Script::new()
    }
}

impl Script {
    /// An empty script: no replies, one model `scripted-model`.
    pub fn new() -> Script {
        Script {
            rules: Vec::new(),
            queue: VecDeque::new(),
            fallback: None,
            models: vec!["scripted-model".to_owned()],
            embedding_faults: VecDeque::new(),
        }
    }

    /// A script answering requests with `replies`, one each, in order.
    pub fn in_order(replies: impl IntoIterator<Item = Reply>) -> Script {
        Script { queue: replies.into_iter().collect(), ..Script::new() }
    }

    /// Appends `reply` to the in-order queue.
    pub fn then(mut self, reply: Reply) -> Script {
        self.queue.push_back(reply);
        self
    }

    /// Answers every request that `matcher` accepts with `reply`, before the queue.
    pub fn when(mut self, matcher: Match, reply: Reply) -> Script {
        self.rules.push(Rule { matcher, replies: VecDeque::from([reply]), repeat: true });
        self
    }

    /// Answers requests that `matcher` accepts with `replies` in order; once they are
    /// used up, such requests fall through to the later rules and the queue.
    pub fn when_seq(mut self, matcher: Match, replies: impl IntoIterator<Item = Reply>) -> Script {
        self.rules.push(Rule { matcher, replies: replies.into_iter().collect(), repeat: false });
        self
    }

    /// Answers with `reply` whenever no rule matches and the queue is empty.
    pub fn otherwise(mut self, reply: Reply) -> Script {
        self.fallback = Some(reply);
        self
    }

    /// The model ids `GET /v1/models` lists, in order.
    pub fn models<S: Into<String>>(mut self, models: impl IntoIterator<Item = S>) -> Script {
        self.models = models.into_iter().map(Into::into).collect();
        self
    }

    /// Answers the next `/v1/embeddings` requests, one each and in order, with these
    /// replies when they are faults (an HTTP status, a raw body; a delay applies too);
    /// after them, and for any other kind of reply, the server answers with its
    /// bag-of-words vectors (see [`ScriptedLlmServer`](crate::ScriptedLlmServer)).
    pub fn embedding_faults(mut self, replies: impl IntoIterator<Item = Reply>) -> Script {
        self.embedding_faults.extend(replies);
        self
    }

    /// Picks the reply for `request`, consuming it unless it repeats.
    pub(crate) fn next_reply(&mut self, request: &Value) -> Option<Reply> {
        for rule in &mut self.rules {
            if rule.replies.is_empty() || !rule.matcher.matches(request) {
                continue;
            }
            return if rule.repeat { rule.replies.front().cloned() } else { rule.replies.pop_front() };
        }
        self.queue.pop_front().or_else(|| self.fallback.clone())
    }
}

/// A predicate on a chat request's JSON body, for [`Script::when`].
#[derive(Clone)]
pub struct Match(Arc<dyn Fn(&Value) -> bool + Send + Sync>);

impl fmt::Debug for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Match(..)")
    }
}

impl Match {
    /// The last user message contains `needle`.
    #[must_use]
    pub fn last_user_contains(needle: impl Into<String>) -> Match {
        let needle = needle.into();
        Match::custom(move |request| {
            messages(request)
                .filter(|message| message["role"] == "user")
                .last()
                .is_some_and(|message| text_of(message).contains(&needle))
        })
    }

    /// A system message contains `needle`.
    #[must_use]
    pub fn system_contains(needle: impl Into<String>) -> Match {
        let needle = needle.into();
        Match::custom(move |request| {
            messages(request)
                .filter(|message| message["role"] == "system")
                .any(|message| text_of(message).contains(&needle))
        })
    }

    /// Any message's text contains `needle`.
    #[must_use]
    pub fn any_message_contains(needle: impl Into<String>) -> Match {
        let needle = needle.into();
        Match::custom(move |request| messages(request).any(|message| text_of(message).contains(&needle)))
    }

    /// The last message is a tool result (the model is being told what a tool returned).
    #[must_use]
    pub fn after_tool_result() -> Match {
        Match::custom(|request| messages(request).last().is_some_and(|message| message["role"] == "tool"))
    }

    /// The request offers a tool named `name`.
    #[must_use]
    pub fn offers_tool(name: impl Into<String>) -> Match {
        let name = name.into();
        Match::custom(move |request| {
            request["tools"]
                .as_array()
                .is_some_and(|tools| tools.iter().any(|tool| tool["function"]["name"] == name.as_str()))
        })
    }

    /// The request asks for a `response_format`.
    #[must_use]
    pub fn wants_json() -> Match {
        Match::custom(|request| !request["response_format"].is_null())
    }

    /// The request names model `model`.
    #[must_use]
    pub fn model(model: impl Into<String>) -> Match {
        let model = model.into();
        Match::custom(move |request| request["model"] == model.as_str())
    }

    /// Any predicate on the request body.
    #[must_use]
    pub fn custom(predicate: impl Fn(&Value) -> bool + Send + Sync + 'static) -> Match {
        Match(Arc::new(predicate))
    }

    /// Whether the request body matches.
    #[must_use]
    pub fn matches(&self, request: &Value) -> bool {
        (self.0)(request)
    }
}

fn messages(request: &Value) -> impl Iterator<Item = &Value> {
    request["messages"].as_array().into_iter().flatten()
}

/// A message's text: its `content` string, or the text parts of a content array.
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|part| part["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// One scripted answer: a normal completion, or an injected fault.
///
/// Completions get an OpenAI-shaped body with `id`, `choices[0].index`, `message`,
/// `finish_reason` and `usage`. Unless set with [`Reply::usage`], usage counts
/// whitespace-separated words (prompt: all message texts; completion: the reply).
#[derive(Debug, Clone)]
#[must_use]
pub struct Reply {
    pub(crate) kind: ReplyKind,
    pub(crate) delay: Duration,
    pub(crate) usage: Option<(u64, u64)>,
    pub(crate) finish_reason: Option<String>,
    pub(crate) remove: Vec<String>,
    pub(crate) headers: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
pub(crate) enum ReplyKind {
    Text(String),
    ToolCalls(Vec<(String, String)>),
    Status { status: u16, retry_after: Option<String>, body: String },
    Raw { status: u16, body: String },
}

impl Reply {
    fn of(kind: ReplyKind) -> Reply {
        Reply { kind, delay: Duration::ZERO, usage: None, finish_reason: None, remove: Vec::new(), headers: Vec::new() }
    }

    /// A completion whose message content is `text`.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::of(ReplyKind::Text(text.into()))
    }

    /// A completion whose content is `value` serialised as JSON, as a model answering a
    /// `response_format` request would.
    pub fn json(value: Value) -> Reply {
        Reply::text(value.to_string())
    }

    /// A completion calling one tool with `arguments` (sent, as OpenAI does, as a JSON
    /// string).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Reply {
        Reply::tool_calls([(name, arguments)])
    }

    /// A completion calling several tools at once.
    pub fn tool_calls<S: Into<String>>(calls: impl IntoIterator<Item = (S, Value)>) -> Reply {
        let calls = calls.into_iter().map(|(name, args)| (name.into(), args.to_string())).collect();
        Reply::of(ReplyKind::ToolCalls(calls))
    }

    /// A completion calling `name` with an `arguments` string sent verbatim, which need
    /// not be valid JSON.
    pub fn tool_call_raw(name: impl Into<String>, arguments: impl Into<String>) -> Reply {
        Reply::of(ReplyKind::ToolCalls(vec![(name.into(), arguments.into())]))
    }

    /// HTTP 429 with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_seconds: u64) -> Reply {
        Reply::of(ReplyKind::Status {
            status: 429,
            retry_after: Some(retry_after_seconds.to_string()),
            body: error_body("rate_limit_exceeded", "Rate limit reached; retry later."),
        })
    }

    /// HTTP 429 with OpenAI's `retry-after-ms: <ms>` and `Retry-After` rounded up to
    /// whole seconds, so tests of rate limits can stay fast.
    pub fn rate_limited_ms(retry_after_ms: u64) -> Reply {
        Reply::of(ReplyKind::Status {
            status: 429,
            retry_after: Some(retry_after_ms.div_ceil(1000).to_string()),
            body: error_body("rate_limit_exceeded", "Rate limit reached; retry later."),
        })
        .with_header("retry-after-ms", retry_after_ms.to_string())
    }

    /// HTTP 500 with an OpenAI-shaped error body.
    pub fn server_error() -> Reply {
        Reply::status(500, "The server had an error while processing your request.")
    }

    /// Any HTTP status with an OpenAI-shaped error body carrying `message`.
    pub fn status(status: u16, message: impl Into<String>) -> Reply {
        Reply::of(ReplyKind::Status { status, retry_after: None, body: error_body("scripted_error", &message.into()) })
    }

    /// HTTP 200 whose body is not JSON.
    pub fn malformed_json() -> Reply {
        Reply::raw(200, r#"{"id": "chatcmpl-broken", "choices": [{"index": 0, "message": {"#)
    }

    /// A completion missing its required `choices` field.
    pub fn missing_choices() -> Reply {
        Reply::text("never seen").without("/choices")
    }

    /// Any status and body, sent verbatim as `application/json`.
    pub fn raw(status: u16, body: impl Into<String>) -> Reply {
        Reply::of(ReplyKind::Raw { status, body: body.into() })
    }

    /// Waits `delay` before answering, to simulate a slow model or a hang.
    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// Reports this token usage instead of the word-count estimate.
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Reply {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// Reports this `finish_reason` (default `stop`, or `tool_calls` for tool calls).
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Reply {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Removes the field at JSON `pointer` (for example `/choices/0/message/role` or
    /// `/usage`) from the completion body, to simulate a reply missing a field.
    pub fn without(mut self, pointer: impl Into<String>) -> Reply {
        self.remove.push(pointer.into());
        self
    }
}

fn error_body(code: &str, message: &str) -> String {
    json!({"error": {"message": message, "type": code, "code": code}}).to_string()
}
