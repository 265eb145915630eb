//! Retrieval modes and the one way every caller searches the memory: [`Retriever`]
//! embeds the query when its mode needs a vector, and [`MemoryStore::search_with`]
//! ranks. The agent (`flowmem agent --memory`), the MCP `find_workflows`, the gateway and
//! `flowmem memory eval-retrieval` all go through them.
//!
//! Vectors are derived state: [`embed_workflows`] makes them for workflows about to be
//! stored ([`MemoryStore::add_all_with_vectors`] writes them in the same transaction),
//! and [`sync_vectors`] embeds every workflow that lacks a vector of the current model,
//! which is also the rebuild after a change of embedding model.

use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use flowmem_llm::EmbeddingModel;
use flowmem_model::{Scope, Workflow};

use crate::error::MemoryError;
use crate::store::{Hit, MemoryStore};
use crate::text::embedding_text;

/// How retrieval ranks stored workflows for a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetrievalMode {
    /// Okapi BM25 over descriptions and steps: exact words, no model, microseconds.
    Bm25,
    /// Cosine similarity of sentence embeddings: paraphrases match; embedding the query
    /// costs milliseconds.
    Vector,
    /// Both rankings fused by reciprocal rank, `Σ 1 / (60 + rank)` over the top 100 of
    /// each (ties to the better BM25 rank): a workflow near the top of either ranking
    /// comes up, one near the top of both comes first.
    Hybrid,
}

impl RetrievalMode {
    /// Every mode, in the order reports list them.
    pub const ALL: [RetrievalMode; 3] = [RetrievalMode::Bm25, RetrievalMode::Vector, RetrievalMode::Hybrid];

    /// The lowercase name, as flags and traces spell it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            RetrievalMode::Bm25 => "bm25",
            RetrievalMode::Vector => "vector",
            RetrievalMode::Hybrid => "hybrid",
        }
    }

    /// Whether the mode needs the query's vector (and so an embedding model).
    #[must_use]
    pub fn needs_vectors(self) -> bool {
        self != RetrievalMode::Bm25
    }
}

impl std::fmt::Display for RetrievalMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A query's vector and the model that made it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryEmbedding {
    /// The embedding model's id ([`EmbeddingModel::model_id`]).
    pub model: String,
    /// The vector, normalised.
    pub vector: Vec<f32>,
}

/// A search of the memory: the query text, the mode, and the query's vector when the
/// mode needs one. [`Retriever::query`] builds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchQuery {
    /// The query text (BM25 reads it).
    pub text: String,
    /// How to rank.
    pub mode: RetrievalMode,
    /// The query's vector (vector and hybrid modes read it).
    pub embedding: Option<QueryEmbedding>,
    /// Whether each hit's workflow carries its merged provenance (the runs it was
    /// induced from), one more read per search; on unless
    /// [`SearchQuery::without_provenance`] turns it off.
    pub provenance: bool,
}

impl SearchQuery {
    /// A BM25 search for `text`.
    #[must_use]
    pub fn bm25(text: &str) -> SearchQuery {
        SearchQuery { text: text.to_owned(), mode: RetrievalMode::Bm25, embedding: None, provenance: true }
    }

    /// This search, for a caller that only shows or renders its hits: their workflows
    /// come without the provenance read (a default [`Provenance`](flowmem_model::Provenance)
    /// but for `created_at`).
    ///
    /// ```
    /// let query = flowmem_memory::SearchQuery::bm25("cancel an order").without_provenance();
    /// assert!(!query.provenance);
    /// ```
    #[must_use]
    pub fn without_provenance(mut self) -> SearchQuery {
        self.provenance = false;
        self
    }
}

/// Vectors for workflows about to be stored, one per workflow, all of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowVectors {
    /// The embedding model's id ([`EmbeddingModel::model_id`]), recorded with each vector.
    pub model: String,
    /// One vector per workflow, in order.
    pub vectors: Vec<Vec<f32>>,
}

/// What one retrieval found and how, for traces: the mode, the time spent, and each
/// hit's scores.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrieval {
    /// The mode that ranked.
    pub mode: RetrievalMode,
    /// Milliseconds spent embedding the query (0 for BM25).
    pub embed_ms: f64,
    /// Milliseconds spent ranking and reading the hits.
    pub search_ms: f64,
    /// The hits, best first.
    pub hits: Vec<Hit>,
}

impl Retrieval {
    /// The record of this retrieval that traces keep: `{"mode", "embed_ms", "search_ms",
    /// "hits": [{"id", "score", "bm25"?, "similarity"?}]}`.
    #[must_use]
    pub fn record(&self) -> Value {
        retrieval_record(self.mode, self.embed_ms, self.search_ms, &self.hits)
    }
}

