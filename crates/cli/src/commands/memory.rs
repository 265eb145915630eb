//! `flowmem memory`: list, show, search, curate (retire, restore, describe, delete),
//! export, import and prune a workflow memory, and
//! measure its retrieval quality (`eval-retrieval`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use flowmem_memory::render::{self, read_jsonl, to_graph, write_jsonl};
use flowmem_memory::{
    AddOutcome, MemoryStore, PrunePolicy, RetrievalEvalConfig, RetrievalReport, StoreConfig, eval_retrieval,
};
use flowmem_model::{Provenance, Scope, Workflow, WorkflowStats};

use flowmem_db::DbLocation;

use crate::args::{ConfigArgs, ExchangeFormat, MemoryArgs, MemoryCommand, RetrievalArg, ScopeArgs};
use crate::commands::ExitStatus;
use crate::commands::common::block_on;
use crate::commands::common::refuse_outputs_that_are_inputs;
use crate::printer::Printer;
use crate::session::{chosen_retriever, retriever};
use crate::settings::{Config, DEFAULT_RETRIEVAL, asked_retrieval, retrieval_mode, scope_filter, stored_scope};

/// Runs one `flowmem memory` command.
pub fn run(args: &MemoryArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    if let MemoryCommand::Migrate { from, to } = &args.command {
        return migrate(from, to, printer);
    }
    let Some(path) = &args.memory else {
        let message = "no memory database given\nhint: pass `--memory FILE` or set FLOWMEM_MEMORY";
        return Err(crate::commands::common::MissingFlag { flag: "--memory", message }.into());
    };
    let shared = DbLocation::parse(path.as_os_str()).is_postgres();
    if !matches!(args.command, MemoryCommand::Import { .. }) && !shared && !path.exists() {
        return Err(crate::commands::common::NoMemory { path: path.clone() }.into());
    }
    if matches!(args.command, MemoryCommand::Check) {
        return check(path, printer);
    }
    let mut store = MemoryStore::open(path, StoreConfig::standard())?;
    match &args.command {
        MemoryCommand::List { scope, all } => list(&store, &scope_filter(scope), *all, printer),
        MemoryCommand::Retire { id, reason } => {
            store.retire(id, reason)?;
            curated(id, "retired", printer)
        }
        MemoryCommand::Restore { id } => {
            store.restore(id)?;
            curated(id, "restored", printer)
        }
        MemoryCommand::Describe { id, description } => {
            store.set_description(id, description)?;
            curated(id, "described", printer)
        }
        MemoryCommand::Delete { id } => {
            store.delete(id)?;
            curated(id, "deleted", printer)
        }
        MemoryCommand::Show { id, graph, tree } => show(&store, id, *graph, *tree, printer),
        MemoryCommand::Search { query, limit, retrieval, scope, config } => {
            let search = Search { query, limit: *limit, retrieval: *retrieval, scope, config };
            block_on(run_search(&mut store, search, printer))
        }
        MemoryCommand::EvalRetrieval { records, k, retrieval, scope, config } => {
            block_on(run_eval_retrieval(&mut store, records, *k, retrieval, scope, config, printer))
        }
        MemoryCommand::Export { format, output, scope } => {
            if let Some(output) = output {
                refuse_outputs_that_are_inputs(&[output], &[path])?;
            }
            export(&store, *format, output.as_deref(), &scope_filter(scope), printer)
        }
        MemoryCommand::Import { input, format, scope } => {
            import(&mut store, input, *format, stored_scope(scope), printer)
        }
        MemoryCommand::Check => check(path, printer),
        MemoryCommand::Migrate { .. } => unreachable!("handled before the store opens"),
        MemoryCommand::Prune { max_per_scope, min_success_rate, min_uses } => {
            let policy =
                PrunePolicy { max_per_scope: *max_per_scope, min_success_rate: *min_success_rate, min_uses: *min_uses };
            prune(&mut store, &policy, printer)
        }
    }
}

/// `flowmem memory check`: exit 1 when the file is damaged. Runs on the file as it is:
/// nothing is migrated or marked first.
fn check(path: &Path, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let report = MemoryStore::check(path)?;
    if printer.json {
        printer.json_result(&serde_json::json!({
            "version": 1,
            "file": report.path,
            "ok": report.problems.is_empty(),
            "workflows": report.workflows,
            "problems": report.problems,
        }))?;
    } else if report.problems.is_empty() {
        let workflows = report.workflows.map_or(String::new(), |n| format!(" ({n} workflows)"));
        printer.result(&format!("`{}`: ok{workflows}", report.path.display()))?;
    } else {
        printer.result(&format!("`{}`: corrupt ({} problems):", report.path.display(), report.problems.len()))?;
        for problem in &report.problems {
            printer.result(&format!("  {problem}"))?;
        }
    }
    Ok(if report.problems.is_empty() { ExitStatus::Success } else { ExitStatus::Failure })
}

