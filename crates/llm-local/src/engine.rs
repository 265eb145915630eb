//! The model runtime: loading, prefill through the prefix cache, and the decoding
//! loop, optionally constrained by a grammar.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use candle_transformers::generation::{LogitsProcessor, Sampling};
use llguidance::Matcher;

use crate::constrain::Constrainer;
use crate::error::LocalError;
use crate::gemma::Gemma3;
use crate::llama::{DecodePath, KvCache, Llama, MAX_SEQ_LEN};
use crate::prefix::{PrefixCacheStats, PrefixTree, pieces};
use crate::prompt::ChatFormat;
use crate::tokenizer::GgufTokenizer;

/// SmolLM2's `<|endoftext|>`, the GGUF's unknown/document-end token.
pub(crate) const ENDOFTEXT: u32 = 0;
/// SmolLM2's `<|im_end|>`, the end of a ChatML turn and the model's EOS.
pub(crate) const IM_END: u32 = 2;

/// The forward pass of the file's architecture.
enum Network {
    /// `llama` (SmolLM2).
    Llama(Llama),
    /// `gemma3` (Gemma 3 270M).
    Gemma3(Gemma3),
}

impl Network {
    fn new_cache(&self) -> KvCache {
        match self {
            Network::Llama(m) => m.new_cache(),
            Network::Gemma3(m) => m.new_cache(),
        }
    }

    fn forward_on(
        &self,
        path: Option<DecodePath>,
        tokens: &[u32],
        cache: &mut KvCache,
    ) -> candle_core::Result<Vec<f32>> {
        match (self, path) {
            (Network::Llama(m), Some(path)) => m.forward_on(path, tokens, cache),
            (Network::Llama(m), None) => m.forward(tokens, cache),
            // One path serves both.
            (Network::Gemma3(m), _) => m.forward(tokens, cache),
        }
    }
}

/// How prefill's dense copy of the weights is held. Prefill is a matrix-matrix product,
/// for candle's GEMM on weights dequantised once at load; decoding reads the file's own
/// Q4_1/Q8_0 blocks either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// F16 weights (about 270 MB), multiplied in F16.
    F16,
    /// F32 weights (about 540 MB).
    F32,
}

/// The loaded model: weights, tokenizer, grammar machinery and the prefix cache.
pub(crate) struct Engine {
    pub(crate) tokenizer: Arc<GgufTokenizer>,
    pub(crate) constrainer: Constrainer,
    /// How prompts are written for this model.
    pub(crate) format: ChatFormat,
    /// The tokens that end a reply, with their names; the first is the end of a turn.
    stops: Vec<(u32, &'static str)>,
    network: Network,
    device: Device,
    /// The prefix cache. Its lock also serialises inference: two forward passes at
    /// once would only thrash the cores.
    state: Mutex<PrefixTree>,
}

/// A model state part way through a sequence: the KV cache, the position, and the
/// logits for the next token.
#[derive(Clone)]
pub(crate) struct Session {
    cache: KvCache,
    logits: Vec<f32>,
}

/// Decoding parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecodeParams {
    pub(crate) max_tokens: usize,
    pub(crate) temperature: f32,
    pub(crate) seed: u64,
}

/// Why decoding stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// A stop token (`<|im_end|>`, `<end_of_turn>`, …), or the grammar is complete.
    Stop,
    /// The token limit.
    Length,
}

/// The tokens one decoding produced.
#[derive(Debug, Clone)]
pub(crate) struct Decoded {
    pub(crate) tokens: Vec<u32>,
    pub(crate) finish: Finish,
    /// The stop token, if one ended generation.
    pub(crate) stop_token: Option<u32>,
    /// Tokens the model chose (the rest were forced by the grammar).
    pub(crate) sampled: usize,
    /// Time spent computing grammar masks and picking tokens under them.
    pub(crate) mask_time: Duration,
    /// Time spent in forward passes.
    pub(crate) forward_time: Duration,
}

