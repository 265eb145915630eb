//! Tool-invocation correctness (FlowScout Eq. 2 and 3) with its alignment.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use flowmem_model::ToolCall;

/// How TC compares calls.
///
/// Calls always match on the tool name and the canonical JSON of their arguments, and a
/// reference call's [`compare_args`](ToolCall::compare_args) restricts the compared
/// arguments (τ²-bench gives these per action). `ignore_args` additionally drops named
/// arguments of named tools from both sides before comparing, for arguments the
/// reference does not fix (a free-text `summary`, say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcConfig {
    /// Tool name → argument names left out of the comparison for that tool.
    #[serde(default)]
    pub ignore_args: BTreeMap<String, Vec<String>>,
}

impl TcConfig {
    /// The paper's comparison: every argument counts (apart from `compare_args`).
    #[must_use]
    pub fn exact() -> TcConfig {
        TcConfig { ignore_args: BTreeMap::new() }
    }
}

/// TC for one query, with the alignment that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TcScore {
    /// `LCS(π, π̂) / max(K, K̂)`, in `[0, 1]`; 1 when both logs are empty.
    pub tc: f64,
    /// `K`: the number of reference calls.
    pub n_reference: usize,
    /// `K̂`: the number of calls the run made.
    pub n_run: usize,
    /// Which calls matched, which are missing and which are extra.
    pub alignment: Alignment,
}

/// The alignment of a run's calls with the reference calls, from one longest common
/// subsequence.
///
/// Every reference index appears exactly once in `matched` or `missing`, and every run
/// index exactly once in `matched` or `extra`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alignment {
    /// Matched pairs in increasing order of both indices.
    pub matched: Vec<MatchedPair>,
    /// Indices of reference calls the run did not make (in order).
    pub missing: Vec<usize>,
    /// Indices of run calls that match no reference call (in order).
    pub extra: Vec<usize>,
}

/// One matched pair of the alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchedPair {
    /// Index into the reference log `π`.
    pub reference: usize,
    /// Index into the run's trace `π̂`.
    pub run: usize,
}

/// Scores a run's tool calls against the reference calls (FlowScout Eq. 2).
///
/// Two calls match when [`ToolCall::same_call`] holds after `cfg.ignore_args` has been
/// applied. Dividing the LCS by `max(K, K̂)` penalises both missing and redundant calls.
/// Two empty logs score 1.
///
/// # Example
///
/// ```
/// use flowmem_eval::{TcConfig, tool_correctness};
/// use flowmem_model::ToolCall;
/// use serde_json::json;
///
/// let reference = vec![
///     ToolCall::new("get_user", json!({"id": 1}))?,
///     ToolCall::new("cancel", json!({"order": "A"}))?,
/// ];
/// // The run repeats a lookup and never cancels.
/// let run = vec![
///     ToolCall::new("get_user", json!({"id": 1.0}))?,
///     ToolCall::new("get_user", json!({"id": 1}))?,
/// ];
/// let score = tool_correctness(&reference, &run, &TcConfig::exact());
/// assert_eq!(score.tc, 0.5);
/// assert_eq!(score.alignment.missing, vec![1]);
/// assert_eq!(score.alignment.extra, vec![1]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn tool_correctness(reference: &[ToolCall], run: &[ToolCall], cfg: &TcConfig) -> TcScore {
    let reference_view: Vec<Cow<'_, ToolCall>> = reference.iter().map(|c| strip(c, cfg)).collect();
    let run_view: Vec<Cow<'_, ToolCall>> = run.iter().map(|c| strip(c, cfg)).collect();
    let (n, m) = (reference.len(), run.len());
    // The match matrix is computed once: `same_call` canonicalises arguments, and the
    // table and the backtrack would otherwise ask for the same pair twice.
    let matches: Vec<bool> = reference_view.iter().flat_map(|r| run_view.iter().map(move |c| r.same_call(c))).collect();
    let is_match = |i: usize, j: usize| matches[i * m + j];

    // lengths[i][j] = LCS of reference[i..] and run[j..], stored row-major.
    let width = m + 1;
    let mut lengths = vec![0u32; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lengths[i * width + j] = if is_match(i, j) {
                lengths[(i + 1) * width + j + 1] + 1
            } else {
                lengths[(i + 1) * width + j].max(lengths[i * width + j + 1])
            };
        }
    }

    // Walking forward from the start gives the earliest matches, which reads naturally.
    let mut alignment = Alignment::default();
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if is_match(i, j) && lengths[i * width + j] == lengths[(i + 1) * width + j + 1] + 1 {
            alignment.matched.push(MatchedPair { reference: i, run: j });
            i += 1;
            j += 1;
        } else if lengths[(i + 1) * width + j] >= lengths[i * width + j + 1] {
            alignment.missing.push(i);
            i += 1;
        } else {
            alignment.extra.push(j);
            j += 1;
        }
    }
    alignment.missing.extend(i..n);
    alignment.extra.extend(j..m);

    let lcs = alignment.matched.len();
    let tc = if n == 0 && m == 0 { 1.0 } else { lcs as f64 / n.max(m) as f64 };
    TcScore { tc, n_reference: n, n_run: m, alignment }
}

