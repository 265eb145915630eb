//! The schema, as an ordered list of migrations for each backend, and the mark of a
//! flowmem SQLite file.
//!
//! `PRAGMA user_version` holds the number of migrations applied. Opening a file applies
//! the missing ones in order, each in its own immediate transaction; a file is never
//! dropped and recreated. A migration, once released, is never edited: changes go in a
//! new migration appended to the list.
//!
//! `PRAGMA application_id` is [`APPLICATION_ID`] in every memory flowmem writes, so that
//! another application's SQLite file is recognised and left alone ([`ownership`]).

/// The migrations, oldest first. Migration `n` (0-based) moves the file from
/// `user_version = n` to `n + 1`.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: workflows, their provenances, and the BM25 full-text index.
    "
    CREATE TABLE workflows (
        pk INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        description TEXT NOT NULL,
        steps TEXT NOT NULL,
        site TEXT,
        domain TEXT,
        scope_key TEXT NOT NULL,
        action_key TEXT NOT NULL,
        composed_of TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL,
        retrieved INTEGER NOT NULL DEFAULT 0,
        used_success INTEGER NOT NULL DEFAULT 0,
        used_failure INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX workflows_by_scope_action ON workflows (scope_key, action_key);
    CREATE INDEX workflows_by_domain ON workflows (domain);
    CREATE INDEX workflows_by_site ON workflows (site);
    CREATE TABLE provenance (
        workflow_pk INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        trajectory_ids TEXT NOT NULL,
        inducer TEXT NOT NULL,
        model TEXT,
        prompt_version TEXT,
        created_at TEXT NOT NULL,
        PRIMARY KEY (workflow_pk, seq)
    ) WITHOUT ROWID;
    CREATE VIRTUAL TABLE workflow_fts USING fts5 (
        description, steps, tokenize = 'porter unicode61'
    );
    ",
    // 2: BM25 moves from FTS5 to an in-memory index fed by a log of inserts and deletes,
    // so that a search with a long query stays within milliseconds at 100,000 workflows.
    "
    ALTER TABLE workflows ADD COLUMN index_text TEXT NOT NULL DEFAULT '';
    CREATE TABLE index_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        pk INTEGER NOT NULL,
        op TEXT NOT NULL CHECK (op IN ('insert', 'delete'))
    );
    UPDATE workflows SET index_text = COALESCE(
        (SELECT steps FROM workflow_fts WHERE workflow_fts.rowid = workflows.pk), '');
    INSERT INTO index_log (pk, op) SELECT pk, 'insert' FROM workflows ORDER BY pk;
    DROP TABLE workflow_fts;
    ",
    // 3: an embedding vector per workflow, with the id of the model that made it (derived
    // state for vector and hybrid retrieval, rebuilt when the model changes), and the
    // log op `vector` that tells the in-memory index a workflow's vector was written.
    "
    CREATE TABLE workflow_vectors (
        pk INTEGER PRIMARY KEY,
        model TEXT NOT NULL,
        vector BLOB NOT NULL
    );
    CREATE TABLE index_log_3 (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        pk INTEGER NOT NULL,
        op TEXT NOT NULL CHECK (op IN ('insert', 'delete', 'vector'))
    );
    INSERT INTO index_log_3 (seq, pk, op) SELECT seq, pk, op FROM index_log ORDER BY seq;
    DROP TABLE index_log;
    ALTER TABLE index_log_3 RENAME TO index_log;
    ",
    // 4: retirement. A retired workflow keeps its row, provenance and statistics; the
    // index log takes it out (`delete`) and a restore puts it back (`insert`).
    "
    ALTER TABLE workflows ADD COLUMN retired_at TEXT;
    ALTER TABLE workflows ADD COLUMN retired_reason TEXT;
    ",
    // 5: usage over time: per workflow and UTC day, the retrievals and the uses by
    // outcome, counted beside the workflow's running totals from now on.
    "
    CREATE TABLE usage_days (
        workflow_pk INTEGER NOT NULL,
        day TEXT NOT NULL,
        retrieved INTEGER NOT NULL DEFAULT 0,
        used_success INTEGER NOT NULL DEFAULT 0,
        used_failure INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (workflow_pk, day)
    ) WITHOUT ROWID;
    ",
    // 6: the running totals move out of the workflow's row into a narrow row of their
    // own. SQLite rewrites a whole row on any update, steps and index text included, so
    // counting a retrieval in `workflows` cost five times what it costs here, and a
    // server counts one on every search. A workflow never counted has no row (zeros).
    "
    CREATE TABLE workflow_usage (
        workflow_pk INTEGER PRIMARY KEY,
        retrieved INTEGER NOT NULL DEFAULT 0,
        used_success INTEGER NOT NULL DEFAULT 0,
        used_failure INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO workflow_usage (workflow_pk, retrieved, used_success, used_failure)
        SELECT pk, retrieved, used_success, used_failure FROM workflows
        WHERE retrieved + used_success + used_failure > 0;
    ALTER TABLE workflows DROP COLUMN retrieved;
    ALTER TABLE workflows DROP COLUMN used_success;
    ALTER TABLE workflows DROP COLUMN used_failure;
    ",
];

