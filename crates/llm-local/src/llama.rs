//! A Llama forward pass written for this small model on a CPU.
//!
//! Two paths share one KV cache. Decoding (one or a few tokens) runs in plain Rust over
//! the GGUF's own quantised blocks ([`QMatrix`]): every weight is read once per token,
//! so fewer bytes per weight is more tokens per second. Prefill (many tokens) is a
//! matrix-matrix product, where candle's GEMM on weights dequantised once at load (F16
//! or F32) wins. In both, Q/K/V and gate/up are fused into one matrix each, and query
//! heads are grouped by KV head so that K and V are never repeated.

use std::io::{Read, Seek};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Result, Tensor};

use crate::kernels::{Heads, QMatrix, attend, dot};

/// The longest sequence (RoPE tables are built up to this length). The model was trained
/// with 8,192, but prefill on a CPU grows quadratically: at 5,600 tokens one optimizer
/// proposal took minutes, so requests past this are refused with a clear error instead.
pub(crate) const MAX_SEQ_LEN: usize = 4096;
/// Up to this many tokens go through the decoding path one by one; more are prefilled
/// as a batch.
const DECODE_MAX_TOKENS: usize = 4;

/// The two ways through the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodePath {
    /// Token by token over the file's quantised blocks: decoding.
    Quantised,
    /// All tokens at once through candle's GEMM on dense weights: prefill.
    Dense,
}

#[derive(Debug, Clone, Copy)]
struct Config {
    n_head: usize,
    n_kv_head: usize,
    head_dim: usize,
    hidden: usize,
    ffn: usize,
    eps: f32,
}

/// A weight matrix `[out, in]`, applied as `x · wᵀ`.
#[derive(Debug, Clone)]
struct Linear {
    w: Tensor,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = self.w.dtype();
        x.to_dtype(dtype)?.matmul(&self.w.t()?)?.to_dtype(DType::F32)
    }
}

/// One transformer block: dense weights for prefill, quantised blocks for decoding.
#[derive(Debug, Clone)]
struct Layer {
    attn_norm: Tensor,
    attn_norm_w: Vec<f32>,
    qkv: Linear,
    o: Linear,
    ffn_norm: Tensor,
    ffn_norm_w: Vec<f32>,
    gate_up: Linear,
    down: Linear,
    q_qkv: QMatrix,
    q_o: QMatrix,
    q_gate_up: QMatrix,
    q_down: QMatrix,
}

/// The model weights, shared read-only by every [`KvCache`].
#[derive(Debug, Clone)]
pub(crate) struct Llama {
    cfg: Config,
    /// Token embeddings, also the output projection (the embeddings are tied).
    embed: QMatrix,
    output: QMatrix,
    layers: Vec<Layer>,
    norm: Tensor,
    norm_w: Vec<f32>,
    cos: Tensor,
    sin: Tensor,
    /// `cos` and `sin` as `[MAX_SEQ_LEN, head_dim / 2]` slices for the decoding path.
    cos_table: Vec<f32>,
    sin_table: Vec<f32>,
}

/// Keys and values of the positions seen so far, per layer, position-major:
/// `[len, n_kv_head, head_dim]`. Cloning copies them, so a clone is an independent
/// snapshot.
#[derive(Debug, Clone)]
pub(crate) struct KvCache {
    layers: Vec<(Vec<f32>, Vec<f32>)>,
    len: usize,
}

impl KvCache {
    /// An empty cache of `n_layers` layers.
    pub(crate) fn empty(n_layers: usize) -> KvCache {
        KvCache { layers: vec![(Vec::new(), Vec::new()); n_layers], len: 0 }
    }

    /// Layer `i`'s keys and values, position-major, for a forward pass to append to;
    /// it then calls [`KvCache::set_len`].
    pub(crate) fn layer_mut(&mut self, i: usize) -> &mut (Vec<f32>, Vec<f32>) {
        &mut self.layers[i]
    }

