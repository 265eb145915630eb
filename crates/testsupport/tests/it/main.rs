//! Integration tests of the scripted OpenAI-compatible server, driven by a plain HTTP
//! client.

mod server;
