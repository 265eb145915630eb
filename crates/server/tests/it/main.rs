//! Integration tests of `flowmem serve` with MCP clients flowmem did not write.