    /// Sets the number of cached positions after a forward pass appended them.
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len;
    }

    /// The number of cached positions.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies of the keys and values of positions `start..end`, per layer.
    pub(crate) fn positions(&self, start: usize, end: usize) -> Vec<(Vec<f32>, Vec<f32>)> {
        debug_assert!(start <= end && end <= self.len);
        let stride = self.stride();
        self.layers
            .iter()
            .map(|(k, v)| (k[start * stride..end * stride].to_vec(), v[start * stride..end * stride].to_vec()))
            .collect()
    }

    /// Appends `n` positions copied out by [`KvCache::positions`].
    pub(crate) fn append(&mut self, parts: &[(Vec<f32>, Vec<f32>)], n: usize) {
        debug_assert_eq!(parts.len(), self.layers.len());
        for ((k, v), (pk, pv)) in self.layers.iter_mut().zip(parts) {
            k.extend_from_slice(pk);
            v.extend_from_slice(pv);
        }
        self.len += n;
    }

    /// A cache of `len` positions over `n_layers` layers whose every key and value
    /// float is its position, for tests of code that moves positions around.
    #[cfg(test)]
    pub(crate) fn numbered(n_layers: usize, len: usize, stride: usize) -> KvCache {
        let layer: Vec<f32> = (0..len).flat_map(|p| std::iter::repeat_n(p as f32, stride)).collect();
        KvCache { layers: vec![(layer.clone(), layer); n_layers], len }
    }

    /// Floats per position per layer, for keys (and for values): `n_kv_head · head_dim`.
    fn stride(&self) -> usize {
        match self.layers.first() {
            Some((k, _)) if self.len > 0 => k.len() / self.len,
            _ => 0,
        }
    }
}

