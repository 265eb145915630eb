//! Command-line arguments. Clap derive types only: no logic. Doc comments are the
//! `--help` text.

use std::path::PathBuf;

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
    /// Talk to the configured language models.
    Llm(LlmArgs),
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

/// Arguments of `flowmem llm`.
#[derive(Debug, Args)]
pub struct LlmArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: LlmCommand,
}

/// `flowmem llm` subcommands.
#[derive(Debug, Subcommand)]
pub enum LlmCommand {
    /// Send one prompt to a model and print its reply, to check a configuration.
    ///
    /// The model is a `[models.NAME]` entry of flowmem.toml, or, with OPENAI_BASE_URL
    /// set, a model id at that endpoint. Without --model: FLOWMEM_MODEL, then
    /// `[roles] default`, then the only configured model, then the first model the
    /// OPENAI_BASE_URL endpoint lists, then the embedded local model.
    ///
    /// Example: flowmem llm chat --model big "Say hello in French."
    Chat(LlmChatArgs),
}

/// Arguments of `flowmem llm chat`.
#[derive(Debug, Args)]
pub struct LlmChatArgs {
    /// The prompt, sent as a user message.
    pub prompt: String,
    /// The model: a `[models]` name, or a model id at OPENAI_BASE_URL.
    #[arg(long)]
    pub model: Option<String>,
    /// The configuration file (default: $FLOWMEM_CONFIG, then ./flowmem.toml).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// A system message to send before the prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// The sampling temperature.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// The largest number of tokens to generate.
    #[arg(long)]
    pub max_tokens: Option<u32>,
}
