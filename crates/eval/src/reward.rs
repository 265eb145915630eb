//! The scalar reward the optimizer climbs (FlowScout Eq. 7).

use crate::EvalError;

/// The weight `α` of TC in the reward `R = α·TC + (1−α)·ES`, checked to lie in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Alpha(f64);

impl Alpha {
    /// The paper's weighting, `α = 0.5`.
    pub const HALF: Alpha = Alpha(0.5);

    /// Checks that `alpha` lies in `[0, 1]`.
    ///
    /// # Errors
    ///
    /// [`EvalError::InvalidAlpha`] when it does not (or is NaN).
    pub fn new(alpha: f64) -> Result<Alpha, EvalError> {
        if !(0.0..=1.0).contains(&alpha) {
            return Err(EvalError::InvalidAlpha { alpha });
        }
        Ok(Alpha(alpha))
    }

    /// The weight as a number.
    #[must_use]
    pub fn get(self) -> f64 {
        self.0
    }
}

/// The reward `R = α·TC + (1−α)·ES` (FlowScout Eq. 7).
///
/// # Example
///
/// ```
/// use flowmem_eval::{Alpha, reward};
/// assert_eq!(reward(1.0, 0.5, Alpha::HALF), 0.75);
/// assert_eq!(reward(1.0, 0.5, Alpha::new(1.0)?), 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn reward(tc: f64, es: f64, alpha: Alpha) -> f64 {
    alpha.0 * tc + (1.0 - alpha.0) * es
}

/// The reward of a set of runs from its means: [`reward`] of the mean TC (over every run)
/// and the mean ES (over the judged runs only), or the mean TC alone when no run was
/// judged, because there was no judge or it failed on every run.
///
/// This is the one definition of a split's or a system's reward: the optimizer climbs it
/// and `flowmem eval` reports it.
///
/// # Example
///
/// ```
/// use flowmem_eval::{Alpha, reward_of_means};
/// assert_eq!(reward_of_means(1.0, Some(0.5), Alpha::HALF), 0.75);
/// assert_eq!(reward_of_means(0.8, None, Alpha::HALF), 0.8);
/// ```
#[must_use]
pub fn reward_of_means(mean_tc: f64, mean_es: Option<f64>, alpha: Alpha) -> f64 {
    match mean_es {
        Some(es) => reward(mean_tc, es, alpha),
        None => mean_tc,
    }
}

#[cfg(test)]
mod tests {
    use crate::reward::{Alpha, reward, reward_of_means};

    #[test]
    fn alpha_outside_the_unit_interval_is_rejected() {
        assert!(Alpha::new(-0.1).is_err());
        assert!(Alpha::new(1.5).is_err());
        assert!(Alpha::new(f64::NAN).is_err());
        assert_eq!(Alpha::new(0.0).unwrap().get(), 0.0);
    }

    #[test]
    fn reward_interpolates_between_tc_and_es() {
        assert_eq!(reward(0.2, 0.8, Alpha::new(0.0).unwrap()), 0.8);
        assert_eq!(reward(0.2, 0.8, Alpha::new(1.0).unwrap()), 0.2);
        assert!((reward(0.2, 0.8, Alpha::new(0.25).unwrap()) - 0.65).abs() < 1e-12);
    }

    #[test]
    fn without_es_the_reward_of_means_is_tc_alone() {
        let alpha = Alpha::new(0.25).unwrap();
        assert_eq!(reward_of_means(0.2, Some(0.8), alpha), reward(0.2, 0.8, alpha));
        assert_eq!(reward_of_means(0.2, None, alpha), 0.2);
    }
}
