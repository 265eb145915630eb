//! The tool registry's handling of an MCP `tools/call` result of any JSON.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    flowmem_tools::fuzzing::read_result(data);
});
