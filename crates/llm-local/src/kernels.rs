//! Matrix-vector products over the GGUF's own quantised blocks, for decoding one token.
//!
//! Generating a token multiplies every weight once, so decoding runs at the speed of
//! reading the weights and multiplying them. Kept in the file's Q4_1 (20 bytes per 32
//! weights) and Q8_0 (34 bytes per 32) blocks, they are a quarter and a half of F16's
//! bytes. The input vector is quantised the same way, to a signed byte per value and a
//! scale per block of 32 ([`Q8Input`], as llama.cpp does), so a block's product is an
//! integer dot product: four SIMD instructions for 32 weights where widening every
//! weight to F32 took twelve. That rounds each input value by at most half its block's
//! step (`max |x| / 254`); the Q4_1 offset term uses the exact F32 block sums.
//!
//! This is the one module of the workspace with `unsafe` code: x86 SIMD intrinsics,
//! entered only after runtime detection of the CPU features they need. Other CPUs run
//! the portable loops, which give the same sums up to rounding.
#![allow(unsafe_code)]

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType, Device, Result};
use rayon::prelude::*;

/// Weights per quantisation block, for both Q4_1 and Q8_0.
const BLOCK: usize = 32;
/// Rows per parallel task: small enough to split the output matrix across threads,
/// large enough that scheduling costs nothing next to the arithmetic.
const ROWS_PER_TASK: usize = 64;

/// 32 weights `d·q + m` with `q` in `0..16`. Byte `i` holds weight `i` in its low
/// nibble and weight `i + 16` in its high nibble (GGML's layout).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockQ4_1 {
    d: f32,
    m: f32,
    qs: [u8; 16],
}

/// 32 weights `d·q` with `q` a signed byte.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockQ8_0 {
    d: f32,
    qs: [i8; 32],
}

#[derive(Debug, Clone)]
enum Storage {
    Q4_1(Vec<BlockQ4_1>),
    Q8_0(Vec<BlockQ8_0>),
    /// Any other type, dequantised at load.
    F32(Vec<f32>),
}

/// A weight matrix `[rows, cols]` (output × input), row-major.
#[derive(Debug, Clone)]
pub(crate) struct QMatrix {
    rows: usize,
    cols: usize,
    storage: Storage,
}

impl QMatrix {
    /// Takes a GGUF tensor `[rows, cols]`, keeping Q4_1 and Q8_0 blocks as they are.
    pub(crate) fn from_qtensor(tensor: &QTensor) -> Result<QMatrix> {
        let (rows, cols) = tensor.shape().dims2()?;
        let raw = tensor.data()?;
        let storage = match tensor.dtype() {
            GgmlDType::Q4_1 if cols % BLOCK == 0 => Storage::Q4_1(raw.chunks_exact(20).map(parse_q4_1).collect()),
            GgmlDType::Q8_0 if cols % BLOCK == 0 => Storage::Q8_0(raw.chunks_exact(34).map(parse_q8_0).collect()),
            _ => Storage::F32(tensor.dequantize(&Device::Cpu)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?),
        };
        Ok(QMatrix { rows, cols, storage })
    }

    /// Stacks matrices with the same number of columns, rows after rows.
    pub(crate) fn stack(parts: Vec<QMatrix>) -> Result<QMatrix> {
        let mut parts = parts.into_iter();
        let Some(mut out) = parts.next() else { candle_core::bail!("nothing to stack") };
        for part in parts {
            if part.cols != out.cols {
                candle_core::bail!("cannot stack {} columns under {}", part.cols, out.cols);
            }
            match (&mut out.storage, part.storage) {
                (Storage::Q4_1(a), Storage::Q4_1(b)) => a.extend(b),
                (Storage::Q8_0(a), Storage::Q8_0(b)) => a.extend(b),
                (Storage::F32(a), Storage::F32(b)) => a.extend(b),
                _ => candle_core::bail!("cannot stack matrices of different block types"),
            }
            out.rows += part.rows;
        }
        Ok(out)
    }