impl Llama {
    /// Loads the weights of a `llama` GGUF; prefill's dense copies are dequantised to
    /// `dtype` (F16 or F32).
    pub(crate) fn from_gguf<R: Read + Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        dtype: DType,
        device: &Device,
    ) -> Result<Llama> {
        let md = |key: &str| match content.metadata.get(key) {
            Some(v) => Ok(v),
            None => candle_core::bail!("GGUF metadata `{key}` is missing"),
        };
        let n_head = md("llama.attention.head_count")?.to_u32()? as usize;
        let n_kv_head = md("llama.attention.head_count_kv")?.to_u32()? as usize;
        let n_layer = md("llama.block_count")?.to_u32()? as usize;
        let hidden = md("llama.embedding_length")?.to_u32()? as usize;
        let ffn = md("llama.feed_forward_length")?.to_u32()? as usize;
        let eps = md("llama.attention.layer_norm_rms_epsilon")?.to_f32()?;
        let rope_base = md("llama.rope.freq_base").and_then(|v| v.to_f32()).unwrap_or(10_000.0);
        let head_dim = hidden / n_head;
        let cfg = Config { n_head, n_kv_head, head_dim, hidden, ffn, eps };

        let mut load = |name: &str| content.tensor(reader, name, device);
        let dense = |t: &candle_core::quantized::QTensor, dtype: DType| t.dequantize(device)?.to_dtype(dtype);
        let embed = QMatrix::from_qtensor(&load("token_embd.weight")?)?;
        let output = if content.tensor_infos.contains_key("output.weight") {
            QMatrix::from_qtensor(&load("output.weight")?)?
        } else {
            embed.clone()
        };
        let norm = dense(&load("output_norm.weight")?, DType::F32)?;
        let mut layers = Vec::with_capacity(n_layer);
        for i in 0..n_layer {
            let mut get = |part: &str| load(&format!("blk.{i}.{part}.weight"));
            let (q, k, v) = (get("attn_q")?, get("attn_k")?, get("attn_v")?);
            let (gate, up) = (get("ffn_gate")?, get("ffn_up")?);
            let (o, down) = (get("attn_output")?, get("ffn_down")?);
            let attn_norm = dense(&get("attn_norm")?, DType::F32)?;
            let ffn_norm = dense(&get("ffn_norm")?, DType::F32)?;
            layers.push(Layer {
                attn_norm_w: attn_norm.to_vec1()?,
                attn_norm,
                qkv: Linear { w: Tensor::cat(&[dense(&q, dtype)?, dense(&k, dtype)?, dense(&v, dtype)?], 0)? },
                o: Linear { w: dense(&o, dtype)? },
                ffn_norm_w: ffn_norm.to_vec1()?,
                ffn_norm,
                gate_up: Linear { w: Tensor::cat(&[dense(&gate, dtype)?, dense(&up, dtype)?], 0)? },
                down: Linear { w: dense(&down, dtype)? },
                q_qkv: QMatrix::stack(vec![
                    QMatrix::from_qtensor(&q)?,
                    QMatrix::from_qtensor(&k)?,
                    QMatrix::from_qtensor(&v)?,
                ])?,
                q_o: QMatrix::from_qtensor(&o)?,
                q_gate_up: QMatrix::stack(vec![QMatrix::from_qtensor(&gate)?, QMatrix::from_qtensor(&up)?])?,
                q_down: QMatrix::from_qtensor(&down)?,
            });
        }

        let theta: Vec<f32> =
            (0..head_dim).step_by(2).map(|i| 1.0 / rope_base.powf(i as f32 / head_dim as f32)).collect();
        let theta = Tensor::new(theta.as_slice(), device)?;
        let positions = Tensor::arange(0, MAX_SEQ_LEN as u32, device)?.to_dtype(DType::F32)?;
        let angles = positions.unsqueeze(1)?.broadcast_mul(&theta.unsqueeze(0)?)?;
        let (cos, sin) = (angles.cos()?, angles.sin()?);
        Ok(Llama {
            cfg,
            embed,
            output,
            layers,
            norm_w: norm.to_vec1()?,
            norm,
            cos_table: cos.flatten_all()?.to_vec1()?,
            sin_table: sin.flatten_all()?.to_vec1()?,
            cos,
            sin,
        })
    }

    /// An empty KV cache.
    pub(crate) fn new_cache(&self) -> KvCache {
        KvCache { layers: vec![(Vec::new(), Vec::new()); self.layers.len()], len: 0 }
    }

    /// Runs `tokens` after the positions in `cache`, appends their keys and values,
    /// and returns the logits for the next token (`[vocab]`).
    pub(crate) fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        let path = if tokens.len() <= DECODE_MAX_TOKENS { DecodePath::Quantised } else { DecodePath::Dense };
        self.forward_on(path, tokens, cache)
    }

    /// [`Llama::forward`] on the given path, whatever the number of tokens: the
    /// benchmark decodes on both to compare them.
    pub(crate) fn forward_on(&self, path: DecodePath, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            candle_core::bail!("no tokens to run");
        }
        if cache.len + tokens.len() > MAX_SEQ_LEN {
            candle_core::bail!("sequence of {} tokens exceeds {MAX_SEQ_LEN}", cache.len + tokens.len());
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= self.embed.rows()) {
            candle_core::bail!("token id {bad} is outside the vocabulary of {}", self.embed.rows());
        }
        let last = match path {
            DecodePath::Quantised => {
                let mut x = Vec::new();
                for &t in tokens {
                    x = self.decode_step(t, cache);
                }
                x
            }
            DecodePath::Dense => self.prefill(tokens, cache)?,
        };
        let h = rms_norm(&last, &self.norm_w, self.cfg.eps);
        let mut logits = vec![0.0; self.output.rows()];
        self.output.matvec(&h, &mut logits);
        Ok(logits)
    }

    /// One token through every layer on the quantised weights; returns its final hidden
    /// state.
    fn decode_step(&self, token: u32, cache: &mut KvCache) -> Vec<f32> {
        let Config { n_head, n_kv_head, head_dim, hidden, ffn, eps } = self.cfg;
        let pos = cache.len;
        let mut x = vec![0.0; hidden];
        self.embed.row_into(token as usize, &mut x);
        let half = head_dim / 2;
        let (cos, sin) = (&self.cos_table[pos * half..(pos + 1) * half], &self.sin_table[pos * half..(pos + 1) * half]);
        let mut qkv = vec![0.0; (n_head + 2 * n_kv_head) * head_dim];
        let mut att = vec![0.0; hidden];
        let mut proj = vec![0.0; hidden];
        let mut gu = vec![0.0; 2 * ffn];
        for (layer, (keys, values)) in self.layers.iter().zip(&mut cache.layers) {
            let h = rms_norm(&x, &layer.attn_norm_w, eps);
            layer.q_qkv.matvec(&h, &mut qkv);
            let (q, kv) = qkv.split_at_mut(n_head * head_dim);
            let (k, v) = kv.split_at_mut(n_kv_head * head_dim);
            for head in q.chunks_exact_mut(head_dim).chain(k.chunks_exact_mut(head_dim)) {
                rope_interleaved(head, cos, sin);
            }
            keys.extend_from_slice(k);
            values.extend_from_slice(v);
            attend(q, keys, values, Heads { n_head, n_kv_head, head_dim }, &mut att);
            layer.q_o.matvec(&att, &mut proj);
            add_into(&mut x, &proj);

            let h = rms_norm(&x, &layer.ffn_norm_w, eps);
            layer.q_gate_up.matvec(&h, &mut gu);
            let (gate, up) = gu.split_at_mut(ffn);
            for (g, u) in gate.iter_mut().zip(up.iter()) {
                *g = *g / (1.0 + (-*g).exp()) * u;
            }
            layer.q_down.matvec(gate, &mut proj);
            add_into(&mut x, &proj);
        }
        cache.len = pos + 1;
        x
    }

    /// Tokens through candle's GEMM as one batch; returns the last token's final hidden
    /// state (before the output norm).
    fn prefill(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        let seq = tokens.len();
        let pos = cache.len;
        let device = self.norm.device();
        let Config { n_head, n_kv_head, head_dim, hidden, ffn, eps } = self.cfg;
        let group = n_head / n_kv_head;

        let mut embedded = vec![0.0; seq * hidden];
        for (&t, row) in tokens.iter().zip(embedded.chunks_exact_mut(hidden)) {
            self.embed.row_into(t as usize, row);
        }
        let mut x = Tensor::from_vec(embedded, (seq, hidden), device)?;
        let cos = self.cos.narrow(0, pos, seq)?;
        let sin = self.sin.narrow(0, pos, seq)?;
        let mask = causal_mask(seq, pos, device)?;
        let scale = 1.0 / (head_dim as f64).sqrt();
        let kv_len = pos + seq;

        for (layer, (k_cache, v_cache)) in self.layers.iter().zip(&mut cache.layers) {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
            let qkv = layer.qkv.forward(&h)?;
            let heads = |start: usize, n: usize| -> Result<Tensor> {
                qkv.narrow(1, start * head_dim, n * head_dim)?
                    .reshape((seq, n, head_dim))?
                    .transpose(0, 1)?
                    .contiguous()
            };
            let q = heads(0, n_head)?;
            let k = heads(n_head, n_kv_head)?;
            let v = heads(n_head + n_kv_head, n_kv_head)?;
            let q = candle_nn::rotary_emb::rope_i(&q.unsqueeze(0)?, &cos, &sin)?.squeeze(0)?;
            let k = candle_nn::rotary_emb::rope_i(&k.unsqueeze(0)?, &cos, &sin)?.squeeze(0)?;
            let keys = append_positions(k_cache, &k, kv_len)?;
            let values = append_positions(v_cache, &v, kv_len)?;

            // Query heads h = kv * group + r share KV head `kv`: group them so each KV
            // head is multiplied once, without repeating K and V.
            let q = q.reshape((n_kv_head, group * seq, head_dim))?;
            let att = (q.matmul(&keys.t()?)? * scale)?;
            let att = att.reshape((n_kv_head, group, seq, kv_len))?.broadcast_add(&mask)?.reshape((
                n_kv_head,
                group * seq,
                kv_len,
            ))?;
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            let y = att.matmul(&values)?; // [n_kv, group * seq, head_dim]
            let y = y.reshape((n_head, seq, head_dim))?.transpose(0, 1)?.reshape((seq, hidden))?;
            x = (layer.o.forward(&y)? + x)?;

            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, eps)?;
            let gu = layer.gate_up.forward(&h)?;
            let gate = candle_nn::ops::silu(&gu.narrow(1, 0, ffn)?)?;
            let up = gu.narrow(1, ffn, ffn)?;
            x = (layer.down.forward(&(gate * up)?)? + x)?;
        }
        cache.len = kv_len;
        x.narrow(0, seq - 1, 1)?.flatten_all()?.to_vec1()
    }
}

