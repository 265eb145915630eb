//! A Llama forward pass written for this small model on a CPU.
//!
//! candle's `quantized_llama` runs SmolLM2, but it keeps Q4_1 blocks (slow kernels) or
//! reads an environment variable to dequantise, grows its KV cache by concatenation
//! and copies K and V three times per step for grouped-query attention. Here the
//! weights are dequantised once at load (F16 or F32), Q/K/V and gate/up are fused
//! into one matmul each, the KV cache is preallocated and filled in place, and the
//! query heads are grouped by KV head so that K and V are never repeated.

use std::io::{Read, Seek};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Result, Tensor};

/// The longest sequence (RoPE tables are built up to this length). The model was trained
/// with 8,192, but prefill on a CPU grows quadratically: at 5,600 tokens one optimizer
/// proposal took minutes, so requests past this are refused with a clear error instead.
pub(crate) const MAX_SEQ_LEN: usize = 4096;
/// KV cache capacity grows in steps of this many positions.
const CACHE_STEP: usize = 256;

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

#[derive(Debug, Clone)]
struct Layer {
    attn_norm: Tensor,
    qkv: Linear,
    o: Linear,
    ffn_norm: Tensor,
    gate_up: Linear,
    down: Linear,
}

/// The model weights, shared read-only by every [`KvCache`].
#[derive(Debug, Clone)]
pub(crate) struct Llama {
    cfg: Config,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    output: Linear,
    cos: Tensor,
    sin: Tensor,
}

/// Keys and values of the positions seen so far, per layer: `[n_kv_head, capacity,
/// head_dim]`, valid up to `len`. Cloning copies the valid part, so a clone is an
/// independent snapshot.
#[derive(Debug)]
pub(crate) struct KvCache {
    layers: Vec<(Tensor, Tensor)>,
    len: usize,
    capacity: usize,
}

impl Clone for KvCache {
    fn clone(&self) -> KvCache {
        // A deep copy: in-place writes to the original must not reach the clone. A
        // copy of valid CPU tensors cannot fail; fall back to an empty cache if it did.
        self.resized(self.capacity).unwrap_or_else(|_| KvCache { layers: Vec::new(), len: 0, capacity: 0 })
    }
}

impl KvCache {
    /// The number of cached positions.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn resized(&self, capacity: usize) -> Result<KvCache> {
        let mut layers = Vec::with_capacity(self.layers.len());
        for (k, v) in &self.layers {
            let (n_kv, _, hd) = k.dims3()?;
            let nk = Tensor::zeros((n_kv, capacity, hd), DType::F32, k.device())?;
            let nv = Tensor::zeros((n_kv, capacity, hd), DType::F32, v.device())?;
            if self.len > 0 {
                nk.slice_set(&k.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
                nv.slice_set(&v.narrow(1, 0, self.len)?.contiguous()?, 1, 0)?;
            }
            layers.push((nk, nv));
        }
        Ok(KvCache { layers, len: self.len, capacity })
    }
}

impl Llama {
    /// Loads the weights of a `llama` GGUF, dequantised to `dtype` (F16 or F32).
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

        let mut load = |name: &str, dtype: DType| -> Result<Tensor> {
            content.tensor(reader, name, device)?.dequantize(device)?.to_dtype(dtype)
        };
        let embed = load("token_embd.weight", dtype)?;
        let output = if content.tensor_infos.contains_key("output.weight") {
            load("output.weight", dtype)?
        } else {
            embed.clone()
        };
        let norm = load("output_norm.weight", DType::F32)?;
        let mut layers = Vec::with_capacity(n_layer);
        for i in 0..n_layer {
            let p = format!("blk.{i}");
            let q = load(&format!("{p}.attn_q.weight"), dtype)?;
            let k = load(&format!("{p}.attn_k.weight"), dtype)?;
            let v = load(&format!("{p}.attn_v.weight"), dtype)?;
            let gate = load(&format!("{p}.ffn_gate.weight"), dtype)?;
            let up = load(&format!("{p}.ffn_up.weight"), dtype)?;
            layers.push(Layer {
                attn_norm: load(&format!("{p}.attn_norm.weight"), DType::F32)?,
                qkv: Linear { w: Tensor::cat(&[q, k, v], 0)? },
                o: Linear { w: load(&format!("{p}.attn_output.weight"), dtype)? },
                ffn_norm: load(&format!("{p}.ffn_norm.weight"), DType::F32)?,
                gate_up: Linear { w: Tensor::cat(&[gate, up], 0)? },
                down: Linear { w: load(&format!("{p}.ffn_down.weight"), dtype)? },
            });
        }

