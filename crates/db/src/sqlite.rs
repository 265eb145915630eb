//! The SQLite backend.

use std::borrow::Cow;

use rusqlite::types::{ToSqlOutput, ValueRef};

use crate::{Backend, DbError, Dialect, Row, Value};

/// A SQLite connection as a [`Backend`]. Statements are prepared once per connection
/// and cached.
#[derive(Debug)]
pub struct SqliteBackend {
    conn: rusqlite::Connection,
}

impl SqliteBackend {
    /// A backend over an open connection, configured as its owner wants it.
    #[must_use]
    pub fn new(conn: rusqlite::Connection) -> SqliteBackend {
        SqliteBackend { conn }
    }

    /// The connection, for what only SQLite has (pragmas, integrity checks).
    #[must_use]
    pub fn connection(&self) -> &rusqlite::Connection {
        &self.conn
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(value) => ValueRef::Integer(*value),
            Value::Real(value) => ValueRef::Real(*value),
            Value::Text(value) => ValueRef::Text(value.as_bytes()),
            Value::Blob(value) => ValueRef::Blob(value),
        }))
    }
}

fn read_value(value: ValueRef<'_>) -> Value {
    match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(value) => Value::Int(value),
        ValueRef::Real(value) => Value::Real(value),
        ValueRef::Text(bytes) => Value::Text(String::from_utf8_lossy(bytes).into_owned()),
        ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
    }
}

/// `sql` with PostgreSQL's `$N` placeholders as SQLite's `?N` (outside quotes).
fn placeholders(sql: &str) -> Cow<'_, str> {
    if !sql.contains('$') {
        return Cow::Borrowed(sql);
    }
    // `$`, `'` and digits are ASCII, and no byte of a multi-byte UTF-8 character is,
    // so the text is copied in slices cut at those bytes.
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let (mut copied, mut quoted) = (0, false);
    for (idx, byte) in bytes.iter().enumerate() {
        match byte {
            b'\'' => quoted = !quoted,
            b'$' if !quoted && bytes.get(idx + 1).is_some_and(u8::is_ascii_digit) => {
                out.push_str(&sql[copied..idx]);
                out.push('?');
                copied = idx + 1;
            }
            _ => {}
        }
    }
    out.push_str(&sql[copied..]);
    Cow::Owned(out)
}

impl Backend for SqliteBackend {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn for_each_row(
        &self,
        sql: &str,
        params: &[Value],
        each: &mut dyn FnMut(&Row) -> Result<(), DbError>,
    ) -> Result<(), DbError> {
        let mut stmt = self.conn.prepare_cached(&placeholders(sql))?;
        let n_columns = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        let mut row = Row(Vec::with_capacity(n_columns));
        while let Some(raw) = rows.next()? {
            row.0.clear();
            for idx in 0..n_columns {
                row.0.push(read_value(raw.get_ref(idx)?));
            }
            each(&row)?;
        }
        Ok(())
    }

    fn execute(&self, sql: &str, params: &[Value]) -> Result<u64, DbError> {
        let mut stmt = self.conn.prepare_cached(&placeholders(sql))?;
        Ok(stmt.execute(rusqlite::params_from_iter(params))? as u64)
    }

    fn batch(&self, sql: &str) -> Result<(), DbError> {
        Ok(self.conn.execute_batch(sql)?)
    }

    fn begin_write(&self) -> Result<(), DbError> {
        Ok(self.conn.execute_batch("BEGIN IMMEDIATE")?)
    }
}

#[cfg(test)]
mod tests {
    use super::placeholders;

    #[test]
    fn placeholders_become_sqlite_ones_outside_quotes() {
        assert_eq!(placeholders("SELECT $1, '$2', $10 WHERE a = $1"), "SELECT ?1, '$2', ?10 WHERE a = ?1");
        assert_eq!(placeholders("SELECT 1"), "SELECT 1");
        assert_eq!(placeholders("SELECT 'é$1', $2, ünï$3"), "SELECT 'é$1', ?2, ünï?3");
    }
}
