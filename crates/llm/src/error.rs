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
    /// No reply within the timeout.
    #[error("model `{model}` did not answer within {seconds:.1} s")]
    Timeout {
        /// The model's name.
        model: String,
        /// The timeout.
        seconds: f64,
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
    /// The model is not available (not configured, weights missing, and so on).
    #[error("model `{model}` is unavailable: {reason}")]
    Unavailable {
        /// The model's name.
        model: String,
        /// Why, with what to do.
        reason: String,
    },
}
