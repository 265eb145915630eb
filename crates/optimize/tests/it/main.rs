//! Integration tests of flowmem-optimize.

mod propose;
mod scout;
mod search;
mod study;
