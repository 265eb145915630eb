//! Integration tests of the scripted OpenAI-compatible server, driven by a plain HTTP
//! client, and the repository's tidy checks.

mod server;
mod tidy;
