//! Deciding a branch's route by the mined queries nearest to the query.
//!
//! Mining stores, on a branch whose records showed that this works (leave-one-out), the
//! words of each mined query that took each route ([`NodeKind::Branch`]'s `nearest`);
//! the executor then takes the route most of the [`NEAREST_VOTES`] nearest of them
//! took. Mining's leave-one-out check and the executor vote with this one function, so
//! what mining measured is what runs.
//!
//! [`NodeKind::Branch`]: crate::NodeKind::Branch

use std::collections::BTreeSet;

use crate::query_words;

/// How many of the nearest mined queries vote on a route.
pub const NEAREST_VOTES: usize = 5;

/// The words of a query that route decisions compare: [`query_words`] of letters only,
/// at least three long, sorted (ids, numbers and short words say little about what a
/// task needs, and differ between every pair of queries).
///
/// # Example
///
/// ```
/// use flowmem_model::decision_words;
///
/// let words = decision_words("Return order #W123, the 2 lamps, to me.");
/// assert_eq!(words, ["lamps", "order", "return", "the"]);
/// ```
#[must_use]
pub fn decision_words(query: &str) -> Vec<String> {
    let words: BTreeSet<String> = query_words(query)
        .into_iter()
        .filter(|word| word.chars().count() >= 3 && word.chars().all(char::is_alphabetic))
        .collect();
    words.into_iter().collect()
}

/// The outcome of [`nearest_route`]: the route and how many of the nearest voted for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NearestVote<'a> {
    /// The route's label.
    pub route: &'a str,
    /// The nearest examples that took it.
    pub votes: usize,
    /// The nearest examples that voted: [`NEAREST_VOTES`], or fewer when fewer share a
    /// word with the query.
    pub of: usize,
}

/// The route most of the [`NEAREST_VOTES`] examples nearest to `words` took.
///
/// `examples` are `(route, words)` pairs, each the sorted [`decision_words`] of one
/// mined query and the route it took. Nearness is the Jaccard similarity of the word
/// sets, and only examples that share a word with `words` vote; equally near examples
/// keep their order in `examples`. A tie in votes goes to the route whose voters are
/// nearer in sum, then to the route that comes first. `None` when no example shares a
/// word with `words`.
///
/// # Example
///
/// ```
/// use flowmem_model::{decision_words, nearest_route};
///
/// let cancel = decision_words("cancel my pending order");
/// let keep = decision_words("where is my order");
/// let examples = [("cancel_order", &cancel[..]), ("skip", &keep[..])];
/// let vote = nearest_route(&decision_words("please cancel the order"), examples).unwrap();
/// // One vote each; the tie goes to the nearer: 2 shared words of 5, against 1 of 5.
/// assert_eq!((vote.route, vote.votes, vote.of), ("cancel_order", 1, 2));
/// ```
#[must_use]
pub fn nearest_route<'a>(
    words: &[String],
    examples: impl IntoIterator<Item = (&'a str, &'a [String])>,
) -> Option<NearestVote<'a>> {
    // An example that shares no word with the query says nothing about it: it never votes.
    let mut near: Vec<(f64, &'a str)> = examples
        .into_iter()
        .map(|(route, example)| (jaccard(words, example), route))
        .filter(|(similarity, _)| *similarity > 0.0)
        .collect();
    // Stable: equally near examples keep their order.
    near.sort_by(|a, b| b.0.total_cmp(&a.0));
    near.truncate(NEAREST_VOTES);
    if near.is_empty() {
        return None;
    }
    // Per route, in order of first appearance: votes and summed similarity.
    let mut tally: Vec<(&'a str, usize, f64)> = Vec::new();
    for &(similarity, route) in &near {
        match tally.iter_mut().find(|(seen, ..)| *seen == route) {
            Some(entry) => {
                entry.1 += 1;
                entry.2 += similarity;
            }
            None => tally.push((route, 1, similarity)),
        }
    }
    let mut best = tally[0];
    for &entry in &tally[1..] {
        if entry.1 > best.1 || (entry.1 == best.1 && entry.2 > best.2) {
            best = entry;
        }
    }
    Some(NearestVote { route: best.0, votes: best.1, of: near.len() })
}

/// The Jaccard similarity of two sorted, duplicate-free word lists.
fn jaccard(a: &[String], b: &[String]) -> f64 {
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - shared;
    if union == 0 { 0.0 } else { shared as f64 / union as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        decision_words(text)
    }

    #[test]
    fn the_majority_of_the_five_nearest_wins() {
        let near = [
            words("exchange the blue lamp"),
            words("exchange the red lamp"),
            words("exchange the lamp now"),
            words("return the lamp"),
            words("return the blue lamp"),
            words("cancel everything about flights today"),
        ];
        let examples = [
            ("exchange", &near[0][..]),
            ("exchange", &near[1][..]),
            ("exchange", &near[2][..]),
            ("return", &near[3][..]),
            ("return", &near[4][..]),
            ("cancel", &near[5][..]),
        ];
        let vote = nearest_route(&words("exchange the green lamp"), examples).unwrap();
        assert_eq!(vote, NearestVote { route: "exchange", votes: 3, of: 5 });
    }

    #[test]
    fn examples_sharing_no_word_do_not_vote() {
        let (near, far) = (words("return the lamp"), words("cancel my flights today"));
        let examples = [("return", &near[..]), ("cancel", &far[..]), ("cancel", &far[..]), ("cancel", &far[..])];
        let vote = nearest_route(&words("return a lamp, please"), examples).unwrap();
        assert_eq!(vote, NearestVote { route: "return", votes: 1, of: 1 });
    }

    #[test]
    fn no_shared_word_means_no_vote() {
        let example = words("cancel my flight");
        assert_eq!(nearest_route(&words("return a lamp"), [("cancel", &example[..])]), None);
        assert_eq!(nearest_route(&words("return a lamp"), []), None);
    }

    #[test]
    fn jaccard_counts_shared_words_over_all_words() {
        assert!((jaccard(&words("alpha beta gamma"), &words("beta gamma delta")) - 0.5).abs() < 1e-12);
        assert!(jaccard(&[], &[]).abs() < f64::EPSILON);
    }
}
