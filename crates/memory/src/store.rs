//! The workflow memory: a SQLite file or a PostgreSQL database, with BM25 and vector
//! retrieval, dedup and eviction. The SQL is written once for both ([`flowmem_db`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use flowmem_db::{Db, DbError, DbLocation, Dialect, Row, SqliteBackend, Value};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use flowmem_model::{Provenance, Retirement, Scope, Workflow, WorkflowStats, WorkflowStep, canonical_json};

use crate::error::MemoryError;
use crate::index::{Ranking, SearchIndex, encode_vector};
use crate::retrieval::{RetrievalMode, SearchQuery, WorkflowVectors, normalised};
use crate::schema::{APPLICATION_ID, INDEX_CHANNEL, MIGRATIONS, Ownership, PG_MIGRATIONS, ownership};
use crate::text::{action_key, description_similarity, embedding_text, steps_text};

/// How a store behaves; every field is a policy the caller chooses.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// The most workflows kept per exact scope; the lowest [`retention_score`] goes
    /// first when a new workflow would exceed it. `None` keeps everything, as AWM does.
    pub max_per_scope: Option<usize>,
    /// The token-Jaccard similarity of descriptions ([`description_similarity`]) at or
    /// above which a new workflow with the same tool sequence and scope merges into a
    /// stored one. Above 1.0 disables dedup.
    pub dedup_threshold: f64,
    /// How long a writer waits for another process's lock before failing (SQLite's busy
    /// timeout, PostgreSQL's `lock_timeout`).
    pub busy_timeout: Duration,
}

impl StoreConfig {
    /// The defaults the CLI uses: no size bound, dedup at Jaccard ≥ 0.5, 30 s lock wait.
    #[must_use]
    pub fn standard() -> StoreConfig {
        StoreConfig { max_per_scope: None, dedup_threshold: 0.5, busy_timeout: Duration::from_secs(30) }
    }
}

/// A workflow memory backed by a SQLite file or a PostgreSQL database.
///
/// Every write is one transaction holding the database's write lock (an immediate
/// transaction in SQLite, an advisory lock in PostgreSQL), so several processes can
/// write to the same memory at once, dedup never makes twins, and a killed process
/// loses at most the write in flight. A SQLite file is in WAL mode, so readers never
/// block the writer.
#[derive(Debug)]
pub struct MemoryStore {
    db: Db,
    location: DbLocation,
    // What errors and `path()` name: the file, or the URL without its password.
    path: PathBuf,
    cfg: StoreConfig,
    // Loaded by the first search, then brought up to date from `index_log` before each
    // one; shared with the stores of `open_sibling`. A std lock: it is never held across
    // an await.
    index: Arc<RwLock<SearchIndex>>,
}

/// What [`MemoryStore::add`] did with a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AddOutcome {
    /// It was stored as a new workflow.
    Inserted {
        /// The new workflow's id.
        id: String,
        /// Ids evicted to keep the scope within its bound.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        evicted: Vec<String>,
    },
    /// It merged into a stored near-duplicate, whose provenance now lists both.
    Merged {
        /// The stored workflow's id.
        id: String,
        /// The description similarity that triggered the merge.
        similarity: f64,
    },
}

impl AddOutcome {
    /// The id of the workflow that now holds the added one.
    #[must_use]
    pub fn id(&self) -> &str {
        match self {
            AddOutcome::Inserted { id, .. } | AddOutcome::Merged { id, .. } => id,
        }
    }
}

/// One retrieval result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// The score hits are ordered by, higher first: BM25 relevance (mode `bm25`),
    /// cosine similarity (mode `vector`), or the reciprocal-rank fusion of both
    /// (mode `hybrid`).
    pub score: f64,
    /// The BM25 score, when the workflow was in the BM25 ranking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bm25: Option<f64>,
    /// The cosine similarity of the workflow's vector to the query's, when it was in the
    /// vector ranking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f64>,
    /// The workflow.
    pub workflow: Workflow,
}

/// A workflow that needs a vector from the current embedding model, as
/// [`MemoryStore::vector_backlog`] lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorTask {
    /// The workflow's primary key (the cursor of the next backlog call).
    pub pk: i64,
    /// The workflow's id.
    pub id: String,
    /// The text to embed: description and tool names.
    pub text: String,
}

/// How a run that used a workflow ended, for the usage statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UseOutcome {
    /// The run succeeded.
    Success,
    /// The run failed.
    Failure,
}

/// What [`MemoryStore::prune`] removes.
#[derive(Debug, Clone, PartialEq)]
pub struct PrunePolicy {
    /// Keep at most this many workflows per exact scope, by [`retention_score`].
    pub max_per_scope: Option<usize>,
    /// Retire workflows used at least `min_uses` times whose Laplace-smoothed success
    /// rate is below this.
    pub min_success_rate: Option<f64>,
    /// The number of uses before `min_success_rate` applies.
    pub min_uses: u64,
}

/// The score that decides which workflow a full scope evicts first (lowest first, ties
/// broken by age, oldest first):
///
/// `(used_success + 1) / (used_success + used_failure + 2) × ln(e + used_success + used_failure)`
///
/// The first factor is the Laplace-smoothed success rate of runs that used the workflow,
/// so an unused workflow counts as a coin flip; the second grows with evidence, so a
/// workflow that kept helping outranks a new one, and a new one outranks one that kept
/// failing. Retrievals without use do not count.
#[must_use]
pub fn retention_score(stats: &WorkflowStats) -> f64 {
    let success = stats.used_success as f64;
    let uses = success + stats.used_failure as f64;
    (success + 1.0) / (uses + 2.0) * (std::f64::consts::E + uses).ln()
}

/// The Laplace-smoothed success rate `(s + 1) / (s + f + 2)` of runs that used a workflow.
#[must_use]
pub fn success_rate(stats: &WorkflowStats) -> f64 {
    (stats.used_success as f64 + 1.0) / ((stats.used_success + stats.used_failure) as f64 + 2.0)
}

/// Which workflows a [`PageQuery`] lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PageStatus {
    /// Those in use.
    #[default]
    Active,
    /// Those retired.
    Retired,
    /// Both.
    All,
}

/// The order of a [`PageQuery`]; ties go to the older workflow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PageSort {
    /// Oldest first.
    #[default]
    Oldest,
    /// Newest first.
    Newest,
    /// Most runs that used it first.
    MostUsed,
    /// Highest Laplace-smoothed success rate first ([`success_rate`]).
    BestSuccess,
    /// Most retrieved first.
    MostRetrieved,
}

/// What [`MemoryStore::page`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageQuery {
    /// Words the description or the steps must contain, verbatim; `None` or blank for all.
    pub text: Option<String>,
    /// The scope filter, as for [`MemoryStore::list`].
    pub scope: Scope,
    /// In use, retired, or both.
    pub status: PageStatus,
    /// The order.
    pub sort: PageSort,
    /// How many matching workflows to skip.
    pub offset: u64,
    /// The most to return.
    pub limit: u64,
}

/// One day of a workflow's usage ([`MemoryStore::usage`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct UsageDay {
    /// The UTC day, `YYYY-MM-DD`.
    pub day: String,
    /// That day's retrievals and uses.
    #[serde(flatten)]
    pub stats: WorkflowStats,
}

/// One page of [`MemoryStore::page`].
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// How many workflows match, on every page.
    pub total: u64,
    /// This page's.
    pub workflows: Vec<Workflow>,
}

const COLUMNS: &str = "pk, id, description, steps, site, domain, composed_of, created_at, COALESCE(workflow_usage.retrieved, 0), COALESCE(workflow_usage.used_success, 0), COALESCE(workflow_usage.used_failure, 0), retired_at, retired_reason";

/// The workflows with their running totals, for `SELECT {COLUMNS} FROM {WORKFLOWS}`: the
/// totals live in a narrow table of their own, so that counting a retrieval does not
/// rewrite the workflow's row; a workflow never counted has no row there.
const WORKFLOWS: &str = "workflows LEFT JOIN workflow_usage ON workflow_usage.workflow_pk = workflows.pk";

/// The rows whose scope matches `$1` (site) and `$2` (domain), each `NULL` for any.
const SCOPE_FILTER: &str = "(CAST($1 AS TEXT) IS NULL OR site = $1) AND (CAST($2 AS TEXT) IS NULL OR domain = $2)";

/// The rows whose description or steps contain the `LIKE` pattern `$3` (case-folded), or
/// all when it is `NULL`.
const TEXT_FILTER: &str = "(CAST($3 AS TEXT) IS NULL OR lower(description) LIKE lower(CAST($3 AS TEXT)) ESCAPE '\\' OR lower(index_text) LIKE lower(CAST($3 AS TEXT)) ESCAPE '\\')";

/// What [`MemoryStore::check`] found in a memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// The file, or the PostgreSQL URL without its password.
    pub path: PathBuf,
    /// What is wrong, one finding a line (SQLite's integrity check, workflows that do
    /// not decode); empty when the memory is sound.
    pub problems: Vec<String>,
    /// How many workflows the memory holds, when they could be counted.
    pub workflows: Option<u64>,
}

