//! Integration tests of the `flowmem` binary, one module per command.

mod mine;
