//! `flowmem llm chat`: one call to a configured model, to check a configuration.

use anyhow::Context;
use flowmem_llm::{Accounting, ChatRequest, Message, ModelChoice, Purpose};
use serde::Serialize;

use crate::args::{LlmArgs, LlmChatArgs, LlmCommand};
use crate::commands::ExitStatus;
use crate::printer::Printer;
use crate::settings;

/// Runs an `llm` subcommand.
pub fn run(args: &LlmArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    match &args.command {
        LlmCommand::Chat(chat) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(run_chat(chat, printer))
        }
    }
}

/// `--json` output of `flowmem llm chat` (format version 1).
#[derive(Serialize)]
struct ChatOutput<'a> {
    version: u32,
    /// `openai` (an OpenAI-compatible endpoint) or `local` (the embedded model).
    backend: &'static str,
    model: &'a str,
    reply: &'a flowmem_llm::ChatResponse,
    accounting: flowmem_llm::AccountingSnapshot,
}

async fn run_chat(args: &LlmChatArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let settings = settings::llm_settings(args.config.as_deref())?;
    let accounting = Accounting::new();
    let choice = settings.resolve(Purpose::Other, args.model.as_deref(), &flowmem_llm::std_env).await?;
    let backend = match &choice {
        ModelChoice::Local(_) => "local",
        _ => "openai",
    };
    let model = settings::build_model(choice, None, &accounting)?;
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(Message::system(system.clone()));
    }
    messages.push(Message::user(args.prompt.clone()));
    let mut request = ChatRequest::new(messages, Purpose::Other);
    request.temperature = args.temperature;
    request.max_tokens = args.max_tokens;
    let reply = model.chat(&request).await.with_context(|| format!("asking model `{}`", model.name()))?;
    if printer.json {
        let output =
            ChatOutput { version: 1, backend, model: model.name(), reply: &reply, accounting: accounting.snapshot() };
        printer.json_result(&output)?;
        return Ok(ExitStatus::Success);
    }
    if let Some(content) = &reply.content {
        printer.result(content)?;
    }
    for call in &reply.tool_calls {
        printer.result(&format!("tool call {}({})", call.name, serde_json::Value::Object(call.arguments.clone())))?;
    }
    printer.info(&format!(
        "model `{}`: {} prompt + {} completion tokens in {:.2} s",
        model.name(),
        reply.usage.prompt_tokens,
        reply.usage.completion_tokens,
        reply.latency.as_secs_f64(),
    ));
    Ok(ExitStatus::Success)
}
