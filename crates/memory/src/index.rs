//! The BM25 retrieval index: an in-memory inverted index over the stored workflows,
//! kept in step with the database through its `index_log` table.
//!
//! Every insert and delete in the store appends to `index_log` in the same transaction.
//! Before a search the index reads the log entries it has not seen (its own process's
//! and every other process's), so it always answers for the committed state of the file
//! at the time of the search. The first search loads the whole log.
//!
//! Beside the BM25 postings it holds each workflow's embedding vector (one per
//! workflow, with the id of the model that made it; `index_log` entries `vector` say
//! that a workflow's vector was written), for exact nearest-neighbour search over
//! normalised vectors, and fuses the two rankings by reciprocal rank ([`rank`]).
//!
//! Scoring is Okapi BM25 with `k1 = 1.2`, `b = 0.75` and the always-positive IDF
//! `ln(1 + (N − df + 0.5) / (df + 0.5))`, over the tokens of the description (counted
//! twice, so the description weighs double) and of the steps (state, reasoning, tool
//! name, argument names and values). Tokens are lowercase alphanumeric runs with a light
//! plural stemmer (`orders` → `order`, `entries` → `entry`).

use flowmem_db::{Db, DbError, Value};
use rustc_hash::FxHashMap as HashMap;

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 length normalisation.
const B: f32 = 0.75;
/// How many times a description token counts.
const DESCRIPTION_WEIGHT: u32 = 2;

/// The `k` of reciprocal-rank fusion, `Σ 1 / (k + rank)`: 60, the value of Cormack,
/// Clarke and Büttcher (2009) that most hybrid search systems keep.
pub(crate) const RRF_K: f64 = 60.0;

/// How deep each ranking is read for fusion: a document below this depth in both
/// rankings cannot enter the fused top `limit`.
const FUSION_DEPTH: usize = 100;

/// One document of the index.
#[derive(Debug, Clone)]
struct Doc {
    pk: i64,
    len: u32,
    scope: u32,
    alive: bool,
    // (vector set, slot) of the document's embedding, if it has one.
    vector: Option<(u32, u32)>,
}

/// The vectors of one embedding model, stored contiguously for a linear scan.
#[derive(Debug, Default)]
struct VectorSet {
    model: String,
    dim: usize,
    // `slot_doc.len() * dim` floats, L2-normalised.
    data: Vec<f32>,
    // The document of each slot; `DEAD` for a slot whose vector was replaced or whose
    // document was deleted.
    slot_doc: Vec<u32>,
    n_dead: usize,
}

const DEAD: u32 = u32::MAX;

/// How a search ranks: by words, by meaning, or both fused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Ranking<'a> {
    /// BM25 only.
    Bm25,
    /// Cosine similarity to the query vector of `model` only.
    Vector { model: &'a str, vector: &'a [f32] },
    /// Both, fused by reciprocal rank.
    Hybrid { model: &'a str, vector: &'a [f32] },
}

/// A ranked document with what each ranking said of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Scored {
    /// The workflow's primary key.
    pub(crate) pk: i64,
    /// The score the results are ordered by: BM25, cosine, or the fused score.
    pub(crate) score: f64,
    /// The BM25 score and 1-based rank, when the document was in the BM25 ranking read.
    pub(crate) bm25: Option<(f64, usize)>,
    /// The cosine similarity and 1-based rank, when it was in the vector ranking read.
    pub(crate) vector: Option<(f64, usize)>,
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
    // Each document's length as a float, infinite once it is dead: what BM25's inner
    // loop reads, contiguous (a search touches it only at the documents it scores) and
    // branch-free (a dead document scores 0).
    lens: Vec<f32>,
    doc_of_pk: HashMap<i64, u32>,
    // Interned (site, domain) pairs; a doc's `scope` indexes both vectors.
    scopes: Vec<(Option<String>, Option<String>)>,
    partitions: Vec<Partition>,
    scope_ids: HashMap<(Option<String>, Option<String>), u32>,
    // Interned terms, shared by every partition.
    term_ids: HashMap<String, u32>,
    // One set per embedding model seen.
    vector_sets: Vec<VectorSet>,
    n_dead: u32,
    // The last `index_log.seq` applied.
    last_seq: i64,
}

