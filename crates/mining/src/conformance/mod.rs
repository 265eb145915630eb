//! Conformance checking: how well a Petri net fits an event log, with PM4Py 2.7.23.11
//! parity.
//!
//! The façade follows PM4Py's layout: [`fitness`] with a [`FitnessVariant`] (token-based
//! replay or alignments) and [`precision`] with a [`PrecisionVariant`] (ETConformance,
//! token-based). [`token_replay`] and [`align_log`] give the per-variant details: token
//! counts, alignment costs and moves. Everything works per variant (unique trace) and
//! weights by the variant's count, as PM4Py does.

mod alignments;
mod guard;
mod net;
mod precision;
mod token_replay;

use serde::Serialize;

use crate::conformance::alignments::AlignFailure;
pub use crate::conformance::alignments::{DEFAULT_MAX_STATES, MOVE_COST, Move, SILENT_COST};
pub use crate::conformance::guard::{Guard, GuardStep};
use crate::conformance::net::Compiled;
use crate::conformance::token_replay::{Options, Replayer};
use crate::{EventLog, PetriNet};

/// How to measure fitness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitnessVariant {
    /// Token-based replay: `½(1 − missing/consumed) + ½(1 − remaining/produced)` over the log.
    TokenReplay,
    /// Alignments: `1 − Σ cost / Σ (|trace| · 10000 + best-worst cost)` over the log.
    Alignments,
}

/// How to measure precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrecisionVariant {
    /// ETConformance on token-based replay of the log's prefixes (PM4Py's default).
    EtcToken,
}

/// Why a conformance figure could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConformanceError {
    /// The net's final marking cannot be reached, so nothing aligns.
    #[error("the final marking of the net cannot be reached from its initial marking{}", trace_note(.trace))]
    Unreachable {
        /// The trace being aligned, when it was not the empty one.
        trace: Option<Vec<String>>,
    },
    /// An alignment visited more states than allowed.
    #[error("aligning trace {trace:?} visited more than {limit} states")]
    TooManyStates {
        /// The trace.
        trace: Vec<String>,
        /// The bound ([`AlignConfig::max_states`]).
        limit: usize,
    },
    /// A place would hold more than 255 tokens.
    #[error("the net is not bounded enough to align: a place would hold more than 255 tokens")]
    Unbounded,
}

fn trace_note(trace: &Option<Vec<String>>) -> String {
    trace.as_ref().map_or_else(String::new, |t| format!(" while aligning trace {t:?}"))
}

/// Options of [`align_log`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlignConfig {
    /// The most states one alignment may visit ([`DEFAULT_MAX_STATES`] is a good bound).
    pub max_states: usize,
    /// Whether to keep each variant's moves (the costs are always kept).
    pub keep_moves: bool,
}

/// Token-based replay of a log: totals over cases and one entry per variant.
#[derive(Debug, Clone, Serialize)]
pub struct TokenReplayReport {
    /// Cases in the log.
    pub cases: u64,
    /// Cases with no missing and no remaining token.
    pub fitting_cases: u64,
    /// `½(1 − missing/consumed) + ½(1 − remaining/produced)` over all cases.
    pub log_fitness: f64,
    /// The mean of the cases' own fitness.
    pub average_trace_fitness: f64,
    /// Tokens that had to be added, over all cases.
    pub missing: u64,
    /// Tokens consumed, over all cases.
    pub consumed: u64,
    /// Tokens left over at the end, over all cases.
    pub remaining: u64,
    /// Tokens produced, over all cases.
    pub produced: u64,
    /// One entry per variant, in the order of [`EventLog::variants`].
    pub variants: Vec<VariantReplay>,
}

/// The token-based replay of one variant (the figures of one of its cases).
#[derive(Debug, Clone, Serialize)]
pub struct VariantReplay {
    /// How many cases follow the variant.
    pub count: u64,
    /// No missing and no remaining token.
    pub fit: bool,
    /// `½(1 − m/c) + ½(1 − r/p)`.
    pub fitness: f64,
    /// Missing tokens.
    pub missing: u64,
    /// Consumed tokens.
    pub consumed: u64,
    /// Remaining tokens.
    pub remaining: u64,
    /// Produced tokens.
    pub produced: u64,
}

