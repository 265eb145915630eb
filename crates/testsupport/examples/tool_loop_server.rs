//! The scripted OpenAI-compatible server as a process, for reference scripts that run
//! real client SDKs against it (`scripts/reference/otlp_fixtures.py`).
//!
//! It answers the small order-cancellation tool loop of
//! [`order_loop`](flowmem_testsupport::order_loop) for every order id it knows. It prints `listening on http://ADDR/v1` on stderr and serves until its
//! standard input closes.
//!
//! ```sh
//! cargo run -p flowmem-testsupport --example tool_loop_server
//! ```

#![allow(clippy::print_stderr, reason = "an example program reports its address on stderr")]

use flowmem_testsupport::{Reply, Script, ScriptedLlmServer, order_loop};

fn script() -> Script {
    order_loop(Script::new().models(["scripted-model"])).otherwise(Reply::text("unexpected request"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let server = ScriptedLlmServer::start(script()).await;
    eprintln!("listening on {}", server.base_url());
    // Serve until the parent closes our standard input.
    let _ = tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink())).await;
}
