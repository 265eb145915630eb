//! Our forward passes against a reference implementation's logits (unit tests only).

use crate::llama::KvCache;

/// The cosine similarity of two logit vectors.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

/// The index of the largest logit.
pub(crate) fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold(0, |best, (i, &x)| if x > v[best] { i } else { best })
}

/// Prefills `tokens[..split]` in ours (on `cache`) and in the reference, then decodes the
/// rest one token at a time in both: at every step the top token must be the same and
/// the logits close. Then the steps are replayed from a copy of our cache taken after
/// the prefill, which the steps must not have touched: one token at a time, the last
/// logits come out again bit for bit; in one batch (prefill's dense path), close to them.
/// `theirs` takes the tokens and their first position. Returns the reference's prefill
/// logits.
///
/// How close: both sides decode with the input of each product rounded to 8 bits per
/// block of 32 (llama.cpp's scheme, which candle follows too), but from slightly
/// different states, so the roundings differ, and a rounding that flips in one layer
/// moves every later one. Most steps agree to a cosine of 0.99 or more. On SmolLM2 the
/// step right after the `<|im_start|>` marker, whose logits are one very high peak
/// ("assistant", 38) over a flat mass, is the exception: cosine 0.93 to 0.98 against
/// candle depending on the order our kernels sum in (0.991 when our products were exact
/// F32), with the same top token. Hence a bound per step, and a tighter one on the mean.
pub(crate) fn compare_logits(
    tokens: &[u32],
    split: usize,
    mut cache: KvCache,
    ours: &dyn Fn(&[u32], &mut KvCache) -> Vec<f32>,
    theirs: &mut dyn FnMut(&[u32], usize) -> Vec<f32>,
) -> Vec<f32> {
    let a = ours(&tokens[..split], &mut cache);
    let prefill = theirs(&tokens[..split], 0);
    assert!(cosine(&a, &prefill) > 0.99, "prefill cosine {}", cosine(&a, &prefill));
    assert_eq!(argmax(&a), argmax(&prefill));

    let snapshot = cache.clone();
    let mut last = Vec::new();
    let mut cosines = Vec::new();
    for (i, &t) in tokens.iter().enumerate().skip(split) {
        let a = ours(&[t], &mut cache);
        let b = theirs(&[t], i);
        let c = cosine(&a, &b);
        assert!(c > 0.9, "step {i}: cosine {c}");
        assert_eq!(argmax(&a), argmax(&b), "step {i}: top tokens differ (cosine {c})");
        cosines.push(c);
        last = a;
    }
    let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
    assert!(mean > 0.98, "mean cosine {mean} over the steps: {cosines:?}");
    let mut stepwise = snapshot.clone();
    let mut again = Vec::new();
    for &t in &tokens[split..] {
        again = ours(&[t], &mut stepwise);
    }
    assert_eq!(again, last, "the steps changed the snapshot");
    let mut replay = snapshot;
    assert_eq!(replay.len(), split);
    let batch = ours(&tokens[split..], &mut replay);
    assert!(cosine(&batch, &last) > 0.995, "replay cosine {}", cosine(&batch, &last));
    prefill
}
