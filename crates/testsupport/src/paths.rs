//! Where the repository, its test dependencies and the shared test data are.

use std::path::{Path, PathBuf};

/// The repository root (the directory holding the workspace `Cargo.toml`).
#[must_use]
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// `<repo>/.deps`, where `scripts/setup/*.sh` install external test dependencies.
#[must_use]
pub fn deps_dir() -> PathBuf {
    repo_root().join(".deps")
}

/// `../shared/data` next to the repository, where the test data sets live.
#[must_use]
pub fn shared_data_dir() -> PathBuf {
    repo_root().join("../shared/data")
}

/// Returns `path` if it exists; otherwise fails the test, naming the setup script that
/// installs it.
///
/// # Panics
///
/// When `path` does not exist, with a message such as
/// ``missing .deps/node/...: run `scripts/setup/20-mcp-servers.sh` first``.
///
/// # Example
///
/// ```no_run
/// let server = flowmem_testsupport::require_path(
///     &flowmem_testsupport::deps_dir().join("node/node_modules/.bin/mcp-server-everything"),
///     "scripts/setup/20-mcp-servers.sh",
/// );
/// # let _ = server;
/// ```
#[must_use]
pub fn require_path(path: &Path, setup_script: &str) -> PathBuf {
    assert!(
        path.exists(),
        "missing test dependency {}: run `{setup_script}` (from the repository root) first",
        path.display()
    );
    path.to_path_buf()
}
