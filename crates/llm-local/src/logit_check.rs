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
/// rest one token at a time in both: every step's logits must be close (cosine > 0.99),
/// and the prefill's top token the same. Then the steps are replayed in one batch from a
/// copy of our cache taken after the prefill, which the steps must not have touched: the
/// last logits come out again. `theirs` takes the tokens and their first position.
/// Returns the reference's prefill logits.
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
    for (i, &t) in tokens.iter().enumerate().skip(split) {
        let a = ours(&[t], &mut cache);
        let b = theirs(&[t], i);
        assert!(cosine(&a, &b) > 0.99, "step {i}: cosine {}", cosine(&a, &b));
        last = a;
    }
    let mut replay = snapshot;
    assert_eq!(replay.len(), split);
    let again = ours(&tokens[split..], &mut replay);
    assert!(cosine(&again, &last) > 0.9999, "replay cosine {}", cosine(&again, &last));
    prefill
}
