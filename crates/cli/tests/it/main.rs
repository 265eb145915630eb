//! Integration tests of the `flowmem` binary, one module per command.

mod memory;
mod mine;