/// `flowmem memory migrate`: copies `from` into the empty memory `to`, then checks that
/// both list the same workflows.
fn migrate(from: &Path, to: &Path, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let (shown_from, shown_to) =
        (DbLocation::parse(from.as_os_str()).display(), DbLocation::parse(to.as_os_str()).display());
    if !DbLocation::parse(from.as_os_str()).is_postgres() && !from.exists() {
        return Err(crate::commands::common::NoMemory { path: PathBuf::from(&shown_from) }.into());
    }
    if DbLocation::parse(from.as_os_str()) == DbLocation::parse(to.as_os_str()) {
        anyhow::bail!("`--from` and `--to` name the same memory `{shown_from}`\nhint: copy into another, empty memory");
    }
    let source = MemoryStore::open(from, StoreConfig::standard())?;
    let mut target = MemoryStore::open(to, StoreConfig::standard())?;
    let copied = source.copy_into(&mut target)?;
    // What an export of each would hold must agree.
    let (before, after) = (source.list_all(&Scope::default())?, target.list_all(&Scope::default())?);
    if before != after {
        anyhow::bail!("the copy in `{shown_to}` differs from `{shown_from}`; it was written, so inspect or drop it");
    }
    if printer.json {
        printer
            .json_result(&serde_json::json!({"version": 1, "from": shown_from, "to": shown_to, "copied": copied}))?;
    } else {
        printer.result(&format!("copied {copied} workflows from `{shown_from}` to `{shown_to}`"))?;
    }
    Ok(ExitStatus::Success)
}

fn scope_label(scope: &Scope) -> String {
    match (&scope.site, &scope.domain) {
        (Some(site), Some(domain)) => format!("{domain}@{site}"),
        (Some(site), None) => format!("@{site}"),
        (None, Some(domain)) => domain.clone(),
        (None, None) => "-".to_owned(),
    }
}

fn summary_line(workflow: &Workflow) -> String {
    let WorkflowStats { retrieved, used_success, used_failure } = workflow.stats;
    let retired = match &workflow.retired {
        Some(retired) if retired.reason.is_empty() => format!("[retired {}] ", retired.at),
        Some(retired) => format!("[retired {}: {}] ", retired.at, retired.reason),
        None => String::new(),
    };
    format!(
        "{}  {:<10} {} steps  retrieved {retrieved}, used {used_success}✓/{used_failure}✗  {retired}{}",
        workflow.id,
        scope_label(&workflow.scope),
        workflow.steps.len(),
        workflow.description
    )
}

/// Reports a curation that succeeded: `{"id", "action"}` with `--json`.
fn curated(id: &str, action: &str, printer: &Printer) -> anyhow::Result<ExitStatus> {
    if printer.json {
        printer.json_result(&serde_json::json!({"id": id, "action": action}))?;
    } else {
        printer.result(&format!("{id}: {action}"))?;
    }
    Ok(ExitStatus::Success)
}

fn list(store: &MemoryStore, scope: &Scope, all: bool, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let workflows = if all { store.list_all(scope)? } else { store.list(scope)? };
    if printer.json {
        printer.json_result(&workflows)?;
    } else {
        for workflow in &workflows {
            printer.result(&summary_line(workflow))?;
        }
        printer.info(&format!("{} workflows", workflows.len()));
    }
    Ok(ExitStatus::Success)
}

fn show(store: &MemoryStore, id: &str, graph: bool, tree: bool, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let workflow = store.get(id)?;
    let provenances = store.provenances(id)?;
    if printer.json {
        let mut doc = serde_json::json!({"workflow": workflow, "provenances": provenances});
        if graph {
            doc["graph"] = serde_json::to_value(to_graph(&workflow))?;
        }
        if tree {
            let all = store.list(&Scope::default())?;
            let lines: Vec<serde_json::Value> = flowmem_memory::composition_tree(&all, Some(id))
                .iter()
                .map(|line| serde_json::json!({"depth": line.depth, "id": line.workflow.id, "description": line.workflow.description}))
                .collect();
            doc["tree"] = serde_json::Value::Array(lines);
        }
        printer.json_result(&doc)?;
        return Ok(ExitStatus::Success);
    }
    printer.result(&summary_line(&workflow))?;
    for (idx, step) in workflow.steps.iter().enumerate() {
        let args = flowmem_model::canonical_json(&serde_json::Value::Object(step.action.args.clone()));
        printer.result(&format!("  {}. {}({args})", idx + 1, step.action.tool))?;
        if !step.state.is_empty() {
            printer.result(&format!("     state: {}", step.state))?;
        }
        if !step.reasoning.is_empty() {
            printer.result(&format!("     reasoning: {}", step.reasoning))?;
        }
    }
    for provenance in &provenances {
        printer.result(&provenance_line(provenance))?;
    }
    if graph {
        printer.result(&serde_json::to_string_pretty(&to_graph(&workflow))?)?;
    }
    if tree {
        show_tree(store, id, printer)?;
    }
    Ok(ExitStatus::Success)
}

