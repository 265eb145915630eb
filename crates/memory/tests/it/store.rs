//! The store's shared suite, run against SQLite and PostgreSQL alike: retrieval
//! ranking, dedup, eviction, statistics, migrations, retirement, usage per day.

use flowmem_memory::{AddOutcome, MemoryError, MemoryStore, PrunePolicy, StoreConfig, UseOutcome};
use flowmem_model::Scope;

use crate::{Backend, TestMemory, workflow};

crate::both_backends!(
    retrieval_ranks_a_hand_made_set,
    dedup_merges_near_duplicates_and_keeps_both_provenances,
    a_full_scope_evicts_the_lowest_retention_score_then_the_oldest,
    usage_statistics_and_prune_by_success_rate,
    reopening_migrates_nothing_twice_and_refuses_newer_schemas,
    workflows_without_steps_are_refused,
    an_open_store_sees_writes_and_deletes_made_through_another_handle,
    siblings_share_one_index_that_follows_every_handle,
    retiring_hides_a_workflow_everywhere_and_restoring_brings_it_back,
    a_new_description_is_searched_at_once_and_keeps_the_id,
    usage_is_counted_per_day,
    a_page_filters_sorts_and_counts,
    vectors_are_written_replaced_and_searched,
    a_copy_into_the_other_backend_loses_nothing,
);

/// The schema version a new memory has: each backend counts its own migrations.
fn schema_version(backend: Backend) -> i64 {
    match backend {
        Backend::Sqlite => 6,
        Backend::Postgres => 3,
    }
}

fn domain(name: &str) -> Scope {
    Scope { site: None, domain: Some(name.to_owned()) }
}

/// Ranks `query` within `scope` and returns the descriptions, best first.
fn ranked(store: &MemoryStore, query: &str, scope: &Scope) -> Vec<String> {
    let hits = store.search(query, scope, 10).unwrap();
    for pair in hits.windows(2) {
        assert!(pair[0].score >= pair[1].score, "hits must come best first");
    }
    hits.into_iter().map(|hit| hit.workflow.description).collect()
}

fn retrieval_ranks_a_hand_made_set(backend: Backend) {
    let memory = TestMemory::new(backend);
    let mut store = memory.open(StoreConfig::standard());
    let set = [
        workflow(
            "Cancel a pending order and refund it to the original payment method",
            &["find_user_id_by_email", "get_order_details", "cancel_pending_order"],
            Some("retail"),
        ),
        workflow(
            "Exchange a delivered item for another variant of the same product",
            &["get_order_details", "get_product_details", "exchange_delivered_order_items"],
            Some("retail"),
        ),
        workflow(
            "Update the shipping address of a pending order",
            &["get_order_details", "modify_pending_order_address"],
            Some("retail"),
        ),
        workflow(
            "Look up a user's profile by name and zip code",
            &["find_user_id_by_name_zip", "get_user_details"],
            Some("retail"),
        ),
        workflow(
            "Cancel a flight reservation and refund it",
            &["get_reservation_details", "cancel_reservation"],
            Some("airline"),
        ),
    ];
    store.add_all(&set).unwrap();

    let retail = domain("retail");
    let cancel = ranked(&store, "I want to cancel my order and get a refund", &retail);
    assert_eq!(cancel[0], set[0].description);
    assert!(!cancel.contains(&set[4].description), "the scope filter keeps airline out: {cancel:?}");

    let exchange = ranked(&store, "exchange an item for a different product variant", &retail);
    assert_eq!(exchange[0], set[1].description);

    // Tool names in steps are searchable too: `modify_pending_order_address` mentions address.
    let address = ranked(&store, "change address", &retail);
    assert_eq!(address[0], set[2].description);

    // Without a scope filter the airline workflow competes, and wins on its own words.
    let flight = ranked(&store, "cancel flight reservation", &Scope::default());
    assert_eq!(flight[0], set[4].description);

    assert!(ranked(&store, "zzzz unknownword", &retail).is_empty());
    assert!(ranked(&store, "  ?! ", &retail).is_empty());
}

