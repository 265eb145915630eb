//! Vector and hybrid retrieval: vectors stored with their workflows, rebuilt when the
//! embedding model changes, scope filters. The embedding model is the real HTTP client
//! against the scripted server's bag-of-words `/v1/embeddings` on loopback.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use flowmem_llm::{EmbeddingModel, HttpEmbeddingConfig, HttpEmbeddingModel, RetryPolicy};
use flowmem_memory::{MemoryError, MemoryStore, RetrievalMode, Retriever, StoreConfig, embed_workflows, sync_vectors};
use flowmem_model::{Scope, Workflow};
use flowmem_testsupport::{Script, ScriptedLlmServer};

use crate::workflow;

fn embedder(server: &ScriptedLlmServer, model: &str) -> Arc<dyn EmbeddingModel> {
    let mut cfg = HttpEmbeddingConfig::new("scripted-embedder", server.base_url(), model);
    cfg.timeout = Duration::from_secs(10);
    cfg.retry = RetryPolicy { max_retries: 0, ..RetryPolicy::standard() };
    Arc::new(HttpEmbeddingModel::new(cfg).unwrap())
}

fn domain(name: &str) -> Scope {
    Scope { site: None, domain: Some(name.to_owned()) }
}

fn corpus() -> Vec<Workflow> {
    vec![
        workflow("cancel a pending order", &["find_user", "cancel_pending_order"], Some("retail")),
        workflow("exchange a delivered item", &["get_order", "exchange_delivered_order_items"], Some("retail")),
        workflow("book a flight reservation", &["search_flights", "book_reservation"], Some("airline")),
        workflow("cancel a flight reservation", &["get_reservation", "cancel_reservation"], Some("airline")),
    ]
}

/// The vector rows of the file, read over a connection of its own: (workflow id, model).
fn vector_rows(path: &std::path::Path) -> Vec<(String, String)> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT w.id, v.model FROM workflow_vectors AS v JOIN workflows AS w ON w.pk = v.pk ORDER BY w.pk")
        .unwrap();
    stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?))).unwrap().map(Result::unwrap).collect()
}

#[tokio::test]
async fn vectors_are_written_in_the_same_transaction_as_their_workflows() {
    let server = ScriptedLlmServer::start(Script::new()).await;
    let model = embedder(&server, "bag-a");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let mut store = MemoryStore::open(&path, StoreConfig::standard()).unwrap();

    // A batch whose last workflow is refused stores neither workflows nor vectors.
    let mut batch = corpus();
    batch.push(workflow("no steps", &[], None));
    let vectors = embed_workflows(model.as_ref(), &batch).await.unwrap();
    assert!(matches!(store.add_all_with_vectors(&batch, Some(&vectors)), Err(MemoryError::InvalidWorkflow { .. })));
    assert_eq!(store.count(&Scope::default()).unwrap(), 0);
    assert!(vector_rows(&path).is_empty(), "no vector outlives its rolled-back workflow");

    // Vectors that do not fit the workflows are refused before anything is written.
    let short =
        flowmem_memory::WorkflowVectors { model: vectors.model.clone(), vectors: vectors.vectors[..2].to_vec() };
    assert!(matches!(store.add_all_with_vectors(&corpus(), Some(&short)), Err(MemoryError::Retrieval { .. })));

    let vectors = embed_workflows(model.as_ref(), &corpus()).await.unwrap();
    let outcomes = store.add_all_with_vectors(&corpus(), Some(&vectors)).unwrap();
    let ids: Vec<String> = outcomes.iter().map(|outcome| outcome.id().to_owned()).collect();
    let rows = vector_rows(&path);
    assert_eq!(rows.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(), ids);
    assert!(rows.iter().all(|(_, model)| model == "openai:bag-a"), "{rows:?}");
    assert_eq!(store.vector_coverage("openai:bag-a", &Scope::default()).unwrap(), (4, 4));

    // Deleting a workflow deletes its vector.
    store.delete(&ids[0]).unwrap();
    assert_eq!(vector_rows(&path).len(), 3);
    assert_eq!(store.vector_coverage("openai:bag-a", &Scope::default()).unwrap(), (3, 3));
}

