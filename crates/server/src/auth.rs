//! Bearer tokens for the HTTP surfaces: created by `flowmem serve token create`, stored
//! hashed in a table the server owns inside the memory database, checked by a tower
//! layer in front of every authenticated route.
//!
//! The table (`server_tokens`) is created by the server with `CREATE TABLE IF NOT
//! EXISTS`, outside memory's migrations: memory's schema stays memory's, and a memory
//! file that never served has no such table. Only the SHA-256 of a token is stored; the
//! token itself is shown once, when it is created, and never logged.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flowmem_db::{Dialect, Value};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::db::ServerDb;
use crate::error::ServerError;
use crate::state::AppState;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// Read memory and run workflows: every tool but `report_run`.
    Read,
    /// Everything `read` may, and hand runs back with `report_run`.
    Write,
}

impl TokenScope {
    /// The scope's name in the database and on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            TokenScope::Read => "read",
            TokenScope::Write => "write",
        }
    }

    fn parse(name: &str) -> Option<TokenScope> {
        match name {
            "read" => Some(TokenScope::Read),
            "write" => Some(TokenScope::Write),
            _ => None,
        }
    }
}

/// A newly created token. Its secret exists only here; the database keeps its hash.
///
/// `Debug` redacts the secret, so the value can be logged without leaking it.
pub struct NewToken {
    /// The secret to give the client, `fmt_` and 64 hex digits.
    pub secret: String,
    /// Its scope.
    pub scope: TokenScope,
    /// The row id, which names the token without revealing it.
    pub id: i64,
}

impl std::fmt::Debug for NewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewToken").field("id", &self.id).field("scope", &self.scope).finish_non_exhaustive()
    }
}

/// The server's token table in the memory database.
///
/// Lookups hit a cache of known hashes first; an unknown hash is looked up in the file,
/// so a token created while the server runs works at once.
pub struct TokenStore {
    // Every use is a short synchronous query, never held across an await.
    db: ServerDb,
    known: Mutex<HashMap<[u8; 32], (i64, TokenScope)>>,
}

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore").finish_non_exhaustive()
    }
}

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS server_tokens (
    id INTEGER PRIMARY KEY,
    sha256 BLOB NOT NULL UNIQUE,
    scope TEXT NOT NULL CHECK (scope IN ('read', 'write')),
    created_at TEXT NOT NULL
)";

const CREATE_TABLE_POSTGRES: &str = "CREATE TABLE IF NOT EXISTS server_tokens (
    id BIGSERIAL PRIMARY KEY,
    sha256 BYTEA NOT NULL UNIQUE,
    scope TEXT NOT NULL CHECK (scope IN ('read', 'write')),
    created_at TEXT NOT NULL
)";

impl TokenStore {
    /// Opens the token table in the memory database at `path`, a SQLite file or a
    /// PostgreSQL URL (creating the table if needed). The memory itself must have been
    /// opened first, so the database exists (a file in WAL mode).
    ///
    /// # Errors
    ///
    /// [`ServerError::Database`] when the database cannot be opened or the table created.
    pub fn open(path: &Path) -> Result<TokenStore, ServerError> {
        let db = ServerDb::open(path, "opening the token table", |db| {
            db.batch(match db.dialect() {
                Dialect::Sqlite => CREATE_TABLE,
                Dialect::Postgres => CREATE_TABLE_POSTGRES,
            })
        })?;
        Ok(TokenStore { db, known: Mutex::new(HashMap::new()) })
    }

    /// Creates a token with `scope`, stores its hash in one transaction, and returns it.
    ///
    /// # Errors
    ///
    /// [`ServerError::Database`] when the insert fails.
    pub fn create(&self, scope: TokenScope) -> Result<NewToken, ServerError> {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let mut secret = String::from("fmt_");
        for byte in bytes {
            secret.push_str(&format!("{byte:02x}"));
        }
        let hash = digest(&secret);
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let id = self.db.run("storing a token", |db| {
            db.query_one(
                "INSERT INTO server_tokens (sha256, scope, created_at) VALUES ($1, $2, $3) RETURNING id",
                &[hash.to_vec().into(), scope.name().into(), now.into()],
            )?
            .int(0)
        })?;
        Ok(NewToken { secret, scope, id })
    }

    /// How many tokens exist.
    ///
    /// # Errors
    ///
    /// [`ServerError::Database`] when the count fails.
    pub fn count(&self) -> Result<u64, ServerError> {
        self.db.run("counting tokens", |db| db.query_one("SELECT COUNT(*) FROM server_tokens", &[])?.count(0))
    }