fn dedup_merges_near_duplicates_and_keeps_both_provenances(backend: Backend) {
    let memory = TestMemory::new(backend);
    let mut store = memory.open(StoreConfig::standard());
    let tools = ["find_user_id_by_email", "get_order_details"];
    let mut first = workflow("Look up the details of a user's order", &tools, Some("retail"));
    first.provenance.trajectory_ids = vec!["t1".into()];
    let mut second = workflow("look up details of the user's order", &tools, Some("retail"));
    second.provenance.trajectory_ids = vec!["t2".into(), "t3".into()];
    second.provenance.inducer = "lm".into();
    second.provenance.model = Some("scripted".into());

    let id = store.add(&first).unwrap().id().to_owned();
    let outcome = store.add(&second).unwrap();
    let AddOutcome::Merged { id: merged_id, similarity } = outcome else {
        panic!("expected a merge, got {outcome:?}");
    };
    assert_eq!(merged_id, id);
    assert!(similarity >= 0.5);
    assert_eq!(store.count(&Scope::default()).unwrap(), 1);
    let stored = store.get(&id).unwrap();
    assert_eq!(stored.description, first.description, "the stored description is kept");
    assert_eq!(stored.provenance.trajectory_ids, ["t1", "t2", "t3"]);
    let provenances = store.provenances(&id).unwrap();
    assert_eq!(provenances.len(), 2);
    assert_eq!(provenances[1].inducer, "lm");
    assert_eq!(provenances[1].model.as_deref(), Some("scripted"));

    // Not merged: another tool sequence, a dissimilar description, or another scope.
    let other_tools = workflow(
        "Look up the details of a user's order",
        &["get_order_details", "find_user_id_by_email"],
        Some("retail"),
    );
    let dissimilar = workflow("Cancel a pending order", &tools, Some("retail"));
    let other_scope = workflow("Look up the details of a user's order", &tools, Some("airline"));
    for workflow in [other_tools, dissimilar, other_scope] {
        assert!(matches!(store.add(&workflow).unwrap(), AddOutcome::Inserted { .. }));
    }
    assert_eq!(store.count(&Scope::default()).unwrap(), 4);
}

fn a_full_scope_evicts_the_lowest_retention_score_then_the_oldest(backend: Backend) {
    let memory = TestMemory::new(backend);
    let cfg = StoreConfig { max_per_scope: Some(3), ..StoreConfig::standard() };
    let mut store = memory.open(cfg);
    let ids: Vec<String> = ["alpha", "bravo", "charlie"]
        .iter()
        .enumerate()
        .map(|(idx, name)| {
            let tools = [format!("tool_{idx}_a"), format!("tool_{idx}_b")];
            let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
            store.add(&workflow(name, &tools, Some("retail"))).unwrap().id().to_owned()
        })
        .collect();
    // alpha helped twice; bravo failed twice; charlie was never used.
    for _ in 0..2 {
        store.record_use(&ids[0], UseOutcome::Success).unwrap();
        store.record_use(&ids[1], UseOutcome::Failure).unwrap();
    }
    // Another scope is not affected by this scope's bound.
    store.add(&workflow("elsewhere", &["x", "y"], Some("airline"))).unwrap();

    let outcome = store.add(&workflow("delta", &["d1", "d2"], Some("retail"))).unwrap();
    let AddOutcome::Inserted { evicted, .. } = outcome else { panic!("expected an insert") };
    assert_eq!(evicted, [ids[1].clone()], "the workflow that kept failing goes first");

    // Now charlie and delta are both unused: the older one, charlie, goes.
    let outcome = store.add(&workflow("echo", &["e1", "e2"], Some("retail"))).unwrap();
    let AddOutcome::Inserted { evicted, .. } = outcome else { panic!("expected an insert") };
    assert_eq!(evicted, [ids[2].clone()]);
    assert_eq!(store.count(&domain("retail")).unwrap(), 3);
    assert_eq!(store.count(&domain("airline")).unwrap(), 1);
    assert!(matches!(store.get(&ids[2]), Err(MemoryError::NotFound { .. })));
    assert!(store.search("charlie", &Scope::default(), 5).unwrap().is_empty(), "the index forgets evicted workflows");
}