/// The trace record of a retrieval (see [`Retrieval::record`]), for callers that ran
/// the search themselves (a server on its reader threads).
#[must_use]
pub fn retrieval_record(mode: RetrievalMode, embed_ms: f64, search_ms: f64, hits: &[Hit]) -> Value {
    let hits: Vec<Value> = hits
        .iter()
        .map(|hit| {
            let mut entry = json!({"id": hit.workflow.id, "score": hit.score});
            if let Some(bm25) = hit.bm25 {
                entry["bm25"] = json!(bm25);
            }
            if let Some(similarity) = hit.similarity {
                entry["similarity"] = json!(similarity);
            }
            entry
        })
        .collect();
    json!({"mode": mode, "embed_ms": embed_ms, "search_ms": search_ms, "hits": hits})
}

/// How a caller retrieves: a mode and, for vector and hybrid, the embedding model.
/// Cheap to clone.
#[derive(Clone)]
pub struct Retriever {
    mode: RetrievalMode,
    // Invariant: present when `mode.needs_vectors()`.
    embedder: Option<Arc<dyn EmbeddingModel>>,
}

impl std::fmt::Debug for Retriever {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retriever")
            .field("mode", &self.mode)
            .field("embedder", &self.embedder.as_ref().map(|model| model.name()))
            .finish()
    }
}

impl Retriever {
    /// A retriever in `mode`, embedding with `embedder`.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Retrieval`] when `mode` needs vectors and `embedder` is `None`.
    pub fn new(mode: RetrievalMode, embedder: Option<Arc<dyn EmbeddingModel>>) -> Result<Retriever, MemoryError> {
        if mode.needs_vectors() && embedder.is_none() {
            return Err(MemoryError::Retrieval {
                reason: format!(
                    "retrieval mode `{mode}` needs an embedding model\nhint: configure one, or use --retrieval bm25"
                ),
            });
        }
        Ok(Retriever { mode, embedder })
    }

    /// A BM25 retriever, which needs no model.
    #[must_use]
    pub fn bm25() -> Retriever {
        Retriever { mode: RetrievalMode::Bm25, embedder: None }
    }

    /// The mode.
    #[must_use]
    pub fn mode(&self) -> RetrievalMode {
        self.mode
    }

    /// The embedding model, if the retriever has one.
    #[must_use]
    pub fn embedder(&self) -> Option<&Arc<dyn EmbeddingModel>> {
        self.embedder.as_ref()
    }

    /// The same embedding model in another mode.
    ///
    /// # Errors
    ///
    /// As [`Retriever::new`].
    pub fn with_mode(&self, mode: RetrievalMode) -> Result<Retriever, MemoryError> {
        Retriever::new(mode, self.embedder.clone())
    }

    /// The search for `text`, with its vector when the mode needs one, and the
    /// milliseconds the embedding took.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Embedding`] when the embedding model fails.
    pub async fn query(&self, text: &str) -> Result<(SearchQuery, f64), MemoryError> {
        let mut query = SearchQuery { text: text.to_owned(), mode: self.mode, embedding: None, provenance: true };
        let Some(embedder) = self.embedder.as_ref().filter(|_| self.mode.needs_vectors()) else {
            return Ok((query, 0.0));
        };
        let started = Instant::now();
        let embedded = embedder
            .embed(&[text.to_owned()])
            .await
            .map_err(|source| MemoryError::Embedding { model: embedder.name().to_owned(), source })?;
        let vector = embedded.vectors.into_iter().next().ok_or_else(|| MemoryError::Retrieval {
            reason: format!("embedding model `{}` returned no vector for the query", embedder.name()),
        })?;
        query.embedding = Some(QueryEmbedding { model: embedder.model_id(), vector: normalised(&vector) });
        Ok((query, started.elapsed().as_secs_f64() * 1000.0))
    }

    /// Retrieves the `limit` best workflows for `text` in `filter`'s scope from `store`
    /// (read-only; see [`MemoryStore::search_with`]), with the mode and scores.
    ///
    /// # Errors
    ///
    /// As [`Retriever::query`] and [`MemoryStore::search_with`].
    pub async fn search(
        &self,
        store: &MemoryStore,
        text: &str,
        filter: &Scope,
        limit: usize,
    ) -> Result<Retrieval, MemoryError> {
        let (query, embed_ms) = self.query(text).await?;
        let started = Instant::now();
        let hits = store.search_with(&query, filter, limit)?;
        Ok(Retrieval { mode: self.mode, embed_ms, search_ms: started.elapsed().as_secs_f64() * 1000.0, hits })
    }

