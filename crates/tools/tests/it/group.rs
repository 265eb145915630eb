//! Issue 27 (10): a tool server runs in a process group of its own, and the whole group
//! ends with it, so a wrapper script leaves no children behind.

use std::io::Read;
use std::time::Duration;

use flowmem_tools::{Registry, ToolServerError};

use crate::support::config;

#[tokio::test]
async fn a_wrapper_scripts_children_end_when_its_handshake_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("alive");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // The wrapper never answers the handshake. It and its child hold the FIFO's write
    // end open, so the reader sees the end of the file only once both have exited.
    let script = dir.path().join("server.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec 3>'{fifo}'\nsleep 300 &\necho $! > '{pid}'\nwait\n",
            fifo = fifo.display(),
            pid = dir.path().join("child.pid").display()
        ),
    )
    .unwrap();
    assert!(std::process::Command::new("chmod").arg("+x").arg(&script).status().unwrap().success());
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let reader_fifo = fifo.clone();
    std::thread::spawn(move || {
        let mut file = std::fs::File::open(&reader_fifo).unwrap();
        let mut rest = Vec::new();
        let _ = file.read_to_end(&mut rest);
        let _ = done_tx.send(());
    });
    let text = format!(
        "[tools]\nconnect_timeout_secs = 1\n[[tools.mcp]]\nname = \"wrapped\"\ncommand = \"{}\"\n",
        script.display()
    );
    let err = Registry::connect(&config(&text)).await.expect_err("the handshake times out");
    assert!(matches!(err, ToolServerError::ConnectTimeout { .. }), "{err:?}");
    // Awaited, not blocked on: the runtime stays free to run whatever ends the processes.
    let ended = tokio::time::timeout(Duration::from_secs(10), done_rx).await.is_ok();
    if !ended {
        // Clean up the orphan before failing, so the machine is left as it was.
        if let Ok(pid) = std::fs::read_to_string(dir.path().join("child.pid")) {
            let _ = std::process::Command::new("kill").args(["-9", pid.trim()]).status();
        }
    }
    assert!(ended, "the wrapper's child still runs after the handshake timeout");
}
