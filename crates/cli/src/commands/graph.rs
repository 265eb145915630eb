//! `flowmem graph check` and `flowmem graph render`.

use anyhow::Context;
use flowmem_exec::{ToolCatalog, load_graph, to_dot, to_mermaid, violations};

use crate::args::{GraphCheckArgs, GraphCommand, GraphRenderArgs, RenderFormat};
use crate::commands::ExitStatus;
use crate::printer::Printer;

/// Runs a `flowmem graph` subcommand.
pub fn run(command: &GraphCommand, printer: &Printer) -> anyhow::Result<ExitStatus> {
    match command {
        GraphCommand::Check(args) => check(args, printer),
        GraphCommand::Render(args) => render(args, printer),
    }
}

fn check(args: &GraphCheckArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let graph = load_graph(&args.file)?;
    let catalog = if args.tools.is_empty() { ToolCatalog::Unchecked } else { ToolCatalog::Known(&args.tools) };
    let found = violations(&graph, catalog);
    let file = args.file.display();
    if printer.json {
        let items: Vec<serde_json::Value> = found
            .iter()
            .map(|violation| serde_json::json!({"node": violation.node(), "message": violation.to_string()}))
            .collect();
        printer.json_result(&serde_json::json!({
            "file": file.to_string(),
            "valid": found.is_empty(),
            "tools_checked": !args.tools.is_empty(),
            "violations": items,
        }))?;
    } else {
        for violation in &found {
            printer.result(&format!("{file}: {violation}"))?;
        }
    }
    if args.tools.is_empty() {
        printer.info("note: tool binding not checked; name the available tools with --tool");
    }
    if found.is_empty() {
        printer.info(&format!("{file}: valid ({} nodes, {} edges)", graph.nodes.len(), graph.edges.len()));
        return Ok(ExitStatus::Success);
    }
    printer.info(&format!("{file}: {} violations", found.len()));
    Ok(ExitStatus::Failure)
}

fn render(args: &GraphRenderArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let graph = load_graph(&args.file).with_context(|| format!("cannot render `{}`", args.file.display()))?;
    let text = match args.format {
        RenderFormat::Mermaid => to_mermaid(&graph),
        RenderFormat::Dot => to_dot(&graph),
    };
    printer.result(text.trim_end())?;
    Ok(ExitStatus::Success)
}
