//! The StableToolBench importer on a file `G1_tool.json` of any bytes.

#![no_main]

use flowmem_model::ImportFormat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    flowmem_fuzz::import(ImportFormat::StableToolBench, "G1_tool.json", data);
});