        let theta: Vec<f32> =
            (0..head_dim).step_by(2).map(|i| 1.0 / rope_base.powf(i as f32 / head_dim as f32)).collect();
        let theta = Tensor::new(theta.as_slice(), device)?;
        let positions = Tensor::arange(0, MAX_SEQ_LEN as u32, device)?.to_dtype(DType::F32)?;
        let angles = positions.unsqueeze(1)?.broadcast_mul(&theta.unsqueeze(0)?)?;
        Ok(Llama { cfg, embed, layers, norm, output: Linear { w: output }, cos: angles.cos()?, sin: angles.sin()? })
    }

    /// An empty KV cache.
    pub(crate) fn new_cache(&self) -> KvCache {
        KvCache { layers: Vec::new(), len: 0, capacity: 0 }
    }

    /// Runs `tokens` after the positions in `cache`, appends their keys and values,
    /// and returns the logits for the next token (`[vocab]`, F32).
    pub(crate) fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let seq = tokens.len();
        let pos = cache.len;
        if seq == 0 {
            candle_core::bail!("no tokens to run");
        }
        if pos + seq > MAX_SEQ_LEN {
            candle_core::bail!("sequence of {} tokens exceeds {MAX_SEQ_LEN}", pos + seq);
        }
        let device = self.embed.device();
        self.reserve(cache, pos + seq, device)?;
        let Config { n_head, n_kv_head, head_dim, hidden, ffn, eps } = self.cfg;
        let group = n_head / n_kv_head;

        let ids = Tensor::new(tokens, device)?;
        let mut x = self.embed.index_select(&ids, 0)?.to_dtype(DType::F32)?;
        let cos = self.cos.narrow(0, pos, seq)?;
        let sin = self.sin.narrow(0, pos, seq)?;
        let mask = if seq > 1 { Some(causal_mask(seq, pos, device)?) } else { None };
        let scale = 1.0 / (head_dim as f64).sqrt();
        let kv_len = pos + seq;

        for (layer, (k_cache, v_cache)) in self.layers.iter().zip(&cache.layers) {
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
            let qkv = layer.qkv.forward(&h)?;
            let q = qkv.narrow(1, 0, n_head * head_dim)?.reshape((seq, n_head, head_dim))?.transpose(0, 1)?.contiguous()?;
            let k = qkv
                .narrow(1, n_head * head_dim, n_kv_head * head_dim)?
                .reshape((seq, n_kv_head, head_dim))?
                .transpose(0, 1)?
                .contiguous()?;
            let v = qkv
                .narrow(1, (n_head + n_kv_head) * head_dim, n_kv_head * head_dim)?
                .reshape((seq, n_kv_head, head_dim))?
                .transpose(0, 1)?
                .contiguous()?;
            let q = candle_nn::rotary_emb::rope_i(&q.unsqueeze(0)?, &cos, &sin)?.squeeze(0)?;
            let k = candle_nn::rotary_emb::rope_i(&k.unsqueeze(0)?, &cos, &sin)?.squeeze(0)?;
            k_cache.slice_set(&k, 1, pos)?;
            v_cache.slice_set(&v, 1, pos)?;
            let keys = k_cache.narrow(1, 0, kv_len)?;
            let values = v_cache.narrow(1, 0, kv_len)?;

            // Query heads h = kv * group + r share KV head `kv`: group them so each KV
            // head is multiplied once, without repeating K and V.
            let q = q.reshape((n_kv_head, group * seq, head_dim))?;
            let mut att = (q.matmul(&keys.t()?)? * scale)?;
            if let Some(mask) = &mask {
                att = att.reshape((n_kv_head, group, seq, kv_len))?.broadcast_add(mask)?.reshape((
                    n_kv_head,
                    group * seq,
                    kv_len,
                ))?;
            }
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
        let last = x.narrow(0, seq - 1, 1)?;
        let last = candle_nn::ops::rms_norm(&last, &self.norm, eps)?;
        self.output.forward(&last)?.squeeze(0)
    }

    /// Makes room in `cache` for `needed` positions.
    fn reserve(&self, cache: &mut KvCache, needed: usize, device: &Device) -> Result<()> {
        if cache.layers.is_empty() {
            let capacity = needed.div_ceil(CACHE_STEP) * CACHE_STEP;
            let shape = (self.cfg.n_kv_head, capacity, self.cfg.head_dim);
            cache.layers = (0..self.layers.len())
                .map(|_| Ok((Tensor::zeros(shape, DType::F32, device)?, Tensor::zeros(shape, DType::F32, device)?)))
                .collect::<Result<_>>()?;
            cache.capacity = capacity;
        } else if needed > cache.capacity {
            let capacity = (needed.div_ceil(CACHE_STEP) * CACHE_STEP).max(cache.capacity * 2).min(MAX_SEQ_LEN);
            *cache = cache.resized(capacity)?;
        }
        Ok(())
    }
}