/// A ranked match: the workflow's primary key and its BM25 score.
#[cfg(test)]
pub(crate) type Ranked = (i64, f64);

/// A document index and its score in one ranking.
type DocScore = (f32, u32);

impl SearchIndex {
    /// The last `index_log.seq` committed in `db`.
    pub(crate) fn log_head(db: &Db) -> Result<i64, DbError> {
        db.query_one("SELECT COALESCE(MAX(seq), 0) FROM index_log", &[])?.int(0)
    }

    /// The last `index_log.seq` applied.
    pub(crate) fn last_seq(&self) -> i64 {
        self.last_seq
    }

    /// Applies every `index_log` entry after the last one seen; `head` is the log's last
    /// sequence number as the caller just read it ([`SearchIndex::log_head`]).
    pub(crate) fn sync(&mut self, db: &Db, head: i64) -> Result<(), DbError> {
        if head <= self.last_seq {
            return Ok(());
        }
        db.for_each(
            "SELECT l.seq, l.pk, l.op, w.description, w.index_text, w.site, w.domain, v.model, v.vector
             FROM index_log AS l LEFT JOIN workflows AS w ON w.pk = l.pk
             LEFT JOIN workflow_vectors AS v ON v.pk = l.pk
             WHERE l.seq > $1 ORDER BY l.seq",
            &[Value::Int(self.last_seq)],
            |row| {
                let seq = row.int(0)?;
                let pk = row.int(1)?;
                let op = row.text(2)?;
                self.last_seq = seq;
                if op == "delete" {
                    self.remove(pk);
                    return Ok(());
                }
                // An insert whose row is gone was deleted later in the log; the delete
                // entry follows, so there is nothing to index now.
                let Some(description) = row.opt_text(3)? else {
                    return Ok(());
                };
                if op == "insert" {
                    let steps_text = row.opt_text(4)?.unwrap_or_default();
                    let scope = (row.opt_text(5)?, row.opt_text(6)?);
                    self.insert(pk, &description, &steps_text, scope);
                }
                // The vector as it is now: a later `vector` entry only writes it again.
                if let (Some(model), Some(blob)) = (row.opt_text(7)?, row.opt_blob(8)?) {
                    self.set_vector(pk, &model, &decode_vector(blob));
                }
                Ok(())
            },
        )?;
        let n_alive = self.docs.len() as u32 - self.n_dead;
        if self.n_dead > 1024 && self.n_dead > n_alive / 4 {
            self.compact();
        }
        Ok(())
    }

    /// The best `limit` alive documents for `query` by BM25 whose scope passes `filter`.
    #[cfg(test)]
    pub(crate) fn search(&self, query: &str, filter: (Option<&str>, Option<&str>), limit: usize) -> Vec<Ranked> {
        self.bm25(query, &self.admitted(filter), limit)
            .into_iter()
            .map(|(score, doc_idx)| (self.docs[doc_idx as usize].pk, f64::from(score)))
            .collect()
    }

