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
}
