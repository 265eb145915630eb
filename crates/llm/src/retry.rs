//! When and how long to wait before retrying a failed request.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// How the HTTP backend retries 429, 5xx, timeouts and connection errors.
///
/// The wait before retry `n` (counting from 0) is `base_delay · 2ⁿ`, capped at
/// `max_delay`, times a random factor in [0.5, 1) so that clients that failed together
/// do not retry together. A `Retry-After` (or OpenAI's `retry-after-ms`) header replaces
/// that wait, capped at `max_retry_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 never retries.
    pub max_retries: u32,
    /// The first backoff.
    pub base_delay: Duration,
    /// The longest backoff.
    pub max_delay: Duration,
    /// The longest wait a server's `Retry-After` may ask for.
    pub max_retry_after: Duration,
}

impl RetryPolicy {
    /// 4 retries, backing off from 0.5 s up to 30 s, honouring `Retry-After` up to 2 min.
    #[must_use]
    pub fn standard() -> RetryPolicy {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(120),
        }
    }

    /// The wait before retry number `retry` (0-based), given the server's requested wait.
    #[must_use]
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(requested) = retry_after {
            return requested.min(self.max_retry_after);
        }
        let exponential = self.base_delay.saturating_mul(1u32.checked_shl(retry).unwrap_or(u32::MAX));
        exponential.min(self.max_delay).mul_f64(0.5 + 0.5 * unit_random())
    }
}

/// Reads `retry-after-ms` (OpenAI) or `Retry-After` in seconds.
///
/// An HTTP-date `Retry-After` is ignored, falling back to the computed backoff.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|text| text.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let seconds = header("retry-after")?.parse::<f64>().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// A random number in [0, 1) from the standard library's per-process random hash keys.
fn unit_random() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_jitters() {
        let policy = RetryPolicy {
            max_retries: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            max_retry_after: Duration::from_secs(5),
        };
        for retry in 0..10 {
            let full = Duration::from_millis(100 * (1 << retry)).min(Duration::from_millis(1000));
            let delay = policy.delay(retry, None);
            assert!(delay >= full / 2 && delay <= full, "retry {retry}: {delay:?} vs {full:?}");
        }
        assert_eq!(policy.delay(0, Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(policy.delay(0, Some(Duration::from_secs(60))), Duration::from_secs(5));
        // Huge retry counts do not overflow.
        assert!(policy.delay(40, None) <= Duration::from_millis(1000));
    }

    #[test]
    fn reads_retry_after_headers() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", "3".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        let mut date = reqwest::header::HeaderMap::new();
        date.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&date), None);
    }
}