    /// The best `limit` alive documents whose scope passes `filter`, ranked as `ranking`
    /// says. Hybrid ranking reads the top [`FUSION_DEPTH`] (at least `limit`) of each
    /// ranking and orders their union by `Σ 1 / (RRF_K + rank)` over the rankings a
    /// document is in; ties go to the better BM25 rank, then to the older document.
    pub(crate) fn rank(
        &self,
        ranking: Ranking<'_>,
        query: &str,
        filter: (Option<&str>, Option<&str>),
        limit: usize,
    ) -> Vec<Scored> {
        let admitted = self.admitted(filter);
        let pk = |doc_idx: u32| self.docs[doc_idx as usize].pk;
        match ranking {
            Ranking::Bm25 => self
                .bm25(query, &admitted, limit)
                .into_iter()
                .enumerate()
                .map(|(rank, (score, doc))| Scored {
                    pk: pk(doc),
                    score: f64::from(score),
                    bm25: Some((f64::from(score), rank + 1)),
                    vector: None,
                })
                .collect(),
            Ranking::Vector { model, vector } => self
                .nearest(model, vector, &admitted, limit)
                .into_iter()
                .enumerate()
                .map(|(rank, (similarity, doc))| Scored {
                    pk: pk(doc),
                    score: f64::from(similarity),
                    bm25: None,
                    vector: Some((f64::from(similarity), rank + 1)),
                })
                .collect(),
            Ranking::Hybrid { model, vector } => {
                let depth = limit.max(FUSION_DEPTH);
                let by_words = self.bm25(query, &admitted, depth);
                let by_meaning = self.nearest(model, vector, &admitted, depth);
                let mut fused: HashMap<u32, Scored> = HashMap::default();
                for (rank, &(score, doc)) in by_words.iter().enumerate() {
                    let entry =
                        fused.entry(doc).or_insert(Scored { pk: pk(doc), score: 0.0, bm25: None, vector: None });
                    entry.bm25 = Some((f64::from(score), rank + 1));
                    entry.score += 1.0 / (RRF_K + (rank + 1) as f64);
                }
                for (rank, &(similarity, doc)) in by_meaning.iter().enumerate() {
                    let entry =
                        fused.entry(doc).or_insert(Scored { pk: pk(doc), score: 0.0, bm25: None, vector: None });
                    entry.vector = Some((f64::from(similarity), rank + 1));
                    entry.score += 1.0 / (RRF_K + (rank + 1) as f64);
                }
                let mut ranked: Vec<(u32, Scored)> = fused.into_iter().collect();
                let bm25_rank = |scored: &Scored| scored.bm25.map_or(usize::MAX, |(_, rank)| rank);
                ranked.sort_by(|(doc_a, a), (doc_b, b)| {
                    b.score.total_cmp(&a.score).then(bm25_rank(a).cmp(&bm25_rank(b))).then(doc_a.cmp(doc_b))
                });
                ranked.truncate(limit);
                ranked.into_iter().map(|(_, scored)| scored).collect()
            }
        }
    }

    /// For each interned scope, whether `filter` admits it.
    fn admitted(&self, filter: (Option<&str>, Option<&str>)) -> Vec<bool> {
        self.scopes
            .iter()
            .map(|(site, domain)| {
                filter.0.is_none_or(|want| site.as_deref() == Some(want))
                    && filter.1.is_none_or(|want| domain.as_deref() == Some(want))
            })
            .collect()
    }

    /// How many alive documents `filter` admits, and how many of them have a vector of
    /// `model`.
    pub(crate) fn vector_coverage(&self, model: &str, filter: (Option<&str>, Option<&str>)) -> (usize, usize) {
        let admitted = self.admitted(filter);
        let n_alive: usize =
            self.partitions.iter().zip(&admitted).filter(|(_, ok)| **ok).map(|(p, _)| p.n_alive as usize).sum();
        let Some(set) = self.vector_sets.iter().find(|set| set.model == model) else { return (n_alive, 0) };
        let n_vectors =
            set.slot_doc.iter().filter(|&&doc| doc != DEAD && admitted[self.docs[doc as usize].scope as usize]).count();
        (n_alive, n_vectors)
    }