#[tokio::test]
async fn a_change_of_embedding_model_rebuilds_the_vectors() {
    let server = ScriptedLlmServer::start(Script::new()).await;
    let (old, new) = (embedder(&server, "bag-a"), embedder(&server, "bag-b"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.db");
    let mut writer = MemoryStore::open(&path, StoreConfig::standard()).unwrap();
    let vectors = embed_workflows(old.as_ref(), &corpus()).await.unwrap();
    writer.add_all_with_vectors(&corpus(), Some(&vectors)).unwrap();
    // A workflow stored without a vector (by a writer with no embedding model).
    writer.add(&workflow("return a delivered item", &["get_order", "return_items"], Some("retail"))).unwrap();

    // Another process searches the same file; its index follows the writes.
    let reader = MemoryStore::open(&path, StoreConfig::standard()).unwrap();
    let new_retriever = Retriever::new(RetrievalMode::Vector, Some(new.clone())).unwrap();
    let before = new_retriever.search(&reader, "cancel my flight", &Scope::default(), 5).await.unwrap();
    assert!(before.hits.is_empty(), "no stored vector is of the new model: {:?}", before.hits);
    assert_eq!(reader.vector_coverage("openai:bag-b", &Scope::default()).unwrap(), (5, 0));

    assert_eq!(sync_vectors(&mut writer, new.as_ref()).await.unwrap(), 5, "four re-embedded, one embedded");
    assert_eq!(sync_vectors(&mut writer, new.as_ref()).await.unwrap(), 0, "nothing left to do");
    assert!(vector_rows(&path).iter().all(|(_, model)| model == "openai:bag-b"));
    assert_eq!(reader.vector_coverage("openai:bag-b", &Scope::default()).unwrap(), (5, 5));
    let after = new_retriever.search(&reader, "cancel my flight reservation", &Scope::default(), 2).await.unwrap();
    assert_eq!(after.hits[0].workflow.description, "cancel a flight reservation");
    assert!(after.hits.iter().all(|hit| hit.similarity.is_some() && hit.bm25.is_none()));
    let old_retriever = Retriever::new(RetrievalMode::Vector, Some(old)).unwrap();
    let stale = old_retriever.search(&reader, "cancel my flight", &Scope::default(), 5).await.unwrap();
    assert!(stale.hits.is_empty(), "vectors of two models are never compared");
}

#[tokio::test]
async fn every_mode_keeps_to_the_scope_filter() {
    let server = ScriptedLlmServer::start(Script::new()).await;
    let model = embedder(&server, "bag-a");
    let dir = tempfile::tempdir().unwrap();
    let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard()).unwrap();
    let vectors = embed_workflows(model.as_ref(), &corpus()).await.unwrap();
    store.add_all_with_vectors(&corpus(), Some(&vectors)).unwrap();
    for mode in RetrievalMode::ALL {
        let retriever = Retriever::new(mode, Some(model.clone())).unwrap();
        let retrieval = retriever.search(&store, "cancel a reservation", &domain("airline"), 10).await.unwrap();
        assert_eq!(retrieval.mode, mode);
        assert!(!retrieval.hits.is_empty(), "{mode}");
        assert!(
            retrieval.hits.iter().all(|hit| hit.workflow.scope == domain("airline")),
            "{mode}: {:?}",
            retrieval.hits
        );
        assert_eq!(retrieval.hits[0].workflow.description, "cancel a flight reservation", "{mode}");
        let record = retrieval.record();
        assert_eq!(record["mode"], mode.as_str());
        assert_eq!(record["hits"][0]["id"], retrieval.hits[0].workflow.id.as_str());
    }
    let none = Retriever::new(RetrievalMode::Hybrid, Some(model)).unwrap();
    let retrieval = none.search(&store, "cancel a reservation", &domain("telecom"), 10).await.unwrap();
    assert!(retrieval.hits.is_empty());
}

#[tokio::test]
async fn hybrid_hits_carry_both_scores_and_a_vector_mode_needs_a_model() {
    let server = ScriptedLlmServer::start(Script::new()).await;
    let model = embedder(&server, "bag-a");
    let dir = tempfile::tempdir().unwrap();
    let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard()).unwrap();
    let vectors = embed_workflows(model.as_ref(), &corpus()).await.unwrap();
    store.add_all_with_vectors(&corpus(), Some(&vectors)).unwrap();
    let retriever = Retriever::new(RetrievalMode::Hybrid, Some(model)).unwrap();
    let retrieval = retriever.search(&store, "cancel a pending order", &Scope::default(), 4).await.unwrap();
    let top = &retrieval.hits[0];
    assert_eq!(top.workflow.description, "cancel a pending order");
    assert!(top.bm25.is_some() && top.similarity.is_some(), "{top:?}");
    // First in both rankings: the fused score of rank 1 twice.
    assert!((top.score - 2.0 / 61.0).abs() < 1e-12, "{}", top.score);
    let err = Retriever::new(RetrievalMode::Vector, None).unwrap_err();
    assert!(err.to_string().contains("needs an embedding model"), "{err}");
    let err = store
        .search_with(
            &flowmem_memory::SearchQuery {
                text: "x".into(),
                mode: RetrievalMode::Hybrid,
                embedding: None,
                provenance: true,
            },
            &Scope::default(),
            3,
        )
        .unwrap_err();
    assert!(matches!(err, MemoryError::Retrieval { .. }), "{err:?}");
}
