//! Integration tests of the LLM client against the scripted OpenAI-compatible server on
//! loopback (`flowmem-testsupport`).

mod accounting;
mod cache;
mod limit;
mod concurrency;
mod config;
mod faults;
mod schema;
mod secrets;
mod support;
mod tools;
