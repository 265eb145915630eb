//! The BM25 retrieval index: an in-memory inverted index over the stored workflows,
//! kept in step with the SQLite file through its `index_log` table.
//!
//! Every insert and delete in the store appends to `index_log` in the same transaction.
//! Before a search the index reads the log entries it has not seen (its own process's
//! and every other process's), so it always answers for the committed state of the file
//! at the time of the search. The first search loads the whole log.
//!
//! Scoring is Okapi BM25 with `k1 = 1.2`, `b = 0.75` and the always-positive IDF
//! `ln(1 + (N − df + 0.5) / (df + 0.5))`, over the tokens of the description (counted
//! twice, so the description weighs double) and of the steps (state, reasoning, tool
//! name, argument names and values). Tokens are lowercase alphanumeric runs with a light
//! plural stemmer (`orders` → `order`, `entries` → `entry`).

use rusqlite::Connection;
use rustc_hash::FxHashMap as HashMap;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;
/// How many times a description token counts.
const DESCRIPTION_WEIGHT: u32 = 2;

/// One document of the index.
#[derive(Debug, Clone)]
struct Doc {
    pk: i64,
    len: u32,
    scope: u32,
    alive: bool,
}

/// The postings of one exact scope: a scope filter then touches only the lists of the
/// scopes it admits, and BM25 statistics are those of the filtered collection.
#[derive(Debug, Default)]
struct Partition {
    // Term id → (document index, term frequency), in document order.
    postings: HashMap<u32, Vec<(u32, u32)>>,
    n_alive: u32,
    total_len_alive: u64,
}

/// The in-memory inverted index.
#[derive(Debug, Default)]
pub(crate) struct SearchIndex {
    docs: Vec<Doc>,
    doc_of_pk: HashMap<i64, u32>,
    // Interned (site, domain) pairs; a doc's `scope` indexes both vectors.
    scopes: Vec<(Option<String>, Option<String>)>,
    partitions: Vec<Partition>,
    scope_ids: HashMap<(Option<String>, Option<String>), u32>,
    // Interned terms, shared by every partition.
    term_ids: HashMap<String, u32>,
    n_dead: u32,
    // The last `index_log.seq` applied.
    last_seq: i64,
}

/// A ranked match: the workflow's primary key and its BM25 score.
pub(crate) type Ranked = (i64, f64);

impl SearchIndex {
    /// The last `index_log.seq` committed in `conn`'s file.
    pub(crate) fn log_head(conn: &Connection) -> rusqlite::Result<i64> {
        // Runs before every search: a cached statement saves parsing it each time.
        conn.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM index_log")?.query_row([], |row| row.get(0))
    }

    /// The last `index_log.seq` applied.
    pub(crate) fn last_seq(&self) -> i64 {
        self.last_seq
    }

    /// Applies every `index_log` entry after the last one seen.
    pub(crate) fn sync(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        if SearchIndex::log_head(conn)? <= self.last_seq {
            return Ok(());
        }
        let mut stmt = conn.prepare_cached(
            "SELECT l.seq, l.pk, l.op, w.description, w.index_text, w.site, w.domain
             FROM index_log AS l LEFT JOIN workflows AS w ON w.pk = l.pk
             WHERE l.seq > ?1 ORDER BY l.seq",
        )?;
        let mut rows = stmt.query([self.last_seq])?;
        while let Some(row) = rows.next()? {
            let seq: i64 = row.get(0)?;
            let pk: i64 = row.get(1)?;
            let op: String = row.get(2)?;
            self.last_seq = seq;
            if op == "delete" {
                self.remove(pk);
                continue;
            }
            // An insert whose row is gone was deleted later in the log; the delete entry
            // follows, so there is nothing to index now.
            let Some(description) = row.get::<_, Option<String>>(3)? else {
                continue;
            };
            let steps_text: String = row.get::<_, Option<String>>(4)?.unwrap_or_default();
            let scope = (row.get::<_, Option<String>>(5)?, row.get::<_, Option<String>>(6)?);
            self.insert(pk, &description, &steps_text, scope);
        }
        let n_alive = self.docs.len() as u32 - self.n_dead;
        if self.n_dead > 1024 && self.n_dead > n_alive / 4 {
            self.compact();
        }
        Ok(())
    }