/// Appends `new` (`[n_kv, seq, head_dim]`) to a position-major cache and returns all
/// `kv_len` cached positions as `[n_kv, kv_len, head_dim]`.
fn append_positions(cache: &mut Vec<f32>, new: &Tensor, kv_len: usize) -> Result<Tensor> {
    let (n_kv, _, head_dim) = new.dims3()?;
    let fresh = cache.is_empty();
    cache.extend(new.transpose(0, 1)?.contiguous()?.flatten_all()?.to_vec1::<f32>()?);
    if fresh {
        return Ok(new.clone());
    }
    Tensor::from_slice(cache.as_slice(), (kv_len, n_kv, head_dim), new.device())?.transpose(0, 1)?.contiguous()
}

/// RoPE on one head, rotating pairs `(2i, 2i + 1)` (candle's `rope_i`).
fn rope_interleaved(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    for ((pair, c), s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
        let (a, b) = (pair[0], pair[1]);
        pair[0] = a * c - b * s;
        pair[1] = a * s + b * c;
    }
}

fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let mean = dot(x, x) / x.len() as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    x.iter().zip(weight).map(|(v, w)| v * scale * w).collect()
}

fn add_into(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `[seq, pos + seq]`: 0 where query `i` (at position `pos + i`) may attend, −∞ after.
fn causal_mask(seq: usize, pos: usize, device: &Device) -> Result<Tensor> {
    let kv = pos + seq;
    let values: Vec<f32> =
        (0..seq).flat_map(|i| (0..kv).map(move |j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 })).collect();
    Tensor::from_vec(values, (seq, kv), device)
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, IndexOp};

    use super::causal_mask;

    #[test]
    fn mask_lets_each_query_see_the_prefix_and_itself() {
        let m = causal_mask(2, 3, &Device::Cpu).unwrap();
        let row0: Vec<f32> = m.i(0).unwrap().to_vec1().unwrap();
        let row1: Vec<f32> = m.i(1).unwrap().to_vec1().unwrap();
        assert_eq!(row0[..4], [0.0; 4]);
        assert!(row0[4].is_infinite());
        assert_eq!(row1, vec![0.0; 5]);
    }
}