    /// The number of output rows.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Row `r`, dequantised into `out` (`cols` values): an embedding lookup.
    pub(crate) fn row_into(&self, r: usize, out: &mut [f32]) {
        let per_row = self.cols / BLOCK;
        match &self.storage {
            Storage::Q4_1(blocks) => {
                for (b, o) in blocks[r * per_row..(r + 1) * per_row].iter().zip(out.chunks_exact_mut(BLOCK)) {
                    for (i, &q) in b.qs.iter().enumerate() {
                        o[i] = b.d * f32::from(q & 0x0F) + b.m;
                        o[i + 16] = b.d * f32::from(q >> 4) + b.m;
                    }
                }
            }
            Storage::Q8_0(blocks) => {
                for (b, o) in blocks[r * per_row..(r + 1) * per_row].iter().zip(out.chunks_exact_mut(BLOCK)) {
                    for (o, &q) in o.iter_mut().zip(&b.qs) {
                        *o = b.d * f32::from(q);
                    }
                }
            }
            Storage::F32(w) => out.copy_from_slice(&w[r * self.cols..(r + 1) * self.cols]),
        }
    }

    /// `out = W · x`, with `x` of length `cols` and `out` of length `rows`.
    pub(crate) fn matvec(&self, x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), self.cols, "input length");
        assert_eq!(out.len(), self.rows, "output length");
        let cols = self.cols;
        match &self.storage {
            Storage::Q4_1(blocks) => {
                // Σ (d·q + m)·x = d·Σ q·x + m·Σ x: the input's block sums serve every row.
                let x = Q8Input::new(x);
                let per_row = cols / BLOCK;
                par_rows(out, |first, chunk| {
                    let blocks = &blocks[first * per_row..(first + chunk.len()) * per_row];
                    rows_q4_1(blocks, &x, chunk);
                });
            }
            Storage::Q8_0(blocks) => {
                let x = Q8Input::new(x);
                let per_row = cols / BLOCK;
                par_rows(out, |first, chunk| {
                    let blocks = &blocks[first * per_row..(first + chunk.len()) * per_row];
                    rows_q8_0(blocks, &x, chunk);
                });
            }
            Storage::F32(w) => par_rows(out, |first, chunk| {
                for (i, o) in chunk.iter_mut().enumerate() {
                    *o = dot(&w[(first + i) * cols..(first + i + 1) * cols], x);
                }
            }),
        }
    }
}

/// An input vector quantised for the integer products: per block of 32 values, a
/// scale `d = max |x| / 127`, the values as signed bytes `round(x / d)`, and the exact
/// F32 sum of the block (for Q4_1's offsets).
#[derive(Debug)]
pub(crate) struct Q8Input {
    d: Vec<f32>,
    qs: Vec<i8>,
    sums: Vec<f32>,
}

impl Q8Input {
    /// Quantises `x`, whose length is a multiple of 32.
    pub(crate) fn new(x: &[f32]) -> Q8Input {
        let blocks = x.len() / BLOCK;
        let mut input =
            Q8Input { d: Vec::with_capacity(blocks), qs: vec![0; x.len()], sums: Vec::with_capacity(blocks) };
        for (values, qs) in x.chunks_exact(BLOCK).zip(input.qs.chunks_exact_mut(BLOCK)) {
            let max = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = max / 127.0;
            if d > 0.0 {
                let inverse = 1.0 / d;
                for (q, v) in qs.iter_mut().zip(values) {
                    // |v·inverse| ≤ 127 up to rounding; the cast saturates.
                    *q = (v * inverse).round() as i8;
                }
            }
            input.d.push(d);
            input.sums.push(values.iter().sum());
        }
        input
    }

    /// The number of blocks.
    fn blocks(&self) -> usize {
        self.d.len()
    }
}

/// Runs `f(first_row, rows)` over chunks of `out`, in parallel on rayon's pool.
fn par_rows(out: &mut [f32], f: impl Fn(usize, &mut [f32]) + Sync) {
    out.par_chunks_mut(ROWS_PER_TASK).enumerate().for_each(|(i, chunk)| f(i * ROWS_PER_TASK, chunk));
}

