//! Issue 27 (1): what a write may replace. (Here rather than in `fs.rs`'s unit tests,
//! because making a FIFO starts `mkfifo`, which library code never does.)

use std::os::unix::fs::FileTypeExt;

use flowmem_model::{open_append, write_text_atomic};

#[test]
fn a_fifo_at_the_target_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.fifo");
    assert!(std::process::Command::new("mkfifo").arg(&path).status().unwrap().success());
    let err = write_text_atomic(&path, "new").unwrap_err();
    assert_eq!(err.source.kind(), std::io::ErrorKind::InvalidInput);
    let message = err.source.to_string();
    assert!(message.contains("out.fifo") && message.contains("a FIFO, not a regular file"), "{message}");
    assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_fifo());
    let err = open_append(&path).unwrap_err();
    assert_eq!(err.source.kind(), std::io::ErrorKind::InvalidInput);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert_eq!(names, ["out.fifo"], "no temporary file is left");
}

#[test]
fn a_symlink_to_a_fifo_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    std::os::unix::fs::symlink("pipe", dir.path().join("out.jsonl")).unwrap();
    let err = write_text_atomic(&dir.path().join("out.jsonl"), "x").unwrap_err();
    let message = err.source.to_string();
    assert!(message.contains("out.jsonl") && message.contains("pipe") && message.contains("a FIFO"), "{message}");
}
