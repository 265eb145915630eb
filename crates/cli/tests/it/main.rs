//! Integration tests of the `flowmem` binary, run as a subprocess in a temp dir.

mod mine;
mod score;
mod split;
mod tools;
