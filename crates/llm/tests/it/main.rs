//! Integration tests of the LLM client against the scripted OpenAI-compatible server on
//! loopback (`flowmem-testsupport`).

mod accounting;
mod cache;
mod concurrency;
mod config;
mod embed;
mod faults;
mod limit;
mod schema;
mod secrets;
mod support;
mod tools;