fn f16_at(bytes: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([bytes[0], bytes[1]])).to_f32()
}

fn parse_q4_1(raw: &[u8]) -> BlockQ4_1 {
    let mut qs = [0u8; 16];
    qs.copy_from_slice(&raw[4..20]);
    BlockQ4_1 { d: f16_at(&raw[0..2]), m: f16_at(&raw[2..4]), qs }
}

fn parse_q8_0(raw: &[u8]) -> BlockQ8_0 {
    let mut qs = [0i8; 32];
    for (q, &b) in qs.iter_mut().zip(&raw[2..34]) {
        *q = i8::from_ne_bytes([b]);
    }
    BlockQ8_0 { d: f16_at(&raw[0..2]), qs }
}

/// The attention heads' shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heads {
    pub(crate) n_head: usize,
    pub(crate) n_kv_head: usize,
    pub(crate) head_dim: usize,
}

/// Attention of one position's query heads `q` (`n_head · head_dim`) over cached keys
/// and values (position-major, `[len, n_kv_head, head_dim]`), written into `out`.
pub(crate) fn attend(q: &[f32], keys: &[f32], values: &[f32], heads: Heads, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        unsafe { x86::attend(q, keys, values, heads, out) };
        return;
    }
    attend_lanes(q, keys, values, heads, out);
}

/// [`attend`] in plain loops, inlined into the SIMD entry point so that the compiler
/// vectorises it for the detected features.
#[inline(always)]
fn attend_lanes(q: &[f32], keys: &[f32], values: &[f32], heads: Heads, out: &mut [f32]) {
    let Heads { n_head, n_kv_head, head_dim } = heads;
    let group = n_head / n_kv_head;
    let stride = n_kv_head * head_dim;
    let len = keys.len() / stride;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let mut scores = vec![0.0f32; len];
    for (h, (qh, oh)) in q.chunks_exact(head_dim).zip(out.chunks_exact_mut(head_dim)).enumerate() {
        let offset = (h / group) * head_dim;
        for (s, k) in scores.iter_mut().zip(keys.chunks_exact(stride)) {
            *s = dot(qh, &k[offset..offset + head_dim]) * scale;
        }
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0;
        for s in &mut scores {
            *s = (*s - max).exp();
            total += *s;
        }
        oh.fill(0.0);
        for (s, v) in scores.iter().zip(values.chunks_exact(stride)) {
            let weight = s / total;
            for (o, v) in oh.iter_mut().zip(&v[offset..offset + head_dim]) {
                *o += weight * v;
            }
        }
    }
}

/// `Σ a·b`, in eight lanes so that the compiler can vectorise the sum (with the
/// detected features, when inlined into a SIMD entry point).
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a8.remainder().iter().zip(b8.remainder()).map(|(x, y)| x * y).sum();
    for (a, b) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] += a[i] * b[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

fn rows_q4_1(blocks: &[BlockQ4_1], x: &Q8Input, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        unsafe { x86::rows_q4_1(blocks, x, out) };
        return;
    }
    rows_q4_1_portable(blocks, x, out);
}

/// Each row is `x.blocks()` blocks; a block's product is `d·dₓ·Σ q·qₓ + m·Σ x`.
fn rows_q4_1_portable(blocks: &[BlockQ4_1], x: &Q8Input, out: &mut [f32]) {
    for (row, o) in blocks.chunks_exact(x.blocks()).zip(out) {
        *o = row
            .iter()
            .zip(x.qs.chunks_exact(BLOCK))
            .zip(x.d.iter().zip(&x.sums))
            .map(|((b, qx), (dx, sum))| {
                let mut total = 0i32;
                for (i, &q) in b.qs.iter().enumerate() {
                    total += i32::from(q & 0x0F) * i32::from(qx[i]) + i32::from(q >> 4) * i32::from(qx[i + 16]);
                }
                b.d * dx * total as f32 + b.m * sum
            })
            .sum();
    }
}

fn rows_q8_0(blocks: &[BlockQ8_0], x: &Q8Input, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA, checked just above.
        unsafe { x86::rows_q8_0(blocks, x, out) };
        return;
    }
    rows_q8_0_portable(blocks, x, out);
}