fn usage_statistics_and_prune_by_success_rate(backend: Backend) {
    let memory = TestMemory::new(backend);
    let mut store = memory.open(StoreConfig::standard());
    let good = store.add(&workflow("reliable order lookup", &["a", "b"], None)).unwrap().id().to_owned();
    let bad = store.add(&workflow("unreliable order lookup", &["c", "d"], None)).unwrap().id().to_owned();
    let hits = store.retrieve("order lookup", &Scope::default(), 5).unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|hit| hit.workflow.stats.retrieved == 1));
    store.search("order lookup", &Scope::default(), 5).unwrap();
    assert_eq!(store.get(&good).unwrap().stats.retrieved, 1, "search alone does not count");
    for _ in 0..4 {
        store.record_use(&good, UseOutcome::Success).unwrap();
        store.record_use(&bad, UseOutcome::Failure).unwrap();
    }
    let stats = store.get(&bad).unwrap().stats;
    assert_eq!((stats.used_success, stats.used_failure), (0, 4));
    assert!(matches!(store.record_use("wf-missing", UseOutcome::Success), Err(MemoryError::NotFound { .. })));

    let policy = PrunePolicy { max_per_scope: None, min_success_rate: Some(0.4), min_uses: 3 };
    assert_eq!(store.prune(&policy).unwrap(), [bad]);
    assert_eq!(store.count(&Scope::default()).unwrap(), 1);
}

fn reopening_migrates_nothing_twice_and_refuses_newer_schemas(backend: Backend) {
    let memory = TestMemory::new(backend);
    let path = memory.location();
    let id = {
        let mut store = MemoryStore::open(path, StoreConfig::standard()).unwrap();
        assert_eq!(store.schema_version().unwrap(), schema_version(backend));
        store.add(&workflow("persisted", &["a", "b"], None)).unwrap().id().to_owned()
    };
    let store = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    assert_eq!(store.get(&id).unwrap().description, "persisted");
    assert_eq!(store.schema_version().unwrap(), schema_version(backend));
    drop(store);

    let db = flowmem_db::Db::open(&flowmem_db::DbLocation::parse(path.as_os_str()), std::time::Duration::from_secs(5))
        .unwrap();
    match backend {
        Backend::Sqlite => db.batch("PRAGMA user_version = 99").unwrap(),
        Backend::Postgres => db.batch("UPDATE flowmem_meta SET version = 99 WHERE name = 'memory'").unwrap(),
    }
    drop(db);
    let err = MemoryStore::open(path, StoreConfig::standard()).unwrap_err();
    let supported = schema_version(backend);
    assert!(matches!(err, MemoryError::SchemaTooNew { found: 99, supported: s, .. } if s == supported), "{err}");
}

fn workflows_without_steps_are_refused(backend: Backend) {
    let memory = TestMemory::new(backend);
    let mut store = memory.open(StoreConfig::standard());
    let err = store.add(&workflow("empty", &[], None)).unwrap_err();
    assert!(err.to_string().contains("no steps"), "{err}");
}

fn an_open_store_sees_writes_and_deletes_made_through_another_handle(backend: Backend) {
    let memory = TestMemory::new(backend);
    let path = memory.location();
    let reader = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    let mut writer = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    assert!(reader.search("parcel", &Scope::default(), 5).unwrap().is_empty());
    let id = writer.add(&workflow("track a parcel", &["a", "b"], None)).unwrap().id().to_owned();
    writer.add(&workflow("return a parcel", &["c", "d"], None)).unwrap();
    assert_eq!(reader.search("parcel", &Scope::default(), 5).unwrap().len(), 2);
    writer.delete(&id).unwrap();
    let hits = reader.search("parcel", &Scope::default(), 5).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].workflow.description, "return a parcel");
}

fn siblings_share_one_index_that_follows_every_handle(backend: Backend) {
    let memory = TestMemory::new(backend);
    let path = memory.location();
    let first = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    let second = first.open_sibling().unwrap();
    let mut writer = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    let id = writer.add(&workflow("track a parcel", &["a", "b"], None)).unwrap().id().to_owned();
    // The first sibling's search brings the shared index up to date ...
    assert_eq!(first.search("parcel", &Scope::default(), 5).unwrap().len(), 1);
    writer.add(&workflow("return a parcel", &["c", "d"], None)).unwrap();
    // ... and so does the second's, for both.
    assert_eq!(second.search("parcel", &Scope::default(), 5).unwrap().len(), 2);
    assert_eq!(first.search("parcel", &Scope::default(), 5).unwrap().len(), 2);
    writer.delete(&id).unwrap();
    for store in [&first, &second] {
        let hits = store.search("parcel", &Scope::default(), 5).unwrap();
        assert_eq!(hits.iter().map(|hit| hit.workflow.description.as_str()).collect::<Vec<_>>(), ["return a parcel"]);
    }
}

