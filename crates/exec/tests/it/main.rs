//! Integration tests of flowmem-exec, one module per topic.

mod file;
mod otel;
mod prompts;
mod validate;
