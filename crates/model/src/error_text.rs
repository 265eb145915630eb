//! Errors as one line of text, for logs and for error fields of data types.

/// The error and its causes on one line, `outer: inner: innermost`.
///
/// Tool calls, traces and run measurements keep errors as text; this keeps the cause
/// chain that `Display` alone drops.
///
/// # Example
///
/// ```
/// use flowmem_model::error_chain;
/// let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
/// assert_eq!(error_chain(&Wrapped(inner)), "cannot open: no such file");
///
/// #[derive(Debug)]
/// struct Wrapped(std::io::Error);
/// impl std::fmt::Display for Wrapped {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("cannot open")
///     }
/// }
/// impl std::error::Error for Wrapped {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
///         Some(&self.0)
///     }
/// }
/// ```
#[must_use]
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut res = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        res.push_str(": ");
        res.push_str(&cause.to_string());
        source = cause.source();
    }
    res
}