    /// The best `limit` (score, document) pairs by BM25 among the admitted scopes.
    fn bm25(&self, query: &str, admitted_scopes: &[bool], limit: usize) -> Vec<DocScore> {
        let admitted: Vec<&Partition> = self
            .partitions
            .iter()
            .zip(admitted_scopes)
            .filter(|(_, ok)| **ok)
            .map(|(partition, _)| partition)
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
        // Length normalisation `k1 (1 - b + b len / avg_len)`, computed at each posting
        // from `lens`; a dead document's is infinite, so it scores 0 with no branch.
        let (base, per_token) = (K1 * (1.0 - B), K1 * B / avg_len);
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
                    let norm = base + per_token * self.lens[doc_idx as usize];
                    scores[doc_idx as usize] += weight * tf / (tf + norm);
                }
            }
        }
        top_positive(&scores, limit)
    }

    /// The best `limit` (cosine, document) pairs among the admitted scopes' documents
    /// with a vector of `model`: an exact scan over normalised vectors (`query` is
    /// normalised by the caller). A query of another dimension matches nothing.
    fn nearest(&self, model: &str, query: &[f32], admitted_scopes: &[bool], limit: usize) -> Vec<DocScore> {
        let Some(set) = self.vector_sets.iter().find(|set| set.model == model) else { return Vec::new() };
        if set.dim != query.len() || limit == 0 {
            return Vec::new();
        }
        let mut scored: Vec<DocScore> = Vec::with_capacity(set.slot_doc.len());
        for (row, &doc) in set.data.chunks_exact(set.dim).zip(&set.slot_doc) {
            if doc == DEAD || !admitted_scopes[self.docs[doc as usize].scope as usize] {
                continue;
            }
            scored.push((dot(row, query), doc));
        }
        top(scored, limit)
    }

    /// Sets the vector of the document `pk` (normalised by the caller), replacing any
    /// earlier one; a document not in the index is left alone.
    fn set_vector(&mut self, pk: i64, model: &str, vector: &[f32]) {
        let Some(&doc_idx) = self.doc_of_pk.get(&pk) else { return };
        if vector.is_empty() {
            return;
        }
        self.clear_vector(doc_idx);
        let set_idx = match self.vector_sets.iter().position(|set| set.model == model && set.dim == vector.len()) {
            Some(idx) => idx,
            None => {
                // A model's vectors have one dimension; a new dimension starts a new set
                // and retires the old one.
                self.vector_sets.retain(|set| set.model != model);
                for doc in &mut self.docs {
                    doc.vector = None;
                }
                self.reslot_all();
                self.vector_sets.push(VectorSet { model: model.to_owned(), dim: vector.len(), ..VectorSet::default() });
                self.vector_sets.len() - 1
            }
        };
        let set = &mut self.vector_sets[set_idx];
        let slot = u32::try_from(set.slot_doc.len()).unwrap_or(u32::MAX);
        set.data.extend_from_slice(vector);
        set.slot_doc.push(doc_idx);
        self.docs[doc_idx as usize].vector = Some((set_idx as u32, slot));
        if set.n_dead > 1024 && set.n_dead > set.slot_doc.len() / 2 {
            self.compact_vectors();
        }
    }

    /// Marks the document's vector slot dead, if it has one.
    fn clear_vector(&mut self, doc_idx: u32) {
        if let Some((set, slot)) = self.docs[doc_idx as usize].vector.take() {
            let set = &mut self.vector_sets[set as usize];
            set.slot_doc[slot as usize] = DEAD;
            set.n_dead += 1;
        }
    }

    /// Points every document at its current slot, after sets were dropped.
    fn reslot_all(&mut self) {
        for (set_idx, set) in self.vector_sets.iter().enumerate() {
            for (slot, &doc) in set.slot_doc.iter().enumerate() {
                if doc != DEAD {
                    self.docs[doc as usize].vector = Some((set_idx as u32, slot as u32));
                }
            }
        }
    }

    /// Drops dead slots from every vector set.
    fn compact_vectors(&mut self) {
        for set in &mut self.vector_sets {
            let dim = set.dim;
            let mut data = Vec::with_capacity(set.data.len() - set.n_dead * dim);
            let mut slot_doc = Vec::with_capacity(set.slot_doc.len() - set.n_dead);
            for (row, &doc) in set.data.chunks_exact(dim).zip(&set.slot_doc) {
                if doc != DEAD {
                    data.extend_from_slice(row);
                    slot_doc.push(doc);
                }
            }
            set.data = data;
            set.slot_doc = slot_doc;
            set.n_dead = 0;
        }
        self.reslot_all();
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
        self.docs.push(Doc { pk, len, scope: scope_id, alive: true, vector: None });
        self.lens.push(len as f32);
        self.doc_of_pk.insert(pk, doc_idx);
    }

    fn remove(&mut self, pk: i64) {
        let Some(doc_idx) = self.doc_of_pk.remove(&pk) else {
            return;
        };
        self.clear_vector(doc_idx);
        let doc = &mut self.docs[doc_idx as usize];
        doc.alive = false;
        self.lens[doc_idx as usize] = f32::INFINITY;
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
        self.lens = self.docs.iter().map(|doc| doc.len as f32).collect();
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
        for set in &mut self.vector_sets {
            for doc in &mut set.slot_doc {
                if *doc != DEAD {
                    *doc = new_idx[*doc as usize].unwrap_or(DEAD);
                }
            }
        }
        self.compact_vectors();
        self.n_dead = 0;
    }
}

