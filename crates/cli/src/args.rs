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
