//! What can go wrong while scoring.

/// An error from scoring, judging, checking or reporting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The reward weight is outside `[0, 1]`.
    #[error("`alpha` must lie in [0, 1], found {alpha}")]
    InvalidAlpha {
        /// The weight given.
        alpha: f64,
    },
    /// All split weights are zero.
    #[error("split ratios must not all be zero")]
    InvalidRatios,
    /// A prompt template is missing or does not render.
    #[error("cannot render the judge prompt")]
    Prompt(#[source] flowmem_llm::PromptError),
    /// The model failed.
    #[error("the judge model failed")]
    Llm(#[source] flowmem_llm::LlmError),
    /// The judge's reply is unusable.
    #[error("judge `{model}` replied with an unusable verdict: {problem}")]
    Judge {
        /// The model's name.
        model: String,
        /// What is wrong with the reply.
        problem: String,
        /// The raw reply.
        raw: String,
    },
    /// Resetting a state key on the tool server failed.
    #[error(transparent)]
    StateReset(#[from] flowmem_tools::StateResetError),
    /// The task check needs a reset tool, and none is configured.
    #[error("cannot give state `{key}` a fresh state: no reset tool is configured")]
    NoResetTool {
        /// The state key.
        key: String,
    },
    /// A replayed call timed out or the server broke, so the state cannot be trusted.
    #[error("replaying call #{index} (`{tool}`) failed in transport: {error}")]
    ReplayTransport {
        /// The tool.
        tool: String,
        /// The call's position in its log.
        index: usize,
        /// The transport error.
        error: String,
    },
    /// A server state file is missing or unreadable.
    #[error("bad state file `{}`: {problem}\nhint: is the checker's state directory the server's `$TAU2_*_MCP_STATE_DIR`?", path.display())]
    StateFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// An evaluation's progress file cannot be resumed from.
    #[error("cannot resume from `{}`: {problem}", path.display())]
    Journal {
        /// The progress file.
        path: std::path::PathBuf,
        /// What is wrong, with the line or setting it concerns.
        problem: String,
    },
    /// A report file could not be written.
    #[error("cannot write `{}`", path.display())]
    Write {
        /// The file or directory.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}