/// Alignments of a log: totals over cases and one entry per variant.
#[derive(Debug, Clone, Serialize)]
pub struct AlignmentReport {
    /// The cost of aligning the empty trace (the cheapest run of the model).
    pub best_worst_cost: u64,
    /// The mean of the cases' alignment fitness.
    pub average_fitness: f64,
    /// The share of cases with fitness 1, in percent.
    pub percentage_fitting: f64,
    /// `1 − Σ cost / Σ (|trace| · 10000 + best-worst cost)` over all cases.
    pub log_fitness: f64,
    /// One entry per variant, in the order of [`EventLog::variants`].
    pub variants: Vec<VariantAlignment>,
}

/// The optimal alignment of one variant.
#[derive(Debug, Clone, Serialize)]
pub struct VariantAlignment {
    /// How many cases follow the variant.
    pub count: u64,
    /// The raw cost: 10000 per log or model move, 1 per silent move.
    pub cost: u64,
    /// The number of log and model moves (`cost / 10000`).
    pub deviations: u64,
    /// `1 − deviations / (|trace| + best-worst cost / 10000)`, as PM4Py computes it
    /// (integer divisions); 1 for the empty trace on a model with a silent run, where
    /// PM4Py divides by zero and says 0.
    pub fitness: f64,
    /// The moves, when asked for ([`AlignConfig::keep_moves`]).
    pub moves: Vec<Move>,
}

/// The fitness of `log` on `net`, by `variant`.
///
/// # Errors
///
/// For [`FitnessVariant::Alignments`], as [`align_log`]; token replay cannot fail.
///
/// # Example
///
/// ```
/// use flowmem_mining::{EventLogBuilder, FitnessVariant, ProcessTree, fitness, tree_to_petri_net};
///
/// let net = tree_to_petri_net(&ProcessTree::parse("->( 'a', X( 'b', 'c' ) )")?);
/// let mut builder = EventLogBuilder::new();
/// builder.push_trace(["a", "b"]);
/// builder.push_trace(["a", "d"]);
/// let log = builder.build();
/// // `a d` needs two deviations (log move `d`, model move `b`) out of 2 + 2 moves at most.
/// assert_eq!(fitness(&log, &net, FitnessVariant::Alignments)?, 1.0 - 20_000.0 / 80_000.0);
/// assert!(fitness(&log, &net, FitnessVariant::TokenReplay)? < 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn fitness(log: &EventLog, net: &PetriNet, variant: FitnessVariant) -> Result<f64, ConformanceError> {
    Ok(match variant {
        FitnessVariant::TokenReplay => token_replay(log, net).log_fitness,
        FitnessVariant::Alignments => {
            align_log(log, net, AlignConfig { max_states: DEFAULT_MAX_STATES, keep_moves: false })?.log_fitness
        }
    })
}

/// The precision of `net` with respect to `log`, by `variant`.
///
/// # Example
///
/// ```
/// use flowmem_mining::{EventLogBuilder, PrecisionVariant, ProcessTree, precision, tree_to_petri_net};
///
/// let mut builder = EventLogBuilder::new();
/// builder.push_trace(["a", "b"]);
/// let log = builder.build();
/// let exact = tree_to_petri_net(&ProcessTree::parse("->( 'a', 'b' )")?);
/// let loose = tree_to_petri_net(&ProcessTree::parse("->( 'a', X( 'b', 'c' ) )")?);
/// assert_eq!(precision(&log, &exact, PrecisionVariant::EtcToken), 1.0);
/// assert!(precision(&log, &loose, PrecisionVariant::EtcToken) < 1.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn precision(log: &EventLog, net: &PetriNet, variant: PrecisionVariant) -> f64 {
    let compiled = Compiled::new(net, log);
    match variant {
        PrecisionVariant::EtcToken => precision::etc_token(log, &compiled),
    }
}

