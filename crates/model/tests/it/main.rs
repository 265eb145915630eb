//! Integration tests of flowmem-model: importers on the shared data sets and on broken
//! hand-made inputs, and the JSONL helpers.

mod broken;
mod data;
mod files;
mod jsonl;
mod otlp;
mod support;