/// Each row is `x.blocks()` blocks; a block's product is `d·dₓ·Σ q·qₓ`.
fn rows_q8_0_portable(blocks: &[BlockQ8_0], x: &Q8Input, out: &mut [f32]) {
    for (row, o) in blocks.chunks_exact(x.blocks()).zip(out) {
        *o = row
            .iter()
            .zip(x.qs.chunks_exact(BLOCK))
            .zip(&x.d)
            .map(|((b, qx), dx)| {
                let total: i32 = b.qs.iter().zip(qx).map(|(&w, &q)| i32::from(w) * i32::from(q)).sum();
                b.d * dx * total as f32
            })
            .sum();
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m256, __m256i, _mm_add_ps, _mm_add_ss, _mm_and_si128, _mm_cvtss_f32, _mm_loadu_si128, _mm_movehl_ps,
        _mm_set1_epi8, _mm_shuffle_ps, _mm_srli_epi16, _mm256_add_ps, _mm256_castps256_ps128, _mm256_cvtepi32_ps,
        _mm256_extractf128_ps, _mm256_fmadd_ps, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16,
        _mm256_set_m128i, _mm256_set1_epi16, _mm256_set1_ps, _mm256_setzero_ps, _mm256_sign_epi8,
    };

    use super::{BLOCK, BlockQ4_1, BlockQ8_0, Heads, Q8Input};

    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn attend(q: &[f32], keys: &[f32], values: &[f32], heads: Heads, out: &mut [f32]) {
        super::attend_lanes(q, keys, values, heads, out);
    }

    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }

    /// The 32 input bytes of block `i`.
    ///
    /// # Safety
    /// `x` must hold at least `32·(i + 1)` values, and the CPU support AVX2.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn input_block(x: &Q8Input, i: usize) -> __m256i {
        // SAFETY: the caller guarantees the 32 bytes at `32·i` exist.
        unsafe { _mm256_loadu_si256(x.qs.as_ptr().add(i * BLOCK).cast()) }
    }

    /// `Σ w·x` of 32 unsigned weight bytes and 32 signed input bytes, as eight i32
    /// partial sums converted to F32. Exact for our inputs: a weight is at most 128 and
    /// an input byte at most 127 in size, so a pair fits the i16 `maddubs` makes
    /// (2·128·127 < 2¹⁵) and a lane's four products fit an F32's 24-bit mantissa.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn products(w: __m256i, x: __m256i) -> __m256 {
        let pairs = _mm256_maddubs_epi16(w, x);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }

    /// The eight partial sums `Σ q·qₓ` of Q4_1 block `b` and input block `i`.
    ///
    /// # Safety
    /// `x` must hold at least `32·(i + 1)` values, and the CPU support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn q4_1_products(b: &BlockQ4_1, x: &Q8Input, i: usize) -> __m256 {
        // SAFETY: `qs` is 16 bytes; the caller guarantees input block `i`.
        let (bytes, xs) = unsafe { (_mm_loadu_si128(b.qs.as_ptr().cast()), input_block(x, i)) };
        // Weights 0..16 are the low nibbles, 16..32 the high ones: the input's order.
        let nibble = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(bytes, nibble);
        let hi = _mm_and_si128(_mm_srli_epi16::<4>(bytes), nibble);
        products(_mm256_set_m128i(hi, lo), xs)
    }

    /// The eight partial sums `Σ q·qₓ` of Q8_0 block `b` and input block `i`.
    ///
    /// # Safety
    /// `x` must hold at least `32·(i + 1)` values, and the CPU support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn q8_0_products(b: &BlockQ8_0, x: &Q8Input, i: usize) -> __m256 {
        // SAFETY: `qs` is 32 bytes; the caller guarantees input block `i`.
        let (w, xs) = unsafe { (_mm256_loadu_si256(b.qs.as_ptr().cast()), input_block(x, i)) };
        // Signed by signed, as unsigned by signed: |w| · (x with w's sign).
        products(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xs, w))
    }

    /// Each row is `x.blocks()` blocks. Two blocks at a time, into two accumulators, so
    /// that consecutive blocks do not wait for each other's additions.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows_q4_1(blocks: &[BlockQ4_1], x: &Q8Input, out: &mut [f32]) {
        let per_row = x.blocks();
        assert!(x.qs.len() >= per_row * BLOCK && x.sums.len() >= per_row);
        for (row, o) in blocks.chunks_exact(per_row).zip(out) {
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let (mut offset0, mut offset1) = (0.0f32, 0.0f32);
            let mut i = 0;
            while i + 1 < per_row {
                let (b0, b1) = (&row[i], &row[i + 1]);
                // SAFETY: input blocks `i` and `i + 1` exist (`i + 1 < per_row`, asserted above).
                let (p0, p1) = unsafe { (q4_1_products(b0, x, i), q4_1_products(b1, x, i + 1)) };
                acc0 = _mm256_fmadd_ps(_mm256_set1_ps(b0.d * x.d[i]), p0, acc0);
                acc1 = _mm256_fmadd_ps(_mm256_set1_ps(b1.d * x.d[i + 1]), p1, acc1);
                offset0 += b0.m * x.sums[i];
                offset1 += b1.m * x.sums[i + 1];
                i += 2;
            }
            if i < per_row {
                let b = &row[i];
                // SAFETY: input block `i` exists (`i < per_row`, asserted above).
                let p = unsafe { q4_1_products(b, x, i) };
                acc0 = _mm256_fmadd_ps(_mm256_set1_ps(b.d * x.d[i]), p, acc0);
                offset0 += b.m * x.sums[i];
            }
            *o = hsum(_mm256_add_ps(acc0, acc1)) + (offset0 + offset1);
        }
    }

    /// Each row is `x.blocks()` blocks, two at a time as in [`rows_q4_1`].
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn rows_q8_0(blocks: &[BlockQ8_0], x: &Q8Input, out: &mut [f32]) {
        let per_row = x.blocks();
        assert!(x.qs.len() >= per_row * BLOCK);
        for (row, o) in blocks.chunks_exact(per_row).zip(out) {
            let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            let mut i = 0;
            while i + 1 < per_row {
                let (b0, b1) = (&row[i], &row[i + 1]);
                // SAFETY: input blocks `i` and `i + 1` exist (`i + 1 < per_row`, asserted above).
                let (p0, p1) = unsafe { (q8_0_products(b0, x, i), q8_0_products(b1, x, i + 1)) };
                acc0 = _mm256_fmadd_ps(_mm256_set1_ps(b0.d * x.d[i]), p0, acc0);
                acc1 = _mm256_fmadd_ps(_mm256_set1_ps(b1.d * x.d[i + 1]), p1, acc1);
                i += 2;
            }
            if i < per_row {
                let b = &row[i];
                // SAFETY: input block `i` exists (`i < per_row`, asserted above).
                let p = unsafe { q8_0_products(b, x, i) };
                acc0 = _mm256_fmadd_ps(_mm256_set1_ps(b.d * x.d[i]), p, acc0);
            }
            *o = hsum(_mm256_add_ps(acc0, acc1));
        }
    }
}

