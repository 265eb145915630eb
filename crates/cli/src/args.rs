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
    /// Split a record set into opt/val/test parts (5:2:3), reproducibly for a seed.
    Split(SplitArgs),
    /// Score logged agent runs against records: TC with alignments, no LLM needed.
    Score(ScoreArgs),
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

/// Arguments of `flowmem split`.
///
/// Writes `opt.jsonl`, `val.jsonl` and `test.jsonl` into `--out`. The split depends only
/// on the seed and the records' ids, not on their order in the file, so the same seed
/// always gives the same parts.
///
/// Example: `flowmem split records.jsonl --seed 7 --out splits/`
#[derive(Debug, Args)]
pub struct SplitArgs {
    /// The record set (JSONL, one record a line).
    pub records: std::path::PathBuf,
    /// The seed; the same seed gives the same split.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The directory to write `opt.jsonl`, `val.jsonl` and `test.jsonl` into (created if
    /// missing).
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// Relative part sizes as `OPT:VAL:TEST`.
    #[arg(long, default_value = "5:2:3")]
    pub ratios: String,
}

/// Arguments of `flowmem score`.
///
/// Matches every run to the record with the same id and scores its tool calls with
/// FlowScout's TC, `LCS(π, π̂) / max(K, K̂)`, listing matched, missing and extra calls.
/// Runs with no record are listed as unmatched. Exits 1 when no run matched or the mean
/// TC is below `--fail-under`.
///
/// Example: `flowmem score --records records.jsonl --runs runs.jsonl --json`
#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// The records (JSONL) holding the reference tool-call logs.
    #[arg(long)]
    pub records: std::path::PathBuf,
    /// The runs to score (trajectory JSONL, for example from `flowmem import`).
    #[arg(long)]
    pub runs: std::path::PathBuf,
    /// Leave an argument of a tool out of the comparison, as `TOOL=ARG[,ARG...]`
    /// (repeatable). Example: `--ignore-args transfer_to_human_agents=summary`.
    #[arg(long, value_name = "TOOL=ARGS")]
    pub ignore_args: Vec<String>,
    /// Exit 1 when the mean TC is below this value.
    #[arg(long)]
    pub fail_under: Option<f64>,
}