impl Engine {
    /// Loads the GGUF at `path`, with a prefix cache of at most `prefix_cache_bytes`
    /// (0: off). The architecture (`llama` or `gemma3`) comes from the file.
    pub(crate) fn load(path: &Path, precision: Precision, prefix_cache_bytes: usize) -> Result<Engine, LocalError> {
        if !path.is_file() {
            return Err(LocalError::ModelMissing { path: path.to_owned() });
        }
        let load_err = |e: candle_core::Error| LocalError::Load { path: path.to_owned(), source: Box::new(e) };
        let device = Device::Cpu;
        let mut file = File::open(path).map_err(|e| LocalError::Load { path: path.to_owned(), source: Box::new(e) })?;
        let content = gguf_file::Content::read(&mut file).map_err(load_err)?;
        let key = "general.architecture";
        let architecture = content
            .metadata
            .get(key)
            .ok_or_else(|| LocalError::Gguf { key: key.to_owned(), problem: "missing".to_owned() })?
            .to_string()
            .map_err(|e| LocalError::Gguf { key: key.to_owned(), problem: e.to_string() })?
            .clone();
        if architecture != "llama" && architecture != "gemma3" {
            return Err(LocalError::Architecture { path: path.to_owned(), architecture });
        }
        let tokenizer = Arc::new(GgufTokenizer::from_gguf(&content)?);
        let control = |name: &'static str| match tokenizer.control_id(name) {
            Some(id) => Ok((id, name)),
            None => Err(LocalError::Gguf {
                key: "tokenizer.ggml.tokens".to_owned(),
                problem: format!("has no control token `{name}`"),
            }),
        };
        let dtype = match precision {
            Precision::F16 => DType::F16,
            Precision::F32 => DType::F32,
        };
        let (network, format, stops) = match architecture.as_str() {
            "llama" => {
                let llama = Llama::from_gguf(&content, &mut file, dtype, &device).map_err(load_err)?;
                (Network::Llama(llama), ChatFormat::ChatMl, vec![(IM_END, "<|im_end|>"), (ENDOFTEXT, "<|endoftext|>")])
            }
            "gemma3" => {
                let gemma = Gemma3::from_gguf(&content, &mut file, dtype, &device).map_err(load_err)?;
                (Network::Gemma3(gemma), ChatFormat::Gemma, vec![control("<end_of_turn>")?, control("<eos>")?])
            }
            _ => return Err(LocalError::Architecture { path: path.to_owned(), architecture }),
        };
        let stop_ids: Vec<u32> = stops.iter().map(|&(id, _)| id).collect();
        let constrainer = Constrainer::new(Arc::clone(&tokenizer), &stop_ids)?;
        Ok(Engine {
            tokenizer,
            constrainer,
            format,
            stops,
            network,
            device,
            state: Mutex::new(PrefixTree::new(prefix_cache_bytes)),
        })
    }

    /// Whether `token` ends a reply.
    pub(crate) fn is_stop(&self, token: u32) -> bool {
        self.stops.iter().any(|&(id, _)| id == token)
    }

    /// The name of stop token `token`, for reports.
    pub(crate) fn stop_name(&self, token: u32) -> &'static str {
        self.stops.iter().find(|&&(id, _)| id == token).map_or("", |&(_, name)| name)
    }

    /// Runs `f` with exclusive use of the model, on one of rayon's workers.
    ///
    /// The kernels split every product over rayon's pool. Called from outside the pool,
    /// each split would hand its work to a worker and sleep until it is done: two thread
    /// wake-ups per matrix product, hundreds per token, which cost a quarter of decoding's
    /// time on one thread. Run on a worker, a split the worker does alone is a plain loop.
    ///
    /// The lock is taken here, before entering the pool, so no worker ever waits for it:
    /// a worker waiting inside a split may pick up any job of the pool, and if that job
    /// took the lock, the worker would wait on itself.
    pub(crate) fn with_lock<T: Send>(&self, f: impl FnOnce(&mut Runner<'_>) -> T + Send) -> T {
        let mut cache = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut runner = Runner { engine: self, cache: &mut cache };
        rayon::scope(|_| f(&mut runner))
    }

    /// Prefix-cache counters.
    pub(crate) fn prefix_stats(&self) -> PrefixCacheStats {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).stats()
    }
}

/// Exclusive access to the model for one request.
pub(crate) struct Runner<'a> {
    engine: &'a Engine,
    cache: &'a mut PrefixTree,
}

