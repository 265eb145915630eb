//! The OpenAi importer on a file `runs.jsonl` of any bytes.

#![no_main]

use flowmem_model::ImportFormat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    flowmem_fuzz::import(ImportFormat::OpenAi, "runs.jsonl", data);
});
