//! Data-flow grounding against the real τ² retail MCP server: a tool node whose
//! argument is bound to an upstream result gets its value from that result, not from
//! the model's imagination.

use flowmem_exec::{AgentConfig, Grounding, NoObserver, RunInput, run, run_agent};
use flowmem_testsupport::{Match, Reply, Script, ScriptedLlmServer};
use serde_json::json;

use crate::support;

/// Order → product (bound to the order's items) → user (bound to the order's user).
fn graph() -> serde_json::Value {
    let bound = |path: &str| json!({"observed": 5, "sources": [{"from": "result", "node": "order", "path": path, "support": 5}]});
    json!({
        "name": "grounded",
        "nodes": [
            {"id": "order", "kind": "tool", "hints": ["get_order_details"]},
            {"id": "product", "kind": "tool", "hints": ["get_product_details"],
             "bindings": {"product_id": bound("$.parsed_content.items[*].product_id")}},
            {"id": "user", "kind": "tool", "hints": ["get_user_details"],
             "bindings": {"user_id": bound("$.parsed_content.user_id")}}
        ],
        "edges": [{"from": "order", "to": "product"}, {"from": "product", "to": "user"}],
        "entry": "order",
        "exit": "user"
    })
}

/// The model looks the order up right, then invents a product id (and, asked again,
/// picks a real one); it would invent a user id too.
fn script() -> Script {
    Script::new()
        .when(
            Match::offers_tool("get_order_details"),
            Reply::tool_call("get_order_details", json!({"order_id": "#W5918442"})),
        )
        .when_seq(
            Match::offers_tool("get_product_details"),
            [
                Reply::tool_call("get_product_details", json!({"product_id": "1234567890"})),
                Reply::tool_call("get_product_details", json!({"product_id": "3377618313"})),
            ],
        )
        .when(
            Match::offers_tool("get_user_details"),
            Reply::tool_call("get_user_details", json!({"user_id": "yusuf_19122"})),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_arguments_come_from_upstream_results_not_from_the_model() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let server = support::llm(script()).await;
    let runtime = support::runtime(&server, tools.clone());
    assert_eq!(runtime.grounding, Grounding::Bindings, "grounding is on by default");
    let plan = support::plan(graph(), runtime);
    let input = RunInput { id: "grounded-1".to_owned(), query: "Tell me about order #W5918442.".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let calls: Vec<(&str, &serde_json::Map<String, serde_json::Value>)> =
        trace.tool_calls.iter().map(|call| (call.tool.as_str(), &call.args)).collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    // Three products in the order: offered as an enum; the invented id was refused and
    // the model asked again.
    assert_eq!(calls[1].1["product_id"], "3377618313", "{calls:?}");
    assert!(trace.tool_calls[1].error.is_none(), "{:?}", trace.tool_calls[1]);
    let product_requests: Vec<_> = server
        .chat_requests()
        .into_iter()
        .filter(|request| request.body.to_string().contains("get_product_details"))
        .collect();
    assert_eq!(product_requests.len(), 2, "asked once more after the stray value");
    let offered = &product_requests[0].body["tools"][0]["function"]["parameters"]["properties"]["product_id"]["enum"];
    assert_eq!(offered, &json!(["6858788497", "1968349452", "3377618313"]), "{}", product_requests[0].body);
    // One user: the call needs no model at all.
    assert_eq!(calls[2].1["user_id"], "sofia_rossi_8776", "{calls:?}");
    assert!(
        !server.chat_requests().iter().any(|request| request.body.to_string().contains("get_user_details")),
        "the user node asked no model"
    );
    let observed = |node: &str| {
        trace.observations.iter().find(|observation| observation.node_id == node).map(|o| o.grounding.clone()).unwrap()
    };
    let product = observed("product");
    assert_eq!(product.len(), 1, "{product:?}");
    assert_eq!(product[0].source, "result of order at $.parsed_content.items[*].product_id");
    assert_eq!((product[0].candidates, product[0].grounded), (3, true));
    let user = observed("user");
    assert_eq!((user[0].arg.as_str(), user[0].candidates, user[0].grounded), ("user_id", 1, true));

    // Without grounding, the model's invented values reach the tools.
    let server = support::llm(script()).await;
    let mut runtime = support::runtime(&server, tools);
    runtime.grounding = Grounding::Off;
    let trace = run(&support::plan(graph(), runtime), &input, &NoObserver).await;
    let product = trace.tool_calls.iter().find(|call| call.tool == "get_product_details").unwrap();
    assert_eq!(product.args["product_id"], "1234567890");
    assert!(product.error.is_some(), "the real server knows no such product: {product:?}");
    let user = trace.tool_calls.iter().find(|call| call.tool == "get_user_details");
    assert!(user.is_none_or(|call| call.args["user_id"] == "yusuf_19122"), "{user:?}");
}

/// Find the user by the name and zip in the query → their details (bound to the find's
/// result) → an order whose id the query does not hold → the same order again (bound to
/// the argument the first lookup was given).
fn query_graph() -> serde_json::Value {
    let from_query = |shape: &str| json!({"observed": 9, "sources": [{"from": "query", "shape": shape, "support": 9}]});
    let one = |source: serde_json::Value| json!({"observed": 9, "sources": [source]});
    json!({
        "name": "from-the-query",
        "nodes": [
            {"id": "find", "kind": "tool", "hints": ["find_user_id_by_name_zip"],
             "bindings": {"first_name": from_query("name"), "last_name": from_query("name"), "zip": from_query("number")}},
            {"id": "user", "kind": "tool", "hints": ["get_user_details"],
             "bindings": {"user_id": one(json!({"from": "result", "node": "find", "path": "$.parsed_content", "support": 9}))}},
            {"id": "order", "kind": "tool", "hints": ["get_order_details"], "bindings": {"order_id": from_query("id")}},
            {"id": "again", "kind": "tool", "hints": ["get_order_details"],
             "bindings": {"order_id": one(json!({"from": "argument", "node": "order", "arg": "order_id", "support": 9}))}}
        ],
        "edges": [{"from": "find", "to": "user"}, {"from": "user", "to": "order"}, {"from": "order", "to": "again"}],
        "entry": "find",
        "exit": "again"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_spans_and_upstream_arguments_ground_calls_and_a_missing_value_is_marked_ungrounded() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let script = Script::new()
        .when(
            Match::offers_tool("find_user_id_by_name_zip"),
            Reply::tool_call("find_user_id_by_name_zip", json!({"first_name": "Yusuf", "last_name": "Rossi"})),
        )
        .when(
            Match::offers_tool("get_order_details"),
            Reply::tool_call("get_order_details", json!({"order_id": "#W2378156"})),
        );
    let server = support::llm(script).await;
    let plan = support::plan(query_graph(), support::runtime(&server, tools));
    let input = RunInput { id: "spans".to_owned(), query: "You are Yusuf Rossi in zip code 19122.".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let calls: Vec<(&str, &serde_json::Map<String, serde_json::Value>)> =
        trace.tool_calls.iter().map(|call| (call.tool.as_str(), &call.args)).collect();
    assert_eq!(calls.len(), 4, "{calls:?}");
    assert!(trace.tool_calls.iter().all(|call| call.error.is_none()), "{:?}", trace.tool_calls);

    // Two names in the query, offered to the model; one zip, filled in without asking.
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2, "only the find and the unbound order asked the model");
    let find = &requests[0].body["tools"][0]["function"]["parameters"];
    assert_eq!(find["properties"]["first_name"]["enum"], json!(["Yusuf", "Rossi"]), "{find}");
    assert_eq!(find["properties"]["last_name"]["enum"], json!(["Yusuf", "Rossi"]), "{find}");
    assert!(find["properties"].get("zip").is_none(), "the zip is no question for the model: {find}");
    assert_eq!(calls[0].1["zip"], "19122");
    assert_eq!(calls[1].1["user_id"], "yusuf_rossi_9620", "the user comes from the find's result");

    let observed = |node: &str| {
        trace.observations.iter().find(|observation| observation.node_id == node).map(|o| o.grounding.clone()).unwrap()
    };
    let find = observed("find");
    let zip = find.iter().find(|arg| arg.arg == "zip").unwrap();
    assert_eq!((zip.source.as_str(), zip.candidates, zip.grounded), ("query (number spans)", 1, true));
    let first = find.iter().find(|arg| arg.arg == "first_name").unwrap();
    assert_eq!((first.source.as_str(), first.candidates, first.grounded), ("query (name spans)", 2, true));
    // No order id in the query: the model wrote it, and the trace says so.
    let order = observed("order");
    assert_eq!(order.len(), 1, "{order:?}");
    assert_eq!((order[0].source.as_str(), order[0].grounded), ("model (the binding gave no value)", false));
    // The second lookup takes the first one's argument, with no model call.
    assert_eq!(calls[3].1["order_id"], "#W2378156");
    let again = observed("again");
    assert_eq!(
        (again[0].source.as_str(), again[0].candidates, again[0].grounded),
        ("argument $.order_id of order", 1, true)
    );
}

/// The same graph, with the words the mined names followed: "you are" before the first
/// name, the first name before the last. The find then asks the model nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mined_anchors_pick_the_names_so_the_find_asks_the_model_nothing() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let mut graph = query_graph();
    let bindings = &mut graph["nodes"][0]["bindings"];
    bindings["first_name"]["sources"][0]["anchors"] = json!([{"words": ["you", "are"], "support": 9}]);
    bindings["last_name"]["sources"][0]["anchors"] = json!([{"words": ["{first_name}"], "support": 9}]);
    let script = Script::new().when(
        Match::offers_tool("get_order_details"),
        Reply::tool_call("get_order_details", json!({"order_id": "#W2378156"})),
    );
    let server = support::llm(script).await;
    let plan = support::plan(graph, support::runtime(&server, tools));
    // "Rossi" also opens the query, and "Thanks" (before a name) and "Yusuf" end it: only
    // the words before them tell.
    let query = "Rossi is the family name. Known info: You are Yusuf Rossi in zip code 19122. Thanks, Yusuf";
    let input = RunInput { id: "anchors".to_owned(), query: query.to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1, "only the unbound order asked the model");
    assert!(Match::offers_tool("get_order_details").matches(&requests[0].body));
    let find = &trace.tool_calls[0];
    assert_eq!((find.args["first_name"].as_str(), find.args["last_name"].as_str()), (Some("Yusuf"), Some("Rossi")));
    assert!(find.error.is_none(), "{find:?}");
    assert_eq!(trace.tool_calls[1].args["user_id"], "yusuf_rossi_9620");
    let observed = trace.observations.iter().find(|observation| observation.node_id == "find").unwrap();
    let last = observed.grounding.iter().find(|arg| arg.arg == "last_name").unwrap();
    assert_eq!(
        (last.source.as_str(), last.candidates, last.grounded),
        ("query (name spans), 1 of 3 by the words before them", 1, true)
    );
}

/// The names in a handle (`yusuf_rossi_9620`) and a zip code of the mined length (not
/// the item number) find the user against the real retail server with no model request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_holds_the_names_and_the_mined_length_picks_the_zip() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let mut graph = query_graph();
    // Only the find and the user's details.
    graph["nodes"].as_array_mut().unwrap().truncate(2);
    graph["edges"].as_array_mut().unwrap().truncate(1);
    graph["exit"] = json!("user");
    let bindings = &mut graph["nodes"][0]["bindings"];
    bindings["first_name"]["sources"][0]["anchors"] = json!([{"words": ["you", "are"], "support": 9}]);
    bindings["last_name"]["sources"][0]["anchors"] = json!([{"words": ["{first_name}"], "support": 9}]);
    bindings["zip"]["sources"][0]["lengths"] = json!([5, 5]);
    let server = support::llm(Script::new()).await;
    let plan = support::plan(graph, support::runtime(&server, tools));
    let query = "Change the laptop to item 9844888101 for Phoenix. Known info: You are yusuf_rossi_9620 in 19122.";
    let input = RunInput { id: "handle".to_owned(), query: query.to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert!(server.chat_requests().is_empty(), "no model request");
    let find = &trace.tool_calls[0];
    assert!(find.error.is_none(), "{find:?}");
    assert_eq!(
        (find.args["first_name"].as_str(), find.args["last_name"].as_str(), find.args["zip"].as_str()),
        (Some("Yusuf"), Some("Rossi"), Some("19122"))
    );
    assert_eq!(trace.tool_calls[1].args["user_id"], "yusuf_rossi_9620");
    let observed = &trace.observations.iter().find(|observation| observation.node_id == "find").unwrap().grounding;
    let sources: Vec<(&str, usize)> = observed.iter().map(|arg| (arg.source.as_str(), arg.candidates)).collect();
    assert_eq!(
        sources,
        [
            ("query (name spans), 1 of 3 by the words before them", 1),
            ("query (name spans), 1 of 3 by the words before them", 1),
            ("query (number spans, 1 of 2 of the mined length 5)", 1)
        ]
    );
}

/// The user's orders → one order's details (the model picks which) → a return whose
/// order id could be any of the user's orders, and whose items and payment come from the
/// details: the order id agrees with the order looked up, with no question to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_returned_order_is_the_one_whose_items_are_returned() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let from = |node: &str, path: &str| json!({"observed": 5, "sources": [{"from": "result", "node": node, "path": path, "support": 5}]});
    let graph = json!({
        "name": "agreeing",
        "nodes": [
            {"id": "user", "kind": "tool", "hints": ["get_user_details"],
             "bindings": {"user_id": {"observed": 5, "sources": [{"from": "query", "shape": "id", "support": 5}]}}},
            {"id": "order", "kind": "tool", "hints": ["get_order_details"],
             "bindings": {"order_id": from("user", "$.parsed_content.orders[*]")}},
            {"id": "return", "kind": "tool", "hints": ["return_delivered_order_items"],
             "bindings": {"order_id": from("user", "$.parsed_content.orders[*]"),
                          "item_ids[*]": from("order", "$.parsed_content.items[*].item_id"),
                          "payment_method_id": from("order", "$.parsed_content.payment_history[*].payment_method_id")}}
        ],
        "edges": [{"from": "user", "to": "order"}, {"from": "order", "to": "return"}],
        "entry": "user",
        "exit": "return"
    });
    let script = Script::new()
        .when(
            Match::offers_tool("get_order_details"),
            Reply::tool_call("get_order_details", json!({"order_id": "#W2378156"})),
        )
        .when(
            Match::offers_tool("return_delivered_order_items"),
            Reply::tool_call("return_delivered_order_items", json!({"item_ids": ["1151293680"]})),
        );
    let server = support::llm(script).await;
    let plan = support::plan(graph, support::runtime(&server, tools));
    let input = RunInput { id: "agree".to_owned(), query: "I am yusuf_rossi_9620 and want a refund.".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2, "the order lookup and the return's items");
    let order_choice = &requests[0].body["tools"][0]["function"]["parameters"]["properties"]["order_id"]["enum"];
    assert!(order_choice.as_array().unwrap().len() > 1, "the user has several orders: {order_choice}");
    let asked = &requests[1].body["tools"][0]["function"]["parameters"]["properties"];
    assert!(asked.get("order_id").is_none(), "the order id is no question: {asked}");
    assert!(asked.get("payment_method_id").is_none(), "one payment method: {asked}");
    let returned = trace.tool_calls.iter().find(|call| call.tool == "return_delivered_order_items").unwrap();
    assert_eq!(returned.args["order_id"], "#W2378156");
    assert_eq!(returned.args["item_ids"], json!(["1151293680"]));
    let observed = trace.observations.iter().find(|observation| observation.node_id == "return").unwrap();
    let order = observed.grounding.iter().find(|arg| arg.arg == "order_id").unwrap();
    assert!(
        order.source.ends_with("the one `order` was called with, whose result gives another argument"),
        "{}",
        order.source
    );
    assert_eq!((order.candidates, order.grounded), (1, true));
}

/// Context grounding, the same for ReAct and workflows: a call with a value found in
/// neither the query nor an earlier result goes back to the model once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_grounding_sends_back_a_call_with_values_from_nowhere_for_react_and_workflows() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let input = RunInput { id: "context".to_owned(), query: "Where is my order #W2378156?".to_owned() };
    let told = "appear neither in the task nor in any tool result so far";

    // ReAct: an invented order id, told off, then the one from the query, then an answer.
    let script = Script::new()
        .when(Match::after_tool_result(), Reply::text("It was delivered."))
        .when(Match::last_user_contains(told), Reply::tool_call("get_order_details", json!({"order_id": "#W2378156"})))
        .otherwise(Reply::tool_call("get_order_details", json!({"order_id": "#W0000001"})));
    let server = support::llm(script).await;
    let mut runtime = support::runtime(&server, tools.clone());
    runtime.grounding = Grounding::Context;
    let cfg = AgentConfig { max_steps: 4, instruction: None, guard: None };
    let trace = run_agent(&runtime, &cfg, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert_eq!(trace.tool_calls.len(), 1, "{:?}", trace.tool_calls);
    assert_eq!(trace.tool_calls[0].args["order_id"], "#W2378156");
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 3, "step 0 asked twice, step 1 answered");
    let told_off =
        requests[1].body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(told_off.contains("`order_id` = \"#W0000001\""), "{told_off}");
    let step = &trace.observations[0].grounding;
    assert_eq!((step[0].arg.as_str(), step[0].source.as_str(), step[0].grounded), ("order_id", "context", true));

    // Off: the invented id goes to the tool unchallenged.
    let script = Script::new()
        .when(Match::after_tool_result(), Reply::text("Not found."))
        .otherwise(Reply::tool_call("get_order_details", json!({"order_id": "#W0000001"})));
    let server = support::llm(script).await;
    let mut runtime = support::runtime(&server, tools.clone());
    runtime.grounding = Grounding::Off;
    let trace = run_agent(&runtime, &cfg, &input, &NoObserver).await;
    assert_eq!(trace.tool_calls[0].args["order_id"], "#W0000001");
    assert_eq!(server.chat_requests().len(), 2);
    assert!(trace.observations[0].grounding.is_empty());

    // A workflow node: its binding is not used under `context`, and a model that insists
    // on a value from nowhere is recorded as off the context.
    let graph = json!({
        "name": "one-lookup",
        "nodes": [{"id": "order", "kind": "tool", "hints": ["get_order_details"],
                   "bindings": {"order_id": {"observed": 1, "sources": [{"from": "constant", "value": "#W2378156", "support": 1}]}}}],
        "edges": [], "entry": "order", "exit": "order"
    });
    let script = Script::new().otherwise(Reply::tool_call("get_order_details", json!({"order_id": "#W0000001"})));
    let server = support::llm(script).await;
    let mut runtime = support::runtime(&server, tools);
    runtime.grounding = Grounding::Context;
    let trace = run(&support::plan(graph, runtime), &input, &NoObserver).await;
    assert_eq!(server.chat_requests().len(), 2, "asked once more, then the call went out");
    assert_eq!(trace.tool_calls[0].args["order_id"], "#W0000001");
    let order = &trace.observations.iter().find(|o| o.node_id == "order").unwrap().grounding;
    assert_eq!((order[0].source.as_str(), order[0].grounded), ("model (not in the context)", false));
}

/// An array argument whose elements are bound is offered as `items.enum`: the model picks
/// which of the order's items to return, and the rest of the call is filled in. An item
/// the model writes twice, though the order holds it once, is sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_elements_of_a_bound_array_argument_are_offered_as_an_items_enum() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let source = |source: serde_json::Value| json!({"observed": 3, "sources": [source]});
    let order_path = |path: &str| source(json!({"from": "result", "node": "order", "path": path, "support": 3}));
    let graph = json!({
        "name": "return",
        "nodes": [
            {"id": "order", "kind": "tool", "hints": ["get_order_details"]},
            {"id": "return", "kind": "tool", "hints": ["return_delivered_order_items"], "bindings": {
                "order_id": source(json!({"from": "argument", "node": "order", "arg": "order_id", "support": 3})),
                "item_ids[*]": order_path("$.parsed_content.items[*].item_id"),
                "payment_method_id": order_path("$.parsed_content.payment_history[*].payment_method_id")}}
        ],
        "edges": [{"from": "order", "to": "return"}],
        "entry": "order",
        "exit": "return"
    });
    let script = Script::new()
        .when(
            Match::offers_tool("get_order_details"),
            Reply::tool_call("get_order_details", json!({"order_id": "#W2378156"})),
        )
        .when_seq(
            Match::offers_tool("return_delivered_order_items"),
            [
                Reply::tool_call("return_delivered_order_items", json!({"item_ids": ["1151293680", "999"]})),
                Reply::tool_call("return_delivered_order_items", json!({"item_ids": ["1151293680", "1151293680"]})),
            ],
        );
    let server = support::llm(script).await;
    let plan = support::plan(graph, support::runtime(&server, tools));
    let input = RunInput { id: "return".to_owned(), query: "Return the keyboard of order #W2378156.".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 3, "the order, the return, and the return again after a stray element");
    let parameters = &requests[1].body["tools"][0]["function"]["parameters"];
    let offered = &parameters["properties"]["item_ids"]["items"]["enum"];
    assert_eq!(offered, &json!(["4202497723", "4602305039", "1151293680", "4983901480", "9408160950"]), "{parameters}");
    let item_ids = &parameters["properties"]["item_ids"];
    assert_eq!((&item_ids["minItems"], &item_ids["maxItems"]), (&json!(1), &json!(5)), "one to all five items");
    assert!(
        parameters["properties"].get("order_id").is_none()
            && parameters["properties"].get("payment_method_id").is_none()
    );
    let call = &trace.tool_calls[1];
    assert!(call.error.is_none(), "{call:?}");
    assert_eq!(call.args["item_ids"], json!(["1151293680"]));
    assert_eq!(
        (call.args["order_id"].as_str(), call.args["payment_method_id"].as_str()),
        (Some("#W2378156"), Some("credit_card_9513926"))
    );
    let observed = &trace.observations.iter().find(|o| o.node_id == "return").unwrap().grounding;
    let items = observed.iter().find(|arg| arg.arg == "item_ids").unwrap();
    assert_eq!((items.candidates, items.grounded), (5, true));
    assert!(items.source.ends_with("; 1 repeated element(s) dropped"), "{}", items.source);
}