/// Issue 21: a retired workflow leaves every search at once (in this handle, another
/// one, and a fresh index), keeps its row, provenance and statistics, absorbs a twin
/// induced later, and is back in every search after a restore.
fn retiring_hides_a_workflow_everywhere_and_restoring_brings_it_back(backend: Backend) {
    let memory = TestMemory::new(backend);
    let path = memory.location();
    let reader = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    let mut store = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    let tools = ["find_user_id_by_email", "cancel_pending_order"];
    let mut first = workflow("Cancel a pending order for a user", &tools, Some("retail"));
    first.provenance.trajectory_ids = vec!["t1".into()];
    let id = store.add(&first).unwrap().id().to_owned();
    let other = store.add(&workflow("Track a parcel", &["track"], Some("retail"))).unwrap().id().to_owned();
    assert_eq!(reader.search("cancel order", &Scope::default(), 5).unwrap().len(), 1);

    store.retire(&id, "cancels without asking").unwrap();
    let retired_at = store.get(&id).unwrap().retired.expect("marked retired").at;
    store.retire(&id, "again").unwrap();
    let retirement = store.get(&id).unwrap().retired.unwrap();
    assert_eq!((retirement.at, retirement.reason.as_str()), (retired_at, "cancels without asking"), "retiring twice");
    for handle in [&reader, &store] {
        assert!(handle.search("cancel order", &Scope::default(), 5).unwrap().is_empty());
    }
    let fresh = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    assert!(fresh.search("cancel order", &Scope::default(), 5).unwrap().is_empty(), "a rebuilt index");
    assert_eq!(store.count(&Scope::default()).unwrap(), 1);
    assert_eq!(store.list(&Scope::default()).unwrap().iter().map(|w| &w.id).collect::<Vec<_>>(), [&other]);
    assert_eq!(store.list_all(&Scope::default()).unwrap().len(), 2);

    // A twin induced later merges into the retired workflow, which stays retired.
    let mut twin = workflow("cancel the pending order of a user", &tools, Some("retail"));
    twin.provenance.trajectory_ids = vec!["t2".into()];
    assert!(matches!(store.add(&twin).unwrap(), AddOutcome::Merged { id: merged, .. } if merged == id));
    let stored = store.get(&id).unwrap();
    assert!(stored.retired.is_some());
    assert_eq!(stored.provenance.trajectory_ids, ["t1", "t2"]);
    assert!(reader.search("cancel order", &Scope::default(), 5).unwrap().is_empty());
    // A prune does not touch it.
    let policy = PrunePolicy { max_per_scope: Some(1), min_success_rate: None, min_uses: 0 };
    assert!(store.prune(&policy).unwrap().is_empty());

    store.restore(&id).unwrap();
    assert!(store.get(&id).unwrap().retired.is_none());
    for handle in [&reader, &store, &fresh] {
        let hits = handle.search("cancel order", &Scope::default(), 5).unwrap();
        assert_eq!(hits.iter().map(|hit| &hit.workflow.id).collect::<Vec<_>>(), [&id]);
    }
    assert_eq!(store.count(&Scope::default()).unwrap(), 2);
    let fresh = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    assert_eq!(fresh.search("cancel order", &Scope::default(), 5).unwrap().len(), 1);

    assert!(matches!(store.retire("wf-none", ""), Err(MemoryError::NotFound { .. })));
    assert!(matches!(store.restore("wf-none"), Err(MemoryError::NotFound { .. })));
}

/// Issue 21: a new description is what searches match at once; the id, steps and
/// statistics stay; an empty one is refused.
fn a_new_description_is_searched_at_once_and_keeps_the_id(backend: Backend) {
    let memory = TestMemory::new(backend);
    let path = memory.location();
    let reader = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    let mut store = MemoryStore::open(path, StoreConfig::standard()).unwrap();
    let id = store.add(&workflow("Track a parcel", &["track"], None)).unwrap().id().to_owned();
    store.record_use(&id, UseOutcome::Success).unwrap();
    assert_eq!(reader.search("parcel", &Scope::default(), 5).unwrap().len(), 1);
    store.set_description(&id, "  Follow a shipment to the door  ").unwrap();
    assert!(reader.search("parcel", &Scope::default(), 5).unwrap().is_empty());
    let hits = reader.search("shipment", &Scope::default(), 5).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].workflow.id, id);
    assert_eq!(hits[0].workflow.description, "Follow a shipment to the door");
    assert_eq!(hits[0].workflow.stats.used_success, 1);
    assert!(matches!(store.set_description(&id, " "), Err(MemoryError::InvalidWorkflow { .. })));
    assert!(matches!(store.set_description("wf-none", "x"), Err(MemoryError::NotFound { .. })));
    // Retired, the edit is kept but not searched until the restore.
    store.retire(&id, "").unwrap();
    store.set_description(&id, "Trace a delivery").unwrap();
    assert!(reader.search("delivery", &Scope::default(), 5).unwrap().is_empty());
    store.restore(&id).unwrap();
    assert_eq!(reader.search("delivery", &Scope::default(), 5).unwrap().len(), 1);
}

