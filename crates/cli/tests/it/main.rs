//! Integration tests of the `flowmem` binary.

mod llm_chat;
