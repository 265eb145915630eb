//! The OpenAI-compatible client's reading of a chat-completions body of any text.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    flowmem_llm::fuzzing::read_reply(&text);
});
