//! Servers started as processes for tests and benches: spawn, wait for the line that
//! says where it listens, and keep reading its stderr so that it never blocks.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// A started server process and what it said.
#[derive(Debug)]
pub struct Listening {
    /// The process; the caller stops it.
    pub child: Child,
    /// What followed `prefix` on the line that said where it listens.
    pub address: String,
    /// Every stderr line so far, and on.
    pub stderr: Arc<Mutex<String>>,
}

/// Spawns `command` with stderr piped and waits up to `timeout` for a stderr line that
/// starts with `prefix` (such as `listening on `).
///
/// # Panics
///
/// When the process cannot start, or exits or stays silent past `timeout`: it is killed
/// and the panic message holds its stderr.
pub fn spawn_listening(mut command: Command, prefix: &str, timeout: Duration) -> Listening {
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("starting the server process");
    let stderr = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let lines = BufReader::new(child.stderr.take().expect("piped stderr"));
    let sink = stderr.clone();
    let prefix = prefix.to_owned();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(prefix.as_str()) {
                let _ = tx.send(rest.to_owned());
            }
            let mut all = sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            all.push_str(&line);
            all.push('\n');
        }
    });
    match rx.recv_timeout(timeout) {
        Ok(address) => Listening { child, address, stderr },
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            let said = stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            panic!("the server did not say where it listens: {said}");
        }
    }
}

/// The value of line `field` of a process's `/proc/PID/status` (Linux), trimmed: such
/// as `VmRSS` (`"1234 kB"`) or `THP_enabled` (`"1"`); `pid` `None` is this process.
/// `None` when the file or the line cannot be read.
///
/// # Example
///
/// ```
/// # if cfg!(target_os = "linux") {
/// let name = flowmem_testsupport::process_status(None, "Name").expect("Linux reports it");
/// assert!(!name.is_empty());
/// # }
/// ```
#[must_use]
pub fn process_status(pid: Option<u32>, field: &str) -> Option<String> {
    let path = pid.map_or_else(|| "/proc/self/status".to_owned(), |pid| format!("/proc/{pid}/status"));
    let status = std::fs::read_to_string(path).ok()?;
    let value = status.lines().find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?;
    Some(value.trim().to_owned())
}

/// A memory figure of a process from `/proc/PID/status` (see [`process_status`]), in
/// KiB: `field` is the line's name, such as `VmRSS` (resident now) or `VmHWM` (its
/// peak). `None` when the file or the line cannot be read.
///
/// # Example
///
/// ```
/// # if cfg!(target_os = "linux") {
/// let resident = flowmem_testsupport::process_memory_kib(None, "VmRSS").expect("Linux reports it");
/// assert!(resident > 0.0);
/// # }
/// ```
#[must_use]
pub fn process_memory_kib(pid: Option<u32>, field: &str) -> Option<f64> {
    process_status(pid, field)?.split_whitespace().next()?.parse().ok()
}