/// Issue 21: uses and retrievals are counted per UTC day beside the running totals, and
/// leave with their workflow.
fn usage_is_counted_per_day(backend: Backend) {
    let memory = TestMemory::new(backend);
    let mut store = memory.open(StoreConfig::standard());
    let id = store.add(&workflow("Track a parcel", &["track"], None)).unwrap().id().to_owned();
    assert!(store.usage(&id).unwrap().is_empty(), "no day before a use");
    store.record_use(&id, UseOutcome::Success).unwrap();
    store.record_use(&id, UseOutcome::Success).unwrap();
    store.record_use(&id, UseOutcome::Failure).unwrap();
    store.retrieve("parcel", &Scope::default(), 5).unwrap();
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let days = store.usage(&id).unwrap();
    assert_eq!(days.len(), 1, "{days:?}");
    assert_eq!(days[0].day, today);
    let stats = days[0].stats;
    assert_eq!((stats.retrieved, stats.used_success, stats.used_failure), (1, 2, 1));
    assert_eq!(store.get(&id).unwrap().stats, stats, "the totals agree");
    // A server's batch names a popular workflow many times: each counts, and workflows
    // hit a different number of times in one batch each get their own.
    let other = store.add(&workflow("Return an item", &["return_item"], None)).unwrap().id().to_owned();
    store.count_retrievals(&[id.as_str(), "wf-gone", other.as_str(), id.as_str(), id.as_str()]).unwrap();
    let days = store.usage(&id).unwrap();
    assert_eq!(days[0].stats.retrieved, 4, "{days:?}");
    assert_eq!(store.get(&id).unwrap().stats.retrieved, 4, "the total agrees");
    assert_eq!(store.usage(&other).unwrap()[0].stats.retrieved, 1);
    assert_eq!(store.get(&other).unwrap().stats.retrieved, 1);
    assert!(matches!(store.usage("wf-none"), Err(MemoryError::NotFound { .. })));
    store.delete(&id).unwrap();
    let id = store.add(&workflow("Track a parcel", &["track"], None)).unwrap().id().to_owned();
    assert!(store.usage(&id).unwrap().is_empty(), "a deleted workflow's days went with it");
}

/// Issue 21's curator page: text (case-folded, `%` and `_` literal), status, the five
/// orders, paging and the total, on both backends alike.
fn a_page_filters_sorts_and_counts(backend: Backend) {
    use flowmem_memory::{PageQuery, PageSort, PageStatus};
    let memory = TestMemory::new(backend);
    let mut store = memory.open(StoreConfig::standard());
    let ids: Vec<String> = ["Refund an Order", "Track a parcel", "refund a 100% damaged item", "Cancel an order"]
        .iter()
        .enumerate()
        .map(|(idx, description)| {
            let tools = [format!("tool_{idx}")];
            let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
            store.add(&workflow(description, &tools, Some("retail"))).unwrap().id().to_owned()
        })
        .collect();
    for _ in 0..3 {
        store.record_use(&ids[1], UseOutcome::Success).unwrap();
    }
    store.record_use(&ids[3], UseOutcome::Failure).unwrap();
    store.count_retrievals(&[&ids[2], &ids[2]]).unwrap();
    store.retire(&ids[3], "duplicate").unwrap();
    let page = |query: PageQuery| {
        let page = store.page(&PageQuery { limit: 10, ..query }).unwrap();
        (page.total, page.workflows.into_iter().map(|w| w.id).collect::<Vec<_>>())
    };
    assert_eq!(
        page(PageQuery { text: Some("REFUND".into()), ..PageQuery::default() }),
        (2, vec![ids[0].clone(), ids[2].clone()])
    );
    assert_eq!(page(PageQuery { text: Some("100%".into()), ..PageQuery::default() }), (1, vec![ids[2].clone()]));
    assert_eq!(page(PageQuery { text: Some("1_0".into()), ..PageQuery::default() }).0, 0, "`_` is literal");
    assert_eq!(page(PageQuery { text: Some("tool_1".into()), ..PageQuery::default() }).1, [ids[1].clone()], "steps");
    assert_eq!(page(PageQuery { status: PageStatus::Retired, ..PageQuery::default() }).1, [ids[3].clone()]);
    assert_eq!(page(PageQuery { status: PageStatus::All, ..PageQuery::default() }).0, 4);
    let sorted = |sort| page(PageQuery { sort, status: PageStatus::All, ..PageQuery::default() }).1;
    assert_eq!(sorted(PageSort::Newest)[0], ids[3]);
    assert_eq!(sorted(PageSort::MostUsed)[..2], [ids[1].clone(), ids[3].clone()]);
    assert_eq!(sorted(PageSort::BestSuccess)[0], ids[1]);
    assert_eq!(sorted(PageSort::MostRetrieved)[0], ids[2]);
    let second = store.page(&PageQuery { offset: 1, limit: 1, ..PageQuery::default() }).unwrap();
    assert_eq!((second.total, second.workflows[0].id.as_str()), (3, ids[1].as_str()));
}

