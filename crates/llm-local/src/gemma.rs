//! A Gemma 3 forward pass (GGUF architecture `gemma3`), for Gemma 3 270M on a CPU.
//!
//! What differs from Llama: the embeddings are scaled by √hidden; every block has four
//! RMSNorms (before and after attention, before and after the feed-forward), and the
//! queries and keys are RMS-normalised per head (QK-norm) before RoPE (NeoX order);
//! the feed-forward is GELU (tanh) gated; heads are 256 wide, with one KV head for four
//! query heads. Five local layers alternate with one global one: a local layer sees the
//! last `sliding_window` positions only and rotates with base 10,000, a global layer
//! sees everything and rotates with the file's `rope.freq_base`. The output head is
//! the token embedding (tied).
//!
//! llama.cpp's converter stores the RMSNorm weights as `1 + w`, so they are applied as
//! stored. Decoding multiplies by the projections requantised to Q8_0 once at load,
//! for the crate's SIMD kernels ([`QMatrix`]: reading the weights is the cost, and
//! candle's k-quant products measured slower); prefill, a matrix-matrix product, by
//! copies dequantised at load (F16 or F32, as for Llama), many times faster. The tied 262,144 × 640
//! embedding stays in its Q8_0 blocks ([`QMatrix`]): rows are dequantised one token at
//! a time, and the logits are one quantised matrix-vector product, so nothing of the
//! vocabulary's size is ever held in F32.
//!
//! The KV cache is the one [`KvCache`] of the Llama path (every position is kept; local
//! layers only look at the last window of it), so the prefix cache works unchanged.

use std::io::{Read, Seek};

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{DType, Device, Result, Tensor};

use crate::kernels::QMatrix;
use crate::llama::{KvCache, MAX_SEQ_LEN};

/// Local layers per global one, plus one: layer `i` is global when `(i + 1) % 6 == 0`
/// (llama.cpp's and the reference's default; the GGUF does not say).
const SLIDING_WINDOW_PATTERN: usize = 6;
/// RoPE base of the local layers (llama.cpp's and the reference's default).
const LOCAL_ROPE_BASE: f32 = 10_000.0;

/// The gate's activation. Gemma uses GELU (tanh approximation); candle's
/// `quantized_gemma3`, the reference of the tests, uses SiLU, so the tests can switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    GeluTanh,
    #[cfg(test)]
    Silu,
}

#[derive(Debug, Clone, Copy)]
struct Config {
    n_head: usize,
    n_kv_head: usize,
    head_dim: usize,
    hidden: usize,
    eps: f64,
    window: usize,
}

/// Up to this many tokens go through the quantised weights; more through the dense
/// copies (prefill), where candle's GEMM is many times faster.
const DECODE_MAX_TOKENS: usize = 4;

/// A projection `[out, in]`: Q8_0 blocks for decoding, a dense copy (F16 or F32) for
/// prefill.
#[derive(Debug, Clone)]
struct Proj {
    quantised: QMatrix,
    dense: Tensor,
}

impl Proj {
    /// The file's k-quant blocks are requantised to Q8_0 (8 bits over their 4 to 6,
    /// so next to no error is added), for the crate's own SIMD kernels.
    fn new(tensor: &QTensor, dtype: DType, device: &Device) -> Result<Proj> {
        let dense = tensor.dequantize(device)?;
        let quantised = match tensor.dtype() {
            GgmlDType::Q8_0 => QMatrix::from_qtensor(tensor)?,
            _ => QMatrix::from_qtensor(&QTensor::quantize(&dense, GgmlDType::Q8_0)?)?,
        };
        Ok(Proj { quantised, dense: dense.to_dtype(dtype)? })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (seq, _) = x.dims2()?;
        if seq <= DECODE_MAX_TOKENS {
            let rows = self.quantised.rows();
            let mut out = vec![0.0; seq * rows];
            for (row, o) in x.to_vec2::<f32>()?.iter().zip(out.chunks_exact_mut(rows)) {
                self.quantised.matvec(row, o);
            }
            return Tensor::from_vec(out, (seq, rows), x.device());
        }
        x.to_dtype(self.dense.dtype())?.matmul(&self.dense.t()?)?.to_dtype(DType::F32)
    }
}

#[derive(Debug, Clone)]
struct Layer {
    attn_norm: Tensor,
    q: Proj,
    k: Proj,
    v: Proj,
    q_norm: Tensor,
    k_norm: Tensor,
    o: Proj,
    post_attn_norm: Tensor,
    ffn_norm: Tensor,
    gate: Proj,
    up: Proj,
    down: Proj,
    post_ffn_norm: Tensor,
    /// A local (sliding-window) layer.
    local: bool,
}

