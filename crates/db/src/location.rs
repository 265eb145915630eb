//! Where a store lives: a SQLite file or a PostgreSQL database.

use std::ffi::OsStr;
use std::path::PathBuf;

/// A store's location, as given on a command line: a path, or a `postgres://` (or
/// `postgresql://`) URL.
#[derive(Clone, PartialEq, Eq)]
pub enum DbLocation {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL, as libpq reads it (`postgres://user:password@host:port/db`).
    Postgres(String),
}

impl DbLocation {
    /// Reads a location: a PostgreSQL URL when it starts with `postgres://` or
    /// `postgresql://`, else a path.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_db::DbLocation;
    /// let url = DbLocation::parse("postgres://flowmem:s3cret@db.internal:5432/memory".as_ref());
    /// assert!(matches!(url, DbLocation::Postgres(_)));
    /// assert_eq!(url.display(), "postgres://flowmem:***@db.internal:5432/memory");
    /// assert!(matches!(DbLocation::parse("memory.db".as_ref()), DbLocation::Sqlite(_)));
    /// ```
    #[must_use]
    pub fn parse(text: &OsStr) -> DbLocation {
        match text.to_str() {
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                DbLocation::Postgres(url.to_owned())
            }
            _ => DbLocation::Sqlite(PathBuf::from(text)),
        }
    }

    /// The location to show a person: the path, or the URL with its password (and any
    /// `password=` parameter) replaced by `***`.
    #[must_use]
    pub fn display(&self) -> String {
        match self {
            DbLocation::Sqlite(path) => path.display().to_string(),
            DbLocation::Postgres(url) => redact(url),
        }
    }

    /// Whether the store is PostgreSQL, shared by every process that names it.
    #[must_use]
    pub fn is_postgres(&self) -> bool {
        matches!(self, DbLocation::Postgres(_))
    }
}

// Never the URL itself: it may hold a password.
impl std::fmt::Debug for DbLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DbLocation({})", self.display())
    }
}

/// `url` without its password.
///
/// The user information ends at the URL's last `@`, so a password written raw (not
/// percent-encoded) is hidden whole even when it holds `/`, `?` or `@`. An `@` later in
/// the URL (in a parameter) can only make more of it hidden, never less.
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let shown = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***@"),
                None => format!("{userinfo}@"),
            };
            (shown, &rest[at + 1..])
        }
        None => (String::new(), rest),
    };
    let after = match after.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                    _ => param.to_owned(),
                })
                .collect();
            format!("{path}?{}", params.join("&"))
        }
        None => after.to_owned(),
    };
    format!("{scheme}://{userinfo}{after}")
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_show() {
        for (url, shown) in [
            ("postgres://u:p@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p%40ss@h:5/db?sslmode=disable", "postgres://u:***@h:5/db?sslmode=disable"),
            ("postgresql://h/db?user=u&password=secret", "postgresql://h/db?user=u&password=***"),
            ("postgres://u@h", "postgres://u@h"),
            ("postgres://u:p@h?password=x", "postgres://u:***@h?password=***"),
            // Raw (unencoded) passwords with URL delimiters in them.
            ("postgres://u:pa/ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p?x=1@h:5432/db", "postgres://u:***@h:5432/db"),
            ("postgres://u:p@ss@h/db", "postgres://u:***@h/db"),
        ] {
            assert_eq!(redact(url), shown);
        }
    }
}