/// Overall TC (FlowScout Eq. 3): the mean of per-query TC; `None` for no queries.
#[must_use]
pub fn mean_tc(scores: &[TcScore]) -> Option<f64> {
    if scores.is_empty() {
        return None;
    }
    Some(scores.iter().map(|s| s.tc).sum::<f64>() / scores.len() as f64)
}

fn strip<'a>(call: &'a ToolCall, cfg: &TcConfig) -> Cow<'a, ToolCall> {
    let Some(names) = cfg.ignore_args.get(&call.tool) else {
        return Cow::Borrowed(call);
    };
    if !names.iter().any(|name| call.args.contains_key(name)) && call.compare_args.is_none() {
        return Cow::Borrowed(call);
    }
    let mut owned = call.clone();
    for name in names {
        owned.args.remove(name);
    }
    if let Some(compare) = owned.compare_args.as_mut() {
        compare.retain(|name| !names.contains(name));
    }
    Cow::Owned(owned)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::{Value, json};

    use crate::tc::{MatchedPair, TcConfig, tool_correctness};
    use flowmem_model::ToolCall;

    fn call(tool: &str, args: Value) -> ToolCall {
        // The fixtures below only pass objects.
        ToolCall::new(tool, args).expect("object arguments")
    }

    /// Parses a compact log: `a(1) b(2)` means tool `a` with `{"x": 1}` and so on.
    fn log(text: &str) -> Vec<ToolCall> {
        text.split_whitespace()
            .map(|item| {
                let (tool, rest) = item.split_once('(').expect("tool(arg)");
                let arg: i64 = rest.trim_end_matches(')').parse().expect("integer arg");
                call(tool, json!({ "x": arg }))
            })
            .collect()
    }

    fn check(reference: &str, run: &str, tc: f64, missing: &[usize], extra: &[usize]) {
        let score = tool_correctness(&log(reference), &log(run), &TcConfig::exact());
        assert!((score.tc - tc).abs() < 1e-12, "{reference} vs {run}: tc {}", score.tc);
        assert_eq!(score.alignment.missing, missing, "missing, {reference} vs {run}");
        assert_eq!(score.alignment.extra, extra, "extra, {reference} vs {run}");
    }

    #[test]
    fn identical_logs_score_one() {
        check("a(1) b(2) c(3)", "a(1) b(2) c(3)", 1.0, &[], &[]);
    }

    #[test]
    fn both_empty_score_one() {
        check("", "", 1.0, &[], &[]);
    }

    #[test]
    fn one_side_empty_scores_zero() {
        check("a(1)", "", 0.0, &[0], &[]);
        check("", "a(1) a(1)", 0.0, &[], &[0, 1]);
    }

    #[test]
    fn missing_call_divides_by_reference_length() {
        check("a(1) b(2) c(3)", "a(1) c(3)", 2.0 / 3.0, &[1], &[]);
    }

    #[test]
    fn redundant_call_divides_by_run_length() {
        check("a(1) b(2)", "a(1) a(1) b(2) b(2)", 0.5, &[], &[1, 3]);
    }

    #[test]
    fn reordered_calls_keep_only_a_common_subsequence() {
        check("a(1) b(2) c(3)", "c(3) b(2) a(1)", 1.0 / 3.0, &[0, 1], &[1, 2]);
        check("a(1) b(2)", "b(2) a(1)", 0.5, &[0], &[1]);
    }

    #[test]
    fn same_name_different_arguments_do_not_match() {
        check("a(1) b(2)", "a(1) b(3)", 0.5, &[1], &[1]);
    }

    #[test]
    fn alignment_names_the_matched_pairs() {
        let score = tool_correctness(&log("a(1) b(2) c(3)"), &log("x(0) a(1) c(3)"), &TcConfig::exact());
        assert_eq!(
            score.alignment.matched,
            vec![MatchedPair { reference: 0, run: 1 }, MatchedPair { reference: 2, run: 2 }]
        );
        assert_eq!((score.n_reference, score.n_run), (3, 3));
    }

    #[test]
    fn argument_order_and_number_form_do_not_matter() {
        let reference = vec![call("f", json!({"a": 1, "b": [1, 2]}))];
        let run = vec![call("f", json!({"b": [1.0, 2], "a": 1.0}))];
        assert_eq!(tool_correctness(&reference, &run, &TcConfig::exact()).tc, 1.0);
    }

    #[test]
    fn compare_args_from_the_reference_are_honoured() {
        let mut reference = call("transfer", json!({"summary": "user wants a refund", "id": 7}));
        reference.compare_args = Some(vec!["id".into()]);
        let run = vec![call("transfer", json!({"summary": "refund please", "id": 7}))];
        assert_eq!(tool_correctness(&[reference.clone()], &run, &TcConfig::exact()).tc, 1.0);
        reference.compare_args = Some(vec![]);
        let other_id = vec![call("transfer", json!({"summary": "x", "id": 8}))];
        assert_eq!(tool_correctness(&[reference], &other_id, &TcConfig::exact()).tc, 1.0);
    }

    #[test]
    fn ignored_arguments_are_off_by_default_and_apply_per_tool() {
        let reference = vec![call("transfer", json!({"summary": "a"})), call("note", json!({"summary": "a"}))];
        let run = vec![call("transfer", json!({"summary": "b"})), call("note", json!({"summary": "b"}))];
        assert_eq!(tool_correctness(&reference, &run, &TcConfig::exact()).tc, 0.0);
        let cfg = TcConfig { ignore_args: BTreeMap::from([("transfer".to_string(), vec!["summary".to_string()])]) };
        assert_eq!(tool_correctness(&reference, &run, &cfg).tc, 0.5);
    }

    #[test]
    fn ignoring_an_argument_that_compare_args_names_drops_it_too() {
        let mut reference = call("f", json!({"a": 1, "b": 2}));
        reference.compare_args = Some(vec!["a".into(), "b".into()]);
        let run = vec![call("f", json!({"a": 1, "b": 3}))];
        let cfg = TcConfig { ignore_args: BTreeMap::from([("f".to_string(), vec!["b".to_string()])]) };
        assert_eq!(tool_correctness(&[reference], &run, &cfg).tc, 1.0);
    }

    fn arb_log() -> impl Strategy<Value = Vec<ToolCall>> {
        let arb_call = ("[abc]", 0i64..3, prop::bool::ANY).prop_map(|(tool, x, as_float)| {
            let arg = if as_float { json!(x as f64) } else { json!(x) };
            call(&tool, json!({ "x": arg }))
        });
        prop::collection::vec(arb_call, 0..9)
    }

    /// The textbook recursion over suffixes, memoised; independent of the table above.
    fn brute_force_lcs(a: &[ToolCall], b: &[ToolCall]) -> usize {
        fn go(a: &[ToolCall], b: &[ToolCall], memo: &mut BTreeMap<(usize, usize), usize>) -> usize {
            let key = (a.len(), b.len());
            if let Some(&known) = memo.get(&key) {
                return known;
            }
            let res = match (a.split_first(), b.split_first()) {
                (Some((x, rest_a)), Some((y, rest_b))) => {
                    let skip = go(rest_a, b, memo).max(go(a, rest_b, memo));
                    if x.same_call(y) { skip.max(1 + go(rest_a, rest_b, memo)) } else { skip }
                }
                _ => 0,
            };
            memo.insert(key, res);
            res
        }
        go(a, b, &mut BTreeMap::new())
    }

    proptest! {
        #[test]
        fn tc_is_between_zero_and_one(reference in arb_log(), run in arb_log()) {
            let tc = tool_correctness(&reference, &run, &TcConfig::exact()).tc;
            prop_assert!((0.0..=1.0).contains(&tc));
        }

        #[test]
        fn a_log_against_itself_scores_one(calls in arb_log()) {
            prop_assert_eq!(tool_correctness(&calls, &calls, &TcConfig::exact()).tc, 1.0);
        }

        #[test]
        fn tc_is_symmetric(a in arb_log(), b in arb_log()) {
            let ab = tool_correctness(&a, &b, &TcConfig::exact());
            let ba = tool_correctness(&b, &a, &TcConfig::exact());
            prop_assert_eq!(ab.tc, ba.tc);
            prop_assert_eq!(ab.alignment.matched.len(), ba.alignment.matched.len());
        }

        #[test]
        fn lcs_is_the_longest(a in arb_log(), b in arb_log()) {
            let score = tool_correctness(&a, &b, &TcConfig::exact());
            prop_assert_eq!(score.alignment.matched.len(), brute_force_lcs(&a, &b));
        }

        #[test]
        fn alignment_partitions_both_logs(a in arb_log(), b in arb_log()) {
            let score = tool_correctness(&a, &b, &TcConfig::exact());
            let al = &score.alignment;
            prop_assert_eq!(al.matched.len() + al.missing.len(), a.len());
            prop_assert_eq!(al.matched.len() + al.extra.len(), b.len());
            for pair in &al.matched {
                prop_assert!(a[pair.reference].same_call(&b[pair.run]));
            }
            for w in al.matched.windows(2) {
                prop_assert!(w[0].reference < w[1].reference && w[0].run < w[1].run);
            }
        }
    }
}