    /// The best `limit` alive documents for `query` whose scope passes `filter`.
    pub(crate) fn search(&self, query: &str, filter: (Option<&str>, Option<&str>), limit: usize) -> Vec<Ranked> {
        let admitted: Vec<&Partition> = self
            .scopes
            .iter()
            .zip(&self.partitions)
            .filter(|((site, domain), _)| {
                filter.0.is_none_or(|want| site.as_deref() == Some(want))
                    && filter.1.is_none_or(|want| domain.as_deref() == Some(want))
            })
            .map(|(_, partition)| partition)
            .collect();
        let n_alive: u32 = admitted.iter().map(|p| p.n_alive).sum();
        if n_alive == 0 || limit == 0 {
            return Vec::new();
        }
        let total_len: u64 = admitted.iter().map(|p| p.total_len_alive).sum();
        let mut terms: Vec<u32> = Vec::new();
        for_each_term(query, &mut String::new(), |term| {
            if let Some(&id) = self.term_ids.get(term) {
                terms.push(id);
            }
        });
        terms.sort_unstable();
        terms.dedup();
        let n = n_alive as f32;
        let avg_len = (total_len as f32 / n).max(1.0);
        // Each document's length normalisation, once per search; a dead document's is
        // infinite, so that it scores 0 and the inner loop needs no branch.
        let (base, per_token) = (K1 * (1.0 - B), K1 * B / avg_len);
        let norms: Vec<f32> = self
            .docs
            .iter()
            .map(|doc| if doc.alive { base + per_token * doc.len as f32 } else { f32::INFINITY })
            .collect();
        // Dense accumulators: a hash map costs more than zeroing one float per document.
        let mut scores: Vec<f32> = vec![0.0; self.docs.len()];
        for term in &terms {
            let lists: Vec<&Vec<(u32, u32)>> = admitted.iter().filter_map(|p| p.postings.get(term)).collect();
            // Lists hold dead documents until compaction; they count in df, a small bias
            // that compaction removes. df is capped at N so that the IDF stays positive
            // (many dead documents could push df past N) and no term lowers a score.
            let df: usize = lists.iter().map(|list| list.len()).sum();
            if df == 0 {
                continue;
            }
            let df = (df as f32).min(n);
            let weight = (1.0 + (n - df + 0.5) / (df + 0.5)).ln() * (K1 + 1.0);
            for list in lists {
                for &(doc_idx, tf) in list {
                    let tf = tf as f32;
                    scores[doc_idx as usize] += weight * tf / (tf + norms[doc_idx as usize]);
                }
            }
        }
        let mut ranked: Vec<(f32, u32)> = scores
            .iter()
            .enumerate()
            .filter(|&(_, &score)| score > 0.0)
            .map(|(doc_idx, &score)| (score, doc_idx as u32))
            .collect();
        // Best first; ties go to the older workflow (smaller doc index), so the order is
        // deterministic.
        let by_rank = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if ranked.len() > limit {
            ranked.select_nth_unstable_by(limit - 1, by_rank);
            ranked.truncate(limit);
        }
        ranked.sort_by(by_rank);
        ranked.into_iter().map(|(score, doc_idx)| (self.docs[doc_idx as usize].pk, f64::from(score))).collect()
    }

    fn insert(&mut self, pk: i64, description: &str, steps_text: &str, scope: (Option<String>, Option<String>)) {
        if self.doc_of_pk.contains_key(&pk) {
            return;
        }
        let doc_idx = u32::try_from(self.docs.len()).unwrap_or(u32::MAX);
        // (term id, weight) per occurrence, then summed per term; a sorted vector beats a
        // map for the few dozen terms of a workflow.
        let mut counts: Vec<(u32, u32)> = Vec::new();
        let mut buf = String::new();
        for (text, weight) in [(description, DESCRIPTION_WEIGHT), (steps_text, 1)] {
            for_each_term(text, &mut buf, |term| {
                let id = match self.term_ids.get(term) {
                    Some(&id) => id,
                    None => {
                        let id = u32::try_from(self.term_ids.len()).unwrap_or(u32::MAX);
                        self.term_ids.insert(term.to_owned(), id);
                        id
                    }
                };
                counts.push((id, weight));
            });
        }
        counts.sort_unstable_by_key(|&(id, _)| id);
        counts.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                earlier.1 += later.1;
            }
            same
        });
        let len: u32 = counts.iter().map(|&(_, tf)| tf).sum();
        let next_scope = u32::try_from(self.scopes.len()).unwrap_or(u32::MAX);
        let scope_id = *self.scope_ids.entry(scope.clone()).or_insert_with(|| {
            self.scopes.push(scope);
            self.partitions.push(Partition::default());
            next_scope
        });
        let partition = &mut self.partitions[scope_id as usize];
        for (term, tf) in counts {
            partition.postings.entry(term).or_default().push((doc_idx, tf));
        }
        partition.n_alive += 1;
        partition.total_len_alive += u64::from(len);
        self.docs.push(Doc { pk, len, scope: scope_id, alive: true });
        self.doc_of_pk.insert(pk, doc_idx);
    }

    fn remove(&mut self, pk: i64) {
        let Some(doc_idx) = self.doc_of_pk.remove(&pk) else {
            return;
        };
        let doc = &mut self.docs[doc_idx as usize];
        doc.alive = false;
        let partition = &mut self.partitions[doc.scope as usize];
        partition.n_alive -= 1;
        partition.total_len_alive -= u64::from(doc.len);
        self.n_dead += 1;
    }

    /// Drops dead documents from the postings, so document frequencies count only the
    /// living and the lists stop growing.
    fn compact(&mut self) {
        let mut new_idx: Vec<Option<u32>> = Vec::with_capacity(self.docs.len());
        let mut docs = Vec::with_capacity(self.docs.len());
        for doc in self.docs.drain(..) {
            if doc.alive {
                new_idx.push(Some(u32::try_from(docs.len()).unwrap_or(u32::MAX)));
                docs.push(doc);
            } else {
                new_idx.push(None);
            }
        }
        self.docs = docs;
        self.doc_of_pk = self.docs.iter().enumerate().map(|(idx, doc)| (doc.pk, idx as u32)).collect();
        for partition in &mut self.partitions {
            partition.postings.retain(|_, list| {
                list.retain_mut(|(doc_idx, _)| match new_idx[*doc_idx as usize] {
                    Some(idx) => {
                        *doc_idx = idx;
                        true
                    }
                    None => false,
                });
                !list.is_empty()
            });
        }
        self.n_dead = 0;
    }
}