impl MemoryStore {
    /// Opens the memory at `path`: a SQLite file, created if needed, or a PostgreSQL
    /// database when `path` is a `postgres://` or `postgresql://` URL. Applies any
    /// missing schema migrations (in PostgreSQL under an advisory lock, so that servers
    /// starting at once do not race) and marks a new SQLite file as flowmem's
    /// (`PRAGMA application_id`).
    ///
    /// # Errors
    ///
    /// [`MemoryError::NotMemory`] when the file or database is another application's
    /// (another application id, or tables but not flowmem's), which is left unchanged;
    /// [`MemoryError::Database`] when it cannot be opened or migrated (or is no SQLite
    /// file), and [`MemoryError::SchemaTooNew`] when a newer flowmem wrote it.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_memory::{MemoryStore, StoreConfig};
    /// let dir = tempfile::tempdir()?;
    /// let store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard())?;
    /// assert_eq!(store.count(&Default::default())?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(path: &Path, cfg: StoreConfig) -> Result<MemoryStore, MemoryError> {
        let location = DbLocation::parse(path.as_os_str());
        let shown = PathBuf::from(location.display());
        let db = match &location {
            DbLocation::Sqlite(path) => open_sqlite(path, &cfg)?,
            DbLocation::Postgres(_) => Db::open(&location, cfg.busy_timeout)
                .map_err(|source| MemoryError::Database { path: shown.clone(), what: "connecting", source })?,
        };
        let mut store = MemoryStore { db, location, path: shown, cfg, index: Arc::default() };
        match store.db.dialect() {
            Dialect::Sqlite => store.migrate_sqlite()?,
            Dialect::Postgres => store.migrate_postgres()?,
        }
        Ok(store)
    }

    /// Checks the memory at `path`: SQLite's integrity check of every page and index,
    /// then a decoding of every stored workflow. A damaged file is a [`CheckReport`]
    /// listing what is wrong, not an error. A SQLite file is not changed. A PostgreSQL
    /// memory is opened as [`MemoryStore::open`] opens it, pending migrations included
    /// (the decoding needs the current schema), and gets the decoding (the server checks
    /// its own pages).
    ///
    /// # Errors
    ///
    /// [`MemoryError::NotMemory`] for another application's file, and
    /// [`MemoryError::Database`] when the memory cannot be opened at all.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_memory::{MemoryStore, StoreConfig};
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("memory.db");
    /// drop(MemoryStore::open(&path, StoreConfig::standard())?);
    /// let report = MemoryStore::check(&path)?;
    /// assert!(report.problems.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(path: &Path) -> Result<CheckReport, MemoryError> {
        let location = DbLocation::parse(path.as_os_str());
        let shown = PathBuf::from(location.display());
        let mut report = CheckReport { path: shown.clone(), problems: Vec::new(), workflows: None };
        let store = match &location {
            DbLocation::Postgres(_) => MemoryStore::open(path, StoreConfig::standard())?,
            DbLocation::Sqlite(file) => {
                let sqlite = |what| move |source| MemoryError::Database { path: file.clone(), what, source };
                let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
                let conn = rusqlite::Connection::open_with_flags(file, flags)
                    .map_err(|err| sqlite("opening")(DbError::Sqlite(err)))?;
                match ownership(&conn) {
                    Ok(Ownership::Foreign(reason)) => {
                        return Err(MemoryError::NotMemory { path: file.clone(), reason });
                    }
                    Ok(Ownership::Claimable | Ownership::Marked) => {}
                    Err(err) => {
                        report.problems.push(format!("the file cannot be read as a database: {err}"));
                        return Ok(report);
                    }
                }
                let integrity = conn.prepare("PRAGMA integrity_check").and_then(|mut stmt| {
                    stmt.query_map([], |row| row.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<String>>>()
                });
                match integrity {
                    Ok(lines) => report.problems.extend(lines.into_iter().filter(|line| line != "ok")),
                    Err(err) => report.problems.push(format!("SQLite's integrity check failed: {err}")),
                }
                let db = Db::new(SqliteBackend::new(conn));
                let store =
                    MemoryStore { db, location, path: shown, cfg: StoreConfig::standard(), index: Arc::default() };
                // A file an older flowmem wrote is read in the current schema once it is
                // migrated, and a check never changes a file.
                if let Ok(version) = store.schema_version()
                    && version < MIGRATIONS.len() as i64
                {
                    report.problems.push(format!(
                        "the file is at schema version {version} and this flowmem reads version {}: open it once with \
                         this flowmem (that migrates it in place), then check again",
                        MIGRATIONS.len()
                    ));
                    return Ok(report);
                }
                store
            }
        };
        let rows = match store.query_rows(&format!("SELECT {COLUMNS} FROM {WORKFLOWS} ORDER BY pk"), &[]) {
            Ok(rows) => rows,
            Err(err) => {
                report.problems.push(format!("the workflows cannot be read: {}", flowmem_model::error_chain(&err)));
                return Ok(report);
            }
        };
        report.workflows = Some(rows.len() as u64);
        for row in rows {
            if let Err(err) = store.decode_all(vec![row], true) {
                report.problems.push(flowmem_model::error_chain(&err));
            }
        }
        Ok(report)
    }

    /// Another connection to this store's memory that shares its search index: the
    /// readers of a server keep one index in memory, not one each.
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::open`].
    pub fn open_sibling(&self) -> Result<MemoryStore, MemoryError> {
        let target = match &self.location {
            DbLocation::Sqlite(path) => path.clone(),
            DbLocation::Postgres(url) => PathBuf::from(url),
        };
        let mut sibling = MemoryStore::open(&target, self.cfg.clone())?;
        sibling.index = Arc::clone(&self.index);
        Ok(sibling)
    }

    /// Calls `wake` whenever another process (or this one) adds to the index log of the
    /// PostgreSQL memory at `path`, and after each reconnection, until the returned
    /// listener is dropped: a server then refreshes at once what it polls
    /// ([`MemoryStore::revision`]). `None` for a SQLite file, which has no
    /// notifications; poll it.
    #[must_use]
    pub fn watch(path: &Path, wake: impl Fn() + Send + 'static) -> Option<flowmem_db::Listener> {
        match DbLocation::parse(path.as_os_str()) {
            DbLocation::Postgres(url) => Some(flowmem_db::Listener::start(&url, INDEX_CHANNEL, wake)),
            DbLocation::Sqlite(_) => None,
        }
    }

    /// The database file, or the PostgreSQL URL without its password: what messages name.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the memory is a PostgreSQL database (shared by every process that names
    /// it) rather than a SQLite file.
    #[must_use]
    pub fn is_postgres(&self) -> bool {
        self.location.is_postgres()
    }

    /// The schema version of the memory: the number of migrations applied (each backend
    /// counts its own).
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when it cannot be read.
    pub fn schema_version(&self) -> Result<i64, MemoryError> {
        let sql = match self.db.dialect() {
            Dialect::Sqlite => "PRAGMA user_version",
            Dialect::Postgres => "SELECT version FROM flowmem_meta WHERE name = 'memory'",
        };
        self.db.query_one(sql, &[]).and_then(|row| row.int(0)).map_err(self.err("reading the schema version"))
    }

    /// Adds a workflow in one transaction: merges it into a near-duplicate, or inserts it
    /// and evicts to keep its scope within [`StoreConfig::max_per_scope`].
    ///
    /// A near-duplicate is a stored workflow with the same scope, the same tool-name
    /// sequence and a description similarity of at least
    /// [`StoreConfig::dedup_threshold`]. Merging keeps the stored description and steps,
    /// appends the new provenance and adds the new usage statistics.
    ///
    /// # Errors
    ///
    /// [`MemoryError::InvalidWorkflow`] for a workflow without steps, and
    /// [`MemoryError::Database`] when the write fails.
    pub fn add(&mut self, workflow: &Workflow) -> Result<AddOutcome, MemoryError> {
        let tx = self.db.write().map_err(self.err("starting a write transaction"))?;
        let outcome = add_in(&self.db, &self.path, &self.cfg, workflow)?;
        tx.commit().map_err(self.err("committing a workflow"))?;
        Ok(outcome)
    }

    /// Adds many workflows in one transaction, as [`MemoryStore::add`] does for each.
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::add`]; on error nothing is stored.
    pub fn add_all(&mut self, workflows: &[Workflow]) -> Result<Vec<AddOutcome>, MemoryError> {
        self.add_all_with_vectors(workflows, None)
    }

    /// Adds many workflows as [`MemoryStore::add_all`] does, each inserted one with its
    /// vector from `vectors` (one per workflow, in order, as
    /// [`embed_workflows`](crate::embed_workflows) makes them; normalised here) written in
    /// the same transaction. A workflow that merges into a stored one keeps the stored
    /// one's vector.
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::add`], and [`MemoryError::Retrieval`] when `vectors` does not
    /// hold one vector per workflow; on error nothing is stored.
    pub fn add_all_with_vectors(
        &mut self,
        workflows: &[Workflow],
        vectors: Option<&WorkflowVectors>,
    ) -> Result<Vec<AddOutcome>, MemoryError> {
        if let Some(vectors) = vectors
            && vectors.vectors.len() != workflows.len()
        {
            return Err(MemoryError::Retrieval {
                reason: format!("{} vectors for {} workflows", vectors.vectors.len(), workflows.len()),
            });
        }
        let tx = self.db.write().map_err(self.err("starting a write transaction"))?;
        let mut outcomes = Vec::with_capacity(workflows.len());
        for (idx, workflow) in workflows.iter().enumerate() {
            let outcome = add_in(&self.db, &self.path, &self.cfg, workflow)?;
            if let (AddOutcome::Inserted { id, .. }, Some(vectors)) = (&outcome, vectors) {
                let pk = self.pk_of(id)?.unwrap_or_default();
                write_vector(&self.db, &self.path, pk, &vectors.model, &vectors.vectors[idx])?;
            }
            outcomes.push(outcome);
        }
        tx.commit().map_err(self.err("committing workflows"))?;
        Ok(outcomes)
    }

    /// The workflow with `id`, with its merged provenance and statistics.
    ///
    /// # Errors
    ///
    /// [`MemoryError::NotFound`] when no such workflow is stored, and
    /// [`MemoryError::Database`] or [`MemoryError::Corrupt`] when reading fails.
    pub fn get(&self, id: &str) -> Result<Workflow, MemoryError> {
        let sql = format!("SELECT {COLUMNS} FROM {WORKFLOWS} WHERE id = $1");
        let mut rows = self.query_rows(&sql, &[id.into()])?;
        match rows.pop() {
            Some(row) => Ok(self.decode_all(vec![row], true)?.remove(0).1),
            None => Err(self.not_found(id)),
        }
    }

    /// Every provenance recorded for the workflow `id`, oldest first: one per induction
    /// that produced it or merged into it.
    ///
    /// # Errors
    ///
    /// [`MemoryError::NotFound`] when no such workflow is stored, and
    /// [`MemoryError::Database`] or [`MemoryError::Corrupt`] when reading fails.
    pub fn provenances(&self, id: &str) -> Result<Vec<Provenance>, MemoryError> {
        let Some(pk) = self.pk_of(id)? else {
            return Err(self.not_found(id));
        };
        Ok(read_provenances(&self.db, &self.path, &[(pk, id)])?.remove(&pk).unwrap_or_default())
    }

    /// The workflows in use whose scope matches `filter`, oldest first: every one not
    /// retired. A `None` field of the filter matches any value; a `Some` field must be
    /// equal. [`MemoryStore::list_all`] includes the retired ones.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] or [`MemoryError::Corrupt`] when reading fails.
    pub fn list(&self, filter: &Scope) -> Result<Vec<Workflow>, MemoryError> {
        self.list_where(filter, "retired_at IS NULL")
    }

    /// Every workflow whose scope matches `filter`, retired or not, oldest first: what an
    /// export or a curator sees.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] or [`MemoryError::Corrupt`] when reading fails.
    pub fn list_all(&self, filter: &Scope) -> Result<Vec<Workflow>, MemoryError> {
        self.list_where(filter, "TRUE")
    }

    /// The workflows whose scope matches `filter` and whose row passes `status` (an SQL
    /// condition), oldest first.
    fn list_where(&self, filter: &Scope, status: &str) -> Result<Vec<Workflow>, MemoryError> {
        let sql = format!("SELECT {COLUMNS} FROM {WORKFLOWS} WHERE {SCOPE_FILTER} AND {status} ORDER BY pk");
        let rows = self.query_rows(&sql, &[filter.site.clone().into(), filter.domain.clone().into()])?;
        Ok(self.decode_all(rows, true)?.into_iter().map(|(_, workflow)| workflow).collect())
    }

    /// One page of workflows for a curator: those of `query.status` whose scope matches
    /// `query.scope` and whose description or steps contain `query.text` (case-folded),
    /// in `query.sort` order, from `query.offset`, at most `query.limit`; and how many
    /// match in all. Reads only the page's rows, so it stays fast at 100,000 workflows.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] or [`MemoryError::Corrupt`] when reading fails.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_memory::{MemoryStore, PageQuery, StoreConfig};
    /// let dir = tempfile::tempdir()?;
    /// let store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard())?;
    /// let page = store.page(&PageQuery { text: Some("order".into()), limit: 20, ..PageQuery::default() })?;
    /// assert_eq!((page.total, page.workflows.len()), (0, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn page(&self, query: &PageQuery) -> Result<Page, MemoryError> {
        let status = match query.status {
            PageStatus::Active => "retired_at IS NULL",
            PageStatus::Retired => "retired_at IS NOT NULL",
            PageStatus::All => "TRUE",
        };
        let order = match query.sort {
            PageSort::Oldest => "pk ASC",
            PageSort::Newest => "pk DESC",
            PageSort::MostUsed => "COALESCE(used_success + used_failure, 0) DESC, pk ASC",
            PageSort::BestSuccess => {
                "(COALESCE(used_success, 0) + 1.0) / (COALESCE(used_success + used_failure, 0) + 2.0) DESC, pk ASC"
            }
            PageSort::MostRetrieved => "COALESCE(retrieved, 0) DESC, pk ASC",
        };
        let pattern = query.text.as_deref().map(str::trim).filter(|text| !text.is_empty()).map(|text| {
            let escaped = text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
            format!("%{escaped}%")
        });
        let filter = format!("{SCOPE_FILTER} AND {status} AND {TEXT_FILTER}");
        let mut params: Vec<Value> =
            vec![query.scope.site.clone().into(), query.scope.domain.clone().into(), pattern.into()];
        let total = self
            .db
            .query_one(&format!("SELECT COUNT(*) FROM workflows WHERE {filter}"), &params)
            .and_then(|row| row.count(0))
            .map_err(self.err("counting workflows"))?;
        params.extend([Value::from(query.limit), Value::from(query.offset)]);
        let rows = self.query_rows(
            &format!("SELECT {COLUMNS} FROM {WORKFLOWS} WHERE {filter} ORDER BY {order} LIMIT $4 OFFSET $5"),
            &params,
        )?;
        let workflows = self.decode_all(rows, true)?.into_iter().map(|(_, workflow)| workflow).collect();
        Ok(Page { total, workflows })
    }

    /// The number of workflows in use (not retired) whose scope matches `filter`, as
    /// [`MemoryStore::list`] returns them.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when reading fails.
    pub fn count(&self, filter: &Scope) -> Result<u64, MemoryError> {
        self.db
            .query_one(
                &format!("SELECT COUNT(*) FROM workflows WHERE {SCOPE_FILTER} AND retired_at IS NULL"),
                &[filter.site.clone().into(), filter.domain.clone().into()],
            )
            .and_then(|row| row.count(0))
            .map_err(self.err("counting workflows"))
    }

    /// Retires the workflow `id`: it stays stored, with its provenance and statistics,
    /// but leaves the search index at once, so no search, retrieval or agent sees it,
    /// and a twin induced later merges into it instead of coming back. Retiring a
    /// retired workflow changes nothing. [`MemoryStore::restore`] undoes it.
    ///
    /// # Errors
    ///
    /// [`MemoryError::NotFound`] when no such workflow is stored, and
    /// [`MemoryError::Database`] when the update fails.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_memory::{MemoryStore, StoreConfig};
    /// use flowmem_model::{Workflow, WorkflowAction, WorkflowStep};
    /// let dir = tempfile::tempdir()?;
    /// let mut store = MemoryStore::open(&dir.path().join("memory.db"), StoreConfig::standard())?;
    /// let step = WorkflowStep {
    ///     state: String::new(),
    ///     reasoning: String::new(),
    ///     action: WorkflowAction { tool: "cancel_order".into(), args: Default::default(), sources: Default::default() },
    /// };
    /// let workflow: Workflow =
    ///     serde_json::from_value(serde_json::json!({"description": "Cancel an order", "steps": [step]}))?;
    /// let id = store.add(&workflow)?.id().to_owned();
    /// store.retire(&id, "cancels without asking")?;
    /// assert!(store.search("cancel", &Default::default(), 5)?.is_empty());
    /// assert_eq!(store.get(&id)?.retired.unwrap().reason, "cancels without asking");
    /// store.restore(&id)?;
    /// assert_eq!(store.search("cancel", &Default::default(), 5)?.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retire(&mut self, id: &str, reason: &str) -> Result<(), MemoryError> {
        let what = "retiring a workflow";
        let tx = self.db.write().map_err(self.err(what))?;
        let (pk, retired) = self.lookup(id)?;
        if !retired {
            self.db
                .execute(
                    "UPDATE workflows SET retired_at = $2, retired_reason = $3 WHERE pk = $1",
                    &[pk.into(), now_rfc3339().into(), reason.into()],
                )
                .map_err(self.err(what))?;
            log_index(&self.db, pk, "delete").map_err(self.err(what))?;
        }
        tx.commit().map_err(self.err(what))
    }

    /// Puts a retired workflow back in use: searchable and offered to agents again.
    /// Restoring a workflow in use changes nothing.
    ///
    /// # Errors
    ///
    /// [`MemoryError::NotFound`] when no such workflow is stored, and
    /// [`MemoryError::Database`] when the update fails.
    pub fn restore(&mut self, id: &str) -> Result<(), MemoryError> {
        let what = "restoring a workflow";
        let tx = self.db.write().map_err(self.err(what))?;
        let (pk, retired) = self.lookup(id)?;
        if retired {
            self.db
                .execute("UPDATE workflows SET retired_at = NULL, retired_reason = NULL WHERE pk = $1", &[pk.into()])
                .map_err(self.err(what))?;
            log_index(&self.db, pk, "insert").map_err(self.err(what))?;
        }
        tx.commit().map_err(self.err(what))
    }

    /// Replaces the description of the workflow `id` (its id stays), and re-indexes it
    /// when it is in use, so searches match the new words at once. Its embedding vector
    /// is dropped, as it embedded the old words: vector search finds it again once the
    /// vectors are brought up to date ([`sync_vectors`](crate::sync_vectors)).
    ///
    /// # Errors
    ///
    /// [`MemoryError::InvalidWorkflow`] for an empty description, [`MemoryError::NotFound`]
    /// when no such workflow is stored, and [`MemoryError::Database`] when the update fails.
    pub fn set_description(&mut self, id: &str, description: &str) -> Result<(), MemoryError> {
        let description = description.trim();
        if description.is_empty() {
            return Err(MemoryError::InvalidWorkflow {
                description: id.to_owned(),
                reason: "the description is empty".to_owned(),
            });
        }
        let what = "editing a description";
        let tx = self.db.write().map_err(self.err(what))?;
        let (pk, retired) = self.lookup(id)?;
        self.db
            .execute("UPDATE workflows SET description = $2 WHERE pk = $1", &[pk.into(), description.into()])
            .map_err(self.err(what))?;
        self.db.execute("DELETE FROM workflow_vectors WHERE pk = $1", &[pk.into()]).map_err(self.err(what))?;
        if !retired {
            // The index reads the row as it is when it applies the log: out, then in.
            log_index(&self.db, pk, "delete").map_err(self.err(what))?;
            log_index(&self.db, pk, "insert").map_err(self.err(what))?;
        }
        tx.commit().map_err(self.err(what))
    }

    /// The primary key of the workflow `id` and whether it is retired.
    fn lookup(&self, id: &str) -> Result<(i64, bool), MemoryError> {
        let row = self
            .db
            .query_opt("SELECT pk, retired_at IS NOT NULL FROM workflows WHERE id = $1", &[id.into()])
            .map_err(self.err("looking up a workflow"))?;
        match row {
            Some(row) => Ok((
                row.int(0).map_err(self.err("looking up a workflow"))?,
                row.bool(1).map_err(self.err("looking up a workflow"))?,
            )),
            None => Err(self.not_found(id)),
        }
    }

    /// The primary key of the workflow `id`, if it is stored.
    fn pk_of(&self, id: &str) -> Result<Option<i64>, MemoryError> {
        self.db
            .query_opt("SELECT pk FROM workflows WHERE id = $1", &[id.into()])
            .and_then(|row| row.map(|row| row.int(0)).transpose())
            .map_err(self.err("looking up a workflow"))
    }

    /// The `limit` workflows most relevant to `query` by BM25 among those whose scope
    /// matches `filter`, best first. Read-only: it does not count as a retrieval.
    ///
    /// Relevance is Okapi BM25 (k1 = 1.2, b = 0.75) over the description and the steps'
    /// text (state, reasoning, tool names, argument names and values), with the
    /// description weighted twice. Words are matched after lowercasing and plural
    /// stemming; a query without any word matches nothing. The index lives in memory, is
    /// loaded by the first search and then follows every process's writes.
    /// [`MemoryStore::search_with`] ranks by meaning too.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] or [`MemoryError::Corrupt`] when reading fails.
    pub fn search(&self, query: &str, filter: &Scope, limit: usize) -> Result<Vec<Hit>, MemoryError> {
        self.search_with(&SearchQuery::bm25(query), filter, limit)
    }

    /// The `limit` workflows best for `query` among those whose scope matches `filter`,
    /// best first, ranked as its mode says: BM25 as [`MemoryStore::search`] does, the
    /// cosine similarity of the workflows' vectors to the query's (an exact scan over
    /// normalised vectors of the query's embedding model; workflows without such a
    /// vector are left out), or both fused by reciprocal rank
    /// (`Σ 1 / (60 + rank)` over the top 100 of each ranking; see
    /// [`RetrievalMode::Hybrid`]). Each hit carries what each ranking said of it.
    /// Read-only: it does not count as a retrieval. [`Retriever`](crate::Retriever)
    /// builds the query.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Retrieval`] for a vector or hybrid query without a vector, and
    /// [`MemoryError::Database`] or [`MemoryError::Corrupt`] when reading fails.
    pub fn search_with(&self, query: &SearchQuery, filter: &Scope, limit: usize) -> Result<Vec<Hit>, MemoryError> {
        let ranking = match (query.mode, &query.embedding) {
            (RetrievalMode::Bm25, _) => Ranking::Bm25,
            (RetrievalMode::Vector, Some(embedding)) => {
                Ranking::Vector { model: &embedding.model, vector: &embedding.vector }
            }
            (RetrievalMode::Hybrid, Some(embedding)) => {
                Ranking::Hybrid { model: &embedding.model, vector: &embedding.vector }
            }
            (mode, None) => {
                return Err(MemoryError::Retrieval {
                    reason: format!("a `{}` search needs the query's vector, and none was given", mode.as_str()),
                });
            }
        };
        let filter_pair = (filter.site.as_deref(), filter.domain.as_deref());
        let ranked = self.with_index(|index| index.rank(ranking, &query.text, filter_pair, limit))?;
        if ranked.is_empty() {
            return Ok(Vec::new());
        }
        // The hits' rows and (when asked) provenances in one query each, whatever their
        // number.
        let pks = serde_json::to_string(&ranked.iter().map(|scored| scored.pk).collect::<Vec<_>>()).unwrap_or_default();
        let sql = format!("SELECT {COLUMNS} FROM {WORKFLOWS} WHERE pk IN ({})", self.db.dialect().json_integers("$1"));
        let mut rows: std::collections::HashMap<i64, RawRow> =
            self.query_rows(&sql, &[pks.into()])?.into_iter().map(|row| (row.pk, row)).collect();
        let mut workflows = self
            .decode_all(ranked.iter().filter_map(|scored| rows.remove(&scored.pk)).collect(), query.provenance)?
            .into_iter();
        // A row deleted by another process since the sync is simply no longer a hit.
        let mut hits = Vec::with_capacity(ranked.len());
        let mut next = workflows.next();
        for scored in ranked {
            if let Some(workflow) = next.take_if(|(row_pk, _)| *row_pk == scored.pk) {
                hits.push(Hit {
                    score: scored.score,
                    bm25: scored.bm25.map(|(score, _)| score),
                    similarity: scored.vector.map(|(similarity, _)| similarity),
                    workflow: workflow.1,
                });
                next = workflows.next();
            }
        }
        Ok(hits)
    }

    /// Brings the search index up to date with the database now (loading it whole the
    /// first time), so that the next search pays only for what changed since. A server
    /// calls this once as it starts, not in its first request.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when the index log cannot be read.
    pub fn prepare_search(&self) -> Result<(), MemoryError> {
        self.with_index(|_| ())
    }

    /// Runs `f` on the search index, brought up to date with the database first.
    fn with_index<T>(&self, f: impl FnOnce(&SearchIndex) -> T) -> Result<T, MemoryError> {
        let head = SearchIndex::log_head(&self.db).map_err(self.err("updating the search index"))?;
        // A poisoned lock only means another search panicked; the index is rebuilt from
        // the log then.
        match self.index.read() {
            // Up to date, or ahead (a sibling synced since this connection looked).
            Ok(index) if index.last_seq() >= head => Ok(f(&index)),
            held => {
                drop(held);
                let mut index = self.index.write().unwrap_or_else(|poisoned| {
                    let mut guard = poisoned.into_inner();
                    *guard = SearchIndex::default();
                    guard
                });
                index.sync(&self.db, head).map_err(self.err("updating the search index"))?;
                Ok(f(&index))
            }
        }
    }

    /// How many workflows `filter` admits, and how many of them have a vector of the
    /// embedding model `model` (as [`EmbeddingModel::model_id`](flowmem_llm::EmbeddingModel::model_id)
    /// names it). Cheap: the index answers.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when the index cannot be brought up to date.
    pub fn vector_coverage(&self, model: &str, filter: &Scope) -> Result<(usize, usize), MemoryError> {
        let filter_pair = (filter.site.as_deref(), filter.domain.as_deref());
        self.with_index(|index| index.vector_coverage(model, filter_pair))
    }

    /// Up to `limit` workflows after primary key `after` (oldest first) without a vector
    /// of `model`: never embedded, or embedded by another model. Embed their texts and
    /// write the vectors with [`MemoryStore::set_vectors`]; [`sync_vectors`](crate::sync_vectors)
    /// does both until none is left.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when reading fails.
    pub fn vector_backlog(&self, model: &str, after: i64, limit: usize) -> Result<Vec<VectorTask>, MemoryError> {
        self.db
            .query_map(
                "SELECT w.pk, w.id, w.description, w.action_key FROM workflows AS w
                 LEFT JOIN workflow_vectors AS v ON v.pk = w.pk
                 WHERE w.pk > $1 AND (v.model IS NULL OR v.model != $2) ORDER BY w.pk LIMIT $3",
                &[after.into(), model.into(), Value::from(limit as u64)],
                |row| {
                    let description = row.text(2)?;
                    let action_key = row.text(3)?;
                    Ok(VectorTask {
                        pk: row.int(0)?,
                        id: row.text(1)?,
                        text: embedding_text(&description, action_key.split('\u{1f}').filter(|tool| !tool.is_empty())),
                    })
                },
            )
            .map_err(self.err("listing workflows to embed"))
    }

    /// Writes the vectors of `model` for the workflows `ids` (normalised here), replacing
    /// their earlier vectors, in one transaction; ids no longer stored are skipped.
    /// Returns how many were written.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Retrieval`] when `vectors` and `ids` differ in length, and
    /// [`MemoryError::Database`] when the write fails (then nothing is written).
    pub fn set_vectors(&mut self, ids: &[&str], vectors: &WorkflowVectors) -> Result<usize, MemoryError> {
        if ids.len() != vectors.vectors.len() {
            return Err(MemoryError::Retrieval {
                reason: format!("{} vectors for {} workflows", vectors.vectors.len(), ids.len()),
            });
        }
        let tx = self.db.write().map_err(self.err("writing vectors"))?;
        let mut n_written = 0;
        for (id, vector) in ids.iter().zip(&vectors.vectors) {
            if let Some(pk) = self.pk_of(id)? {
                write_vector(&self.db, &self.path, pk, &vectors.model, vector)?;
                n_written += 1;
            }
        }
        tx.commit().map_err(self.err("writing vectors"))?;
        Ok(n_written)
    }

    /// Searches as [`MemoryStore::search`] does and counts each hit as retrieved, in one
    /// transaction. Agents call this; browsing calls `search`.
    ///
    /// # Errors
    ///
    /// As [`MemoryStore::search`], and [`MemoryError::Database`] when the update fails.
    pub fn retrieve(&mut self, query: &str, filter: &Scope, limit: usize) -> Result<Vec<Hit>, MemoryError> {
        let mut hits = self.search(query, filter, limit)?;
        let ids: Vec<&str> = hits.iter().map(|hit| hit.workflow.id.as_str()).collect();
        self.count_retrievals(&ids)?;
        for hit in &mut hits {
            hit.workflow.stats.retrieved += 1;
        }
        Ok(hits)
    }

    /// Counts each of `ids` as retrieved once (an id given twice counts twice), in one
    /// transaction; ids no longer stored are skipped.
    ///
    /// [`MemoryStore::retrieve`] searches and counts at once. A server that searches on
    /// read-only connections with [`MemoryStore::search`] counts its hits later with
    /// this, many searches per transaction.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when the update fails; then nothing is counted.
    pub fn count_retrievals(&mut self, ids: &[&str]) -> Result<(), MemoryError> {
        if ids.is_empty() {
            return Ok(());
        }
        let what = "counting a retrieval";
        // One update per workflow, however often it was hit: a server's batch repeats
        // its popular workflows.
        let mut times: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
        for id in ids {
            *times.entry(id).or_default() += 1;
        }
        let tx = self.db.write().map_err(self.err(what))?;
        for (id, n) in times {
            let pk = pk_of(&self.db, id).map_err(self.err(what))?;
            if let Some(pk) = pk {
                let counts = WorkflowStats { retrieved: n as u64, ..WorkflowStats::default() };
                add_usage(&self.db, pk, &counts).map_err(self.err(what))?;
                count_day(&self.db, pk, "retrieved", n).map_err(self.err(what))?;
            }
        }
        tx.commit().map_err(self.err("counting retrievals"))
    }

    /// Whether the trajectory `trajectory_id` is in some workflow's provenance: it was
    /// induced from (stored or merged). A learner that may see the same run twice (a
    /// queue replayed after a crash) asks this first.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when the query fails, and [`MemoryError::Corrupt`] when
    /// a provenance row is not valid JSON.
    pub fn learned_from(&self, trajectory_id: &str) -> Result<bool, MemoryError> {
        // A LIKE over the JSON text narrows the rows; parsing them decides.
        let quoted = serde_json::to_string(trajectory_id).unwrap_or_default();
        let escaped = quoted.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
        let pattern = format!("%{escaped}%");
        let candidates = self
            .db
            .query_map(
                "SELECT w.id, p.trajectory_ids FROM provenance AS p JOIN workflows AS w ON w.pk = p.workflow_pk
                 WHERE p.trajectory_ids LIKE $1 ESCAPE '\\'",
                &[pattern.into()],
                |row| Ok((row.text(0)?, row.text(1)?)),
            )
            .map_err(self.err("looking up a trajectory"))?;
        for (workflow_id, text) in candidates {
            let ids = self.provenance_ids(workflow_id, &text)?;
            if ids.iter().any(|id| id == trajectory_id) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// A provenance row's `trajectory_ids`, read from its JSON text.
    fn provenance_ids(&self, workflow_id: String, text: &str) -> Result<Vec<String>, MemoryError> {
        serde_json::from_str(text).map_err(|source| MemoryError::Corrupt {
            path: self.path.clone(),
            id: workflow_id,
            column: "provenance.trajectory_ids",
            source,
        })
    }

    /// The ids of every trajectory some stored workflow was induced from (stored or
    /// merged): [`MemoryStore::learned_from`] for a whole input at once.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when the query fails, and [`MemoryError::Corrupt`] when
    /// a provenance row is not valid JSON.
    pub fn learned_trajectory_ids(&self) -> Result<std::collections::HashSet<String>, MemoryError> {
        let rows = self
            .db
            .query_map(
                "SELECT w.id, p.trajectory_ids FROM provenance AS p JOIN workflows AS w ON w.pk = p.workflow_pk",
                &[],
                |row| Ok((row.text(0)?, row.text(1)?)),
            )
            .map_err(self.err("reading provenances"))?;
        let mut res = std::collections::HashSet::new();
        for (workflow_id, text) in rows {
            let ids = self.provenance_ids(workflow_id, &text)?;
            res.extend(ids);
        }
        Ok(res)
    }

    /// A number that changes whenever a workflow is inserted or deleted, by this or any
    /// other process: the last sequence number of the search index's log. Usage counts
    /// and merged provenance do not change it; writing vectors (a rebuild after a change
    /// of embedding model) does.
    ///
    /// A server polls it to tell its clients that the list of workflows changed.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when reading fails.
    pub fn revision(&self) -> Result<i64, MemoryError> {
        SearchIndex::log_head(&self.db).map_err(self.err("reading the revision"))
    }

    /// Records that the workflow `id` was used in a run that ended with `outcome`.
    ///
    /// # Errors
    ///
    /// [`MemoryError::NotFound`] when no such workflow is stored, and
    /// [`MemoryError::Database`] when the update fails.
    pub fn record_use(&mut self, id: &str, outcome: UseOutcome) -> Result<(), MemoryError> {
        let (counts, column) = match outcome {
            UseOutcome::Success => (WorkflowStats { used_success: 1, ..WorkflowStats::default() }, "used_success"),
            UseOutcome::Failure => (WorkflowStats { used_failure: 1, ..WorkflowStats::default() }, "used_failure"),
        };
        let what = "recording a use";
        let tx = self.db.write().map_err(self.err(what))?;
        let Some(pk) = pk_of(&self.db, id).map_err(self.err(what))? else {
            return Err(self.not_found(id));
        };
        add_usage(&self.db, pk, &counts).map_err(self.err(what))?;
        count_day(&self.db, pk, column, 1).map_err(self.err(what))?;
        tx.commit().map_err(self.err(what))
    }

    /// The usage of the workflow `id` per UTC day, oldest first: the days on which it was
    /// retrieved or used since this memory counted days (schema 5); its running totals
    /// are in [`Workflow::stats`].
    ///
    /// # Errors
    ///
    /// [`MemoryError::NotFound`] when no such workflow is stored, and
    /// [`MemoryError::Database`] when reading fails.
    pub fn usage(&self, id: &str) -> Result<Vec<UsageDay>, MemoryError> {
        let (pk, _) = self.lookup(id)?;
        self.db
            .query_map(
                "SELECT day, retrieved, used_success, used_failure FROM usage_days WHERE workflow_pk = $1 ORDER BY day",
                &[pk.into()],
                |row| {
                    Ok(UsageDay {
                        day: row.text(0)?,
                        stats: WorkflowStats {
                            retrieved: row.count(1)?,
                            used_success: row.count(2)?,
                            used_failure: row.count(3)?,
                        },
                    })
                },
            )
            .map_err(self.err("reading usage"))
    }

    /// Deletes the workflow `id` with its provenance and index entry.
    ///
    /// # Errors
    ///
    /// [`MemoryError::NotFound`] when no such workflow is stored, and
    /// [`MemoryError::Database`] when the delete fails.
    pub fn delete(&mut self, id: &str) -> Result<(), MemoryError> {
        let tx = self.db.write().map_err(self.err("deleting a workflow"))?;
        let Some(pk) = self.pk_of(id)? else {
            return Err(self.not_found(id));
        };
        delete_pk(&self.db, &self.path, pk)?;
        tx.commit().map_err(self.err("deleting a workflow"))
    }

    /// Removes what `policy` says, in one transaction, and returns the removed ids.
    ///
    /// Retirement by success rate runs first, then each exact scope is cut down to
    /// `max_per_scope` by [`retention_score`], lowest first, oldest first on ties.
    /// Workflows retired by hand ([`MemoryStore::retire`]) are left alone and do not
    /// count towards `max_per_scope`.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Database`] when reading or deleting fails.
    pub fn prune(&mut self, policy: &PrunePolicy) -> Result<Vec<String>, MemoryError> {
        let tx = self.db.write().map_err(self.err("pruning"))?;
        let mut removed = Vec::new();
        if let Some(min_rate) = policy.min_success_rate {
            let rows = self
                .db
                .query_map(
                    &format!(
                        "SELECT pk, id, COALESCE(used_success, 0), COALESCE(used_failure, 0) FROM {WORKFLOWS}
                         WHERE retired_at IS NULL ORDER BY pk"
                    ),
                    &[],
                    |row| {
                        let stats =
                            WorkflowStats { retrieved: 0, used_success: row.count(2)?, used_failure: row.count(3)? };
                        Ok((row.int(0)?, row.text(1)?, stats))
                    },
                )
                .map_err(self.err("pruning"))?;
            for (pk, id, stats) in rows {
                let uses = stats.used_success + stats.used_failure;
                if uses >= policy.min_uses && success_rate(&stats) < min_rate {
                    delete_pk(&self.db, &self.path, pk)?;
                    removed.push(id);
                }
            }
        }
        if let Some(max) = policy.max_per_scope {
            let scopes = self
                .db
                .query_map(
                    "SELECT scope_key FROM workflows WHERE retired_at IS NULL GROUP BY scope_key HAVING COUNT(*) > $1",
                    &[Value::from(max as u64)],
                    |row| row.text(0),
                )
                .map_err(self.err("pruning"))?;
            for scope_key in scopes {
                removed.extend(evict_in(&self.db, &self.path, &scope_key, max)?);
            }
        }
        tx.commit().map_err(self.err("pruning"))?;
        Ok(removed)
    }

    /// Copies every workflow of this memory into `target`, which must hold none, losing
    /// nothing: ids, descriptions, steps, scopes, every provenance, running totals, usage
    /// per day, retirements and vectors. Primary keys are the target's own. One
    /// transaction on the target, so a failed copy leaves it empty. Returns how many
    /// workflows were copied. `flowmem memory migrate` moves a SQLite memory into
    /// PostgreSQL with it, and back.
    ///
    /// # Errors
    ///
    /// [`MemoryError::Retrieval`] when `target` is not empty, and
    /// [`MemoryError::Database`] when reading or writing fails.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_memory::{MemoryStore, StoreConfig};
    /// let dir = tempfile::tempdir()?;
    /// let from = MemoryStore::open(&dir.path().join("a.db"), StoreConfig::standard())?;
    /// let mut to = MemoryStore::open(&dir.path().join("b.db"), StoreConfig::standard())?;
    /// assert_eq!(from.copy_into(&mut to)?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn copy_into(&self, target: &mut MemoryStore) -> Result<u64, MemoryError> {
        let in_target = target
            .db
            .query_one("SELECT COUNT(*) FROM workflows", &[])
            .and_then(|row| row.count(0))
            .map_err(target.err("counting workflows"))?;
        if in_target > 0 {
            return Err(MemoryError::Retrieval {
                reason: format!(
                    "`{}` already holds {in_target} workflows; copy into an empty memory",
                    target.path.display()
                ),
            });
        }
        let read = |sql: &str| self.db.query(sql, &[]).map_err(self.err("reading the memory to copy"));
        let workflows = read(
            "SELECT pk, id, description, steps, site, domain, scope_key, action_key, composed_of, created_at, index_text, retired_at, retired_reason FROM workflows ORDER BY pk",
        )?;
        // Each table keyed by a workflow's primary key (its first column): all its rows.
        let children = COPIED_TABLES.iter().map(|table| read(table.select)).collect::<Result<Vec<_>, _>>()?;
        let write = target.err("writing the copy");
        let tx = target.db.write().map_err(target.err("writing the copy"))?;
        let copied = (|| {
            let mut new_pk = std::collections::HashMap::with_capacity(workflows.len());
            for row in &workflows {
                let values = &row.0[1..];
                let retired = !matches!(values[10], Value::Null);
                let pk = target
                    .db
                    .query_one(
                        "INSERT INTO workflows (id, description, steps, site, domain, scope_key, action_key, composed_of, created_at, index_text, retired_at, retired_reason)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING pk",
                        values,
                    )?
                    .int(0)?;
                if !retired {
                    log_index(&target.db, pk, "insert")?;
                }
                new_pk.insert(row.int(0)?, pk);
            }
            for (table, rows) in COPIED_TABLES.iter().zip(&children) {
                for row in rows {
                    let Some(&pk) = new_pk.get(&row.int(0)?) else { continue };
                    let mut values = row.0.clone();
                    values[0] = Value::Int(pk);
                    target.db.execute(table.insert, &values)?;
                    if table.logs_vector {
                        log_index(&target.db, pk, "vector")?;
                    }
                }
            }
            Ok(workflows.len() as u64)
        })()
        .map_err(write)?;
        tx.commit().map_err(target.err("committing the copy"))?;
        if target.db.dialect() == Dialect::Postgres {
            // Fresh tables have no planner statistics until autovacuum comes round, and
            // without them PostgreSQL scans where it should look up (measured: 8 ms
            // against 1 ms a search at 100,000 workflows).
            target.db.batch("ANALYZE").map_err(target.err("analysing the copy"))?;
        }
        Ok(copied)
    }

    fn migrate_sqlite(&mut self) -> Result<(), MemoryError> {
        let supported = MIGRATIONS.len() as i64;
        loop {
            let tx = self.db.write().map_err(self.err("starting a migration"))?;
            // Read the version inside the immediate transaction: another process may have
            // migrated the file while this one waited for the lock.
            let version = self.schema_version()?;
            if version > supported {
                return Err(MemoryError::SchemaTooNew { path: self.path.clone(), found: version, supported });
            }
            let application_id = self
                .db
                .query_one("PRAGMA application_id", &[])
                .and_then(|row| row.int(0))
                .map_err(self.err("reading the application id"))?;
            if application_id != APPLICATION_ID {
                self.db
                    .batch(&format!("PRAGMA application_id = {APPLICATION_ID}"))
                    .map_err(self.err("marking the file"))?;
            }
            if version == supported {
                tx.commit().map_err(self.err("marking the file"))?;
                return Ok(());
            }
            // Invariant: 0 <= version < supported, so the index is in range.
            self.db.batch(MIGRATIONS[version as usize]).map_err(self.err("migrating the schema"))?;
            self.db
                .batch(&format!("PRAGMA user_version = {}", version + 1))
                .map_err(self.err("recording the schema version"))?;
            tx.commit().map_err(self.err("committing a migration"))?;
        }
    }

    /// Creates or migrates the tables in a PostgreSQL database, under a session advisory
    /// lock so that processes starting at once migrate one after the other.
    fn migrate_postgres(&mut self) -> Result<(), MemoryError> {
        let what = "migrating the schema";
        self.db.batch(&format!("SELECT pg_advisory_lock({MIGRATE_LOCK})")).map_err(self.err(what))?;
        let res = self.migrate_postgres_locked();
        let unlocked = self.db.batch(&format!("SELECT pg_advisory_unlock({MIGRATE_LOCK})")).map_err(self.err(what));
        res.and(unlocked)
    }

    fn migrate_postgres_locked(&mut self) -> Result<(), MemoryError> {
        let what = "migrating the schema";
        let supported = PG_MIGRATIONS.len() as i64;
        let row = self
            .db
            .query_one("SELECT to_regclass('flowmem_meta') IS NOT NULL, to_regclass('workflows') IS NOT NULL", &[])
            .map_err(self.err(what))?;
        let (has_meta, has_workflows) = (row.bool(0).map_err(self.err(what))?, row.bool(1).map_err(self.err(what))?);
        if !has_meta && has_workflows {
            return Err(MemoryError::NotMemory {
                path: self.path.clone(),
                reason: "it has a `workflows` table that flowmem did not make".to_owned(),
            });
        }
        self.db
            .batch("CREATE TABLE IF NOT EXISTS flowmem_meta (name TEXT PRIMARY KEY, version BIGINT NOT NULL)")
            .map_err(self.err(what))?;
        loop {
            let version = self
                .db
                .query_opt("SELECT version FROM flowmem_meta WHERE name = 'memory'", &[])
                .and_then(|row| row.map(|row| row.int(0)).transpose())
                .map_err(self.err(what))?
                .unwrap_or(0);
            if version > supported {
                return Err(MemoryError::SchemaTooNew { path: self.path.clone(), found: version, supported });
            }
            if version == supported {
                return Ok(());
            }
            let tx = self.db.write().map_err(self.err(what))?;
            self.db.batch(PG_MIGRATIONS[version as usize]).map_err(self.err(what))?;
            self.db
                .execute(
                    "INSERT INTO flowmem_meta (name, version) VALUES ('memory', $1)
                     ON CONFLICT (name) DO UPDATE SET version = excluded.version",
                    &[Value::Int(version + 1)],
                )
                .map_err(self.err("recording the schema version"))?;
            tx.commit().map_err(self.err("committing a migration"))?;
        }
    }

    fn query_rows(&self, sql: &str, params: &[Value]) -> Result<Vec<RawRow>, MemoryError> {
        self.db.query_map(sql, params, RawRow::read).map_err(self.err("reading workflows"))
    }

    /// The workflows of `rows`, in order, each with its primary key; their provenances
    /// are read in one query if `provenance`, else left default.
    fn decode_all(&self, rows: Vec<RawRow>, provenance: bool) -> Result<Vec<(i64, Workflow)>, MemoryError> {
        let keys: Vec<(i64, &str)> = rows.iter().map(|row| (row.pk, row.id.as_str())).collect();
        let mut provenances =
            if provenance { read_provenances(&self.db, &self.path, &keys)? } else { Default::default() };
        rows.into_iter()
            .map(|row| {
                let pk = row.pk;
                let own = provenances.remove(&pk).unwrap_or_default();
                Ok((pk, row.into_workflow(&self.path, own)?))
            })
            .collect()
    }

    fn err(&self, what: &'static str) -> impl FnOnce(DbError) -> MemoryError + '_ {
        move |source| MemoryError::Database { path: self.path.clone(), what, source }
    }

    fn not_found(&self, id: &str) -> MemoryError {
        MemoryError::NotFound { path: self.path.clone(), id: id.to_owned() }
    }
}

/// A table [`MemoryStore::copy_into`] copies beside `workflows`.
struct CopiedTable {
    /// The query that reads all its rows, the workflow's primary key first.
    select: &'static str,
    /// The insert that writes one.
    insert: &'static str,
    /// Whether each row copied is logged for the search index (`vector`).
    logs_vector: bool,
}

/// The tables [`MemoryStore::copy_into`] copies beside `workflows`.
const COPIED_TABLES: [CopiedTable; 4] = [
    CopiedTable {
        select: "SELECT workflow_pk, seq, trajectory_ids, inducer, model, prompt_version, created_at FROM provenance ORDER BY workflow_pk, seq",
        insert: "INSERT INTO provenance (workflow_pk, seq, trajectory_ids, inducer, model, prompt_version, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        logs_vector: false,
    },
    CopiedTable {
        select: "SELECT workflow_pk, retrieved, used_success, used_failure FROM workflow_usage ORDER BY workflow_pk",
        insert: "INSERT INTO workflow_usage (workflow_pk, retrieved, used_success, used_failure) VALUES ($1, $2, $3, $4)",
        logs_vector: false,
    },
    CopiedTable {
        select: "SELECT workflow_pk, day, retrieved, used_success, used_failure FROM usage_days ORDER BY workflow_pk, day",
        insert: "INSERT INTO usage_days (workflow_pk, day, retrieved, used_success, used_failure) VALUES ($1, $2, $3, $4, $5)",
        logs_vector: false,
    },
    CopiedTable {
        select: "SELECT pk, model, vector FROM workflow_vectors ORDER BY pk",
        insert: "INSERT INTO workflow_vectors (pk, model, vector) VALUES ($1, $2, $3)",
        logs_vector: true,
    },
];

/// The key of the session advisory lock PostgreSQL migrations run under: "flmmmigr".
const MIGRATE_LOCK: i64 = 0x666C_6D6D_6D69_6772;

/// Opens a SQLite memory file: refuses another application's file before writing
/// anything, then switches to WAL.
fn open_sqlite(path: &Path, cfg: &StoreConfig) -> Result<Db, MemoryError> {
    let sqlite = |what| {
        move |source: rusqlite::Error| MemoryError::Database { path: path.to_path_buf(), what, source: source.into() }
    };
    let conn = rusqlite::Connection::open(path).map_err(sqlite("opening"))?;
    conn.busy_timeout(cfg.busy_timeout).map_err(sqlite("setting the busy timeout"))?;
    // Before anything writes (even the journal mode): another application's file is
    // left exactly as it is.
    if let Ownership::Foreign(reason) = ownership(&conn).map_err(sqlite("reading what the file holds"))? {
        return Err(MemoryError::NotMemory { path: path.to_path_buf(), reason });
    }
    // Switching to WAL needs a moment of exclusive access, which the busy handler does
    // not always cover while another process creates the same file; retry briefly.
    let mut attempt = 0;
    loop {
        let res: Result<String, _> = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0));
        match res {
            Ok(_) => break,
            Err(err) if is_busy(&err) && attempt < 200 => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(err) => return Err(sqlite("switching to WAL mode")(err)),
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(sqlite("setting synchronous"))?;
    Ok(Db::new(SqliteBackend::new(conn)))
}

/// A `workflows` row before its JSON columns are decoded.
struct RawRow {
    pk: i64,
    id: String,
    description: String,
    steps: String,
    site: Option<String>,
    domain: Option<String>,
    composed_of: String,
    created_at: String,
    stats: WorkflowStats,
    retired: Option<Retirement>,
}

impl RawRow {
    fn read(row: &Row) -> Result<RawRow, DbError> {
        Ok(RawRow {
            pk: row.int(0)?,
            id: row.text(1)?,
            description: row.text(2)?,
            steps: row.text(3)?,
            site: row.opt_text(4)?,
            domain: row.opt_text(5)?,
            composed_of: row.text(6)?,
            created_at: row.text(7)?,
            stats: WorkflowStats {
                retrieved: row.count(8)?,
                used_success: row.count(9)?,
                used_failure: row.count(10)?,
            },
            retired: match row.opt_text(11)? {
                Some(at) => Some(Retirement { at, reason: row.opt_text(12)?.unwrap_or_default() }),
                None => None,
            },
        })
    }

    fn into_workflow(self, path: &Path, provenances: Vec<Provenance>) -> Result<Workflow, MemoryError> {
        let corrupt = |column| {
            let id = self.id.clone();
            move |source| MemoryError::Corrupt { path: path.to_path_buf(), id, column, source }
        };
        let steps: Vec<WorkflowStep> = serde_json::from_str(&self.steps).map_err(corrupt("steps"))?;
        let composed_of: Vec<String> = serde_json::from_str(&self.composed_of).map_err(corrupt("composed_of"))?;
        let mut provenance = merge_provenances(provenances);
        provenance.created_at = Some(self.created_at);
        Ok(Workflow {
            id: self.id,
            description: self.description,
            steps,
            scope: Scope { site: self.site, domain: self.domain },
            provenance,
            stats: self.stats,
            composed_of,
            retired: self.retired,
        })
    }
}

/// Folds a workflow's provenances into one: the first one's inducer, model and prompt,
/// and the union of all trajectory ids in first-seen order.
fn merge_provenances(provenances: Vec<Provenance>) -> Provenance {
    let mut iter = provenances.into_iter();
    let mut merged = iter.next().unwrap_or_default();
    for provenance in iter {
        for id in provenance.trajectory_ids {
            if !merged.trajectory_ids.contains(&id) {
                merged.trajectory_ids.push(id);
            }
        }
    }
    merged
}

/// The provenances of the workflows `workflows` (primary key and id), each oldest
/// first, in one query.
fn read_provenances(
    db: &Db,
    path: &Path,
    workflows: &[(i64, &str)],
) -> Result<std::collections::HashMap<i64, Vec<Provenance>>, MemoryError> {
    let sqlite = |source| MemoryError::Database { path: path.to_path_buf(), what: "reading provenance", source };
    let mut by_pk: std::collections::HashMap<i64, Vec<Provenance>> = std::collections::HashMap::new();
    if workflows.is_empty() {
        return Ok(by_pk);
    }
    let pks = serde_json::to_string(&workflows.iter().map(|&(pk, _)| pk).collect::<Vec<_>>()).unwrap_or_default();
    let sql = format!(
        "SELECT workflow_pk, trajectory_ids, inducer, model, prompt_version, created_at FROM provenance
         WHERE workflow_pk IN ({}) ORDER BY workflow_pk, seq",
        db.dialect().json_integers("$1")
    );
    let rows = db
        .query_map(&sql, &[pks.into()], |row| {
            Ok((
                row.int(0)?,
                row.text(1)?,
                Provenance {
                    trajectory_ids: Vec::new(),
                    inducer: row.text(2)?,
                    model: row.opt_text(3)?,
                    prompt_version: row.opt_text(4)?,
                    created_at: Some(row.text(5)?),
                },
            ))
        })
        .map_err(sqlite)?;
    for (pk, ids, mut provenance) in rows {
        provenance.trajectory_ids = serde_json::from_str(&ids).map_err(|source| MemoryError::Corrupt {
            path: path.to_path_buf(),
            id: workflows.iter().find(|&&(own, _)| own == pk).map_or_else(String::new, |&(_, id)| id.to_owned()),
            column: "provenance.trajectory_ids",
            source,
        })?;
        by_pk.entry(pk).or_default().push(provenance);
    }
    Ok(by_pk)
}

/// Adds `workflow` inside the caller's write transaction.
fn add_in(db: &Db, path: &Path, cfg: &StoreConfig, workflow: &Workflow) -> Result<AddOutcome, MemoryError> {
    let sqlite = |what| move |source| MemoryError::Database { path: path.to_path_buf(), what, source };
    if workflow.steps.is_empty() {
        return Err(MemoryError::InvalidWorkflow {
            description: workflow.description.clone(),
            reason: "it has no steps".to_owned(),
        });
    }
    let scope_key = scope_key(&workflow.scope);
    let action_key = action_key(workflow);
    let now = now_rfc3339();
    let created_at = workflow.provenance.created_at.clone().unwrap_or_else(|| now.clone());

    // Dedup: the most similar stored workflow with the same scope and tool sequence.
    let candidates: Vec<(i64, String, String)> = db
        .query_map(
            "SELECT pk, id, description FROM workflows WHERE scope_key = $1 AND action_key = $2 ORDER BY pk",
            &[scope_key.as_str().into(), action_key.as_str().into()],
            |row| Ok((row.int(0)?, row.text(1)?, row.text(2)?)),
        )
        .map_err(sqlite("looking for duplicates"))?;
    let mut best: Option<(i64, String, f64)> = None;
    for (pk, id, description) in candidates {
        let similarity = description_similarity(&description, &workflow.description);
        if similarity >= cfg.dedup_threshold && best.as_ref().is_none_or(|(_, _, s)| similarity > *s) {
            best = Some((pk, id, similarity));
        }
    }
    if let Some((pk, id, similarity)) = best {
        insert_provenance(db, path, pk, &workflow.provenance, &created_at)?;
        add_usage(db, pk, &workflow.stats).map_err(sqlite("merging a duplicate"))?;
        return Ok(AddOutcome::Merged { id, similarity });
    }

    let id = content_id(workflow);
    let steps_json = serde_json::to_string(&workflow.steps).map_err(|err| MemoryError::InvalidWorkflow {
        description: workflow.description.clone(),
        reason: format!("its steps do not serialize: {err}"),
    })?;
    let composed_json = serde_json::to_string(&workflow.composed_of).map_err(|err| MemoryError::InvalidWorkflow {
        description: workflow.description.clone(),
        reason: format!("its composition does not serialize: {err}"),
    })?;
    let existing = pk_of(db, &id).map_err(sqlite("looking up an id"))?;
    if let Some(pk) = existing {
        // The same content in the same scope: only possible with dedup disabled. Keep one
        // row and record the extra provenance.
        insert_provenance(db, path, pk, &workflow.provenance, &created_at)?;
        return Ok(AddOutcome::Merged { id, similarity: 1.0 });
    }
    let pk = db
        .query_one(
            "INSERT INTO workflows (id, description, steps, site, domain, scope_key, action_key, composed_of, created_at, index_text, retired_at, retired_reason)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING pk",
            &[
                id.as_str().into(),
                workflow.description.as_str().into(),
                steps_json.into(),
                workflow.scope.site.clone().into(),
                workflow.scope.domain.clone().into(),
                scope_key.as_str().into(),
                action_key.into(),
                composed_json.into(),
                created_at.as_str().into(),
                steps_text(workflow).into(),
                workflow.retired.as_ref().map(|retired| retired.at.as_str()).into(),
                workflow.retired.as_ref().map(|retired| retired.reason.as_str()).into(),
            ],
        )
        .and_then(|row| row.int(0))
        .map_err(sqlite("inserting a workflow"))?;
    add_usage(db, pk, &workflow.stats).map_err(sqlite("inserting a workflow"))?;
    if workflow.retired.is_none() {
        log_index(db, pk, "insert").map_err(sqlite("indexing a workflow"))?;
    }
    insert_provenance(db, path, pk, &workflow.provenance, &created_at)?;
    let evicted = match cfg.max_per_scope {
        Some(max) => evict_in(db, path, &scope_key, max)?,
        None => Vec::new(),
    };
    Ok(AddOutcome::Inserted { id, evicted })
}

fn insert_provenance(
    db: &Db,
    path: &Path,
    pk: i64,
    provenance: &Provenance,
    created_at: &str,
) -> Result<(), MemoryError> {
    let sqlite = |source| MemoryError::Database { path: path.to_path_buf(), what: "recording provenance", source };
    // Trajectory ids are strings, so this serialisation cannot fail.
    let ids = serde_json::to_string(&provenance.trajectory_ids).unwrap_or_else(|_| "[]".to_owned());
    db.execute(
        "INSERT INTO provenance (workflow_pk, seq, trajectory_ids, inducer, model, prompt_version, created_at)
         VALUES ($1, (SELECT COALESCE(MAX(seq), -1) + 1 FROM provenance WHERE workflow_pk = $1), $2, $3, $4, $5, $6)",
        &[
            pk.into(),
            ids.into(),
            provenance.inducer.as_str().into(),
            provenance.model.clone().into(),
            provenance.prompt_version.clone().into(),
            created_at.into(),
        ],
    )
    .map_err(sqlite)?;
    Ok(())
}

/// Evicts from the exact scope `scope_key` until at most `max` workflows remain.
fn evict_in(db: &Db, path: &Path, scope_key: &str, max: usize) -> Result<Vec<String>, MemoryError> {
    let sqlite = |source| MemoryError::Database { path: path.to_path_buf(), what: "evicting", source };
    let mut rows: Vec<(f64, i64, String)> = db
        .query_map(
            &format!(
                "SELECT pk, id, COALESCE(used_success, 0), COALESCE(used_failure, 0) FROM {WORKFLOWS}
                 WHERE scope_key = $1 AND retired_at IS NULL"
            ),
            &[scope_key.into()],
            |row| {
                let stats = WorkflowStats { retrieved: 0, used_success: row.count(2)?, used_failure: row.count(3)? };
                Ok((retention_score(&stats), row.int(0)?, row.text(1)?))
            },
        )
        .map_err(sqlite)?;
    let excess = rows.len().saturating_sub(max);
    if excess == 0 {
        return Ok(Vec::new());
    }
    // Lowest score first; among equal scores the oldest (smallest pk) first.
    rows.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut evicted = Vec::with_capacity(excess);
    for (_, pk, id) in rows.into_iter().take(excess) {
        delete_pk(db, path, pk)?;
        evicted.push(id);
    }
    Ok(evicted)
}

/// Writes (or replaces) the vector of workflow `pk`, normalised, and logs it for the
/// index.
fn write_vector(db: &Db, path: &Path, pk: i64, model: &str, vector: &[f32]) -> Result<(), MemoryError> {
    let sqlite = |source| MemoryError::Database { path: path.to_path_buf(), what: "writing a vector", source };
    if vector.is_empty() {
        return Err(MemoryError::Retrieval { reason: format!("an empty vector from embedding model `{model}`") });
    }
    db.execute(
        "INSERT INTO workflow_vectors (pk, model, vector) VALUES ($1, $2, $3)
         ON CONFLICT (pk) DO UPDATE SET model = excluded.model, vector = excluded.vector",
        &[pk.into(), model.into(), encode_vector(&normalised(vector)).into()],
    )
    .map_err(sqlite)?;
    log_index(db, pk, "vector").map_err(sqlite)?;
    Ok(())
}

fn delete_pk(db: &Db, path: &Path, pk: i64) -> Result<(), MemoryError> {
    let sqlite = |source| MemoryError::Database { path: path.to_path_buf(), what: "deleting a workflow", source };
    log_index(db, pk, "delete").map_err(sqlite)?;
    for sql in [
        "DELETE FROM workflow_vectors WHERE pk = $1",
        "DELETE FROM provenance WHERE workflow_pk = $1",
        "DELETE FROM usage_days WHERE workflow_pk = $1",
        "DELETE FROM workflow_usage WHERE workflow_pk = $1",
        "DELETE FROM workflows WHERE pk = $1",
    ] {
        db.execute(sql, &[pk.into()]).map_err(sqlite)?;
    }
    Ok(())
}

/// Appends `op` (`insert`, `delete` or `vector`) for the workflow `pk` to the log the
/// search index follows.
fn log_index(db: &Db, pk: i64, op: &'static str) -> Result<(), DbError> {
    db.execute("INSERT INTO index_log (pk, op) VALUES ($1, $2)", &[pk.into(), op.into()]).map(|_| ())
}

/// The exact-scope grouping key: both fields, with absence distinct from any value.
fn scope_key(scope: &Scope) -> String {
    let part = |value: &Option<String>| match value {
        Some(value) => format!("={value}"),
        None => "-".to_owned(),
    };
    format!("site{}\u{1f}domain{}", part(&scope.site), part(&scope.domain))
}

/// A workflow's id: a hash of its scope, description and steps, so the same workflow gets
/// the same id in every memory file.
fn content_id(workflow: &Workflow) -> String {
    let mut hasher = Sha256::new();
    hasher.update(scope_key(&workflow.scope).as_bytes());
    hasher.update([0]);
    hasher.update(workflow.description.as_bytes());
    hasher.update([0]);
    for step in &workflow.steps {
        hasher.update(step.state.as_bytes());
        hasher.update([0]);
        hasher.update(step.reasoning.as_bytes());
        hasher.update([0]);
        hasher.update(step.action.tool.as_bytes());
        hasher.update([0]);
        hasher.update(canonical_json(&serde_json::Value::Object(step.action.args.clone())).as_bytes());
        hasher.update([0]);
    }
    let digest = hasher.finalize();
    let mut id = String::from("wf-");
    for byte in &digest[..8] {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}

/// Adds `n` to `column` of the workflow `pk`'s bucket for today (UTC).
/// The primary key of the workflow `id`, if it is stored.
fn pk_of(db: &Db, id: &str) -> Result<Option<i64>, DbError> {
    db.query_opt("SELECT pk FROM workflows WHERE id = $1", &[id.into()])?.map(|row| row.int(0)).transpose()
}

/// Adds `counts` to the running totals of workflow `pk` (nothing when all are zero).
fn add_usage(db: &Db, pk: i64, counts: &WorkflowStats) -> Result<(), DbError> {
    if *counts == WorkflowStats::default() {
        return Ok(());
    }
    db.execute(
        "INSERT INTO workflow_usage (workflow_pk, retrieved, used_success, used_failure) VALUES ($1, $2, $3, $4)
         ON CONFLICT (workflow_pk) DO UPDATE SET retrieved = workflow_usage.retrieved + excluded.retrieved,
             used_success = workflow_usage.used_success + excluded.used_success,
             used_failure = workflow_usage.used_failure + excluded.used_failure",
        &[pk.into(), counts.retrieved.into(), counts.used_success.into(), counts.used_failure.into()],
    )?;
    Ok(())
}

fn count_day(db: &Db, pk: i64, column: &'static str, n: i64) -> Result<(), DbError> {
    let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
    db.execute(
        &format!(
            "INSERT INTO usage_days (workflow_pk, day, {column}) VALUES ($1, $2, $3)
             ON CONFLICT (workflow_pk, day) DO UPDATE SET {column} = usage_days.{column} + excluded.{column}"
        ),
        &[pk.into(), day.into(), n.into()],
    )?;
    Ok(())
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(e, _)
            if e.code == rusqlite::ErrorCode::DatabaseBusy || e.code == rusqlite::ErrorCode::DatabaseLocked
    )
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use flowmem_model::{Scope, WorkflowStats};

    use crate::index::SearchIndex;
    use crate::schema::MIGRATIONS;
    use crate::store::{MemoryStore, StoreConfig};

    #[test]
    fn a_version_1_file_migrates_in_place_and_stays_searchable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute_batch(
                "INSERT INTO workflows (pk, id, description, steps, scope_key, action_key, created_at, retrieved, used_success, used_failure)
                 VALUES (1, 'wf-old', 'refund a returned parcel', '[{\"action\":{\"tool\":\"refund\",\"args\":{}}}]', 's', 'refund', '2026-01-01T00:00:00Z', 7, 3, 1);
                 INSERT INTO workflows (pk, id, description, steps, scope_key, action_key, created_at)
                 VALUES (2, 'wf-unused', 'cancel a pending order', '[{\"action\":{\"tool\":\"cancel\",\"args\":{}}}]', 's', 'cancel', '2026-01-01T00:00:00Z');
                 INSERT INTO provenance (workflow_pk, seq, trajectory_ids, inducer, created_at) VALUES (1, 0, '[\"t9\"]', 'rule', '2026-01-01T00:00:00Z');
                 INSERT INTO workflow_fts (rowid, description, steps) VALUES (1, 'refund a returned parcel', 'refund\nissue_voucher');",
            )
            .unwrap();
        }
        let store = MemoryStore::open(&path, StoreConfig::standard()).unwrap();
        assert_eq!(store.schema_version().unwrap(), MIGRATIONS.len() as i64);
        let hits = store.search("voucher", &Scope::default(), 5).unwrap();
        assert_eq!(hits.len(), 1, "the old index text carried over");
        assert_eq!(hits[0].workflow.id, "wf-old");
        assert_eq!(hits[0].workflow.provenance.trajectory_ids, ["t9"]);
        // Migration 6 moved the running totals out of the row, and kept them.
        let stats = |id: &str| store.get(id).unwrap().stats;
        assert_eq!(stats("wf-old"), WorkflowStats { retrieved: 7, used_success: 3, used_failure: 1 });
        assert_eq!(stats("wf-unused"), WorkflowStats::default());
        let usage_rows = store.db.query_one("SELECT COUNT(*) FROM workflow_usage", &[]).unwrap().count(0).unwrap();
        assert_eq!(usage_rows, 1, "a workflow never counted has no usage row");
    }

    #[test]
    fn a_check_of_a_file_an_older_flowmem_wrote_says_so_and_leaves_it_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v5.db");
        {
            let conn = Connection::open(&path).unwrap();
            for migration in &MIGRATIONS[..5] {
                conn.execute_batch(migration).unwrap();
            }
            conn.pragma_update(None, "user_version", 5).unwrap();
        }
        let report = MemoryStore::check(&path).unwrap();
        assert_eq!(report.workflows, None);
        assert!(
            report.problems.len() == 1
                && report.problems[0].contains("schema version 5 and this flowmem reads version"),
            "{:?}",
            report.problems
        );
        let version: i64 =
            Connection::open(&path).unwrap().pragma_query_value(None, "user_version", |row| row.get(0)).unwrap();
        assert_eq!(version, 5, "the check migrated nothing");
        drop(MemoryStore::open(&path, StoreConfig::standard()).unwrap());
        let report = MemoryStore::check(&path).unwrap();
        assert_eq!((report.problems.len(), report.workflows), (0, Some(0)), "{:?}", report.problems);
    }

    #[test]
    fn prepare_search_loads_what_another_process_wrote_and_its_siblings_share_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.db");
        let store = MemoryStore::open(&path, StoreConfig::standard()).unwrap();
        let sibling = store.open_sibling().unwrap();
        // Another process's writes, through its own connection and index.
        let mut other = MemoryStore::open(&path, StoreConfig::standard()).unwrap();
        other.add_all(&flowmem_testsupport::synthetic_workflows(40, 3)).unwrap();
        let head = SearchIndex::log_head(&store.db).unwrap();
        assert!(head > 0);
        assert!(store.index.read().unwrap().last_seq() < head, "not loaded before it is asked");
        store.prepare_search().unwrap();
        assert_eq!(store.index.read().unwrap().last_seq(), head);
        assert_eq!(sibling.index.read().unwrap().last_seq(), head, "one index for the siblings");
    }
}