/// `[seq, pos + seq]`: 0 where query `i` (at position `pos + i`) may attend, −∞ after.
fn causal_mask(seq: usize, pos: usize, device: &Device) -> Result<Tensor> {
    let kv = pos + seq;
    let values: Vec<f32> = (0..seq)
        .flat_map(|i| (0..kv).map(move |j| if j > pos + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
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

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (na * nb)
    }

    fn argmax(v: &[f32]) -> usize {
        v.iter().enumerate().fold(0, |best, (i, &x)| if x > v[best] { i } else { best })
    }

    /// Our forward pass against candle's `quantized_llama` on the same file: prefill,
    /// then token-by-token decoding, then a cloned cache continuing independently.
    #[test]
    fn logits_match_candle_quantized_llama() {
        let path = crate::model::default_model_path();
        if !path.is_file() {
            eprintln!("SKIPPED: model file `{}` is missing; run `{}`", path.display(), crate::SETUP_COMMAND);
            return;
        }
        let device = Device::Cpu;
        let mut file = File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut file).unwrap();
        let ours = Llama::from_gguf(&content, &mut file, DType::F32, &device).unwrap();
        let mut theirs = ModelWeights::from_gguf(content, &mut file, &device).unwrap();

        // "<|im_start|>user\nHello, world!<|im_end|>\n<|im_start|>assistant\n" then text.
        let tokens: [u32; 16] = [1, 4093, 198, 19556, 28, 905, 17, 2, 198, 1, 520, 9531, 198, 19556, 17, 1073];
        let split = 10;
        let mut cache = ours.new_cache();
        let a = ours.forward(&tokens[..split], &mut cache).unwrap().to_vec1::<f32>().unwrap();
        let input = Tensor::new(&tokens[..split], &device).unwrap().unsqueeze(0).unwrap();
        let b = theirs.forward(&input, 0).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap();
        assert!(cosine(&a, &b) > 0.99, "prefill cosine {}", cosine(&a, &b));
        assert_eq!(argmax(&a), argmax(&b));

        let snapshot = cache.clone();
        let mut last = Vec::new();
        for (i, &t) in tokens.iter().enumerate().skip(split) {
            let a = ours.forward(&[t], &mut cache).unwrap().to_vec1::<f32>().unwrap();
            let input = Tensor::new(&[t], &device).unwrap().unsqueeze(0).unwrap();
            let b = theirs.forward(&input, i).unwrap().squeeze(0).unwrap().to_vec1::<f32>().unwrap();
            assert!(cosine(&a, &b) > 0.99, "step {i}: cosine {}", cosine(&a, &b));
            last = a;
        }
        // The snapshot was not touched by the steps above: replaying them from it in
        // one batch gives the same final logits.
        let mut replay = snapshot;
        assert_eq!(replay.len(), split);
        let again = ours.forward(&tokens[split..], &mut replay).unwrap().to_vec1::<f32>().unwrap();
        assert!(cosine(&again, &last) > 0.9999, "replay cosine {}", cosine(&again, &last));
    }
}