/// English function words, left out of the index and of queries: they match nearly
/// every workflow and carry no meaning for retrieval.
fn is_stopword(token: &str) -> bool {
    const STOPWORDS: &[&str] = &[
        "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been",
        "before", "being", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "he",
        "her", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "no", "not", "of",
        "on", "only", "or", "our", "she", "so", "some", "than", "that", "the", "their", "them", "then", "there",
        "these", "they", "this", "those", "to", "too", "very", "was", "we", "were", "what", "when", "which", "while",
        "who", "will", "with", "would", "you", "your",
    ];
    STOPWORDS.binary_search(&token).is_ok()
}

/// Calls `f` with each index term of `text`: lowercase alphanumeric runs (the same
/// splitting as [`crate::text::tokens`]), stopwords left out, plurals stemmed. `buf` is
/// reused so that no term allocates.
fn for_each_term(text: &str, buf: &mut String, mut f: impl FnMut(&str)) {
    for raw in text.split(|ch: char| !ch.is_alphanumeric()).filter(|raw| !raw.is_empty()) {
        buf.clear();
        buf.extend(raw.chars().flat_map(char::to_lowercase));
        if is_stopword(buf) {
            continue;
        }
        stem_in_place(buf);
        f(buf);
    }
}

/// A light English plural stemmer: `entries` → `entry`, `boxes` → `box`, `orders` →
/// `order`; words of three letters or fewer and words in `ss`, `us` or `is` are kept.
fn stem_in_place(token: &mut String) {
    let n = token.len();
    if n > 4 && token.ends_with("ies") {
        token.truncate(n - 3);
        token.push('y');
    } else if n > 4
        && (token.ends_with("xes") || token.ends_with("ches") || token.ends_with("shes") || token.ends_with("sses"))
    {
        token.truncate(n - 2);
    } else if n > 3
        && token.ends_with('s')
        && !token.ends_with("ss")
        && !token.ends_with("us")
        && !token.ends_with("is")
    {
        token.truncate(n - 1);
    }
}

#[cfg(test)]
fn stem(token: &str) -> String {
    let mut token = token.to_owned();
    stem_in_place(&mut token);
    token
}

#[cfg(test)]
mod tests {
    use crate::index::{SearchIndex, is_stopword, stem};

    #[test]
    fn dead_documents_never_make_a_matching_term_count_against_a_document() {
        // Ten dead documents with `order` outnumber the two alive ones: without the cap on
        // df, `order` would get a negative IDF and lower the score of the one that has it.
        let mut index = SearchIndex::default();
        for pk in 0..10 {
            index.insert(pk, "order", "", (None, None));
        }
        index.insert(10, "order lamp", "", (None, None));
        index.insert(11, "lamp", "", (None, None));
        for pk in 0..10 {
            index.remove(pk);
        }
        let ranked = index.search("order lamp", (None, None), 5);
        assert_eq!(ranked.iter().map(|&(pk, _)| pk).collect::<Vec<_>>(), [10, 11], "{ranked:?}");
        assert!(ranked[0].1 > ranked[1].1, "{ranked:?}");
    }

    #[test]
    fn stopwords_are_found_and_content_words_are_not() {
        assert!(is_stopword("the") && is_stopword("your") && is_stopword("a"));
        assert!(!is_stopword("order") && !is_stopword("cancel"));
    }

    #[test]
    fn plurals_stem_to_their_singular() {
        for (word, expected) in [
            ("orders", "order"),
            ("entries", "entry"),
            ("boxes", "box"),
            ("addresses", "address"),
            ("address", "address"),
            ("status", "status"),
            ("its", "its"),
            ("details", "detail"),
        ] {
            assert_eq!(stem(word), expected, "{word}");
        }
    }
}