    /// Retrieves for an agent: readies the store's vectors when some workflow lacks one
    /// of the retriever's model (the index tells cheaply), searches as
    /// [`Retriever::search`] does, and counts each hit as retrieved, as
    /// [`MemoryStore::retrieve`] does.
    ///
    /// # Errors
    ///
    /// As [`Retriever::prepare`] and [`Retriever::search`], and [`MemoryError::Database`]
    /// when counting fails.
    pub async fn retrieve(
        &self,
        store: &mut MemoryStore,
        text: &str,
        filter: &Scope,
        limit: usize,
    ) -> Result<Retrieval, MemoryError> {
        if let Some(embedder) = self.embedder.as_ref().filter(|_| self.mode.needs_vectors()) {
            let (n_workflows, n_vectors) = store.vector_coverage(&embedder.model_id(), &Scope::default())?;
            if n_vectors < n_workflows {
                sync_vectors(store, embedder.as_ref()).await?;
            }
        }
        let mut retrieval = self.search(store, text, filter, limit).await?;
        let ids: Vec<&str> = retrieval.hits.iter().map(|hit| hit.workflow.id.as_str()).collect();
        store.count_retrievals(&ids)?;
        for hit in &mut retrieval.hits {
            hit.workflow.stats.retrieved += 1;
        }
        Ok(retrieval)
    }

    /// Readies `store` for this retriever: in vector and hybrid mode, embeds every
    /// workflow that lacks a vector of the retriever's model ([`sync_vectors`]); returns
    /// how many it embedded.
    ///
    /// # Errors
    ///
    /// As [`sync_vectors`].
    pub async fn prepare(&self, store: &mut MemoryStore) -> Result<usize, MemoryError> {
        match self.embedder.as_ref().filter(|_| self.mode.needs_vectors()) {
            Some(embedder) => sync_vectors(store, embedder.as_ref()).await,
            None => Ok(0),
        }
    }
}

/// The vectors of `workflows` (from their descriptions and tool names), to store with
/// them through [`MemoryStore::add_all_with_vectors`].
///
/// # Errors
///
/// [`MemoryError::Embedding`] when the model fails, and [`MemoryError::Retrieval`] when it
/// answers with the wrong number of vectors.
pub async fn embed_workflows(
    embedder: &dyn EmbeddingModel,
    workflows: &[Workflow],
) -> Result<WorkflowVectors, MemoryError> {
    let texts: Vec<String> =
        workflows.iter().map(|workflow| embedding_text(&workflow.description, workflow.tool_sequence())).collect();
    embed_texts(embedder, &texts).await
}

async fn embed_texts(embedder: &dyn EmbeddingModel, texts: &[String]) -> Result<WorkflowVectors, MemoryError> {
    let embedded = embedder
        .embed(texts)
        .await
        .map_err(|source| MemoryError::Embedding { model: embedder.name().to_owned(), source })?;
    if embedded.vectors.len() != texts.len() {
        return Err(MemoryError::Retrieval {
            reason: format!(
                "embedding model `{}` returned {} vectors for {} texts",
                embedder.name(),
                embedded.vectors.len(),
                texts.len()
            ),
        });
    }
    Ok(WorkflowVectors { model: embedder.model_id(), vectors: embedded.vectors })
}

/// How many workflows [`sync_vectors`] embeds per call of the model and per transaction.
const SYNC_BATCH: usize = 128;

/// Embeds every stored workflow that lacks a vector of `embedder`'s model (never
/// embedded, or embedded by another model: the rebuild after a model change) and
/// writes the vectors, 128 per transaction, so a kill loses at most one
/// batch. Returns how many workflows it embedded.
///
/// # Errors
///
/// [`MemoryError::Embedding`] when the model fails, [`MemoryError::Database`] when reading
/// or writing fails; the batches written before stay.
pub async fn sync_vectors(store: &mut MemoryStore, embedder: &dyn EmbeddingModel) -> Result<usize, MemoryError> {
    let model = embedder.model_id();
    let mut after = 0;
    let mut n_embedded = 0;
    loop {
        let tasks = store.vector_backlog(&model, after, SYNC_BATCH)?;
        let Some(last) = tasks.last() else { break };
        after = last.pk;
        let texts: Vec<String> = tasks.iter().map(|task| task.text.clone()).collect();
        let vectors = embed_texts(embedder, &texts).await?;
        let ids: Vec<&str> = tasks.iter().map(|task| task.id.as_str()).collect();
        n_embedded += store.set_vectors(&ids, &vectors)?;
        tracing::info!(model = %model, embedded = n_embedded, "embedded stored workflows");
    }
    Ok(n_embedded)
}

/// `vector` scaled to unit length ([`flowmem_llm::normalize`]).
pub(crate) fn normalised(vector: &[f32]) -> Vec<f32> {
    let mut vector = vector.to_vec();
    flowmem_llm::normalize(&mut vector);
    vector
}