/// Prints the composition tree below workflow `id`, one indented line per workflow.
fn show_tree(store: &MemoryStore, id: &str, printer: &Printer) -> anyhow::Result<()> {
    let all = store.list(&Scope::default())?;
    let lines = flowmem_memory::composition_tree(&all, Some(id));
    printer.result("composition:")?;
    for line in &lines {
        let mark = if line.repeated { " (cycle)" } else { "" };
        printer.result(&format!(
            "{}{}  {}{mark}",
            "  ".repeat(line.depth + 1),
            line.workflow.id,
            line.workflow.description
        ))?;
    }
    Ok(())
}

fn provenance_line(provenance: &Provenance) -> String {
    let mut line = format!("  from {} induction", provenance.inducer);
    if let Some(model) = &provenance.model {
        line.push_str(&format!(" by {model}"));
    }
    if let Some(prompt) = &provenance.prompt_version {
        line.push_str(&format!(" with prompt {prompt}"));
    }
    if let Some(created) = &provenance.created_at {
        line.push_str(&format!(" at {created}"));
    }
    line.push_str(&format!(" of [{}]", provenance.trajectory_ids.join(", ")));
    line
}

/// The flags of `flowmem memory search`.
struct Search<'a> {
    query: &'a str,
    limit: usize,
    retrieval: Option<RetrievalArg>,
    scope: &'a ScopeArgs,
    config: &'a ConfigArgs,
}

async fn run_search(store: &mut MemoryStore, args: Search<'_>, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let config = Config::load(args.config)?;
    let asked = asked_retrieval(args.retrieval, config.memory()?.retrieval);
    let retriever = chosen_retriever(&config, asked, DEFAULT_RETRIEVAL)?;
    let embedded = retriever.prepare(store).await?;
    if embedded > 0 {
        printer.info(&format!("embedded {embedded} workflows that had no vector of the embedding model"));
    }
    let retrieval = retriever.search(store, args.query, &scope_filter(args.scope), args.limit).await?;
    let hits = &retrieval.hits;
    if printer.json {
        printer.json_result(hits)?;
    } else {
        for hit in hits {
            let parts: Vec<String> =
                [hit.bm25.map(|s| format!("bm25 {s:.3}")), hit.similarity.map(|s| format!("cos {s:.3}"))]
                    .into_iter()
                    .flatten()
                    .collect();
            let detail = if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) };
            printer.result(&format!("{:>7.3}{detail}  {}", hit.score, summary_line(&hit.workflow)))?;
        }
        printer.info(&format!("{} hits by {}", hits.len(), retrieval.mode));
    }
    Ok(if hits.is_empty() { ExitStatus::Failure } else { ExitStatus::Success })
}

async fn run_eval_retrieval(
    store: &mut MemoryStore,
    records: &Path,
    k: usize,
    modes: &[RetrievalArg],
    scope: &ScopeArgs,
    config: &ConfigArgs,
    printer: &Printer,
) -> anyhow::Result<ExitStatus> {
    if k == 0 {
        anyhow::bail!("-k must be at least 1");
    }
    let config = Config::load(config)?;
    let records = flowmem_model::read_records(records)?;
    let mut retrievers = Vec::with_capacity(modes.len());
    for &mode in modes {
        let retriever = retriever(&config, retrieval_mode(mode))?;
        let embedded = retriever.prepare(store).await?;
        if embedded > 0 {
            printer.info(&format!("embedded {embedded} workflows that had no vector of the embedding model"));
        }
        retrievers.push(retriever);
    }
    let cfg = RetrievalEvalConfig { k, scope: scope_filter(scope) };
    let report = eval_retrieval(store, &retrievers, &records, &cfg).await?;
    if printer.json {
        printer.json_result(&report)?;
    } else {
        for line in report_table(&report) {
            printer.result(&line)?;
        }
    }
    Ok(if report.n_records == 0 { ExitStatus::Failure } else { ExitStatus::Success })
}

/// The report as a Markdown table, one row per mode, with the counts below.
fn report_table(report: &RetrievalReport) -> Vec<String> {
    let k = report.k;
    let mut lines = vec![
        format!("| retrieval | TC@1 | recall@1 | recall@{k} | MRR@{k} | embed ms | search ms |"),
        "|---|---|---|---|---|---|---|".to_owned(),
    ];
    for mode in &report.modes {
        lines.push(format!(
            "| {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} |",
            mode.mode,
            mode.mean_tc_top1,
            mode.recall_at_1,
            mode.recall_at_k,
            mode.mrr_at_k,
            mode.mean_embed_ms,
            mode.mean_search_ms
        ));
    }
    lines.push(String::new());
    lines.push(format!(
        "{} records with a reference tool log ({} without, left out); {} have a stored workflow of the reference's tool sequence (the bound on recall)",
        report.n_records, report.n_without_reference, report.n_reachable
    ));
    lines
}

