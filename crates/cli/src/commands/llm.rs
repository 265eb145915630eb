//! `flowmem llm chat`: one call to a configured model, to check a configuration.

use anyhow::Context;
use flowmem_llm::{ChatRequest, Message, ModelChoice, Purpose};
use serde::Serialize;

use crate::args::{LlmArgs, LlmChatArgs, LlmCommand};
use crate::commands::ExitStatus;
use crate::commands::common::block_on;
use crate::printer::Printer;
use crate::session::{CacheUse, Session, SessionSettings, ToolsUse};
use crate::settings::{Config, ModelRoles};

/// Runs an `llm` subcommand.
pub fn run(args: &LlmArgs, printer: &Printer) -> anyhow::Result<ExitStatus> {
    match &args.command {
        LlmCommand::Chat(chat) => block_on(run_chat(chat, printer)),
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
    let settings = SessionSettings {
        config: Config::load(&args.config)?,
        models: ModelRoles::new(&args.model),
        tools: ToolsUse::None,
        prompts: None,
        cache: CacheUse::Off,
        state: None,
    };
    let session = Session::open(settings).await?;
    let choice = session.model_choice(Purpose::Other).await?;
    let backend = match &choice {
        ModelChoice::Local(_) => "local",
        _ => "openai",
    };
    let model = session.build_model(choice, None)?;
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
        let output = ChatOutput {
            version: 1,
            backend,
            model: model.name(),
            reply: &reply,
            accounting: session.accounting().snapshot(),
        };
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
