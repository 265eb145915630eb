//! Integration tests of the `flowmem` binary, run as a subprocess in a temporary
//! directory, one module per command.

mod memory;
mod import;
mod mine;
mod score;
mod split;
mod stats;
mod support;
mod graph;
mod tools;
mod llm_chat;
