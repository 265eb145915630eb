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
}