/// A user lookup the model writes, then a loop over `get_order_details` whose `order_id`
/// is bound to the user's `orders[*]`, with `each` evidence `all` of 3 records.
fn for_each_graph(all: u64) -> serde_json::Value {
    json!({
        "name": "for-each",
        "nodes": [
            {"id": "user", "kind": "tool", "hints": ["get_user_details"]},
            {"id": "orders", "kind": "loop", "max_iterations": 6,
             "until": {"type": "judge", "question": "Has every order been looked at?"}},
            {"id": "order", "kind": "tool", "hints": ["get_order_details"],
             "bindings": {"order_id": {"observed": 9, "sources": [{"from": "result", "node": "user",
                 "path": "$.parsed_content.orders[*]", "support": 9, "each": {"records": 3, "all": all}}]}}},
            {"id": "done", "kind": "join"}
        ],
        "edges": [
            {"from": "user", "to": "orders"},
            {"from": "orders", "to": "order", "label": "body"},
            {"from": "order", "to": "orders", "kind": "back"},
            {"from": "orders", "to": "done", "label": "exit"}
        ],
        "entry": "user",
        "exit": "done"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_goes_through_a_collection_the_logs_usually_took_whole_with_no_model_call() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let script = Script::new()
        .when(
            Match::offers_tool("get_user_details"),
            Reply::tool_call("get_user_details", json!({"user_id": "sofia_rossi_8776"})),
        )
        .when(
            Match::offers_tool("get_order_details"),
            Reply::tool_call("get_order_details", json!({"order_id": "#W8535951"})),
        )
        .when(Match::wants_json(), Reply::json(json!({"choice": "yes"})));
    let input = RunInput {
        id: "each-1".to_owned(),
        query: "I am Sofia Rossi; what did I order? Order #W8535951 first.".to_owned(),
    };

    // Two of three records took every order: the loop goes through all four of Sofia's,
    // the one the query names first, then in the user's order, one each, and stops when
    // none is left.
    let server = support::llm(script.clone()).await;
    let plan = support::plan(for_each_graph(2), support::runtime(&server, tools.clone()));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let orders: Vec<&serde_json::Value> = trace
        .tool_calls
        .iter()
        .filter(|call| call.tool == "get_order_details")
        .map(|call| &call.args["order_id"])
        .collect();
    assert_eq!(orders, [&json!("#W8535951"), &json!("#W5918442"), &json!("#W5500815"), &json!("#W2818151")]);
    assert!(trace.tool_calls.iter().all(|call| call.error.is_none()), "{:?}", trace.tool_calls);
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1, "only the user lookup asked the model: {requests:?}");
    let decisions: Vec<&str> = trace
        .observations
        .iter()
        .filter(|observation| observation.node_id == "orders")
        .filter_map(|observation| observation.output.as_deref())
        .filter(|output| output.starts_with("exit") || output.starts_with("repeat"))
        .collect();
    assert_eq!(decisions.len(), 4, "{decisions:?}");
    assert!(decisions[0].contains("`order_id` of order has 3 of 4 left"), "{decisions:?}");
    assert!(decisions[3].starts_with("exit after 4") && decisions[3].contains("every value taken"), "{decisions:?}");
    let grounding = &trace.observations.iter().find(|o| o.node_id == "order").unwrap().grounding;
    assert!(grounding[0].source.contains("for each"), "{grounding:?}");

    // One of three: a judge decides, as for any loop, and the model picks the order.
    let server = support::llm(script).await;
    let plan = support::plan(for_each_graph(1), support::runtime(&server, tools));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let orders: Vec<&serde_json::Value> = trace
        .tool_calls
        .iter()
        .filter(|call| call.tool == "get_order_details")
        .map(|call| &call.args["order_id"])
        .collect();
    assert_eq!(orders, [&json!("#W8535951")], "the judge said done after one");
    let judged = server.chat_requests().iter().filter(|r| r.body.to_string().contains("Has every order been")).count();
    assert_eq!(judged, 1);
}

/// A user found by name and zip, then two judged branches with mined route counts:
/// `lookup` (7 of 10 records) to `get_user_details` bound to the found id, and `orders`
/// (6 of 10) to `get_order_details` bound to the found result's `orders[*]`, which a
/// user id does not have.
fn routed_graph() -> serde_json::Value {
    let bound = |path: &str| json!({"observed": 6, "sources": [{"from": "result", "node": "find", "path": path, "support": 6}]});
    json!({
        "name": "routed",
        "nodes": [
            {"id": "find", "kind": "tool", "hints": ["find_user_id_by_name_zip"]},
            {"id": "look", "kind": "branch", "condition": {"type": "judge", "question": "Look the user up?"},
             "taken": {"lookup": 7, "skip": 3}},
            {"id": "user", "kind": "tool", "hints": ["get_user_details"],
             "bindings": {"user_id": bound("$.parsed_content")}},
            {"id": "looked", "kind": "join"},
            {"id": "list", "kind": "branch", "condition": {"type": "judge", "question": "Read an order?"},
             "taken": {"orders": 6, "skip": 4}},
            {"id": "order", "kind": "tool", "hints": ["get_order_details"],
             "bindings": {"order_id": bound("$.parsed_content.orders[*]")}},
            {"id": "done", "kind": "join"}
        ],
        "edges": [
            {"from": "find", "to": "look"},
            {"from": "look", "to": "user", "label": "lookup"},
            {"from": "look", "to": "looked", "label": "skip"},
            {"from": "user", "to": "looked"},
            {"from": "looked", "to": "list"},
            {"from": "list", "to": "order", "label": "orders"},
            {"from": "list", "to": "done", "label": "skip"},
            {"from": "order", "to": "done"}
        ],
        "entry": "find",
        "exit": "done"
    })
}

/// A script in which the model looks Yusuf Rossi up by name and zip.
fn finds_yusuf() -> Script {
    Script::new().when(
        Match::offers_tool("find_user_id_by_name_zip"),
        Reply::tool_call(
            "find_user_id_by_name_zip",
            json!({"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}),
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mined_route_counts_and_groundability_route_a_branch_with_no_judge() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    // Asked, the judge would skip every route, and the model would invent an order id.
    let script = finds_yusuf()
        .when(
            Match::offers_tool("get_order_details"),
            Reply::tool_call("get_order_details", json!({"order_id": "#W1"})),
        )
        .when(Match::wants_json(), Reply::json(json!({"choice": "skip"})));
    let input = RunInput { id: "routed-1".to_owned(), query: "I am Yusuf Rossi, zip code 19122.".to_owned() };

    let server = support::llm(script.clone()).await;
    let plan = support::plan(routed_graph(), support::runtime(&server, tools.clone()));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let called: Vec<(&str, serde_json::Value)> = trace
        .tool_calls
        .iter()
        .map(|call| (call.tool.as_str(), serde_json::Value::Object(call.args.clone())))
        .collect();
    assert_eq!(
        called,
        [
            ("find_user_id_by_name_zip", json!({"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"})),
            ("get_user_details", json!({"user_id": "yusuf_rossi_9620"})),
        ],
        "the majority route ran with the found id, and the order route was left out"
    );
    assert!(trace.tool_calls.iter().all(|call| call.error.is_none()), "{:?}", trace.tool_calls);
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1, "only the user search asked the model: {requests:?}");
    let output = |id: &str| {
        trace.observations.iter().find(|o| o.node_id == id).and_then(|o| o.output.clone()).unwrap_or_default()
    };
    assert!(
        output("look").starts_with("lookup (taken by 7 of 10 mined records, and `user` can be grounded"),
        "{}",
        output("look")
    );
    assert!(
        output("list").starts_with("skip (`orders` left out: `order` has no value for `order_id`"),
        "{}",
        output("list")
    );

    // Under context grounding the bindings are not used, and the judges decide as before.
    let server = support::llm(script).await;
    let mut runtime = support::runtime(&server, tools);
    runtime.grounding = Grounding::Context;
    let plan = support::plan(routed_graph(), runtime);
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let tools_called: Vec<&str> = trace.tool_calls.iter().map(|call| call.tool.as_str()).collect();
    assert_eq!(tools_called, ["find_user_id_by_name_zip"], "both judges skipped");
    let judged = server.chat_requests().iter().filter(|r| r.body.to_string().contains("Question:")).count();
    assert_eq!(judged, 2);
}

/// Sofia's orders looked up one by one, then a judged branch to a return whose order id
/// comes from her orders and must meet a mined precondition on the lookup's result:
/// its `status` is `status`. Her items and payment come from the lookup.
fn precondition_graph(status: &str) -> serde_json::Value {
    let from = |node: &str, path: &str, each: bool| {
        let mut source = json!({"from": "result", "node": node, "path": path, "support": 9});
        if each {
            source["each"] = json!({"records": 3, "all": 3});
        }
        source
    };
    json!({
        "name": "preconditions",
        "nodes": [
            {"id": "user", "kind": "tool", "hints": ["get_user_details"],
             "bindings": {"user_id": {"observed": 9, "sources": [{"from": "query", "shape": "id", "support": 9}]}}},
            {"id": "orders", "kind": "loop", "max_iterations": 6,
             "until": {"type": "judge", "question": "Has every order been looked at?"}},
            {"id": "order", "kind": "tool", "hints": ["get_order_details"],
             "bindings": {"order_id": {"observed": 9, "sources": [from("user", "$.parsed_content.orders[*]", true)]}}},
            {"id": "act", "kind": "branch", "condition": {"type": "judge", "question": "Return something?"},
             "taken": {"return": 6, "skip": 4}},
            {"id": "return", "kind": "tool", "hints": ["return_delivered_order_items"],
             "bindings": {
                 "order_id": {"observed": 9, "sources": [from("user", "$.parsed_content.orders[*]", false)],
                     "requires": [{"node": "order", "key": "$.parsed_content.order_id",
                                   "field": "$.parsed_content.status", "value": status, "support": 9}]},
                 "item_ids[*]": {"observed": 9, "sources": [from("order", "$.parsed_content.items[*].item_id", false)]},
                 "payment_method_id": {"observed": 9,
                     "sources": [from("order", "$.parsed_content.payment_history[*].payment_method_id", false)]}}},
            {"id": "done", "kind": "join"}
        ],
        "edges": [
            {"from": "user", "to": "orders"},
            {"from": "orders", "to": "order", "label": "body"},
            {"from": "order", "to": "orders", "kind": "back"},
            {"from": "orders", "to": "act", "label": "exit"},
            {"from": "act", "to": "return", "label": "return"},
            {"from": "act", "to": "done", "label": "skip"},
            {"from": "return", "to": "done"}
        ],
        "entry": "user",
        "exit": "done"
    })
}

/// The order a return names must be delivered, as the mined precondition says: of
/// Sofia's four orders only #W8535951 is, though the loop looked it up first and three
/// pending orders after it. The return takes that order, with no question, and its
/// items and payment come from that order's lookup, not the latest. When no order meets
/// the precondition, the return route is left out, with no judge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mined_precondition_picks_the_delivered_order_and_leaves_out_a_route_none_meets() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let script = Script::new()
        .when(
            Match::offers_tool("return_delivered_order_items"),
            Reply::tool_call("return_delivered_order_items", json!({"item_ids": ["1304426904"]})),
        )
        // Asked, a judge would stop the loop at once and skip the return.
        .when(Match::wants_json(), Reply::json(json!({"choice": "skip"})));
    let input =
        RunInput { id: "pre-1".to_owned(), query: "I am sofia_rossi_8776; what I got arrived broken.".to_owned() };

    let server = support::llm(script.clone()).await;
    let plan = support::plan(precondition_graph("delivered"), support::runtime(&server, tools.clone()));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let looked: Vec<&serde_json::Value> = trace
        .tool_calls
        .iter()
        .filter(|call| call.tool == "get_order_details")
        .map(|call| &call.args["order_id"])
        .collect();
    assert_eq!(looked.len(), 4, "every order looked up: {looked:?}");
    assert_ne!(looked[3], &json!("#W8535951"), "the delivered order is not the latest lookup");
    let returned = trace.tool_calls.iter().find(|call| call.tool == "return_delivered_order_items").unwrap();
    assert!(returned.error.is_none(), "the server accepted the return: {:?}", returned.error);
    assert_eq!(returned.args["order_id"], "#W8535951");
    assert_eq!(returned.args["item_ids"], json!(["1304426904"]));
    assert_eq!(returned.args["payment_method_id"], "credit_card_5051208");
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 1, "only the items were asked: {requests:?}");
    let items = &requests[0].body["tools"][0]["function"]["parameters"]["properties"]["item_ids"]["items"]["enum"];
    assert_eq!(items, &json!(["1304426904"]), "the delivered order's items are offered");
    let grounding = &trace.observations.iter().find(|o| o.node_id == "return").unwrap().grounding;
    let order = grounding.iter().find(|arg| arg.arg == "order_id").unwrap();
    assert!(
        order.source.contains("3 of 4 dropped: order $.parsed_content.status is not \"delivered\""),
        "{}",
        order.source
    );
    let items = grounding.iter().find(|arg| arg.arg == "item_ids").unwrap();
    assert!(items.source.contains("its call with that `order_id`"), "{}", items.source);

    // No order of hers is processed: the return route is not offered, and the branch
    // skips it with no judge.
    let server = support::llm(script).await;
    let plan = support::plan(precondition_graph("processed"), support::runtime(&server, tools));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert!(trace.tool_calls.iter().all(|call| call.tool != "return_delivered_order_items"), "{:?}", trace.tool_calls);
    let act = trace.observations.iter().find(|o| o.node_id == "act").and_then(|o| o.output.clone()).unwrap();
    assert!(act.starts_with("skip (`return` left out: `return` has no value for `order_id`"), "{act}");
    assert!(server.chat_requests().is_empty(), "{:?}", server.chat_requests());
}

/// Mined query cues leave a route out: the `lookup` route, taken by most mined records
/// and groundable, is not taken when the mined queries that took it all said `details`
/// and this one does not; a query that says it takes the route as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_whose_cue_the_query_lacks_is_left_out() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let mut graph = routed_graph();
    graph["nodes"][1]["cues"] = json!({"lookup": ["details"]});
    let script = finds_yusuf().when(Match::wants_json(), Reply::json(json!({"choice": "lookup"})));
    let tools_called = |trace: &flowmem_model::Trace| -> Vec<String> {
        trace.tool_calls.iter().map(|call| call.tool.clone()).collect()
    };

    let server = support::llm(script.clone()).await;
    let plan = support::plan(graph.clone(), support::runtime(&server, tools.clone()));
    let input = RunInput { id: "cue-1".to_owned(), query: "I am Yusuf Rossi, zip code 19122.".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert_eq!(tools_called(&trace), ["find_user_id_by_name_zip"], "the judge, asked, would have looked the user up");
    let look = trace.observations.iter().find(|o| o.node_id == "look").and_then(|o| o.output.clone()).unwrap();
    assert!(look.starts_with("skip (`lookup` left out: the query says none of “details”"), "{look}");

    let server = support::llm(script).await;
    let plan = support::plan(graph, support::runtime(&server, tools));
    let input =
        RunInput { id: "cue-2".to_owned(), query: "I am Yusuf Rossi, zip code 19122. My Details, please.".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert_eq!(tools_called(&trace), ["find_user_id_by_name_zip", "get_user_details"]);
}

/// A `skip` more than half of the mined records took is taken with no judge, as a tool
/// route would be: the judge, asked, would take the lookup. Not when the query holds
/// the other route's cue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_most_mined_records_took_is_taken_with_no_judge() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let mut graph = routed_graph();
    graph["nodes"][1]["taken"] = json!({"lookup": 3, "skip": 7});
    let server = support::llm(finds_yusuf().when(Match::wants_json(), Reply::json(json!({"choice": "lookup"})))).await;
    let plan = support::plan(graph.clone(), support::runtime(&server, tools.clone()));
    let input = RunInput { id: "skip-1".to_owned(), query: "I am Yusuf Rossi, zip code 19122.".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let called: Vec<&str> = trace.tool_calls.iter().map(|call| call.tool.as_str()).collect();
    assert_eq!(called, ["find_user_id_by_name_zip"]);
    let look = trace.observations.iter().find(|o| o.node_id == "look").and_then(|o| o.output.clone()).unwrap();
    assert_eq!(look, "skip (taken by 7 of 10 mined records)");
    assert_eq!(server.chat_requests().len(), 1, "only the user search asked the model");

    // When the query holds the lookup's cue, the counts say nothing of it: the judge is
    // asked, and takes the lookup.
    graph["nodes"][1]["cues"] = json!({"lookup": ["details"]});
    let server = support::llm(finds_yusuf().when(Match::wants_json(), Reply::json(json!({"choice": "lookup"})))).await;
    let plan = support::plan(graph, support::runtime(&server, tools));
    let input = RunInput { id: "skip-2".to_owned(), query: "I am Yusuf Rossi, zip code 19122. My details?".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let called: Vec<&str> = trace.tool_calls.iter().map(|call| call.tool.as_str()).collect();
    assert_eq!(called, ["find_user_id_by_name_zip", "get_user_details"]);
    let look = trace.observations.iter().find(|o| o.node_id == "look").and_then(|o| o.output.clone()).unwrap();
    assert!(
        look.starts_with("lookup (`skip` not taken for its 7 of 10 mined records: the query holds another route's cue"),
        "{look}"
    );
}

/// A route whose cue the query holds is taken with no judge when more than half of the
/// mined queries that reached the branch holding its cue took it (`cued`): the judge,
/// asked, would skip, as most mined records did. With half or fewer, the judge is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_most_queries_holding_its_cue_took_is_taken_with_no_judge() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let mut graph = routed_graph();
    graph["nodes"][1]["taken"] = json!({"lookup": 3, "skip": 7});
    graph["nodes"][1]["cues"] = json!({"lookup": ["details"]});
    graph["nodes"][1]["cued"] = json!({"lookup": [3, 4]});
    let script = finds_yusuf().when(Match::wants_json(), Reply::json(json!({"choice": "skip"})));
    let input = RunInput { id: "cued-1".to_owned(), query: "I am Yusuf Rossi, zip code 19122. My details?".to_owned() };
    let called = |trace: &flowmem_model::Trace| -> Vec<String> {
        trace.tool_calls.iter().map(|call| call.tool.clone()).collect()
    };
    let look = |trace: &flowmem_model::Trace| {
        trace.observations.iter().find(|o| o.node_id == "look").and_then(|o| o.output.clone()).unwrap_or_default()
    };

    let server = support::llm(script.clone()).await;
    let plan = support::plan(graph.clone(), support::runtime(&server, tools.clone()));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert_eq!(called(&trace), ["find_user_id_by_name_zip", "get_user_details"]);
    assert!(
        look(&trace).starts_with("lookup (taken by 3 of the 4 mined queries that held its cue"),
        "{}",
        look(&trace)
    );
    let judged = server.chat_requests().iter().filter(|r| r.body.to_string().contains("Question:")).count();
    assert_eq!(judged, 0, "no judge was asked at `look`");

    graph["nodes"][1]["cued"] = json!({"lookup": [2, 4]});
    let server = support::llm(script).await;
    let plan = support::plan(graph, support::runtime(&server, tools));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert_eq!(called(&trace), ["find_user_id_by_name_zip"], "the judge was asked and skipped");
    let judged = server.chat_requests().iter().filter(|r| r.body.to_string().contains("Question:")).count();
    assert_eq!(judged, 1, "the judge was asked at `look` only: {:?}", server.chat_requests());
}

/// A branch mined with its queries' words goes the way the nearest mined queries went,
/// with no judge, even against the most taken route: of the `look` branch's mined
/// queries, those that asked about a status skipped the lookup, and this one asks about a
/// status. A query that asks for details takes the lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nearest_mined_queries_decide_a_branch() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let mut graph = routed_graph();
    let words = |text: &str| flowmem_model::decision_words(text);
    graph["queries"] = json!([
        words("show my account details"),
        words("my details and address please"),
        words("what details do you hold"),
        words("what is the status of my order"),
        words("order status please"),
    ]);
    graph["nodes"][1]["nearest"] = json!({"lookup": [0, 1, 2], "skip": [3, 4]});
    // Asked, the judge would take the lookup.
    let script = finds_yusuf().when(Match::wants_json(), Reply::json(json!({"choice": "lookup"})));
    let tools_called = |trace: &flowmem_model::Trace| -> Vec<String> {
        trace.tool_calls.iter().map(|call| call.tool.clone()).collect()
    };
    let output = |trace: &flowmem_model::Trace, id: &str| {
        trace.observations.iter().find(|o| o.node_id == id).and_then(|o| o.output.clone()).unwrap_or_default()
    };

    let server = support::llm(script.clone()).await;
    let plan = support::plan(graph.clone(), support::runtime(&server, tools.clone()));
    let input =
        RunInput { id: "near-1".to_owned(), query: "I am Yusuf Rossi, zip 19122. What is my order status?".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert_eq!(tools_called(&trace), ["find_user_id_by_name_zip"], "the lookup, taken by 7 of 10, was skipped");
    assert!(
        output(&trace, "look").starts_with("skip (taken by 2 of the 3 nearest mined queries"),
        "{}",
        output(&trace, "look")
    );
    assert_eq!(server.chat_requests().len(), 1, "only the user search asked the model");

    let server = support::llm(script).await;
    let plan = support::plan(graph, support::runtime(&server, tools));
    let input = RunInput { id: "near-2".to_owned(), query: "I am Yusuf Rossi, zip 19122. Show my details.".to_owned() };
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert_eq!(tools_called(&trace), ["find_user_id_by_name_zip", "get_user_details"]);
    assert!(
        output(&trace, "look").starts_with("lookup (taken by 3 of the 3 nearest mined queries"),
        "{}",
        output(&trace, "look")
    );
    assert_eq!(server.chat_requests().len(), 1, "no judge was asked");
}

/// An order's lookup, then an exchange whose `item_ids` the mined calls always sent at
/// the length of `new_item_ids`.
fn same_length_graph() -> serde_json::Value {
    let from = |path: &str| json!({"from": "result", "node": "order", "path": path, "support": 9});
    json!({
        "name": "same-length",
        "nodes": [
            {"id": "order", "kind": "tool", "hints": ["get_order_details"],
             "bindings": {"order_id": {"observed": 9, "sources": [{"from": "query", "shape": "id", "support": 9}]}}},
            {"id": "swap", "kind": "tool", "hints": ["exchange_delivered_order_items"],
             "bindings": {
                 "order_id": {"observed": 9, "sources": [{"from": "argument", "node": "order", "arg": "order_id", "support": 9}]},
                 "item_ids[*]": {"observed": 9, "sources": [from("$.parsed_content.items[*].item_id")],
                                 "same_length_as": "new_item_ids"},
                 "payment_method_id": {"observed": 9, "sources": [from("$.parsed_content.payment_history[*].payment_method_id")]}}}
        ],
        "edges": [{"from": "order", "to": "swap"}],
        "entry": "order",
        "exit": "swap"
    })
}

/// A reply with one old item and two new ones breaks the mined equal lengths: it is asked
/// again with both arrays held to one element, and the answer goes through. A backend
/// that answers with two new items again gets the longer array cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arrays_the_logs_sent_at_one_length_are_held_to_one_length() {
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let reply = |new: serde_json::Value| {
        Reply::tool_call("exchange_delivered_order_items", json!({"item_ids": ["1304426904"], "new_item_ids": new}))
    };
    let input = RunInput { id: "len-1".to_owned(), query: "Exchange the vacuum from order #W8535951.".to_owned() };

    let script = Script::new().when_seq(
        Match::offers_tool("exchange_delivered_order_items"),
        [reply(json!(["4602305039", "1345513440"])), reply(json!(["4602305039"]))],
    );
    let server = support::llm(script).await;
    let plan = support::plan(same_length_graph(), support::runtime(&server, tools.clone()));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let requests = server.chat_requests();
    assert_eq!(requests.len(), 2, "asked once more");
    let properties = &requests[1].body["tools"][0]["function"]["parameters"]["properties"];
    for name in ["item_ids", "new_item_ids"] {
        assert_eq!((&properties[name]["minItems"], &properties[name]["maxItems"]), (&json!(1), &json!(1)), "{name}");
    }
    let last = requests[1].body["messages"].as_array().unwrap().last().unwrap().to_string();
    assert!(last.contains("must have the same number of elements: 1 each"), "{last}");
    let swapped = trace.tool_calls.iter().find(|call| call.tool == "exchange_delivered_order_items").unwrap();
    assert!(swapped.error.is_none(), "{:?}", swapped.error);
    assert_eq!(swapped.args["new_item_ids"], json!(["4602305039"]));

    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let script = Script::new()
        .when(Match::offers_tool("exchange_delivered_order_items"), reply(json!(["4602305039", "1345513440"])));
    let server = support::llm(script).await;
    let plan = support::plan(same_length_graph(), support::runtime(&server, tools));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let swapped = trace.tool_calls.iter().find(|call| call.tool == "exchange_delivered_order_items").unwrap();
    assert_eq!(swapped.args["new_item_ids"], json!(["4602305039"]), "cut to the length of `item_ids`");
    assert!(swapped.error.is_none(), "{:?}", swapped.error);
}

/// An order's lookup, a loop over product lookups the model asks for, and an exchange
/// whose new items the mined calls always took beside the old ones in one product lookup
/// (`paired_with`); `paired` false leaves the pairing out.
fn paired_graph(paired: bool) -> serde_json::Value {
    let from = |node: &str, path: &str| json!({"from": "result", "node": node, "path": path, "support": 9});
    let mut new_items = json!({"observed": 9, "sources": [from("prod", "$.parsed_content.variants[*].item_id")]});
    let mut old_items = json!({"observed": 9, "sources": [from("order", "$.parsed_content.items[*].item_id")]});
    if paired {
        // Mining pairs both ways; only the new items come from the product lookups.
        let pairing = |arg: &str| json!({"arg": arg, "node": "prod", "path": "$.parsed_content.variants[*].item_id", "support": 7});
        new_items["paired_with"] = pairing("item_ids");
        old_items["paired_with"] = pairing("new_item_ids");
    }
    json!({
        "name": "paired",
        "nodes": [
            {"id": "order", "kind": "tool", "hints": ["get_order_details"],
             "bindings": {"order_id": {"observed": 9, "sources": [{"from": "query", "shape": "id", "support": 9}]}}},
            {"id": "prods", "kind": "loop", "max_iterations": 4,
             "until": {"type": "judge", "question": "Has every product been looked up?"}},
            {"id": "prod", "kind": "tool", "hints": ["get_product_details"]},
            {"id": "swap", "kind": "tool", "hints": ["exchange_delivered_order_items"],
             "bindings": {
                 "order_id": {"observed": 9, "sources": [{"from": "argument", "node": "order", "arg": "order_id", "support": 9}]},
                 "item_ids[*]": old_items,
                 "new_item_ids[*]": new_items,
                 "payment_method_id": {"observed": 9,
                     "sources": [from("order", "$.parsed_content.payment_history[*].payment_method_id")]}}}
        ],
        "edges": [
            {"from": "order", "to": "prods"},
            {"from": "prods", "to": "prod", "label": "body"},
            {"from": "prod", "to": "prods", "kind": "back"},
            {"from": "prods", "to": "swap", "label": "exit"}
        ],
        "entry": "order",
        "exit": "swap"
    })
}

/// Amelia's delivered order #W9077205 holds a jigsaw puzzle and a dumbbell set; the loop
/// looks up the puzzle, the dumbbells and last a vacuum cleaner. The new items are
/// offered from the lookups that hold an old item (the puzzle's and the dumbbells'
/// variants), not from the latest (the vacuum's); a reply that swaps the two new items
/// is asked again, told which fits where, and the exchange then goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_items_are_variants_of_the_old_items_products() {
    let (puzzle, dumbbells, vacuum) = ("1808611083", "7233192239", "1762337868");
    let (old, new) = (json!(["9370300555", "3877338112"]), json!(["4068787148", "2444431651"]));
    let swap = |new: &serde_json::Value| {
        Reply::tool_call("exchange_delivered_order_items", json!({"item_ids": old, "new_item_ids": new}))
    };
    let lookup = |id: &str| Reply::tool_call("get_product_details", json!({"product_id": id}));
    let done = |answer: &str| Reply::json(json!({"choice": answer}));
    let script = |replies: Vec<Reply>| {
        Script::new()
            .when_seq(Match::offers_tool("get_product_details"), [lookup(puzzle), lookup(dumbbells), lookup(vacuum)])
            .when_seq(Match::wants_json(), [done("no"), done("no"), done("yes")])
            .when_seq(Match::offers_tool("exchange_delivered_order_items"), replies)
    };
    let input = RunInput { id: "pair-1".to_owned(), query: "Exchange the items of order #W9077205.".to_owned() };
    let offered = |request: &serde_json::Value| -> Vec<String> {
        let items = &request["tools"][0]["function"]["parameters"]["properties"]["new_item_ids"]["items"]["enum"];
        items.as_array().unwrap().iter().map(|value| value.as_str().unwrap().to_owned()).collect()
    };
    let exchange_requests = |server: &ScriptedLlmServer| -> Vec<serde_json::Value> {
        let requests = server.chat_requests();
        requests
            .iter()
            .filter(|request| request.body.to_string().contains("exchange_delivered_order_items"))
            .map(|request| request.body.clone())
            .collect()
    };

    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let server = support::llm(script(vec![swap(&json!(["2444431651", "4068787148"])), swap(&new)])).await;
    let plan = support::plan(paired_graph(true), support::runtime(&server, tools));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    let products: Vec<&serde_json::Value> = trace
        .tool_calls
        .iter()
        .filter(|call| call.tool == "get_product_details")
        .map(|c| &c.args["product_id"])
        .collect();
    assert_eq!(products, [puzzle, dumbbells, vacuum]);
    let requests = exchange_requests(&server);
    assert_eq!(requests.len(), 2, "asked once more");
    let first = offered(&requests[0]);
    assert!(first.contains(&"4068787148".to_owned()) && first.contains(&"2444431651".to_owned()), "{first:?}");
    assert!(!first.contains(&"4602305039".to_owned()), "no vacuum: {first:?}");
    let told = requests[1]["messages"].as_array().unwrap().last().unwrap().to_string();
    assert!(told.contains("element 0 of `new_item_ids` must be one of") && told.contains("4068787148"), "{told}");
    let exchanged = trace.tool_calls.iter().find(|call| call.tool == "exchange_delivered_order_items").unwrap();
    assert!(exchanged.error.is_none(), "{:?}", exchanged.error);
    assert_eq!(exchanged.args["new_item_ids"], new);
    let grounding = &trace.observations.iter().find(|o| o.node_id == "swap").unwrap().grounding;
    assert!(grounding.iter().any(|g| g.source.contains("beside one of `item_ids`'s")), "{grounding:?}");

    // A re-ask that fails (here the script has no second reply; in the bench, a message
    // that pushed the request past the model's window) leaves the first answer standing.
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let server = support::llm(script(vec![swap(&json!(["2444431651", "4068787148"]))])).await;
    let plan = support::plan(paired_graph(true), support::runtime(&server, tools));
    let trace = run(&plan, &input, &NoObserver).await;
    assert!(trace.error.is_none(), "{:?}", trace.error);
    assert_eq!(exchange_requests(&server).len(), 2);
    let exchanged = trace.tool_calls.iter().find(|call| call.tool == "exchange_delivered_order_items").unwrap();
    assert_eq!(exchanged.args["new_item_ids"], json!(["2444431651", "4068787148"]));

    // Without the pairing the new items are the latest lookup's: the vacuum's variants
    // (and the reply, outside them, is sent back once).
    let state = tempfile::tempdir().unwrap();
    let tools = support::retail(state.path()).await;
    let server = support::llm(script(vec![swap(&new), swap(&new)])).await;
    let plan = support::plan(paired_graph(false), support::runtime(&server, tools));
    run(&plan, &input, &NoObserver).await;
    let first = offered(&exchange_requests(&server)[0]);
    assert!(first.contains(&"4602305039".to_owned()) && !first.contains(&"4068787148".to_owned()), "{first:?}");
}
