//! Helpers shared by the tests: where the servers are, configs, an HTTP server process.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use flowmem_model::JsonObject;
use flowmem_tools::{Registry, ToolsConfig};

/// The repository root (tests run with the crate as working directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A server binary from `.deps/`, or a failure that says how to install it.
pub fn dep(relative: &str) -> PathBuf {
    let path = repo_root().join(".deps").join(relative);
    assert!(
        path.exists(),
        "`{}` is missing; run `scripts/setup/20-mcp-servers.sh` (or `scripts/test.sh`) to install the MCP test servers",
        path.display()
    );
    path
}

pub fn everything() -> PathBuf {
    dep("node/node_modules/.bin/mcp-server-everything")
}

pub fn memory() -> PathBuf {
    dep("node/node_modules/.bin/mcp-server-memory")
}

pub fn tau2(domain: &str) -> PathBuf {
    dep(&format!("venv/bin/tau2-{domain}-mcp"))
}

/// A TOML `[[tools.mcp]]` entry for server-everything over stdio.
pub fn everything_entry(name: &str, extra: &str) -> String {
    format!("[[tools.mcp]]\nname = \"{name}\"\ncommand = \"{}\"\nargs = [\"stdio\"]\n{extra}\n", everything().display())
}

pub fn config(text: &str) -> ToolsConfig {
    let doc: toml::Value = toml::from_str(text).unwrap();
    ToolsConfig::from_toml(&doc, None).unwrap()
}

pub async fn connect(text: &str) -> Registry {
    Registry::connect(&config(text)).await.unwrap()
}

pub fn args(value: serde_json::Value) -> JsonObject {
    value.as_object().expect("test arguments are a JSON object").clone()
}

/// server-everything in streamable HTTP mode on a free loopback port; killed on drop.
pub struct HttpServer {
    pub url: String,
    _child: tokio::process::Child,
}

impl HttpServer {
    pub async fn start() -> HttpServer {
        // Bind port 0 to learn a free port, then hand it to the server.
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port();
        let child = tokio::process::Command::new(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // Readiness: the port accepts connections. Poll with a bounded backoff.
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut delay = Duration::from_millis(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "server-everything did not listen on {addr} within 30 s");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
        HttpServer { url: format!("http://127.0.0.1:{port}/mcp"), _child: child }
    }
}
