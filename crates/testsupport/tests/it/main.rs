//! Integration tests of the scripted OpenAI-compatible server, driven by a plain HTTP
//! client, of the throwaway PostgreSQL clusters, driven by `psql`, and the
//! repository's tidy checks.

mod postgres;
mod server;
mod tidy;
