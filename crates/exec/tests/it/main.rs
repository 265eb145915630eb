//! Integration tests of flowmem-exec, one module per topic.

mod engine;
mod file;
mod openai;
mod otel;
mod prompts;
mod react;
mod support;
mod validate;