/// A prompt prefilled by [`Runner::start`].
pub(crate) struct Started {
    pub(crate) session: Session,
    /// Prompt tokens served from the prefix cache.
    pub(crate) reused: usize,
}

impl Runner<'_> {
    /// Prefills `prompt`, reusing the longest prefix the cache holds, and adds the
    /// blocks it prefilled to the cache.
    pub(crate) fn start(&mut self, prompt: &[u32]) -> Result<Started, LocalError> {
        check_prompt(prompt)?;
        let path = self.cache.lookup(prompt);
        let mut session = self.empty_session();
        self.cache.restore(&path, &mut session.cache);
        let reused = session.cache.len();
        self.prefill_from(&mut session, prompt)?;
        self.cache.count(reused, prompt.len() - reused);
        self.cache.insert(&path, prompt, &session.cache);
        Ok(Started { session, reused })
    }

    /// A session at position 0, with no logits yet.
    pub(crate) fn empty_session(&self) -> Session {
        Session { cache: self.engine.network.new_cache(), logits: Vec::new() }
    }

    /// Prefills `prompt` without the cache (for benchmarks), in the same pieces as
    /// [`Runner::start`].
    pub(crate) fn start_cold(&self, prompt: &[u32]) -> Result<Session, LocalError> {
        check_prompt(prompt)?;
        let mut session = self.empty_session();
        self.prefill_from(&mut session, prompt)?;
        Ok(session)
    }

    /// Runs the positions of `prompt` after those `session` holds, in block-aligned
    /// pieces (see [`crate::prefix`] for why the cut must not depend on the cache).
    fn prefill_from(&self, session: &mut Session, prompt: &[u32]) -> Result<(), LocalError> {
        for (start, end) in pieces(session.cache.len(), prompt.len()) {
            self.feed(session, &prompt[start..end])?;
        }
        Ok(())
    }

    /// Runs `tokens` through the model, leaving the next-token logits in `session`.
    pub(crate) fn feed(&self, session: &mut Session, tokens: &[u32]) -> Result<(), LocalError> {
        self.feed_on(None, session, tokens)
    }

    /// [`Runner::feed`], on `path` when given (the benchmark compares them), else on the
    /// path that suits the number of tokens.
    pub(crate) fn feed_on(
        &self,
        path: Option<DecodePath>,
        session: &mut Session,
        tokens: &[u32],
    ) -> Result<(), LocalError> {
        if tokens.is_empty() {
            return Ok(());
        }
        if session.cache.len() + tokens.len() >= MAX_SEQ_LEN {
            return Err(LocalError::ContextExceeded { tokens: session.cache.len() + tokens.len(), limit: MAX_SEQ_LEN });
        }
        session.logits = self.engine.network.forward_on(path, tokens, &mut session.cache)?;
        Ok(())
    }

    /// The log-probability of `tokens` following the session, teacher-forced one
    /// token at a time. The session is left untouched.
    pub(crate) fn log_likelihood(&self, session: &Session, tokens: &[u32]) -> Result<f32, LocalError> {
        let mut s = session.clone();
        let mut total = 0.0f32;
        for (i, &t) in tokens.iter().enumerate() {
            total += log_softmax_at(&s.logits, t);
            if i + 1 < tokens.len() {
                self.feed(&mut s, &[t])?;
            }
        }
        Ok(total)
    }

    /// Generates until a stop token, the token limit, or (when constrained) the end of
    /// the grammar; [`LocalError::Cancelled`] as soon as `cancel` is set (it is read
    /// before each token).
    pub(crate) fn decode(
        &self,
        mut session: Session,
        params: DecodeParams,
        mut matcher: Option<Matcher>,
        cancel: &AtomicBool,
    ) -> Result<Decoded, LocalError> {
        let mut sampler = (params.temperature > 0.0).then(|| {
            LogitsProcessor::from_sampling(params.seed, Sampling::All { temperature: f64::from(params.temperature) })
        });
        let mut out = Decoded {
            tokens: Vec::new(),
            finish: Finish::Length,
            stop_token: None,
            sampled: 0,
            mask_time: Duration::ZERO,
            forward_time: Duration::ZERO,
        };
        loop {
            if out.tokens.len() >= params.max_tokens {
                return Ok(out);
            }
            if cancel.load(Ordering::Relaxed) {
                return Err(LocalError::Cancelled);
            }
            let token = match matcher.as_mut() {
                None => self.pick(&session.logits, None, sampler.as_mut())?,
                Some(m) => {
                    let started = Instant::now();
                    let mask = m.compute_mask().map_err(|e| grammar_error(&e))?;
                    let token = self.pick(&session.logits, Some(&mask), sampler.as_mut())?;
                    out.mask_time += started.elapsed();
                    token
                }
            };
            if self.engine.is_stop(token) {
                out.finish = Finish::Stop;
                out.stop_token = Some(token);
                return Ok(out);
            }
            out.tokens.push(token);
            out.sampled += 1;
            let mut step = vec![token];
            if let Some(m) = matcher.as_mut() {
                let started = Instant::now();
                m.consume_token(token).map_err(|e| grammar_error(&e))?;
                let stopped = m.is_stopped();
                // Tokens the grammar forces go through the model in one batch.
                let forced: Vec<u32> = if stopped {
                    Vec::new()
                } else {
                    m.consume_ff_tokens().into_iter().filter(|&t| !self.engine.is_stop(t)).collect()
                };
                out.mask_time += started.elapsed();
                out.tokens.extend_from_slice(&forced);
                step.extend_from_slice(&forced);
                if stopped || m.is_stopped() {
                    out.finish = Finish::Stop;
                    return Ok(out);
                }
            }
            // At the budget no token follows, so the model need not see this step. Tokens
            // the grammar forced may pass the budget; fed, they could pass the context,
            // which `room` does not count on.
            if out.tokens.len() >= params.max_tokens {
                return Ok(out);
            }
            let started = Instant::now();
            self.feed(&mut session, &step)?;
            out.forward_time += started.elapsed();
        }
    }

    /// The most likely token that is not a control token.
    pub(crate) fn argmax_text_token(&self, session: &Session) -> u32 {
        let tokenizer = &self.engine.tokenizer;
        let mut best = (0u32, f32::NEG_INFINITY);
        for (t, &l) in session.logits.iter().enumerate() {
            let t = u32::try_from(t).unwrap_or(u32::MAX);
            if l > best.1 && !tokenizer.is_control(t) {
                best = (t, l);
            }
        }
        best.0
    }

    /// Greedy decoding of exactly `n` tokens, never stopping at a control token.
    /// Returns `n`.
    pub(crate) fn decode_ignoring_eos(&self, mut session: Session, n: usize) -> Result<usize, LocalError> {
        for _ in 0..n {
            let next = self.argmax_text_token(&session);
            self.feed(&mut session, &[next])?;
        }
        Ok(n)
    }

    /// Picks the next token: argmax, or a seeded sample, over the allowed tokens.
    fn pick(
        &self,
        logits: &[f32],
        mask: Option<&toktrie::SimpleVob>,
        sampler: Option<&mut LogitsProcessor>,
    ) -> Result<u32, LocalError> {
        let allowed = |t: usize| mask.is_none_or(|m| m.is_allowed(u32::try_from(t).unwrap_or(u32::MAX)));
        match sampler {
            None => {
                let mut best: Option<(usize, f32)> = None;
                for (t, &l) in logits.iter().enumerate() {
                    if allowed(t) && best.is_none_or(|(_, b)| l > b) {
                        best = Some((t, l));
                    }
                }
                match best {
                    Some((t, _)) => Ok(u32::try_from(t).unwrap_or(u32::MAX)),
                    None => Err(LocalError::Grammar {
                        what: "the output".to_owned(),
                        problem: "no token can continue it".to_owned(),
                    }),
                }
            }
            Some(sampler) => {
                let masked: Vec<f32> =
                    logits.iter().enumerate().map(|(t, &l)| if allowed(t) { l } else { f32::NEG_INFINITY }).collect();
                let masked = Tensor::new(masked.as_slice(), &self.engine.device)?;
                Ok(sampler.sample(&masked)?)
            }
        }
    }
}