#[cfg(test)]
mod tests {
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    use super::{Q8Input, QMatrix, Storage, rows_q4_1_portable, rows_q8_0_portable};

    /// A deterministic pseudo-random matrix, quantised by candle to `dtype`.
    fn quantised(rows: usize, cols: usize, dtype: GgmlDType) -> (QTensor, Vec<f32>) {
        let values: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0).collect();
        let t = Tensor::from_vec(values, (rows, cols), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&t, dtype).unwrap();
        // The reference is what candle dequantises the blocks to.
        let dense = q.dequantize(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        (q, dense)
    }

    fn reference(dense: &[f32], cols: usize, x: &[f32]) -> Vec<f32> {
        dense
            .chunks_exact(cols)
            .map(|row| row.iter().zip(x).map(|(w, x)| f64::from(*w) * f64::from(*x)).sum::<f64>() as f32)
            .collect()
    }

    /// How far a row's product may be from the exact one: each input value is rounded by
    /// at most half its block's step, `max |x| / 254`, times the weight it meets.
    fn bound(dense: &[f32], cols: usize, x: &[f32]) -> Vec<f32> {
        dense
            .chunks_exact(cols)
            .map(|row| {
                row.chunks_exact(32)
                    .zip(x.chunks_exact(32))
                    .map(|(w, x)| {
                        let step = x.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 254.0;
                        w.iter().map(|w| w.abs()).sum::<f32>() * step
                    })
                    .sum::<f32>()
                    + 1e-4
            })
            .collect()
    }

