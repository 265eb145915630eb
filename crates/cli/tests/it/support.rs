//! Running the built binary in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary working directory to run `flowmem` in.
pub struct TestDir {
    dir: tempfile::TempDir,
}

/// What one run printed and how it exited.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl TestDir {
    pub fn new() -> TestDir {
        TestDir { dir: tempfile::tempdir().expect("a temporary directory") }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).expect("writing a fixture");
        path
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_else(|err| panic!("reading {name}: {err}"))
    }

    /// Runs `flowmem args...` with the temporary directory as working directory.
    pub fn run(&self, args: &[&str]) -> Run {
        let output: Output = Command::new(env!("CARGO_BIN_EXE_flowmem"))
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("running flowmem");
        Run {
            code: output.status.code().expect("an exit code"),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// `../shared/data/<rel>` as an absolute path string.
pub fn data(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data").join(rel);
    let path = path.canonicalize().unwrap_or_else(|err| panic!("shared data {}: {err}", path.display()));
    path.to_string_lossy().into_owned()
}

/// Sends SIGINT to `pid`, as Ctrl-C in a terminal does.
pub fn interrupt(pid: u32) {
    let status = std::process::Command::new("kill").arg("-INT").arg(pid.to_string()).status().expect("running kill");
    assert!(status.success());
}
