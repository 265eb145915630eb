//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

/// The repository root (the workspace), from this crate's manifest directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shared benchmark data, a sibling of the repository root.
pub fn shared_data(relative: &str) -> PathBuf {
    let path = repo_root().join("../shared/data").join(relative);
    assert!(path.exists(), "missing test data `{}`: the repository must sit next to `shared/`", path.display());
    path
}