/// Vectors go in with their workflows, are replaced, leave with a new description, and
/// rank by cosine; another handle's index sees them.
fn vectors_are_written_replaced_and_searched(backend: Backend) {
    use flowmem_memory::{QueryEmbedding, RetrievalMode, SearchQuery, WorkflowVectors};
    let memory = TestMemory::new(backend);
    let mut store = memory.open(StoreConfig::standard());
    let reader = memory.open(StoreConfig::standard());
    let set = [workflow("alpha", &["a"], None), workflow("bravo", &["b"], None), workflow("charlie", &["c"], None)];
    let vectors = WorkflowVectors {
        model: "m1".into(),
        vectors: vec![vec![1.0, 0.0, 0.0], vec![0.0, 2.0, 0.0], vec![0.0, 0.0, 3.0]],
    };
    let ids: Vec<String> =
        store.add_all_with_vectors(&set, Some(&vectors)).unwrap().iter().map(|o| o.id().to_owned()).collect();
    let nearest = |store: &MemoryStore, vector: Vec<f32>| {
        let query = SearchQuery {
            text: String::new(),
            mode: RetrievalMode::Vector,
            embedding: Some(QueryEmbedding { model: "m1".into(), vector }),
            provenance: true,
        };
        store
            .search_with(&query, &Scope::default(), 3)
            .unwrap()
            .into_iter()
            .map(|hit| hit.workflow.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(nearest(&reader, vec![0.1, 0.9, 0.0])[0], ids[1]);
    assert_eq!(reader.vector_coverage("m1", &Scope::default()).unwrap(), (3, 3));
    let replaced = WorkflowVectors { model: "m1".into(), vectors: vec![vec![0.0, 0.0, 1.0]] };
    assert_eq!(store.set_vectors(&[&ids[0]], &replaced).unwrap(), 1);
    assert_eq!(nearest(&reader, vec![0.0, 0.0, 1.0])[..2].iter().collect::<std::collections::BTreeSet<_>>().len(), 2);
    assert!(nearest(&reader, vec![0.0, 0.0, 1.0])[..2].contains(&ids[0]), "the new vector ranks");
    store.set_description(&ids[2], "charlie renamed").unwrap();
    assert_eq!(reader.vector_coverage("m1", &Scope::default()).unwrap(), (3, 2));
    let backlog = reader.vector_backlog("m1", 0, 10).unwrap();
    assert_eq!(backlog.iter().map(|task| &task.id).collect::<Vec<_>>(), [&ids[2]]);
    assert!(backlog[0].text.contains("charlie renamed"));
}

/// Issue 22's migration: a copy into the other backend keeps ids, every provenance,
/// totals, usage per day, retirements and vectors, is searchable at once, and a copy
/// into a memory that holds workflows is refused.
fn a_copy_into_the_other_backend_loses_nothing(backend: Backend) {
    use flowmem_memory::WorkflowVectors;
    let memory = TestMemory::new(backend);
    let mut store = memory.open(StoreConfig::standard());
    let tools = ["find_user_id_by_email", "get_order_details"];
    let mut first = workflow("Look up the details of a user's order", &tools, Some("retail"));
    first.provenance.trajectory_ids = vec!["t1".into()];
    let mut twin = workflow("look up details of the user's order", &tools, Some("retail"));
    twin.provenance.trajectory_ids = vec!["t2".into()];
    twin.provenance.model = Some("scripted".into());
    let set =
        [first, twin, workflow("Track a parcel", &["track"], None), workflow("Cancel an order", &["cancel"], None)];
    let vectors = WorkflowVectors { model: "m1".into(), vectors: vec![vec![1.0, 0.0]; 4] };
    let ids: Vec<String> =
        store.add_all_with_vectors(&set, Some(&vectors)).unwrap().iter().map(|o| o.id().to_owned()).collect();
    store.record_use(&ids[0], UseOutcome::Success).unwrap();
    store.retrieve("parcel", &Scope::default(), 5).unwrap();
    store.retire(&ids[3], "unsafe").unwrap();

    let other = TestMemory::new(match backend {
        Backend::Sqlite => Backend::Postgres,
        Backend::Postgres => Backend::Sqlite,
    });
    let mut copy = other.open(StoreConfig::standard());
    assert_eq!(store.copy_into(&mut copy).unwrap(), 3);
    assert_eq!(copy.list_all(&Scope::default()).unwrap(), store.list_all(&Scope::default()).unwrap());
    for id in [&ids[0], &ids[2], &ids[3]] {
        assert_eq!(copy.provenances(id).unwrap(), store.provenances(id).unwrap());
        assert_eq!(copy.usage(id).unwrap(), store.usage(id).unwrap());
    }
    assert_eq!(copy.provenances(&ids[0]).unwrap().len(), 2, "the merged twin's provenance came along");
    assert_eq!(copy.vector_coverage("m1", &Scope::default()).unwrap(), (2, 2), "vectors of the two in use");
    assert_eq!(copy.search("parcel", &Scope::default(), 5).unwrap()[0].workflow.id, ids[2]);
    assert!(copy.search("cancel", &Scope::default(), 5).unwrap().is_empty(), "still retired");
    let err = store.copy_into(&mut copy).unwrap_err();
    assert!(err.to_string().contains("already holds 3 workflows"), "{err}");
}

/// A PostgreSQL URL's password never reaches an error, and a database holding another
/// application's `workflows` table is refused and left unchanged.
#[test]
fn postgres_errors_hide_the_password_and_foreign_databases_are_left_alone() {
    let unreachable = std::path::Path::new("postgres://flowmem:hunter2@127.0.0.1:1/memory?connect_timeout=2");
    let err = MemoryStore::open(unreachable, StoreConfig::standard()).unwrap_err();
    let shown = format!("{} / {err:?}", flowmem_model::error_chain(&err));
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("postgres://flowmem:***@127.0.0.1:1/memory"), "{shown}");

    let url = flowmem_testsupport::PgCluster::shared().fresh_database();
    let db =
        flowmem_db::Db::open(&flowmem_db::DbLocation::parse(url.as_ref()), std::time::Duration::from_secs(5)).unwrap();
    db.batch("CREATE TABLE workflows (name TEXT)").unwrap();
    let err = MemoryStore::open(std::path::Path::new(&url), StoreConfig::standard()).unwrap_err();
    assert!(matches!(err, MemoryError::NotMemory { .. }), "{err}");
    let tables = db
        .query_map("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename", &[], |row| {
            row.text(0)
        })
        .unwrap();
    assert_eq!(tables, ["workflows"], "nothing was added");
}

/// A PostgreSQL memory tells a watcher of every committed write to the index log (the
/// `flowmem_index` channel), and a SQLite file has no watcher.
#[test]
fn a_watcher_of_a_postgres_memory_is_woken_by_each_write() {
    let memory = TestMemory::new(Backend::Postgres);
    let mut store = memory.open(StoreConfig::standard());
    let (woken, wakes) = std::sync::mpsc::channel();
    let listener = MemoryStore::watch(memory.location(), move || {
        let _ = woken.send(());
    })
    .expect("PostgreSQL memories can be watched");
    let timeout = std::time::Duration::from_secs(20);
    wakes.recv_timeout(timeout).expect("a wake once connected");
    for (idx, name) in ["track a parcel", "return a parcel"].iter().enumerate() {
        store.add(&workflow(name, &[&format!("tool_{idx}")], None)).unwrap();
        wakes.recv_timeout(timeout).unwrap_or_else(|_| panic!("no wake after write {idx}"));
    }
    // Counting a use does not touch the index log: no wake.
    let id = store.list(&Scope::default()).unwrap()[0].id.clone();
    store.record_use(&id, UseOutcome::Success).unwrap();
    assert!(wakes.recv_timeout(std::time::Duration::from_millis(500)).is_err(), "a use is no change of the list");
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    assert!(MemoryStore::watch(&dir.path().join("memory.db"), || {}).is_none());
}

/// When the server drops every connection (a restart, an administrator), a store fails
/// at most the call that met the dropped connection and then reconnects; a watcher
/// reconnects and wakes so its owner catches up, and hears later writes again.
#[test]
fn a_postgres_memory_reconnects_after_the_server_drops_its_connections() {
    let memory = TestMemory::new(Backend::Postgres);
    let mut store = memory.open(StoreConfig::standard());
    let mut writer = memory.open(StoreConfig::standard());
    store.add(&workflow("track a parcel", &["track"], None)).unwrap();
    let (woken, wakes) = std::sync::mpsc::channel();
    let _listener = MemoryStore::watch(memory.location(), move || {
        let _ = woken.send(());
    })
    .unwrap();
    let timeout = std::time::Duration::from_secs(20);
    wakes.recv_timeout(timeout).expect("a wake once connected");

    let admin = flowmem_db::Db::open(
        &flowmem_db::DbLocation::parse(memory.location().as_os_str()),
        std::time::Duration::from_secs(5),
    )
    .unwrap();
    let dropped = admin
        .query_one(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap()
        .int(0)
        .unwrap();
    assert!(dropped >= 3, "the store's, the writer's and the watcher's connections: {dropped}");
    wakes.recv_timeout(timeout).expect("the watcher reconnected and woke");

    // At most one failed call each, then as before.
    let counted = (0..2).find_map(|_| store.count(&Scope::default()).ok());
    assert_eq!(counted, Some(1));
    let added = (0..2).find_map(|_| writer.add(&workflow("return a parcel", &["ret"], None)).ok());
    assert!(added.is_some(), "the writer reconnected");
    wakes.recv_timeout(timeout).expect("the watcher hears writes after reconnecting");
    assert_eq!(store.search("parcel", &Scope::default(), 5).unwrap().len(), 2, "the index caught up");
}

/// Eight processes' worth of handles opening one new PostgreSQL memory at the same
/// moment all succeed: the migrations run once, one after the other, under the
/// advisory lock.
#[test]
fn handles_opening_a_new_postgres_memory_at_once_migrate_it_once() {
    let url = flowmem_testsupport::PgCluster::shared().fresh_database();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (url, barrier) = (url.clone(), std::sync::Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                MemoryStore::open(std::path::Path::new(&url), StoreConfig::standard())
                    .map(|store| store.schema_version())
            })
        })
        .collect();
    for handle in handles {
        let version = handle.join().unwrap().expect("every handle opens").unwrap();
        assert_eq!(version, schema_version(Backend::Postgres));
    }
}

