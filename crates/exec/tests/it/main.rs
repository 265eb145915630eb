//! Integration tests of flowmem-exec, one module per topic.

mod embedded;
mod engine;
mod file;
mod grounding;
mod otel;
mod prompts;
mod react;
mod support;
mod validate;