#[cfg(test)]
mod reference {
    use std::fs::File;

    use candle_core::quantized::gguf_file;
    use candle_core::{DType, Device, Tensor};
    use candle_transformers::models::quantized_llama::ModelWeights;

    use super::Llama;
    use crate::logit_check::compare_logits;

    /// Our forward pass against candle's `quantized_llama` on the same file: prefill,
    /// then token-by-token decoding, then a cloned cache continuing independently.
    #[test]
    fn logits_match_candle_quantized_llama() {
        let Some(path) = crate::model::default_path_for_tests() else { return };
        let device = Device::Cpu;
        let mut file = File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut file).unwrap();
        let ours = Llama::from_gguf(&content, &mut file, DType::F32, &device).unwrap();
        let mut theirs = ModelWeights::from_gguf(content, &mut file, &device).unwrap();

        // "<|im_start|>user\nHello, world!<|im_end|>\n<|im_start|>assistant\n" then text.
        let tokens: [u32; 16] = [1, 4093, 198, 19556, 28, 905, 17, 2, 198, 1, 520, 9531, 198, 19556, 17, 1073];
        let mut reference = |tokens: &[u32], position: usize| {
            let input = Tensor::new(tokens, &device).unwrap().unsqueeze(0).unwrap();
            theirs.forward(&input, position).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap()
        };
        compare_logits(&tokens, 10, ours.new_cache(), &|t, cache| ours.forward(t, cache).unwrap(), &mut reference);
    }
}