/// The Gemma 3 weights, shared read-only by every [`KvCache`].
#[derive(Debug, Clone)]
pub(crate) struct Gemma3 {
    cfg: Config,
    /// Token embeddings, also the output projection.
    embed: QMatrix,
    layers: Vec<Layer>,
    norm: Tensor,
    /// `(cos, sin)` tables `[MAX_SEQ_LEN, head_dim / 2]` of the local and global layers.
    rope_local: (Tensor, Tensor),
    rope_global: (Tensor, Tensor),
    activation: Activation,
}

impl Gemma3 {
    /// Loads the weights of a `gemma3` GGUF; prefill's dense copies of the projections
    /// are dequantised to `dtype` (F16 or F32).
    pub(crate) fn from_gguf<R: Read + Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        dtype: DType,
        device: &Device,
    ) -> Result<Gemma3> {
        let md = |key: &str| match content.metadata.get(&format!("gemma3.{key}")) {
            Some(v) => Ok(v),
            None => candle_core::bail!("GGUF metadata `gemma3.{key}` is missing"),
        };
        let n_head = md("attention.head_count")?.to_u32()? as usize;
        let n_kv_head = md("attention.head_count_kv")?.to_u32()? as usize;
        let n_layer = md("block_count")?.to_u32()? as usize;
        let hidden = md("embedding_length")?.to_u32()? as usize;
        let head_dim = md("attention.key_length")?.to_u32()? as usize;
        let value_dim = md("attention.value_length")?.to_u32()? as usize;
        let eps = f64::from(md("attention.layer_norm_rms_epsilon")?.to_f32()?);
        let window = md("attention.sliding_window")?.to_u32()? as usize;
        let rope_base = md("rope.freq_base").and_then(|v| v.to_f32()).unwrap_or(1_000_000.0);
        if value_dim != head_dim || n_kv_head == 0 || !n_head.is_multiple_of(n_kv_head) || !head_dim.is_multiple_of(2) {
            candle_core::bail!(
                "unsupported head shape: {n_head} query heads, {n_kv_head} KV heads, key {head_dim}, value {value_dim}"
            );
        }
        let cfg = Config { n_head, n_kv_head, head_dim, hidden, eps, window };

        let mut load = |name: &str| content.tensor(reader, name, device);
        let dense = |t: candle_core::quantized::QTensor| t.dequantize(device)?.to_dtype(DType::F32);
        let embed = QMatrix::from_qtensor(&load("token_embd.weight")?)?;
        let norm = dense(load("output_norm.weight")?)?;
        let mut layers = Vec::with_capacity(n_layer);
        for i in 0..n_layer {
            let mut get = |part: &str| load(&format!("blk.{i}.{part}.weight"));
            layers.push(Layer {
                attn_norm: dense(get("attn_norm")?)?,
                q: Proj::new(&get("attn_q")?, dtype, device)?,
                k: Proj::new(&get("attn_k")?, dtype, device)?,
                v: Proj::new(&get("attn_v")?, dtype, device)?,
                q_norm: dense(get("attn_q_norm")?)?,
                k_norm: dense(get("attn_k_norm")?)?,
                o: Proj::new(&get("attn_output")?, dtype, device)?,
                post_attn_norm: dense(get("post_attention_norm")?)?,
                ffn_norm: dense(get("ffn_norm")?)?,
                gate: Proj::new(&get("ffn_gate")?, dtype, device)?,
                up: Proj::new(&get("ffn_up")?, dtype, device)?,
                down: Proj::new(&get("ffn_down")?, dtype, device)?,
                post_ffn_norm: dense(get("post_ffw_norm")?)?,
                local: (i + 1) % SLIDING_WINDOW_PATTERN != 0,
            });
        }
        Ok(Gemma3 {
            cfg,
            embed,
            layers,
            norm,
            rope_local: rope_tables(head_dim, LOCAL_ROPE_BASE, device)?,
            rope_global: rope_tables(head_dim, rope_base, device)?,
            activation: Activation::GeluTanh,
        })
    }

    /// The same weights with another gate activation (for the reference test).
    #[cfg(test)]
    pub(crate) fn with_activation(mut self, activation: Activation) -> Gemma3 {
        self.activation = activation;
        self
    }

    /// An empty KV cache.
    pub(crate) fn new_cache(&self) -> KvCache {
        KvCache::empty(self.layers.len())
    }

    /// Runs `tokens` after the positions in `cache`, appends their keys and values,
    /// and returns the logits for the next token (`[vocab]`).
    pub(crate) fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            candle_core::bail!("no tokens to run");
        }
        if cache.len() + tokens.len() > MAX_SEQ_LEN {
            candle_core::bail!("sequence of {} tokens exceeds {MAX_SEQ_LEN}", cache.len() + tokens.len());
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.embed.rows()) {
            candle_core::bail!("token id {bad} is outside the vocabulary of {}", self.embed.rows());
        }
        let Config { n_head, n_kv_head, head_dim, hidden, eps, window } = self.cfg;
        let (seq, pos) = (tokens.len(), cache.len());
        let kv_len = pos + seq;
        let group = n_head / n_kv_head;
        let device = self.norm.device();

        let scale = (hidden as f32).sqrt();
        let mut embedded = vec![0.0; seq * hidden];
        for (&t, row) in tokens.iter().zip(embedded.chunks_exact_mut(hidden)) {
            self.embed.row_into(t as usize, row);
            row.iter_mut().for_each(|v| *v *= scale);
        }
        let mut x = Tensor::from_vec(embedded, (seq, hidden), device)?;
        // The first key position each kind of layer attends to, and its mask.
        let local_first = (pos + 1).saturating_sub(window);
        let masks = [mask(seq, pos, 0, None, device)?, mask(seq, pos, local_first, Some(window), device)?];
        let att_scale = 1.0 / (head_dim as f64).sqrt();

        for (i, layer) in self.layers.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps as f32)?;
            let heads = |w: &Proj, norm: Option<&Tensor>, n: usize| -> Result<Tensor> {
                let t = w.forward(&h)?.reshape((seq, n, head_dim))?;
                let t = match norm {
                    Some(norm) => candle_nn::ops::rms_norm(&t, norm, eps as f32)?,
                    None => t,
                };
                t.transpose(0, 1)?.contiguous()
            };
            let q = heads(&layer.q, Some(&layer.q_norm), n_head)?;
            let k = heads(&layer.k, Some(&layer.k_norm), n_kv_head)?;
            let v = heads(&layer.v, None, n_kv_head)?;
            let (cos, sin) = if layer.local { &self.rope_local } else { &self.rope_global };
            let (cos, sin) = (cos.narrow(0, pos, seq)?, sin.narrow(0, pos, seq)?);
            let q = candle_nn::rotary_emb::rope(&q.unsqueeze(0)?, &cos, &sin)?.squeeze(0)?;
            let k = candle_nn::rotary_emb::rope(&k.unsqueeze(0)?, &cos, &sin)?.squeeze(0)?;

            let (k_cache, v_cache) = cache.layer_mut(i);
            append(k_cache, &k)?;
            append(v_cache, &v)?;
            let first = if layer.local { local_first } else { 0 };
            let keys = positions(k_cache, first, kv_len, n_kv_head, head_dim, device)?;
            let values = positions(v_cache, first, kv_len, n_kv_head, head_dim, device)?;

            // Query heads h = kv * group + r share KV head `kv`.
            let q = q.reshape((n_kv_head, group * seq, head_dim))?;
            let att = (q.matmul(&keys.t()?)? * att_scale)?;
            let att = match &masks[usize::from(layer.local)] {
                Some(mask) => att.reshape((n_kv_head, group, seq, kv_len - first))?.broadcast_add(mask)?.reshape((
                    n_kv_head,
                    group * seq,
                    kv_len - first,
                ))?,
                None => att,
            };
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            let y = att.matmul(&values)?;
            let y = y.reshape((n_head, seq, head_dim))?.transpose(0, 1)?.reshape((seq, n_head * head_dim))?;
            let y = candle_nn::ops::rms_norm(&layer.o.forward(&y)?, &layer.post_attn_norm, eps as f32)?;
            x = (x + y)?;

            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, eps as f32)?;
            let gate = layer.gate.forward(&h)?;
            let gate = match self.activation {
                Activation::GeluTanh => gate.gelu()?,
                #[cfg(test)]
                Activation::Silu => candle_nn::ops::silu(&gate)?,
            };
            let y = layer.down.forward(&(gate * layer.up.forward(&h)?)?)?;
            let y = candle_nn::ops::rms_norm(&y, &layer.post_ffn_norm, eps as f32)?;
            x = (x + y)?;
        }
        cache.set_len(kv_len);
        let last = candle_nn::ops::rms_norm(&x.narrow(0, seq - 1, 1)?, &self.norm, eps as f32)?;
        let last: Vec<f32> = last.flatten_all()?.to_vec1()?;
        let mut logits = vec![0.0; self.embed.rows()];
        self.embed.matvec(&last, &mut logits);
        Ok(logits)
    }
}