/// Token-based replay of every variant of `log` on `net`, with PM4Py's default options
/// (remaining tokens count against fitness; silent transitions are walked through to
/// enable transitions and to reach the final marking).
#[must_use]
pub fn token_replay(log: &EventLog, net: &PetriNet) -> TokenReplayReport {
    let compiled = Compiled::new(net, log);
    let replayer = Replayer::new(&compiled, Options::FITNESS);
    let mut report = TokenReplayReport {
        cases: log.n_cases(),
        fitting_cases: 0,
        log_fitness: 0.0,
        average_trace_fitness: 0.0,
        missing: 0,
        consumed: 0,
        remaining: 0,
        produced: 0,
        variants: Vec::with_capacity(log.variants().len()),
    };
    let mut sum_fitness = 0.0;
    for variant in log.variants() {
        let r = replayer.replay(&variant.activities);
        let n = variant.count;
        report.fitting_cases += if r.fit { n } else { 0 };
        report.missing += r.missing * n;
        report.consumed += r.consumed * n;
        report.remaining += r.remaining * n;
        report.produced += r.produced * n;
        sum_fitness += r.fitness * n as f64;
        report.variants.push(VariantReplay {
            count: n,
            fit: r.fit,
            fitness: r.fitness,
            missing: r.missing,
            consumed: r.consumed,
            remaining: r.remaining,
            produced: r.produced,
        });
    }
    if report.cases > 0 && report.consumed > 0 && report.produced > 0 {
        report.average_trace_fitness = sum_fitness / report.cases as f64;
        report.log_fitness = 0.5 * (1.0 - report.missing as f64 / report.consumed as f64)
            + 0.5 * (1.0 - report.remaining as f64 / report.produced as f64);
    }
    report
}

/// Optimal alignments of every variant of `log` on `net` (standard costs).
///
/// # Errors
///
/// [`ConformanceError::Unreachable`] when the final marking cannot be reached,
/// [`ConformanceError::TooManyStates`] when a variant needs more than
/// [`AlignConfig::max_states`] states, [`ConformanceError::Unbounded`] when a place would
/// hold more than 255 tokens.
pub fn align_log(log: &EventLog, net: &PetriNet, config: AlignConfig) -> Result<AlignmentReport, ConformanceError> {
    let compiled = Compiled::new(net, log);
    let names = log.activities();
    let failure = |failure: AlignFailure, trace: &[u32]| {
        let trace: Vec<String> = trace.iter().map(|&a| names[a as usize].clone()).collect();
        match failure {
            AlignFailure::Unreachable => ConformanceError::Unreachable { trace: Some(trace) },
            AlignFailure::TooManyStates => ConformanceError::TooManyStates { trace, limit: config.max_states },
            AlignFailure::Unbounded => ConformanceError::Unbounded,
        }
    };
    let best_worst_cost = alignments::align(&compiled, &[], names, config.max_states)
        .map_err(|f| match f {
            AlignFailure::Unreachable => ConformanceError::Unreachable { trace: None },
            other => failure(other, &[]),
        })?
        .cost;
    let mut variants = Vec::with_capacity(log.variants().len());
    let (mut sum_fitness, mut sum_cost, mut sum_bound, mut fitting) = (0.0, 0u64, 0u64, 0u64);
    for variant in log.variants() {
        let aligned = alignments::align(&compiled, &variant.activities, names, config.max_states)
            .map_err(|f| failure(f, &variant.activities))?;
        let bound = variant.activities.len() as u64 * MOVE_COST + best_worst_cost;
        let deviations = aligned.cost / MOVE_COST;
        let denominator = bound / MOVE_COST;
        // PM4Py gives 0 when the denominator is 0, which happens only for the empty trace on
        // a model with a silent run: that alignment has no deviation, so it fits.
        let fitness = if denominator > 0 { 1.0 - deviations as f64 / denominator as f64 } else { 1.0 };
        let n = variant.count;
        sum_fitness += fitness * n as f64;
        sum_cost += aligned.cost * n;
        sum_bound += bound * n;
        fitting += if fitness == 1.0 { n } else { 0 };
        variants.push(VariantAlignment {
            count: n,
            cost: aligned.cost,
            deviations,
            fitness,
            moves: if config.keep_moves { aligned.moves } else { Vec::new() },
        });
    }
    let n_cases = log.n_cases();
    let (average_fitness, percentage_fitting, log_fitness) = if n_cases > 0 {
        (
            sum_fitness / n_cases as f64,
            100.0 * fitting as f64 / n_cases as f64,
            if sum_bound > 0 { 1.0 - sum_cost as f64 / sum_bound as f64 } else { 0.0 },
        )
    } else {
        (0.0, 0.0, 0.0)
    };
    Ok(AlignmentReport { best_worst_cost, average_fitness, percentage_fitting, log_fitness, variants })
}
