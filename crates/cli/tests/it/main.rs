//! Integration tests of the `flowmem` binary, run as a subprocess in a temp dir.

mod graph;
mod tools;
