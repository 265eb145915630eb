//! Integration tests of the `flowmem` binary, run as a subprocess in a temporary
//! directory, one module per command.

mod api;
mod conform;
mod dataflow;
mod eval;
mod gateway;
mod graph;
mod hostile;
mod import;
mod induce;
mod learn;
mod llm_chat;
mod memory;
mod mine;
mod online_embedded;
mod otlp_receiver;
mod retrieval;
mod run;
mod score;
mod scout;
mod scout_log;
mod serve;
mod shared_memory;
mod split;
mod stats;
mod study;
mod support;
mod tools;
mod ui;