    fn check(dtype: GgmlDType) {
        let (rows, cols) = (130, 96);
        let (q, dense) = quantised(rows, cols, dtype);
        let m = QMatrix::from_qtensor(&q).unwrap();
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut out = vec![0.0; rows];
        m.matvec(&x, &mut out);
        let exact = reference(&dense, cols, &x);
        let quantised_input = matches!(dtype, GgmlDType::Q4_1 | GgmlDType::Q8_0);
        let bounds = if quantised_input { bound(&dense, cols, &x) } else { vec![0.0; rows] };
        let mut largest_error = 0.0f32;
        for (r, ((got, want), bound)) in out.iter().zip(exact).zip(bounds).enumerate() {
            let error = (got - want).abs();
            assert!(error <= bound + 1e-4 * (1.0 + want.abs()), "{dtype:?} row {r}: {got} vs {want} (bound {bound})");
            largest_error = largest_error.max(error);
        }
        if quantised_input {
            // The input really is quantised: the products are not the exact F32 ones.
            assert!(largest_error > 1e-5, "{dtype:?}: no rounding at all ({largest_error})");
        }
        let mut row = vec![0.0; cols];
        m.row_into(77, &mut row);
        assert_eq!(row, dense[77 * cols..78 * cols]);
    }

    #[test]
    fn q4_1_products_equal_the_dequantised_weights() {
        check(GgmlDType::Q4_1);
    }

    #[test]
    fn q8_0_products_equal_the_dequantised_weights() {
        check(GgmlDType::Q8_0);
    }

    /// The portable loops (what CPUs without AVX2 run) agree with the dispatched kernel.
    #[test]
    fn portable_loops_agree_with_the_dispatched_kernels() {
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
            let (rows, cols) = (70, 128);
            let (q, _) = quantised(rows, cols, dtype);
            let m = QMatrix::from_qtensor(&q).unwrap();
            let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.11).cos()).collect();
            let (mut fast, mut portable) = (vec![0.0; rows], vec![0.0; rows]);
            m.matvec(&x, &mut fast);
            let input = Q8Input::new(&x);
            match &m.storage {
                Storage::Q4_1(b) => rows_q4_1_portable(b, &input, &mut portable),
                Storage::Q8_0(b) => rows_q8_0_portable(b, &input, &mut portable),
                Storage::F32(_) => unreachable!("{dtype:?} is kept in blocks"),
            }
            for (a, b) in fast.iter().zip(&portable) {
                assert!((a - b).abs() < 1e-4 * (1.0 + b.abs()), "{dtype:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn other_types_fall_back_to_f32() {
        check(GgmlDType::F16);
    }

    #[test]
    fn stacked_matrices_multiply_as_one() {
        let (a, _) = quantised(40, 64, GgmlDType::Q4_1);
        let (b, _) = quantised(24, 64, GgmlDType::Q4_1);
        let (a, b) = (QMatrix::from_qtensor(&a).unwrap(), QMatrix::from_qtensor(&b).unwrap());
        let m = QMatrix::stack(vec![a.clone(), b.clone()]).unwrap();
        assert_eq!(m.rows(), 64);
        let x: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
        let (mut out, mut top, mut bottom) = (vec![0.0; 64], vec![0.0; 40], vec![0.0; 24]);
        m.matvec(&x, &mut out);
        a.matvec(&x, &mut top);
        b.matvec(&x, &mut bottom);
        assert_eq!(out, [top, bottom].concat());
    }
}