fn grammar_error(e: &impl std::fmt::Display) -> LocalError {
    LocalError::Grammar { what: "the output".to_owned(), problem: e.to_string() }
}

fn check_prompt(prompt: &[u32]) -> Result<(), LocalError> {
    if prompt.is_empty() {
        return Err(LocalError::Request("the prompt is empty".to_owned()));
    }
    if prompt.len() >= MAX_SEQ_LEN {
        return Err(LocalError::ContextExceeded { tokens: prompt.len(), limit: MAX_SEQ_LEN });
    }
    Ok(())
}

/// `log softmax(logits)[t]`.
fn log_softmax_at(logits: &[f32], t: u32) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = logits.iter().map(|&l| (l - max).exp()).sum();
    logits.get(t as usize).map_or(f32::NEG_INFINITY, |&l| l - max - sum.ln())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF of an architecture we cannot run is refused with its name and the file's.
    #[test]
    fn another_architecture_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("flowmem-arch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mamba.gguf");
        let value = gguf_file::Value::String("mamba".to_owned());
        let mut file = File::create(&path).unwrap();
        gguf_file::write(&mut file, &[("general.architecture", &value)], &[]).unwrap();
        drop(file);
        let error = Engine::load(&path, Precision::F32, 0).err().expect("refused");
        let message = error.to_string();
        assert!(matches!(error, LocalError::Architecture { .. }), "{message}");
        assert!(message.contains("`mamba`") && message.contains("mamba.gguf"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The invariant of the prefix cache on a real model: a prompt served from cached
    /// blocks gets bit-identical logits to the same prompt prefilled cold, and so does a
    /// longer prompt that extends it, as a ReAct step does. `turn` opens a user turn in
    /// the model's chat format.
    fn check_cached_prefixes(path: &std::path::Path, turn: &str) {
        let engine = Engine::load(path, Precision::F32, 64 << 20).unwrap();
        let text = format!("{turn}The order #W2378156 has a keyboard and a thermostat. ").repeat(12);
        let prompt = engine.tokenizer.encode(&text).unwrap();
        assert!(prompt.len() > 3 * crate::prefix::BLOCK, "{} tokens", prompt.len());
        let longer: Vec<u32> = prompt.iter().chain(&prompt[..40]).copied().collect();
        engine.with_lock(|runner| {
            let first = runner.start(&prompt).unwrap();
            assert_eq!(first.reused, 0);
            let again = runner.start(&prompt).unwrap();
            assert_eq!(again.reused, (prompt.len() - 1) / crate::prefix::BLOCK * crate::prefix::BLOCK);
            let cold = runner.start_cold(&prompt).unwrap();
            assert!(first.session.logits == cold.logits, "a first, cached run differs from a cold one");
            assert!(again.session.logits == cold.logits, "a prompt served from the cache differs");
            let extended = runner.start(&longer).unwrap();
            assert!(extended.reused >= 3 * crate::prefix::BLOCK);
            assert!(extended.session.logits == runner.start_cold(&longer).unwrap().logits);
        });
    }

    #[test]
    fn gemma_cached_prefixes_give_bit_identical_logits() {
        let Some(path) = crate::model::gemma_path_for_tests() else { return };
        check_cached_prefixes(&path, "<bos><start_of_turn>user\n");
    }

    #[test]
    fn cached_prefixes_give_bit_identical_logits() {
        let Some(path) = crate::model::default_path_for_tests() else { return };
        check_cached_prefixes(&path, "<|im_start|>user\n");
    }

    /// Decoding reads the cancel flag before each token: set, it makes no token and says
    /// the request was cancelled; unset, decoding runs.
    #[test]
    fn a_set_cancel_flag_stops_decoding_before_the_next_token() {
        let Some(path) = crate::model::default_path_for_tests() else { return };
        let engine = Engine::load(&path, Precision::F32, 0).unwrap();
        let prompt = engine.tokenizer.encode("<|im_start|>user\nCount from one to five hundred.<|im_end|>\n").unwrap();
        let params = DecodeParams { max_tokens: 4, temperature: 0.0, seed: 0 };
        engine.with_lock(|runner| {
            let session = runner.start_cold(&prompt).unwrap();
            let cancelled = runner.decode(session.clone(), params, None, &AtomicBool::new(true));
            assert!(matches!(cancelled, Err(LocalError::Cancelled)), "{cancelled:?}");
            let decoded = runner.decode(session, params, None, &AtomicBool::new(false)).unwrap();
            assert!(!decoded.tokens.is_empty(), "an unset flag lets decoding run");
        });
    }
}