/// RoPE's `(cos, sin)` tables up to [`MAX_SEQ_LEN`] for `base`.
fn rope_tables(head_dim: usize, base: f32, device: &Device) -> Result<(Tensor, Tensor)> {
    let theta: Vec<f32> = (0..head_dim).step_by(2).map(|i| 1.0 / base.powf(i as f32 / head_dim as f32)).collect();
    let theta = Tensor::new(theta.as_slice(), device)?;
    let positions = Tensor::arange(0, MAX_SEQ_LEN as u32, device)?.to_dtype(DType::F32)?;
    let angles = positions.unsqueeze(1)?.broadcast_mul(&theta.unsqueeze(0)?)?;
    Ok((angles.cos()?, angles.sin()?))
}

/// Appends `new` (`[n_kv, seq, head_dim]`) to a position-major cache.
fn append(cache: &mut Vec<f32>, new: &Tensor) -> Result<()> {
    cache.extend(new.transpose(0, 1)?.contiguous()?.flatten_all()?.to_vec1::<f32>()?);
    Ok(())
}

/// Positions `first..end` of a position-major cache as `[n_kv, end - first, head_dim]`.
fn positions(cache: &[f32], first: usize, end: usize, n_kv: usize, head_dim: usize, device: &Device) -> Result<Tensor> {
    let stride = n_kv * head_dim;
    let part = &cache[first * stride..end * stride];
    Tensor::from_slice(part, (end - first, n_kv, head_dim), device)?.transpose(0, 1)?.contiguous()
}