#[test]
fn a_search_without_provenance_finds_the_same_hits_and_skips_only_the_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard()).unwrap();
    let mut set = flowmem_testsupport::synthetic_workflows(200, 5);
    for (n, workflow) in set.iter_mut().enumerate() {
        workflow.provenance.trajectory_ids = vec![format!("run-{n}")];
    }
    store.add_all(&set).unwrap();
    let query = flowmem_memory::SearchQuery::bm25("cancel my pending order and refund it");
    let full = store.search_with(&query, &Scope::default(), 5).unwrap();
    let light = store.search_with(&query.clone().without_provenance(), &Scope::default(), 5).unwrap();
    assert_eq!(full.len(), 5);
    let summary = |hits: &[flowmem_memory::Hit]| {
        hits.iter().map(|hit| (hit.workflow.id.clone(), hit.score, hit.workflow.steps.len())).collect::<Vec<_>>()
    };
    assert_eq!(summary(&full), summary(&light));
    for (with, without) in full.iter().zip(&light) {
        assert!(!with.workflow.provenance.trajectory_ids.is_empty(), "{:?}", with.workflow.provenance);
        assert!(without.workflow.provenance.trajectory_ids.is_empty());
        assert_eq!(with.workflow.provenance.created_at, without.workflow.provenance.created_at);
        assert_eq!(with.workflow.description, without.workflow.description);
    }
}
