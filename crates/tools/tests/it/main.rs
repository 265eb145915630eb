//! Integration tests of flowmem-tools against real MCP servers, over stdio and HTTP.
//!
//! The servers are installed by `scripts/setup/20-mcp-servers.sh`; a test fails with that
//! hint when one is missing.

mod alias;
mod clash;
mod group;
mod http;
mod replay;
mod restart;
mod stdio;
mod support;