/// Ranking order: the higher score first, then the lower document index.
fn by_rank(a: &DocScore, b: &DocScore) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// A candidate in [`top_positive`]'s heap, ordered so that the worst is the greatest.
#[derive(PartialEq)]
struct Worst(DocScore);

impl Eq for Worst {}

impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Worst) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Worst {
    fn cmp(&self, other: &Worst) -> std::cmp::Ordering {
        by_rank(&self.0, &other.0)
    }
}

/// The best `limit` (score, document) pairs of the dense `scores` (indexed by document)
/// with a score above 0, in ranking order: [`top`] in one pass, without collecting
/// every scored document first.
fn top_positive(scores: &[f32], limit: usize) -> Vec<DocScore> {
    if limit == 0 {
        return Vec::new();
    }
    let mut heap: std::collections::BinaryHeap<Worst> = std::collections::BinaryHeap::with_capacity(limit + 1);
    // The worst score kept once the heap is full. Documents come in index order, so a
    // later one with the same score ranks below every kept one and is skipped.
    let mut floor = 0.0f32;
    // Most documents score at most the floor: a block's maximum (which vectorises) lets
    // the scan skip them 16 at a time.
    const BLOCK: usize = 16;
    for (block_idx, block) in scores.chunks(BLOCK).enumerate() {
        let block_max = block.iter().fold(0.0f32, |max, &score| if score > max { score } else { max });
        if block_max <= floor {
            continue;
        }
        for (offset, &score) in block.iter().enumerate() {
            if score > floor {
                heap.push(Worst((score, (block_idx * BLOCK + offset) as u32)));
                if heap.len() > limit {
                    heap.pop();
                }
                if heap.len() == limit {
                    floor = heap.peek().map_or(0.0, |worst| worst.0.0);
                }
            }
        }
    }
    let mut best: Vec<DocScore> = heap.into_iter().map(|worst| worst.0).collect();
    best.sort_by(by_rank);
    best
}

/// The best `limit` of `scored`, best first; ties go to the older document (smaller
/// index), so the order is deterministic.
fn top(mut scored: Vec<DocScore>, limit: usize) -> Vec<DocScore> {
    if limit == 0 {
        return Vec::new();
    }
    if scored.len() > limit {
        scored.select_nth_unstable_by(limit - 1, by_rank);
        scored.truncate(limit);
    }
    scored.sort_by(by_rank);
    scored
}

