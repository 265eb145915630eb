//! Shared helpers: where the shared data lives, and importing with counts.

use std::path::{Path, PathBuf};

use flowmem_model::{ImportFormat, Imported, Item, Record, import};

/// `../shared/data/<rel>`, relative to the repository root.
pub fn data(rel: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join("../shared/data").join(rel);
    assert!(path.exists(), "shared data missing: {} (tests read ../shared/data next to the repo)", path.display());
    path
}

/// Imports `rel` under the shared data, asserting that the import ran.
pub fn import_data(format: ImportFormat, rel: &str) -> Imported {
    let path = data(rel);
    match import(format, &path) {
        Ok(imported) => imported,
        Err(err) => panic!("importing {} failed: {err}", path.display()),
    }
}

/// The records of an import; panics on a trajectory.
pub fn records(imported: &Imported) -> Vec<&Record> {
    imported
        .items
        .iter()
        .map(|item| match item {
            Item::Record(record) => record,
            Item::Trajectory(trajectory) => {
                panic!("expected records, found trajectory {}", trajectory.id)
            }
        })
        .collect()
}

/// Total tool calls over all items.
pub fn n_calls(imported: &Imported) -> usize {
    imported.items.iter().map(|item| item.tool_calls().count()).sum()
}

/// Writes `text` to `name` in a fresh temporary directory.
pub fn write_temp(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("writing the fixture");
    (dir, path)
}

/// The skip messages of an import, with the temporary directory prefix cut off.
pub fn skip_messages(imported: &Imported, dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    imported.skipped.iter().map(|skipped| skipped.to_string().replace(&prefix, "")).collect()
}
