//! Parameters and columns: the five kinds of value both databases share.

use crate::DbError;

/// A parameter or a column value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL `NULL`.
    Null,
    /// An integer (`INTEGER` in SQLite, `BIGINT` in PostgreSQL; PostgreSQL booleans read
    /// as 0 or 1).
    Int(i64),
    /// A float (`REAL`, `DOUBLE PRECISION`).
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes (`BLOB`, `BYTEA`).
    Blob(Vec<u8>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Int(_) => "an integer",
            Value::Real(_) => "a float",
            Value::Text(_) => "text",
            Value::Blob(_) => "bytes",
        }
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Value {
        Value::Int(value)
    }
}

impl From<u64> for Value {
    /// Saturates at `i64::MAX`: counters never get there.
    fn from(value: u64) -> Value {
        Value::Int(i64::try_from(value).unwrap_or(i64::MAX))
    }
}

impl From<f64> for Value {
    fn from(value: f64) -> Value {
        Value::Real(value)
    }
}

impl From<&str> for Value {
    fn from(value: &str) -> Value {
        Value::Text(value.to_owned())
    }
}

impl From<String> for Value {
    fn from(value: String) -> Value {
        Value::Text(value)
    }
}

impl From<&String> for Value {
    fn from(value: &String) -> Value {
        Value::Text(value.clone())
    }
}

impl From<Vec<u8>> for Value {
    fn from(value: Vec<u8>) -> Value {
        Value::Blob(value)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Value {
        value.map_or(Value::Null, Into::into)
    }
}

/// One result row.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row(pub Vec<Value>);

impl Row {
    fn at(&self, index: usize) -> &Value {
        self.0.get(index).unwrap_or(&Value::Null)
    }

    fn wrong(&self, index: usize, expected: &'static str) -> DbError {
        DbError::Column { index, expected, found: self.at(index).kind() }
    }

    /// Column `index` as an integer.
    ///
    /// # Errors
    ///
    /// [`DbError::Column`] when it is not one.
    pub fn int(&self, index: usize) -> Result<i64, DbError> {
        match self.at(index) {
            Value::Int(value) => Ok(*value),
            _ => Err(self.wrong(index, "an integer")),
        }
    }

    /// Column `index` as a count: an integer, negative ones read as 0.
    ///
    /// # Errors
    ///
    /// [`DbError::Column`] when it is not an integer.
    pub fn count(&self, index: usize) -> Result<u64, DbError> {
        Ok(u64::try_from(self.int(index)?).unwrap_or(0))
    }

    /// Column `index` as a boolean: an integer other than 0.
    ///
    /// # Errors
    ///
    /// [`DbError::Column`] when it is not an integer.
    pub fn bool(&self, index: usize) -> Result<bool, DbError> {
        Ok(self.int(index)? != 0)
    }

    /// Column `index` as a float (integers convert).
    ///
    /// # Errors
    ///
    /// [`DbError::Column`] when it is neither.
    pub fn real(&self, index: usize) -> Result<f64, DbError> {
        match self.at(index) {
            Value::Real(value) => Ok(*value),
            Value::Int(value) => Ok(*value as f64),
            _ => Err(self.wrong(index, "a float")),
        }
    }

    /// Column `index` as text.
    ///
    /// # Errors
    ///
    /// [`DbError::Column`] when it is not text.
    pub fn text(&self, index: usize) -> Result<String, DbError> {
        match self.at(index) {
            Value::Text(value) => Ok(value.clone()),
            _ => Err(self.wrong(index, "text")),
        }
    }

    /// Column `index` as text, or `None` for `NULL`.
    ///
    /// # Errors
    ///
    /// [`DbError::Column`] when it is something else.
    pub fn opt_text(&self, index: usize) -> Result<Option<String>, DbError> {
        match self.at(index) {
            Value::Null => Ok(None),
            _ => self.text(index).map(Some),
        }
    }

    /// Column `index` as an integer, or `None` for `NULL`.
    ///
    /// # Errors
    ///
    /// [`DbError::Column`] when it is something else.
    pub fn opt_int(&self, index: usize) -> Result<Option<i64>, DbError> {
        match self.at(index) {
            Value::Null => Ok(None),
            _ => self.int(index).map(Some),
        }
    }

    /// Column `index` as bytes, or `None` for `NULL`.
    ///
    /// # Errors
    ///
    /// [`DbError::Column`] when it is something else.
    pub fn opt_blob(&self, index: usize) -> Result<Option<&[u8]>, DbError> {
        match self.at(index) {
            Value::Null => Ok(None),
            Value::Blob(value) => Ok(Some(value)),
            _ => Err(self.wrong(index, "bytes")),
        }
    }
}
