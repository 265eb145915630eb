//! Timing probes for `benches/local.rs`. Not a stable API.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::constrain::prepare;
use crate::engine::DecodeParams;
use crate::error::LocalError;
pub use crate::llama::DecodePath;
use crate::model::LocalModel;

/// Prefill and generation timings at one context length.
#[derive(Debug, Clone, Copy)]
pub struct DecodeTiming {
    /// Tokens prefilled.
    pub context: usize,
    /// Time to prefill them from an empty KV cache, without the prefix cache.
    pub prefill: Duration,
    /// Tokens generated after the context.
    pub generated: usize,
    /// Time to generate them one by one (greedy, never stopping early).
    pub generate: Duration,
}

/// Constrained against unconstrained decoding from the same prompt.
#[derive(Debug, Clone, Copy)]
pub struct ConstraintTiming {
    /// Tokens chosen by the model under the grammar (excluding forced tokens).
    pub constrained_sampled: usize,
    /// All tokens of the constrained output, forced ones included.
    pub constrained_tokens: usize,
    /// Wall time of the constrained decoding.
    pub constrained: Duration,
    /// Time spent computing masks and picking among allowed tokens.
    pub mask: Duration,
    /// Time spent in forward passes during constrained decoding.
    pub constrained_forward: Duration,
    /// Tokens generated without the grammar.
    pub free_tokens: usize,
    /// Wall time of the unconstrained decoding.
    pub free: Duration,
}

/// A fixed English text of at least `n` tokens, cut to exactly `n`: the prompt every
/// probe here runs, so another engine can be given the very same token ids.
///
/// # Errors
///
/// Load and tokenizer errors.
pub fn context_tokens(model: &LocalModel, n: usize) -> Result<Vec<u32>, LocalError> {
    let paragraph = "The workflow memory stores procedures that agents learned from earlier runs. \
        Each procedure lists the tools to call, in order, with the arguments they need. ";
    let mut text = String::from("<|im_start|>user\n");
    let mut tokens = model.tokenize(&text)?;
    while tokens.len() < n {
        text.push_str(paragraph);
        tokens = model.tokenize(&text)?;
    }
    tokens.truncate(n);
    Ok(tokens)
}

/// Prefills `context` tokens, then generates `generate` tokens greedily, one forward
/// pass per token on `path`.
///
/// # Errors
///
/// Load and inference errors.
pub fn time_decode(
    model: &LocalModel,
    context: usize,
    generate: usize,
    path: DecodePath,
) -> Result<DecodeTiming, LocalError> {
    let tokens = context_tokens(model, context)?;
    let loaded = model.loaded_for_bench()?;
    loaded.engine.with_lock(|runner| {
        let started = Instant::now();
        let mut session = runner.start_cold(&tokens)?;
        let prefill = started.elapsed();
        let started = Instant::now();
        for _ in 0..generate {
            let next = runner.argmax_text_token(&session);
            runner.feed_on(Some(path), &mut session, &[next])?;
        }
        Ok(DecodeTiming { context, prefill, generated: generate, generate: started.elapsed() })
    })
}

/// Prefill of `context` tokens from an empty KV cache, without the prefix cache: in
/// the block-aligned pieces every request uses (`in_pieces`), or as one batch, which
/// is what the pieces cost.
///
/// # Errors
///
/// Load and inference errors.
pub fn time_prefill(model: &LocalModel, context: usize, in_pieces: bool) -> Result<Duration, LocalError> {
    let tokens = context_tokens(model, context)?;
    let loaded = model.loaded_for_bench()?;
    loaded.engine.with_lock(|runner| {
        let started = Instant::now();
        if in_pieces {
            runner.start_cold(&tokens)?;
        } else {
            let mut session = runner.empty_session();
            runner.feed(&mut session, &tokens)?;
        }
        Ok(started.elapsed())
    })
}

/// Time to the first token of a conversation step that appends `turn` tokens to
/// `history` tokens already seen: cold, then through the prefix cache after the
/// history was served once. Returns `(cold, cached, tokens reused)`.
///
/// # Errors
///
/// Load and inference errors.
pub fn time_cached_step(
    model: &LocalModel,
    history: usize,
    turn: usize,
) -> Result<(Duration, Duration, usize), LocalError> {
    let tokens = context_tokens(model, history + turn)?;
    let loaded = model.loaded_for_bench()?;
    loaded.engine.with_lock(|runner| {
        let started = Instant::now();
        let cold = runner.start_cold(&tokens)?;
        runner.argmax_text_token(&cold);
        let cold_time = started.elapsed();
        runner.start(&tokens[..history])?;
        let started = Instant::now();
        let warm = runner.start(&tokens)?;
        runner.argmax_text_token(&warm.session);
        Ok((cold_time, started.elapsed(), warm.reused))
    })
}

/// Decodes from `prompt` (a user message) once under `schema` and once freely, both
/// from the same prefilled state, with at most `max_tokens` each.
///
/// # Errors
///
/// Load, grammar and inference errors.
pub fn time_constraint(
    model: &LocalModel,
    prompt: &str,
    schema: &Value,
    max_tokens: usize,
) -> Result<ConstraintTiming, LocalError> {
    let tokens = model.tokenize(&format!("<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"))?;
    let loaded = model.loaded_for_bench()?;
    let engine = &loaded.engine;
    engine.with_lock(|runner| {
        let session = runner.start_cold(&tokens)?;
        let params = DecodeParams { max_tokens, temperature: 0.0, seed: 0 };

        let matcher = engine.constrainer.matcher(prepare(schema), "the benchmark schema")?;
        let started = Instant::now();
        let constrained =
            runner.decode(session.clone(), params, Some(matcher), &std::sync::atomic::AtomicBool::new(false))?;
        let constrained_time = started.elapsed();

        let started = Instant::now();
        let free = runner.decode_ignoring_eos(session, max_tokens)?;
        let free_time = started.elapsed();
        Ok(ConstraintTiming {
            constrained_sampled: constrained.sampled,
            constrained_tokens: constrained.tokens.len(),
            constrained: constrained_time,
            mask: constrained.mask_time,
            constrained_forward: constrained.forward_time,
            free_tokens: free,
            free: free_time,
        })
    })
}