/// The dot product, in eight independent lanes so the compiler vectorises it.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in a_chunks.zip(b_chunks) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// A stored vector: little-endian `f32`s.
pub(crate) fn encode_vector(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The inverse of [`encode_vector`]; trailing bytes short of a float are ignored.
pub(crate) fn decode_vector(blob: &[u8]) -> Vec<f32> {
    blob.chunks_exact(4).map(|bytes| f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])).collect()
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
    use crate::index::{Ranking, SearchIndex, is_stopword, stem, top, top_positive};

    #[test]
    fn the_one_pass_top_ranks_as_sorting_everything_does() {
        // Scores from a small set of values, so ties are common; zeros never rank.
        let mut state = 7u64;
        for len in [0, 1, 5, 64, 1_000] {
            let scores: Vec<f32> = (0..len)
                .map(|_| {
                    state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    ((state >> 33) % 6) as f32 * 0.5
                })
                .collect();
            let all: Vec<(f32, u32)> = scores
                .iter()
                .enumerate()
                .filter(|&(_, &score)| score > 0.0)
                .map(|(idx, &score)| (score, idx as u32))
                .collect();
            for limit in [0, 1, 3, 10, 2_000] {
                assert_eq!(top_positive(&scores, limit), top(all.clone(), limit), "{len} scores, top {limit}");
            }
        }
    }

    /// The hand-made case of the fusion test: (pk, text, vector).
    const FUSION_CASE: [(i64, &str, [f32; 3]); 4] = [
        (1, "cancel order", [0.6, 0.8, 0.0]),
        (2, "order status", [0.8, 0.6, 0.0]),
        (3, "flight", [1.0, 0.0, 0.0]),
        (4, "weather", [0.0, 0.0, 1.0]),
    ];

    fn fusion_index() -> SearchIndex {
        let mut index = SearchIndex::default();
        for (pk, text, vector) in FUSION_CASE {
            index.insert(pk, text, "", (None, Some("retail".to_owned())));
            index.set_vector(pk, "m", &vector);
        }
        index
    }

    fn pks(index: &SearchIndex, ranking: Ranking<'_>) -> Vec<i64> {
        index.rank(ranking, "cancel order", (None, None), 10).iter().map(|scored| scored.pk).collect()
    }

    #[test]
    fn hybrid_ranking_fuses_by_reciprocal_rank() {
        let index = fusion_index();
        let query = [1.0, 0.0, 0.0];
        // BM25: 1 (both words), 2 (one word). Vectors: 3 (cos 1), 2 (0.8), 1 (0.6), 4 (0).
        assert_eq!(pks(&index, Ranking::Bm25), [1, 2]);
        assert_eq!(pks(&index, Ranking::Vector { model: "m", vector: &query }), [3, 2, 1, 4]);
        // Fused: 1 = 1/61 + 1/63 = 0.032266 > 2 = 1/62 + 1/62 = 0.032258 > 3 = 1/61 > 4 = 1/64.
        let fused = index.rank(Ranking::Hybrid { model: "m", vector: &query }, "cancel order", (None, None), 10);
        assert_eq!(fused.iter().map(|scored| scored.pk).collect::<Vec<_>>(), [1, 2, 3, 4], "{fused:?}");
        assert!((fused[0].score - (1.0 / 61.0 + 1.0 / 63.0)).abs() < 1e-12);
        assert_eq!((fused[0].bm25.map(|(_, rank)| rank), fused[0].vector.map(|(_, rank)| rank)), (Some(1), Some(3)));
        assert_eq!((fused[2].bm25, fused[2].vector.map(|(_, rank)| rank)), (None, Some(1)));
        // A scope that admits nothing, and a query of another model, find nothing.
        assert!(
            index
                .rank(Ranking::Hybrid { model: "m", vector: &query }, "cancel", (None, Some("airline")), 10)
                .is_empty()
        );
        assert!(pks(&index, Ranking::Vector { model: "other", vector: &query }).is_empty());
    }

    #[test]
    fn replaced_and_deleted_vectors_leave_the_scan_and_survive_compaction() {
        let mut index = SearchIndex::default();
        for pk in 0..3000 {
            index.insert(pk, "doc", "", (None, None));
            index.set_vector(pk, "m", &[pk as f32, 1.0]);
        }
        for pk in 0..2500 {
            index.remove(pk);
        }
        // A new vector replaces the old one: pk 2999 now points away from the query.
        index.set_vector(2999, "m", &[-1.0, 0.0]);
        index.compact();
        assert_eq!(index.vector_coverage("m", (None, None)), (500, 500));
        let nearest = index.rank(Ranking::Vector { model: "m", vector: &[-1.0, 0.0] }, "", (None, None), 1);
        assert_eq!(nearest[0].pk, 2999);
        let nearest = index.rank(Ranking::Vector { model: "m", vector: &[0.0, 1.0] }, "", (None, None), 1);
        assert_eq!(nearest[0].pk, 2500, "equal similarities go to the oldest alive document");
    }

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
