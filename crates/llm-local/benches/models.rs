//! The two embedded chat models side by side: load time, resident memory, prefill and
//! greedy decoding speed, and one constrained tool call, for SmolLM2-135M-Instruct and
//! Gemma 3 270M (each skipped when its file is missing).
//!
//! Run in release, with the machine otherwise quiet:
//!     cargo bench -p flowmem-llm-local --bench models

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::{Duration, Instant};

use flowmem_llm::{ChatRequest, Message, Purpose, ToolChoice, ToolDefinition};
use flowmem_llm_local::bench::{DecodePath, time_decode, time_prefill};
use flowmem_llm_local::{LocalConfig, LocalModel};

const ROUNDS: usize = 3;
const GENERATE: usize = 64;

fn rss_mb() -> Option<f64> {
    Some(flowmem_testsupport::process_memory_kib(None, "VmRSS")? / 1024.0)
}

fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn main() {
    println!("threads {}", candle_core::utils::get_num_threads());
    for config in [LocalConfig::standard(), LocalConfig::gemma3()] {
        let name = config.name.clone();
        if !config.path.is_file() {
            println!("{name}: model file `{}` is missing; skipped", config.path.display());
            continue;
        }
        let before = rss_mb().unwrap_or(0.0);
        let model = LocalModel::new(config);
        let started = Instant::now();
        model.load().expect("model loads");
        let load = started.elapsed();
        let resident = rss_mb().unwrap_or(0.0) - before;

        let mut prefill = Duration::MAX;
        for _ in 0..ROUNDS {
            prefill = prefill.min(time_prefill(&model, 512, true).expect("prefill"));
        }
        let mut decode = Duration::MAX;
        for _ in 0..ROUNDS {
            decode = decode.min(time_decode(&model, 32, GENERATE, DecodePath::Quantised).expect("decode").generate);
        }

        let mut request = ChatRequest::new(
            vec![Message::system("You are an assistant that calls tools."), Message::user("Weather in Oslo, celsius?")],
            Purpose::Agent,
        );
        request.tools = vec![ToolDefinition {
            name: "get_weather".to_owned(),
            description: "Get the current weather forecast for a city.".to_owned(),
            parameters: serde_json::json!({"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
            }, "required": ["city", "unit"]}),
        }];
        request.tool_choice = ToolChoice::Required;
        let started = Instant::now();
        let reply = model.chat_blocking(&request).expect("tool call").response;
        let call = started.elapsed();

        println!(
            "{name}: load {:.2} s, +{resident:.0} MB resident; prefill 512 tokens {:.1} tok/s ({:.3} s, best of {ROUNDS}); \
             decoding {:.1} tok/s ({GENERATE} tokens after 32, best of {ROUNDS}); constrained tool call {:.2} s ({} prompt + {} completion tokens)",
            load.as_secs_f64(),
            per_sec(512, prefill),
            prefill.as_secs_f64(),
            per_sec(GENERATE, decode),
            call.as_secs_f64(),
            reply.usage.prompt_tokens,
            reply.usage.completion_tokens,
        );
    }
}
