//! The order-cancellation tool loop the scripted server plays for real client SDKs:
//! `scripts/reference/otlp_fixtures.py` runs it through the `tool_loop_server` example
//! to make the OTLP fixtures, and the tests of `flowmem serve --otlp` run the same
//! script against a receiver.

use serde_json::{Value, json};

use crate::script::{Match, Reply, Script};

/// The orders the loop knows, each with the reason its customer gives.
pub const LOOP_ORDERS: [(&str, &str); 3] =
    [("#W5918442", "no longer needed"), ("#W2974929", "ordered by mistake"), ("#W7731004", "found it cheaper")];

/// How many tool results the request's messages hold.
fn tool_results(request: &Value) -> usize {
    request["messages"].as_array().map_or(0, |messages| messages.iter().filter(|m| m["role"] == "tool").count())
}

fn turn(order: &'static str, n_results: usize) -> Match {
    let user = Match::last_user_contains(order);
    Match::custom(move |request| user.matches(request) && tool_results(request) == n_results)
}

/// `script` with the loop's rules added: for every order of [`LOOP_ORDERS`], the first
/// request of a conversation gets a `get_order_details` call, the second (after one tool
/// result) a `cancel_pending_order` call, the third a final answer, `Your order ID is
/// cancelled.`. Conversations are told apart by the order id in their user message, and
/// the turn by how many tool results the request holds, so the loop can run any number of
/// times. Rules added to `script` before take precedence.
///
/// # Example
///
/// ```
/// use flowmem_testsupport::{Reply, Script, order_loop};
///
/// let script = order_loop(Script::new().models(["scripted-model"])).otherwise(Reply::text("unexpected"));
/// # drop(script);
/// ```
pub fn order_loop(mut script: Script) -> Script {
    for (order, reason) in LOOP_ORDERS {
        script = script
            .when(turn(order, 0), Reply::tool_call("get_order_details", json!({"order_id": order})))
            .when(
                turn(order, 1),
                Reply::tool_call("cancel_pending_order", json!({"order_id": order, "reason": reason})),
            )
            .when(turn(order, 2), Reply::text(format!("Your order {order} is cancelled.")));
    }
    script
}
