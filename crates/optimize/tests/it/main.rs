//! Integration tests of flowmem-optimize.

mod scout;
mod search;
