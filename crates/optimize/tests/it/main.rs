//! Integration tests of flowmem-optimize.

mod search;
