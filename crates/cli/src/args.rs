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
    /// Serve the embedded model over an OpenAI-compatible HTTP API on loopback.
    ///
    /// Loads SmolLM2-135M-Instruct (fetch it first with `bash scripts/setup/30-model.sh`),
    /// prints the base URL, and answers `POST /v1/chat/completions` (messages, tools,
    /// `response_format` with a JSON Schema) and `GET /v1/models` until Ctrl-C.
    ///
    /// Example: `flowmem serve-llm --port 8088`, then point any OpenAI client at
    /// `http://127.0.0.1:8088/v1`.
    ServeLlm(ServeLlmArgs),
}

/// Arguments of `flowmem serve-llm`.
#[derive(Debug, Args)]
pub struct ServeLlmArgs {
    /// The port on 127.0.0.1 to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 8088)]
    pub port: u16,
    /// The GGUF file (default: `$FLOWMEM_MODEL_DIR` or `~/.cache/flowmem/models/`,
    /// `SmolLM2-135M-Instruct.Q4_1.gguf`).
    #[arg(long, value_name = "PATH")]
    pub model: Option<std::path::PathBuf>,
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
