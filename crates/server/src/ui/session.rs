//! Web UI sign-in: a token given once on the sign-in page opens a session kept in this
//! process, named by a random id in an `HttpOnly`, `SameSite=Strict` cookie. The token
//! itself is never stored in the cookie, the page, or a log. Each session has its own
//! CSRF token, which every state-changing form carries.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use rand::RngCore;

use crate::auth::TokenScope;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "flowmem_session";
/// How long a session lasts after sign-in.
const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);
/// The most sessions kept; signing in past it drops the oldest.
const MAX_SESSIONS: usize = 10_000;

/// A signed-in viewer, or the local viewer of a memory without tokens.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// What the token that opened it may do.
    pub(crate) scope: TokenScope,
    /// That token's row id; `None` under open access.
    pub(crate) token_id: Option<i64>,
    /// The CSRF token every form of this session carries.
    pub(crate) csrf: String,
    expires: Instant,
}

impl Session {
    /// Whether this viewer may change memory.
    pub(crate) fn can_write(&self) -> bool {
        self.scope == TokenScope::Write
    }

    /// Whether `presented` is this session's CSRF token (compared in constant time).
    pub(crate) fn csrf_matches(&self, presented: &str) -> bool {
        let (a, b) = (self.csrf.as_bytes(), presented.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// The sessions of one server process.
pub(crate) struct Sessions {
    open: Mutex<HashMap<String, Session>>,
    /// The CSRF token of the open-access viewer (a memory without tokens, on loopback):
    /// there is no cookie then, and the forms still need a secret a cross-site page
    /// cannot read.
    open_access_csrf: String,
}

impl Sessions {
    pub(crate) fn new() -> Sessions {
        Sessions { open: Mutex::new(HashMap::new()), open_access_csrf: random_hex(32) }
    }

    /// The viewer of a memory without tokens: may write, and has no cookie.
    pub(crate) fn open_access(&self) -> Session {
        Session {
            scope: TokenScope::Write,
            token_id: None,
            csrf: self.open_access_csrf.clone(),
            expires: Instant::now() + LIFETIME,
        }
    }

    /// Opens a session for a token with `scope` and returns its id (the cookie's value).
    pub(crate) fn create(&self, scope: TokenScope, token_id: Option<i64>) -> String {
        let id = random_hex(32);
        let session = Session { scope, token_id, csrf: random_hex(32), expires: Instant::now() + LIFETIME };
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        open.retain(|_, session| session.expires > now);
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open.iter().min_by_key(|(_, s)| s.expires).map(|(id, _)| id.clone())
        {
            open.remove(&oldest);
        }
        open.insert(id.clone(), session);
        id
    }

    /// The live session the request's cookie names, if any.
    pub(crate) fn of_request(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match open.get(id) {
            Some(session) if session.expires > Instant::now() => Some(session.clone()),
            Some(_) => {
                open.remove(id);
                None
            }
            None => None,
        }
    }

    /// Ends the session the request's cookie names.
    pub(crate) fn end(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, COOKIE) {
            self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
        }
    }
}

/// The `Set-Cookie` value that stores session `id` (or, with `None`, clears it).
pub(crate) fn set_cookie(id: Option<&str>) -> HeaderValue {
    let value = match id {
        Some(id) => format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}", LIFETIME.as_secs()),
        None => format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    };
    // Hex and fixed text only: always a valid header value.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

fn random_hex(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut raw);
    raw.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    use super::{COOKIE, Sessions, set_cookie};
    use crate::auth::TokenScope;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_session_is_found_by_its_cookie_and_ends_on_sign_out() {
        let sessions = Sessions::new();
        let id = sessions.create(TokenScope::Read, Some(7));
        let headers = with_cookie(&format!("theme=dark; {COOKIE}={id}"));
        let session = sessions.of_request(&headers).expect("the session");
        assert_eq!((session.scope, session.token_id), (TokenScope::Read, Some(7)));
        assert!(!session.can_write());
        assert!(session.csrf_matches(&session.csrf.clone()));
        assert!(!session.csrf_matches("") && !session.csrf_matches(&session.csrf[1..]));
        assert!(sessions.of_request(&with_cookie(&format!("{COOKIE}=0{id}"))).is_none());
        sessions.end(&headers);
        assert!(sessions.of_request(&headers).is_none());
    }

    #[test]
    fn the_cookie_is_http_only_and_same_site_strict() {
        let cookie = set_cookie(Some("abc"));
        let text = cookie.to_str().unwrap();
        assert!(
            text.starts_with("flowmem_session=abc;") && text.contains("HttpOnly") && text.contains("SameSite=Strict")
        );
        assert!(set_cookie(None).to_str().unwrap().contains("Max-Age=0"));
    }
}
