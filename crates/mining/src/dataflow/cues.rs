//! Decision mining on queries: the words without which the logs never called a tool.
//!
//! For each tool called in at least [`MIN_CUE_RECORDS`] records, a word is a cue when
//! at least [`CUE_RECALL`] of those records' queries hold it, at most [`CUE_MAX_SHARE`]
//! of all the records' queries do (a word nearly every query holds says nothing by its
//! absence), and chance explains it poorly: if a share `p` of all queries hold the word,
//! the probability that `k` or more of the tool's `n` queries hold it anyway (the
//! binomial tail) is at most [`MAX_CUE_CHANCE`]. Words are
//! [`decision_words`](flowmem_model::decision_words). (On τ²-bench airline's 25 training
//! records no word passes: `that` held in 10 of 10 reservation lookups, and the held-out
//! records show it was chance.) On τ²-bench retail, `exchange` is the cue of
//! `exchange_delivered_order_items`, `return` of `return_delivered_order_items` and
//! `cancel` of `cancel_pending_order`; a query with none of them did not call the tool.

use std::collections::{BTreeMap, BTreeSet};

/// The fewest records calling a tool for its cues to be mined.
pub const MIN_CUE_RECORDS: usize = 5;

/// The largest probability that the tool's queries hold a cue as often by chance.
pub const MAX_CUE_CHANCE: f64 = 0.001;

/// The least share of a tool's records whose queries hold a cue.
pub const CUE_RECALL: f64 = 0.9;

/// The largest share of all records whose queries may hold a cue.
pub const CUE_MAX_SHARE: f64 = 0.7;

/// Per tool, its cue words, sorted; tools without cues are left out. `cases` are the
/// records' tools and query words ([`Dataflow::cases`](crate::Dataflow)).
pub(crate) fn mine_cues(cases: &[(BTreeSet<String>, Vec<String>)]) -> BTreeMap<String, Vec<String>> {
    let words: Vec<&Vec<String>> = cases.iter().map(|(_, words)| words).collect();
    let mut share: BTreeMap<&str, usize> = BTreeMap::new();
    for word in words.iter().copied().flatten() {
        *share.entry(word).or_default() += 1;
    }
    let mut callers: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (record_idx, (tools, _)) in cases.iter().enumerate() {
        for tool in tools {
            callers.entry(tool).or_default().push(record_idx);
        }
    }
    let mut res = BTreeMap::new();
    for (tool, calling) in callers {
        if calling.len() < MIN_CUE_RECORDS {
            continue;
        }
        let mut held: BTreeMap<&str, usize> = BTreeMap::new();
        for word in calling.iter().flat_map(|&record_idx| words[record_idx].iter()) {
            *held.entry(word).or_default() += 1;
        }
        let cues: Vec<String> = held
            .into_iter()
            .filter(|&(word, count)| {
                let p = share[word] as f64 / cases.len() as f64;
                count as f64 >= CUE_RECALL * calling.len() as f64
                    && p <= CUE_MAX_SHARE
                    && binomial_tail(calling.len(), count, p) <= MAX_CUE_CHANCE
            })
            .map(|(word, _)| word.to_owned())
            .collect();
        if !cues.is_empty() {
            res.insert(tool.to_owned(), cues);
        }
    }
    res
}

/// The probability of `k` or more successes in `n` trials of probability `p`.
fn binomial_tail(n: usize, k: usize, p: f64) -> f64 {
    // C(n, j) p^j (1-p)^(n-j), summed from j = k, in logarithms so large `n` stays finite.
    let ln_choose = |j: usize| -> f64 { (1..=j).map(|i| ((n - j + i) as f64 / i as f64).ln()).sum() };
    (k..=n)
        .map(|j| {
            // 0^0 is 1: a power with exponent 0 adds nothing.
            let power = |base: f64, exponent: usize| if exponent == 0 { 0.0 } else { exponent as f64 * base.ln() };
            (ln_choose(j) + power(p, j) + power(1.0 - p, n - j)).exp()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::binomial_tail;

    #[test]
    fn the_binomial_tail_matches_hand_sums() {
        // P(X >= 9 | n = 10, p = 0.5) = (10 + 1) / 1024.
        assert!((binomial_tail(10, 9, 0.5) - 11.0 / 1024.0).abs() < 1e-12);
        assert!((binomial_tail(3, 0, 0.3) - 1.0).abs() < 1e-12);
        assert!((binomial_tail(4, 4, 1.0) - 1.0).abs() < 1e-12);
        assert_eq!(binomial_tail(4, 1, 0.0), 0.0);
    }
}
