//! Integration tests of the `flowmem` binary, run as a subprocess in a temporary
//! directory.

mod import;
mod stats;
mod support;
