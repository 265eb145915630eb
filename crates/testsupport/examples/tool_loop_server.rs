//! The scripted OpenAI-compatible server as a process, for reference scripts that run
//! real client SDKs against it (`scripts/reference/otlp_fixtures.py`).
//!
//! It answers a small order-cancellation tool loop for every order id in
//! [`ORDERS`]: the first request of a conversation gets a `get_order_details` call,
//! the second (after one tool result) a `cancel_pending_order` call, the third a final
//! answer. Conversations are told apart by the order id in their user message, and the
//! turn by how many tool results the request holds, so the same loop can run any number
//! of times. It prints `listening on http://ADDR/v1` on stderr and serves until its
//! standard input closes.
//!
//! ```sh
//! cargo run -p flowmem-testsupport --example tool_loop_server
//! ```

#![allow(clippy::print_stderr, reason = "an example program reports its address on stderr")]

use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::{Value, json};

/// The orders the loop knows, each with the reason its customer gives.
const ORDERS: [(&str, &str); 3] =
    [("#W5918442", "no longer needed"), ("#W2974929", "ordered by mistake"), ("#W7731004", "found it cheaper")];

/// How many tool results the request's messages hold.
fn tool_results(request: &Value) -> usize {
    request["messages"].as_array().map_or(0, |messages| messages.iter().filter(|m| m["role"] == "tool").count())
}

fn turn(order: &'static str, n_results: usize) -> Match {
    let user = Match::last_user_contains(order);
    Match::custom(move |request| user.matches(request) && tool_results(request) == n_results)
}

fn script() -> Script {
    let mut script = Script::new().models(["scripted-model"]);
    for (order, reason) in ORDERS {
        script = script
            .when(turn(order, 0), Reply::tool_call("get_order_details", json!({"order_id": order})))
            .when(
                turn(order, 1),
                Reply::tool_call("cancel_pending_order", json!({"order_id": order, "reason": reason})),
            )
            .when(turn(order, 2), Reply::text(format!("Your order {order} is cancelled.")));
    }
    script.otherwise(Reply::text("unexpected request"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let server = ScriptedLlmServer::start(script()).await;
    eprintln!("listening on {}", server.base_url());
    // Serve until the parent closes our standard input.
    let _ = tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink())).await;
}
