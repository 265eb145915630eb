//! The ToolBench importer on a file `10_ChatGPT_DFS_woFilter_w2.json` of any bytes.

#![no_main]

use flowmem_model::ImportFormat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    flowmem_fuzz::import(ImportFormat::ToolBench, "10_ChatGPT_DFS_woFilter_w2.json", data);
});
