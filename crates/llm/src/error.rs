//! What can go wrong talking to a model.

/// An error from a chat model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The request could not be sent or the connection failed, after retries.
    #[error("could not reach model `{model}`")]
    Transport {
        /// The model's name.
        model: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server answered with an error status, after retries.
    #[error("model `{model}` answered HTTP {status}: {body}")]
    Status {
        /// The model's name.
        model: String,
        /// The HTTP status.
        status: u16,
        /// The response body, shortened.
        body: String,
    },
    /// No reply within the timeout: the call's deadline, or an attempt's own timeout
    /// when its retries ran out.
    #[error("model `{model}` did not answer within {seconds:.1} s")]
    Timeout {
        /// The model's name.
        model: String,
        /// The timeout.
        seconds: f64,
    },
    /// An attempt failed, and the retry it called for could not start before the call's
    /// deadline, so the call failed at once instead of waiting in vain.
    #[error("model `{model}` failed, and a retry would pass the call's {seconds:.1} s deadline: {reason}")]
    RetryPastDeadline {
        /// The model's name.
        model: String,
        /// The deadline.
        seconds: f64,
        /// Why the retry would come too late, such as a long `Retry-After`.
        reason: String,
        /// The failure that called for the retry.
        #[source]
        last: Box<LlmError>,
    },
    /// The server's answer is not a chat completion at all: a body that is not JSON
    /// (such as a proxy's HTML page), or JSON without `choices`. It is never read as the
    /// model's reply.
    #[error("protocol error from model `{model}` at `{endpoint}`: {problem}")]
    Protocol {
        /// The model's name.
        model: String,
        /// The URL that answered.
        endpoint: String,
        /// What is wrong with the body, with its first characters.
        problem: String,
    },
    /// The reply was not the JSON shape we asked for, even after re-asking.
    #[error("model `{model}` replied with {problem}")]
    InvalidReply {
        /// The model's name.
        model: String,
        /// What is wrong with it.
        problem: String,
        /// The raw reply.
        raw: String,
    },
    /// The request itself is unusable, for example its response format is not a valid
    /// JSON Schema. Not retried.
    #[error("request to model `{model}` is invalid: {problem}")]
    InvalidRequest {
        /// The model's name.
        model: String,
        /// What is wrong.
        problem: String,
    },
    /// The request does not fit the model's context window: the prompt, or the prompt and
    /// the reply so far. Asking again cannot help, a shorter request may; not retried.
    #[error("request to model `{model}` does not fit its context: {problem}")]
    ContextExceeded {
        /// The model's name.
        model: String,
        /// What the model or its server said.
        problem: String,
        /// The tokens the request needs, at least, when the model said.
        tokens: Option<usize>,
        /// The model's context length, when it said.
        limit: Option<usize>,
    },
    /// A tool call's `arguments` string is not a JSON object.
    #[error("model `{model}` called tool `{tool}` with arguments that are not a JSON object: {raw}")]
    ToolArguments {
        /// The model's name.
        model: String,
        /// The tool the model called.
        tool: String,
        /// What is wrong with the arguments.
        #[source]
        problem: flowmem_model::ArgsError,
        /// The raw `arguments` text.
        raw: String,
    },
    /// The response cache is in read-only (replay) mode and has no reply for a request.
    #[error("model `{model}`: no cached reply for request {key} and the cache is read-only")]
    CacheMiss {
        /// The model's name.
        model: String,
        /// The request's cache key (hex SHA-256).
        key: String,
    },
    /// The response cache could not be read or written.
    #[error("response cache {}: {problem}", path.display())]
    Cache {
        /// The cache file.
        path: std::path::PathBuf,
        /// What went wrong.
        problem: String,
    },
    /// The model is not available (not configured, weights missing, and so on).
    #[error("model `{model}` is unavailable: {reason}")]
    Unavailable {
        /// The model's name.
        model: String,
        /// Why, with what to do.
        reason: String,
    },
}