/// `[seq, kv_len - first]`: 0 where query `i` (at position `pos + i`) may attend to key
/// `first + j`, −∞ elsewhere: after it, or (with a window) `window` or more positions
/// before it. `None` when every key is visible.
fn mask(seq: usize, pos: usize, first: usize, window: Option<usize>, device: &Device) -> Result<Option<Tensor>> {
    let kv_len = pos + seq;
    let visible = |i: usize, key: usize| key <= pos + i && window.is_none_or(|w| pos + i - key < w);
    let all = (0..seq).all(|i| (first..kv_len).all(|key| visible(i, key)));
    if all {
        return Ok(None);
    }
    let values: Vec<f32> = (0..seq)
        .flat_map(|i| (first..kv_len).map(move |key| if visible(i, key) { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    Ok(Some(Tensor::from_vec(values, (seq, kv_len - first), device)?))
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::mask;

    #[test]
    fn local_masks_hide_keys_a_window_back() {
        // Positions 3 and 4 after 3 cached, window 2: the first key seen is 2.
        let m = mask(2, 3, 2, Some(2), &Device::Cpu).unwrap().unwrap();
        let rows: Vec<Vec<f32>> = m.to_vec2().unwrap();
        assert_eq!(rows[0][..2], [0.0, 0.0]);
        assert!(rows[0][2].is_infinite());
        assert!(rows[1][0].is_infinite());
        assert_eq!(rows[1][1..], [0.0, 0.0]);
        assert!(mask(1, 3, 0, None, &Device::Cpu).unwrap().is_none());
    }
}

#[cfg(test)]
mod reference {
    use std::fs::File;

    use candle_core::quantized::gguf_file;
    use candle_core::{Device, Tensor};
    use candle_transformers::models::quantized_gemma3::ModelWeights;

    use super::{Activation, Gemma3};
    use crate::logit_check::{compare_logits, cosine};

    /// Our forward pass against candle's `quantized_gemma3` on the same file: prefill,
    /// then token-by-token decoding, then a cloned cache continuing independently.
    /// candle gates with SiLU where Gemma (and llama.cpp) use GELU, so ours runs with
    /// SiLU here; with GELU (as llama.cpp, whose greedy replies ours equal in the
    /// integration tests) the logits are close to candle's but not the same.
    #[test]
    fn logits_match_candle_quantized_gemma3() {
        let Some(path) = crate::model::gemma_path_for_tests() else { return };
        let device = Device::Cpu;
        let mut file = File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut file).unwrap();
        let gelu = Gemma3::from_gguf(&content, &mut file, candle_core::DType::F32, &device).unwrap();
        let ours = gelu.clone().with_activation(Activation::Silu);
        let mut theirs = ModelWeights::from_gguf(content, &mut file, &device).unwrap();

        // "<bos><start_of_turn>user\nHello, world!<end_of_turn>\n<start_of_turn>model\n" then text.
        let tokens: [u32; 16] =
            [2, 105, 2364, 107, 9259, 236764, 1902, 236888, 106, 107, 105, 4368, 107, 9259, 236888, 2088];
        let split = 13;
        let mut reference = |tokens: &[u32], position: usize| {
            let input = Tensor::new(tokens, &device).unwrap().unsqueeze(0).unwrap();
            theirs.forward(&input, position).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap()
        };
        let b = compare_logits(&tokens, split, ours.new_cache(), &|t, c| ours.forward(t, c).unwrap(), &mut reference);

        let mut cache = gelu.new_cache();
        let g = gelu.forward(&tokens[..split], &mut cache).unwrap();
        // GELU and SiLU agree roughly (measured cosine 0.996), not exactly.
        let c = cosine(&g, &b);
        assert!(c > 0.95 && c < 0.9999, "GELU against candle's SiLU: cosine {c}");
    }
}