fn export(
    store: &MemoryStore,
    format: ExchangeFormat,
    output: Option<&Path>,
    scope: &Scope,
    printer: &Printer,
) -> anyhow::Result<ExitStatus> {
    // JSONL keeps everything, retirements included; AWM text has no place for them, so
    // it holds the workflows in use.
    let workflows = match format {
        ExchangeFormat::Jsonl => store.list_all(scope)?,
        ExchangeFormat::Text => store.list(scope)?,
    };
    let mut buffer: Vec<u8> = Vec::new();
    match format {
        ExchangeFormat::Jsonl => write_jsonl(&workflows, &mut buffer)?,
        ExchangeFormat::Text => {
            let prompts = render::prompts()?;
            buffer.extend_from_slice(render::prompt_text(&prompts, &workflows)?.text.as_bytes());
        }
    }
    match output {
        Some(path) => flowmem_model::write_atomic(path, &buffer)?,
        None => std::io::stdout().lock().write_all(&buffer)?,
    }
    printer.info(&format!("exported {} workflows", workflows.len()));
    Ok(ExitStatus::Success)
}

fn import(
    store: &mut MemoryStore,
    input: &PathBuf,
    format: ExchangeFormat,
    scope: Option<Scope>,
    printer: &Printer,
) -> anyhow::Result<ExitStatus> {
    let mut errors: Vec<String> = Vec::new();
    let mut workflows = match format {
        ExchangeFormat::Jsonl => {
            let file = crate::commands::common::open_input(input)?;
            let (workflows, bad) = read_jsonl(&mut std::io::BufReader::new(file))?;
            errors.extend(
                bad.iter().map(|err| format!("`{}:{}`: not a workflow: {}", input.display(), err.line, err.source)),
            );
            workflows
        }
        ExchangeFormat::Text => {
            let text = std::fs::read_to_string(input).with_context(|| format!("cannot read `{}`", input.display()))?;
            let (parsed, bad) = render::parse_text(&text);
            errors.extend(bad.iter().map(|err| format!("`{}:{}`: {}", input.display(), err.line, err.message)));
            parsed
                .into_iter()
                .map(|tw| Workflow {
                    id: String::new(),
                    description: tw.description,
                    steps: tw.steps,
                    scope: Scope::default(),
                    provenance: Provenance {
                        inducer: "import".to_owned(),
                        trajectory_ids: Vec::new(),
                        model: None,
                        prompt_version: None,
                        created_at: None,
                    },
                    stats: WorkflowStats::default(),
                    composed_of: Vec::new(),
                    retired: None,
                })
                .collect()
        }
    };
    if let Some(scope) = scope {
        for workflow in &mut workflows {
            workflow.scope = scope.clone();
        }
    }
    // Skip, and report, workflows the store refuses, rather than losing the whole file.
    workflows.retain(|workflow| {
        let keep = !workflow.steps.is_empty();
        if !keep {
            errors.push(format!("`{}`: workflow `{}` has no steps", input.display(), workflow.description));
        }
        keep
    });
    let outcomes = store.add_all(&workflows)?;
    let n_merged = outcomes.iter().filter(|o| matches!(o, AddOutcome::Merged { .. })).count();
    if printer.json {
        printer.json_result(&serde_json::json!({"added": outcomes, "errors": errors}))?;
    } else {
        for err in &errors {
            printer.warn(&format!("skipped {err}"));
        }
        printer.info(&format!(
            "imported {} workflows ({} new, {n_merged} merged), {} skipped",
            outcomes.len(),
            outcomes.len() - n_merged,
            errors.len()
        ));
    }
    Ok(if outcomes.is_empty() { ExitStatus::Failure } else { ExitStatus::Success })
}

fn prune(store: &mut MemoryStore, policy: &PrunePolicy, printer: &Printer) -> anyhow::Result<ExitStatus> {
    if policy.max_per_scope.is_none() && policy.min_success_rate.is_none() {
        anyhow::bail!("nothing to prune by\nhint: pass `--max-per-scope N` and/or `--min-success-rate R`");
    }
    let removed = store.prune(policy)?;
    if printer.json {
        printer.json_result(&serde_json::json!({"removed": removed}))?;
    } else {
        for id in &removed {
            printer.result(&format!("removed {id}"))?;
        }
        printer.info(&format!("removed {} workflows", removed.len()));
    }
    Ok(ExitStatus::Success)
}