    /// The scope of the token `secret`, or `None` when it is not a token of this memory.
    ///
    /// # Errors
    ///
    /// [`ServerError::Database`] when the lookup fails.
    pub fn check(&self, secret: &str) -> Result<Option<TokenScope>, ServerError> {
        Ok(self.grant(secret)?.map(|(_, scope)| scope))
    }

    /// The row id and scope of the token `secret`, or `None` when it is not a token of
    /// this memory. The id names the token in settings and records without revealing it.
    ///
    /// # Errors
    ///
    /// [`ServerError::Database`] when the lookup fails.
    pub fn grant(&self, secret: &str) -> Result<Option<(i64, TokenScope)>, ServerError> {
        let hash = digest(secret);
        if let Some(grant) = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&hash) {
            return Ok(Some(*grant));
        }
        let row: Option<(i64, String)> = self.db.run("looking up a token", |db| {
            db.query_opt("SELECT id, scope FROM server_tokens WHERE sha256 = $1", &[Value::Blob(hash.to_vec())])?
                .map(|row| Ok((row.int(0)?, row.text(1)?)))
                .transpose()
        })?;
        let grant = row.and_then(|(id, scope)| TokenScope::parse(&scope).map(|scope| (id, scope)));
        if let Some(grant) = grant {
            self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(hash, grant);
        }
        Ok(grant)
    }
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Who is calling: the scope granted to the request. Inserted into the request's
/// extensions by the token layer of [`router`](crate::router); stdio sessions are granted [`TokenScope::Write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The scope granted.
    pub scope: TokenScope,
    /// The token's row id; `None` for open access (a memory without tokens).
    pub token_id: Option<i64>,
}

/// The tower middleware of every authenticated route: a request needs
/// `Authorization: Bearer <token>` with a token of this memory, else it gets a 401. When
/// the memory has no token at all and the server listens on loopback only, requests pass
/// with the `write` scope (a local, single-user setup); the server refuses to listen
/// elsewhere without tokens.
///
/// The token's text never reaches a log or an error message.
pub(crate) async fn require_token(
    State(state): State<std::sync::Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
        .map(str::trim)
        .map(str::to_owned);
    // Open access ignores whatever token a client sends: SDKs send their API key always.
    let grant = if state.open_access() {
        Some((None, TokenScope::Write))
    } else {
        match presented {
            Some(secret) => match state.tokens.grant(&secret) {
                Ok(grant) => grant.map(|(id, scope)| (Some(id), scope)),
                Err(err) => {
                    tracing::error!(error = %err, "token lookup failed");
                    return (StatusCode::INTERNAL_SERVER_ERROR, "token lookup failed").into_response();
                }
            },
            None => None,
        }
    };
    let Some((token_id, scope)) = grant else {
        tracing::info!(path = %request.uri().path(), "request refused: missing or unknown bearer token");
        // One body every surface's clients read: OpenAI SDKs take `error.message` and
        // `error.type`, the REST API documents `error.kind` and `error.message`.
        let body = serde_json::json!({"error": {
            "kind": "unauthorized",
            "type": "authentication_error",
            "message": "missing or invalid bearer token"
        }});
        let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    };
    request.extensions_mut().insert(Caller { scope, token_id });
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use crate::auth::{TokenScope, TokenStore};

    #[test]
    fn a_token_is_stored_only_as_its_hash_and_checks_with_its_scope() {
        let dir = tempfile::tempdir().unwrap();
        for path in crate::db::backends::new_memories(&dir) {
            let store = TokenStore::open(&path).unwrap();
            assert_eq!(store.count().unwrap(), 0);
            let read = store.create(TokenScope::Read).unwrap();
            let write = store.create(TokenScope::Write).unwrap();
            assert_ne!(read.id, write.id);
            assert_eq!(store.count().unwrap(), 2);
            assert_eq!(store.check(&read.secret).unwrap(), Some(TokenScope::Read));
            assert_eq!(store.grant(&write.secret).unwrap(), Some((write.id, TokenScope::Write)));
            assert_eq!(store.check("fmt_0000").unwrap(), None);
            assert!(!format!("{read:?}").contains(&read.secret), "Debug must redact the secret");
            drop(store);
            if path.exists() {
                let bytes = std::fs::read(&path).unwrap();
                let wal = std::fs::read(dir.path().join("memory.db-wal")).unwrap_or_default();
                for haystack in [&bytes, &wal] {
                    assert!(!haystack.windows(read.secret.len()).any(|w| w == read.secret.as_bytes()));
                }
            }
            // A second store on the same memory (another process) sees the tokens.
            let again = TokenStore::open(&path).unwrap();
            assert_eq!(again.check(&write.secret).unwrap(), Some(TokenScope::Write));
            assert_eq!(again.count().unwrap(), 2);
        }
    }
}