/// The PostgreSQL schema, as an ordered list of migrations; the version is in
/// `flowmem_meta` (row `memory`). It starts where the SQLite schema is at version 5, with
/// PostgreSQL's types: `BIGINT` keys and counters, `BYTEA` vectors, and a `BIGSERIAL` log
/// whose sequence numbers commit in order because every writer holds the write lock.
pub(crate) const PG_MIGRATIONS: &[&str] = &[
    // 1: everything the SQLite schema has at version 5.
    "
    CREATE TABLE workflows (
        pk BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        description TEXT NOT NULL,
        steps TEXT NOT NULL,
        site TEXT,
        domain TEXT,
        scope_key TEXT NOT NULL,
        action_key TEXT NOT NULL,
        composed_of TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL,
        retrieved BIGINT NOT NULL DEFAULT 0,
        used_success BIGINT NOT NULL DEFAULT 0,
        used_failure BIGINT NOT NULL DEFAULT 0,
        index_text TEXT NOT NULL DEFAULT '',
        retired_at TEXT,
        retired_reason TEXT
    );
    CREATE INDEX workflows_by_scope_action ON workflows (scope_key, action_key);
    CREATE INDEX workflows_by_domain ON workflows (domain);
    CREATE INDEX workflows_by_site ON workflows (site);
    CREATE TABLE provenance (
        workflow_pk BIGINT NOT NULL,
        seq BIGINT NOT NULL,
        trajectory_ids TEXT NOT NULL,
        inducer TEXT NOT NULL,
        model TEXT,
        prompt_version TEXT,
        created_at TEXT NOT NULL,
        PRIMARY KEY (workflow_pk, seq)
    );
    CREATE TABLE index_log (
        seq BIGSERIAL PRIMARY KEY,
        pk BIGINT NOT NULL,
        op TEXT NOT NULL CHECK (op IN ('insert', 'delete', 'vector'))
    );
    CREATE TABLE workflow_vectors (
        pk BIGINT PRIMARY KEY,
        model TEXT NOT NULL,
        vector BYTEA NOT NULL
    );
    CREATE TABLE usage_days (
        workflow_pk BIGINT NOT NULL,
        day TEXT NOT NULL,
        retrieved BIGINT NOT NULL DEFAULT 0,
        used_success BIGINT NOT NULL DEFAULT 0,
        used_failure BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (workflow_pk, day)
    );
    ",
    // 2: every transaction that appends to the index log notifies the channel
    // `flowmem_index` once, at commit, so that servers sharing the memory learn of new
    // workflows at once instead of at their next poll.
    "
    CREATE OR REPLACE FUNCTION flowmem_index_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('flowmem_index', '');
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER index_log_notify AFTER INSERT ON index_log
        FOR EACH STATEMENT EXECUTE FUNCTION flowmem_index_notify();
    ",
    // 3: the running totals in a narrow table of their own, as in SQLite's migration 6
    // (here it spares a new version of the whole row per count).
    "
    CREATE TABLE workflow_usage (
        workflow_pk BIGINT PRIMARY KEY,
        retrieved BIGINT NOT NULL DEFAULT 0,
        used_success BIGINT NOT NULL DEFAULT 0,
        used_failure BIGINT NOT NULL DEFAULT 0
    );
    INSERT INTO workflow_usage (workflow_pk, retrieved, used_success, used_failure)
        SELECT pk, retrieved, used_success, used_failure FROM workflows
        WHERE retrieved + used_success + used_failure > 0;
    ALTER TABLE workflows DROP COLUMN retrieved, DROP COLUMN used_success, DROP COLUMN used_failure;
    ",
];

/// The channel [`PG_MIGRATIONS`]' trigger notifies when the index log grows.
pub(crate) const INDEX_CHANNEL: &str = "flowmem_index";

/// The `PRAGMA application_id` of a flowmem memory: `flmm` in ASCII.
pub(crate) const APPLICATION_ID: i64 = 0x666C_6D6D;

/// The table every flowmem memory has had since its first migration; an unmarked file
/// with it was written by a flowmem from before the mark.
const FIRST_TABLE: &str = "workflows";

/// Whose a SQLite file is, read without changing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// A flowmem memory, marked.
    Marked,
    /// A flowmem memory from before the mark, or a file without tables: flowmem may
    /// mark it and migrate it.
    Claimable,
    /// Another application's: what it holds instead.
    Foreign(String),
}

/// Whose the database behind `conn` is. Only reads.
pub(crate) fn ownership(conn: &rusqlite::Connection) -> rusqlite::Result<Ownership> {
    let application_id: i64 = conn.query_row("PRAGMA application_id", [], |row| row.get(0))?;
    if application_id == APPLICATION_ID {
        return Ok(Ownership::Marked);
    }
    if application_id != 0 {
        return Ok(Ownership::Foreign(format!("its application id is {application_id:#010x}, not flowmem's")));
    }
    let mut stmt = conn.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?;
    let tables: Vec<String> = stmt.query_map([], |row| row.get(0))?.collect::<rusqlite::Result<_>>()?;
    if tables.is_empty() || tables.iter().any(|table| table == FIRST_TABLE) {
        return Ok(Ownership::Claimable);
    }
    let listed: Vec<String> = tables.iter().take(5).map(|table| format!("`{table}`")).collect();
    Ok(Ownership::Foreign(format!(
        "it holds the tables {}{}",
        listed.join(", "),
        if tables.len() > 5 { ", …" } else { "" }
    )))
}
