//! Scoring runs: the one place flowmem turns a trace into TC, ES and task success, and
//! a set of scored runs into means and a reward.
//!
//! `flowmem eval`, the scout's final test ([`evaluate`](crate::evaluate)) and the
//! optimizer's simulator all score through [`score_trace`] and aggregate through
//! [`ScoreMeans`], so a search and a report never disagree about a run.
//!
//! # A failed judge
//!
//! A run whose ES judge fails (the model errs, or its verdict is unusable after the
//! client's re-ask) has no ES: [`TraceScore::es`] is `None`, [`TraceScore::judge_failed`]
//! is set and the failure is one of its [`TraceScore::problems`]. It still counts for TC
//! and task success. ES means are over judged runs only, and the runs left unjudged are
//! counted beside them ([`ScoreMeans::n_unjudged`]). The reward of a set of runs is
//! [`reward_of_means`]: `α·mean TC + (1−α)·mean ES`, or the mean TC alone when no run was
//! judged.

use flowmem_exec::TaskOracle;
use flowmem_llm::{ChatModel, Prompts};
use flowmem_model::{Record, Trace, error_chain};

use crate::es::{JudgeInput, judge_es};
use crate::reward::{Alpha, reward_of_means};
use crate::tc::{TcConfig, TcScore, tool_correctness};

/// How runs are scored: TC's comparison, and optionally the ES judge and the task check.
#[derive(Clone)]
pub struct ScoreConfig<'a> {
    /// How TC compares calls.
    pub tc: TcConfig,
    /// The ES judge and the prompts holding `judge_es`; `None` leaves ES out.
    pub judge: Option<(&'a dyn ChatModel, &'a Prompts)>,
    /// The deterministic task check; `None` leaves task success out.
    pub checker: Option<&'a dyn TaskOracle>,
}

/// The scores of one run against its record.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceScore {
    /// TC against the record's orchestration, with the alignment of the calls.
    pub tc: TcScore,
    /// The execution score: `None` without a judge, or when the judge failed.
    pub es: Option<f64>,
    /// Whether a judge was asked and failed, leaving the run without ES.
    pub judge_failed: bool,
    /// The deterministic task check, when a checker is configured and could check.
    pub task_success: Option<bool>,
    /// What went wrong, in order: the run's own error, then a failed judge (`judge: …`)
    /// and a failed task check (`task check: …`).
    pub problems: Vec<String>,
}

/// Scores one run: TC against `record`; with a judge, ES (a run without a result scores
/// ES 0 without a judge call); with a checker, task success.
///
/// Never fails: a judge or checker failure leaves that score out and is recorded in
/// [`TraceScore::problems`] (see the module documentation for the failed-judge rule).
pub async fn score_trace(record: &Record, trace: &Trace, cfg: &ScoreConfig<'_>) -> TraceScore {
    let tc = tool_correctness(&record.orchestration, &trace.tool_calls, &cfg.tc);
    let mut problems: Vec<String> = trace.error.iter().cloned().collect();
    let answer = trace.result.as_deref().unwrap_or("");
    let (es, judge_failed) = match cfg.judge {
        None => (None, false),
        Some(_) if answer.trim().is_empty() => (Some(0.0), false),
        Some((model, prompts)) => {
            let input = JudgeInput {
                query: &record.query,
                reference: &record.reference_result,
                answer,
                required_outputs: &record.required_outputs,
            };
            match judge_es(model, prompts, &input).await {
                Ok(judgement) => (Some(judgement.es()), false),
                Err(err) => {
                    problems.push(format!("judge: {}", error_chain(&err)));
                    (None, true)
                }
            }
        }
    };
    let task_success = match cfg.checker {
        None => None,
        Some(checker) => match checker.task_success(record, trace).await {
            Ok(ok) => Some(ok),
            Err(err) => {
                problems.push(format!("task check: {}", error_chain(&err)));
                None
            }
        },
    };
    TraceScore { tc, es, judge_failed, task_success, problems }
}

/// Means over a set of scored runs, under the failed-judge rule: TC over every run, ES
/// over the judged runs only, with the unjudged ones counted.
///
/// # Example
///
/// ```
/// use flowmem_eval::{Alpha, ScoreMeans};
/// let mut means = ScoreMeans::default();
/// means.add(1.0, Some(0.5), false);
/// means.add(0.5, None, true); // the judge failed on this run
/// assert_eq!((means.mean_tc(), means.mean_es(), means.n_unjudged()), (0.75, Some(0.5), 1));
/// assert_eq!(means.reward(Alpha::HALF), 0.625);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScoreMeans {
    n_runs: usize,
    tc_sum: f64,
    n_judged: usize,
    es_sum: f64,
    n_unjudged: usize,
}

impl ScoreMeans {
    /// Adds one run's TC, its ES if it has one, and whether its judge failed.
    pub fn add(&mut self, tc: f64, es: Option<f64>, judge_failed: bool) {
        self.n_runs += 1;
        self.tc_sum += tc;
        if let Some(es) = es {
            self.n_judged += 1;
            self.es_sum += es;
        }
        self.n_unjudged += usize::from(judge_failed);
    }

    /// Adds one scored run.
    pub fn add_score(&mut self, score: &TraceScore) {
        self.add(score.tc.tc, score.es, score.judge_failed);
    }

    /// The runs added.
    #[must_use]
    pub fn n_runs(&self) -> usize {
        self.n_runs
    }

    /// The mean TC over every run; 0 when there is none.
    #[must_use]
    pub fn mean_tc(&self) -> f64 {
        if self.n_runs == 0 {
            return 0.0;
        }
        self.tc_sum / self.n_runs as f64
    }

    /// The mean ES over the judged runs; `None` when no run was judged.
    #[must_use]
    pub fn mean_es(&self) -> Option<f64> {
        (self.n_judged > 0).then(|| self.es_sum / self.n_judged as f64)
    }

    /// The runs whose judge failed, left out of [`ScoreMeans::mean_es`].
    #[must_use]
    pub fn n_unjudged(&self) -> usize {
        self.n_unjudged
    }

    /// The reward of these runs, [`reward_of_means`] of the means.
    #[must_use]
    pub fn reward(&self, alpha: Alpha) -> f64 {
        reward_of_means(self.mean_tc(), self.mean_es(), alpha)
    }
}

#[cfg(test)]
mod tests {
    use crate::reward::Alpha;
    use crate::scoring::ScoreMeans;

    #[test]
    fn es_is_averaged_over_judged_runs_and_unjudged_runs_are_counted() {
        let mut means = ScoreMeans::default();
        means.add(1.0, Some(0.25), false);
        means.add(0.0, Some(0.75), false);
        means.add(0.5, None, true);
        assert_eq!(means.n_runs(), 3);
        assert_eq!(means.mean_tc(), 0.5);
        assert_eq!(means.mean_es(), Some(0.5), "the unjudged run is not an ES of 0");
        assert_eq!(means.n_unjudged(), 1);
        assert_eq!(means.reward(Alpha::new(0.25).unwrap()), 0.25 * 0.5 + 0.75 * 0.5);
    }

    #[test]
    fn without_a_judged_run_there_is_no_es_and_the_reward_is_tc() {
        let mut means = ScoreMeans::default();
        assert_eq!((means.mean_tc(), means.mean_es()), (0.0, None));
        means.add(0.4, None, false);
        means.add(0.8, None, true);
        assert_eq!(means.mean_es(), None);
        assert!((means.reward(Alpha::HALF) - 0.6).abs() < 1e-12);
        assert_eq!(means.n_unjudged(), 1);
    }
}
