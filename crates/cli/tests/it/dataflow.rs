//! `flowmem mine --output dataflow` on the shared τ²-bench logs, replayed through the
//! real τ²-bench MCP servers for their results: bindings checked by hand on named
//! records.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::{TestDir, data};

fn server(domain: &str) -> PathBuf {
    flowmem_testsupport::require_path(
        &flowmem_testsupport::deps_dir().join(format!("venv/bin/tau2-{domain}-mcp")),
        "scripts/setup/20-mcp-servers.sh",
    )
}

/// The dataflow document of all of `domain`'s tasks, replayed in isolated state.
fn mined(domain: &str) -> Value {
    let dir = TestDir::new();
    let state = dir.path("state");
    let env = format!("TAU2_{}_MCP_STATE_DIR", domain.to_uppercase());
    dir.write(
        "flowmem.toml",
        &format!(
            "[tools]\ntimeout_secs = 120\n\n[[tools.mcp]]\nname = \"{domain}\"\ncommand = \"{}\"\nenv = {{ {env} = \"{}\" }}\n",
            server(domain).display(),
            state.display()
        ),
    );
    let tasks = data(&format!("tau2-bench/{domain}/tasks.json"));
    let import = dir.run(&["import", "--format", "tau2-bench", &tasks, "-o", "records.jsonl"]);
    assert_eq!(import.code, 0, "{}", import.stderr);
    let config = dir.path("flowmem.toml");
    let config = config.to_str().unwrap();
    let args = ["--json", "mine", "records.jsonl", "--output", "dataflow", "--config", config];
    let out = dir.run(&[&args[..], &["--state-key-arg", "state_key", "--reset-tool", "reset_state"]].concat());
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["replay"]["executed"], doc["replay"]["calls"], "every logged call was replayed: {}", doc["replay"]);
    doc["output"].clone()
}

/// `(call, tool, arg, value)` → the sources of that value in record `id`, as
/// `query`, `result TOOL PATH`, `argument TOOL ARG` or `constant VALUE`.
fn sources(flow: &Value, id: &str, call: u64, arg: &str) -> Vec<String> {
    let record = flow["per_record"].as_array().unwrap().iter().find(|record| record["id"] == id).unwrap();
    let value = record["values"]
        .as_array()
        .unwrap()
        .iter()
        .find(|value| value["call"] == call && value["arg"] == arg)
        .unwrap_or_else(|| panic!("record {id} has no value of {arg} in call {call}"));
    value["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|source| match source["from"].as_str().unwrap() {
            "query" => "query".to_owned(),
            "result" => format!("result {} {}", source["tool"].as_str().unwrap(), source["path"].as_str().unwrap()),
            "argument" => format!("argument {} {}", source["tool"].as_str().unwrap(), source["arg"].as_str().unwrap()),
            other => format!("{other} {}", source["value"]),
        })
        .collect()
}

fn shape_of(flow: &Value, tool: &str, arg: &str) -> Value {
    let flow = flow["arguments"].as_array().unwrap().iter().find(|flow| flow["tool"] == tool && flow["arg"] == arg);
    flow.unwrap()["query_shape"].clone()
}

#[test]
fn retail_task_0_binds_the_order_from_the_query_and_the_items_from_its_details() {
    let flow = mined("retail");
    for arg in ["first_name", "last_name", "zip"] {
        assert_eq!(sources(&flow, "0", 0, arg), ["query"], "{arg}");
    }
    assert_eq!(sources(&flow, "0", 1, "order_id"), ["query"]);
    let order = |path: &str| format!("result get_order_details $.parsed_content.{path}");
    assert_eq!(sources(&flow, "0", 2, "product_id"), [order("items[*].product_id")]);
    assert_eq!(sources(&flow, "0", 3, "product_id"), [order("items[*].product_id")]);
    assert_eq!(sources(&flow, "0", 4, "order_id"), ["query"]);
    let item_sources = sources(&flow, "0", 4, "item_ids[*]");
    assert_eq!(item_sources[0], order("items[*].item_id"), "{item_sources:?}");
    assert!(item_sources.contains(&order("fulfillments[*].item_ids[*]")), "{item_sources:?}");
    // The new items are variants of the products looked up: a map keyed by item id.
    assert_eq!(
        sources(&flow, "0", 4, "new_item_ids[*]"),
        ["result get_product_details $.parsed_content.variants[*].item_id"]
    );
    assert_eq!(sources(&flow, "0", 4, "payment_method_id"), [order("payment_history[*].payment_method_id")]);
    assert_eq!(shape_of(&flow, "find_user_id_by_name_zip", "first_name"), "name");
    assert_eq!(shape_of(&flow, "find_user_id_by_name_zip", "zip"), "number");
    assert_eq!(shape_of(&flow, "find_user_id_by_email", "email"), "email");
    assert_eq!(shape_of(&flow, "get_order_details", "order_id"), "id");
    // Task 0's query says "You are Yusuf Rossi in zip code 19122": the words before each
    // value, the first name standing for itself before the last name.
    let anchors = |call: usize, arg: &str| {
        let values = flow["per_record"].as_array().unwrap().iter().find(|record| record["id"] == "0").unwrap();
        let value =
            values["values"].as_array().unwrap().iter().find(|value| value["call"] == call && value["arg"] == arg);
        value.unwrap()["anchors"].clone()
    };
    assert_eq!(anchors(0, "first_name"), json!([["are"], ["you", "are"]]));
    assert_eq!(anchors(0, "last_name"), json!([["{first_name}"], ["are", "{first_name}"]]));
    assert_eq!(anchors(0, "zip"), json!([["code"], ["zip", "code"]]));
    // Over the domain, "{first_name}" is the strongest anchor of the last name.
    let last = flow["arguments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|flow| flow["tool"] == "find_user_id_by_name_zip" && flow["arg"] == "last_name")
        .unwrap();
    assert_eq!(last["query_anchors"][0]["words"], json!(["{first_name}"]), "{last}");
    // Coverage of the whole domain, reported in the note; a floor so a regression shows.
    let coverage = flow["coverage"].as_f64().unwrap();
    assert!(coverage > 0.7, "retail coverage {coverage}");
}

#[test]
fn airline_task_30_binds_the_flight_change_to_the_reservation_it_looked_up() {
    let flow = mined("airline");
    let reservation = |path: &str| format!("result get_reservation_details $.parsed_content.{path}");
    assert_eq!(sources(&flow, "30", 0, "reservation_id"), ["query"]);
    assert_eq!(sources(&flow, "30", 1, "origin"), ["query"]);
    assert_eq!(sources(&flow, "30", 1, "destination"), ["query"]);
    assert_eq!(sources(&flow, "30", 1, "date"), [reservation("flights[*].date")]);
    assert_eq!(sources(&flow, "30", 2, "reservation_id"), ["query"]);
    assert_eq!(sources(&flow, "30", 2, "cabin"), [reservation("cabin")]);
    assert_eq!(sources(&flow, "30", 2, "payment_id"), [reservation("payment_history[*].payment_id")]);
    // Task 1 reads the user, then the reservation the user holds.
    assert_eq!(sources(&flow, "1", 0, "user_id"), ["query"]);
    assert_eq!(sources(&flow, "1", 1, "reservation_id"), ["result get_user_details $.parsed_content.reservations[*]"]);
    assert_eq!(shape_of(&flow, "get_user_details", "user_id"), "id");
    let coverage = flow["coverage"].as_f64().unwrap();
    assert!(coverage > 0.65, "airline coverage {coverage}");
}
