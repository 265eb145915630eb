//! The graph loader on a JSON file of any bytes, then every check on what loads.

#![no_main]

use flowmem_exec::{GraphFormat, parse_graph};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(graph) = parse_graph(text, GraphFormat::Json, "g.json".as_ref()) {
        flowmem_fuzz::check_graph(&graph);
    }
});
