//! The prefix cache: KV states of prompt prefixes, shared by every request in the
//! process, so that no token sequence is prefilled twice.
//!
//! It is a radix tree over token sequences whose edges are blocks of [`BLOCK`] tokens
//! (vLLM's automatic prefix caching works in blocks too). A node holds the keys and
//! values of its block's positions, so a prefix shared by many prompts is stored once.
//! A request walks the tree as far as its prompt matches, copies the KV of the blocks on
//! the way into its session, and prefills only the rest; the full blocks it prefilled are
//! added to the tree. Blocks are evicted least recently used first, leaves before their
//! parents, to stay under a byte bound.
//!
//! # The invariant: the same output with and without the cache
//!
//! A forward pass over a batch of tokens is not bit-identical to the same tokens split
//! into two batches: the matrix products block and sum differently. So every prompt is
//! prefilled in the same pieces whether or not the cache is used: one piece per block,
//! aligned to absolute positions (`0..BLOCK`, `BLOCK..2·BLOCK`, …, then the tail). A
//! cached block was computed as exactly such a piece, after exactly the same earlier
//! pieces, so reusing it gives the very numbers a cold prefill would. Only prefilled
//! blocks are stored: positions decoded one token at a time go through another code
//! path, so a decoded reply that a later prompt repeats is prefilled again, not reused.

use crate::llama::KvCache;

/// Tokens per block: the granularity of reuse, and the size of prefill's batches.
pub(crate) const BLOCK: usize = 64;

/// The default memory bound, in MiB: about 44,000 tokens of the embedded model's KV.
pub const DEFAULT_PREFIX_CACHE_MB: u64 = 2048;

const ROOT: usize = 0;

struct Node {
    parent: usize,
    /// The block's tokens (empty for the root).
    tokens: Vec<u32>,
    /// Keys and values of the block's positions, per layer.
    kv: Vec<(Vec<f32>, Vec<f32>)>,
    children: Vec<usize>,
    last_used: u64,
    bytes: usize,
}

/// Counters of the prefix cache since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Requests that reused at least one cached block.
    pub hits: u64,
    /// Requests that reused nothing.
    pub misses: u64,
    /// Prompt tokens served from the cache.
    pub reused_tokens: u64,
    /// Prompt tokens prefilled.
    pub prefilled_tokens: u64,
    /// Blocks evicted to stay under the bound.
    pub evicted_blocks: u64,
    /// Blocks held now.
    pub blocks: u64,
    /// Bytes of KV held now.
    pub bytes: u64,
}

/// The tree. Index 0 is the root; freed slots are reused.
pub(crate) struct PrefixTree {
    nodes: Vec<Option<Node>>,
    free: Vec<usize>,
    budget: usize,
    used: usize,
    tick: u64,
    stats: PrefixCacheStats,
}

impl PrefixTree {
    /// An empty tree holding at most `budget_bytes` of KV; 0 turns caching off (blocks
    /// are still prefilled in the same pieces).
    pub(crate) fn new(budget_bytes: usize) -> PrefixTree {
        let root =
            Node { parent: ROOT, tokens: Vec::new(), kv: Vec::new(), children: Vec::new(), last_used: 0, bytes: 0 };
        PrefixTree {
            nodes: vec![Some(root)],
            free: Vec::new(),
            budget: budget_bytes,
            used: 0,
            tick: 0,
            stats: PrefixCacheStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> PrefixCacheStats {
        let blocks = self.nodes.iter().flatten().count().saturating_sub(1);
        PrefixCacheStats { blocks: blocks as u64, bytes: self.used as u64, ..self.stats }
    }

    fn node(&self, id: usize) -> &Node {
        self.nodes[id].as_ref().expect("a live node id")
    }

    fn node_mut(&mut self, id: usize) -> &mut Node {
        self.nodes[id].as_mut().expect("a live node id")
    }

    fn child(&self, parent: usize, block: &[u32]) -> Option<usize> {
        self.node(parent).children.iter().copied().find(|&c| self.node(c).tokens == block)
    }

    /// The cached blocks `prompt` starts with, root first, leaving at least one token
    /// of the prompt to prefill (its logits are needed). Marks them used.
    pub(crate) fn lookup(&mut self, prompt: &[u32]) -> Vec<usize> {
        self.tick += 1;
        let mut path = Vec::new();
        let mut at = ROOT;
        let reusable = prompt.len().saturating_sub(1) / BLOCK;
        for block in prompt.chunks_exact(BLOCK).take(reusable) {
            match self.child(at, block) {
                Some(next) => {
                    path.push(next);
                    at = next;
                }
                None => break,
            }
        }
        let tick = self.tick;
        for &id in &path {
            self.node_mut(id).last_used = tick;
        }
        path
    }

    /// Copies the KV of the blocks on `path` into `cache` (empty).
    pub(crate) fn restore(&self, path: &[usize], cache: &mut KvCache) {
        for &id in path {
            cache.append(&self.node(id).kv, BLOCK);
        }
    }

    /// Counts one request that reused `reused` tokens and prefilled `prefilled`.
    pub(crate) fn count(&mut self, reused: usize, prefilled: usize) {
        if reused > 0 {
            self.stats.hits += 1;
        } else {
            self.stats.misses += 1;
        }
        self.stats.reused_tokens += reused as u64;
        self.stats.prefilled_tokens += prefilled as u64;
    }

    /// Adds the full blocks of `prompt` after the `path` found by [`PrefixTree::lookup`],
    /// taking their KV from `cache` (which holds at least the whole prompt), then evicts
    /// down to the bound.
    pub(crate) fn insert(&mut self, path: &[usize], prompt: &[u32], cache: &KvCache) {
        if self.budget == 0 {
            return;
        }
        let mut at = path.last().copied().unwrap_or(ROOT);
        let tick = self.tick;
        for (i, block) in prompt.chunks_exact(BLOCK).enumerate().skip(path.len()) {
            if let Some(existing) = self.child(at, block) {
                at = existing;
                self.node_mut(at).last_used = tick;
                continue;
            }
            let kv = cache.positions(i * BLOCK, (i + 1) * BLOCK);
            let bytes =
                kv.iter().map(|(k, v)| (k.len() + v.len()) * size_of::<f32>()).sum::<usize>() + size_of_val(block);
            let node = Node { parent: at, tokens: block.to_vec(), kv, children: Vec::new(), last_used: tick, bytes };
            let id = match self.free.pop() {
                Some(id) => {
                    self.nodes[id] = Some(node);
                    id
                }
                None => {
                    self.nodes.push(Some(node));
                    self.nodes.len() - 1
                }
            };
            self.node_mut(at).children.push(id);
            self.used += bytes;
            at = id;
        }
        self.evict();
    }

    /// Drops least recently used leaves until the tree fits its bound.
    fn evict(&mut self) {
        while self.used > self.budget {
            let victim = self
                .nodes
                .iter()
                .enumerate()
                .skip(1)
                .filter_map(|(id, n)| n.as_ref().filter(|n| n.children.is_empty()).map(|n| (n.last_used, id)))
                .min();
            let Some((_, id)) = victim else { return };
            let node = self.nodes[id].take().expect("a live leaf");
            self.node_mut(node.parent).children.retain(|&c| c != id);
            self.used -= node.bytes;
            self.free.push(id);
            self.stats.evicted_blocks += 1;
        }
    }
}

/// Where prefill of a prompt of `len` tokens, from position `from`, cuts its pieces:
/// the ends of the blocks, then `len`.
pub(crate) fn pieces(from: usize, len: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut start = from;
    std::iter::from_fn(move || {
        if start >= len {
            return None;
        }
        let end = ((start / BLOCK + 1) * BLOCK).min(len);
        let piece = (start, end);
        start = end;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYERS: usize = 2;
    const STRIDE: usize = 3;
    /// The bytes one block takes in these tests.
    const BLOCK_BYTES: usize = BLOCK * (2 * LAYERS * STRIDE * 4 + 4);

    fn prompt(seed: u32, len: usize) -> Vec<u32> {
        (0..len as u32).map(|i| seed * 10_000 + i).collect()
    }

    /// Looks `prompt` up, "prefills" the rest, and inserts it; returns the tokens reused.
    fn serve(tree: &mut PrefixTree, prompt: &[u32]) -> usize {
        let path = tree.lookup(prompt);
        let mut cache = KvCache::numbered(LAYERS, 0, STRIDE);
        tree.restore(&path, &mut cache);
        let reused = cache.len();
        assert_eq!(cache.positions(0, reused), KvCache::numbered(LAYERS, reused, STRIDE).positions(0, reused));
        tree.insert(&path, prompt, &KvCache::numbered(LAYERS, prompt.len(), STRIDE));
        reused
    }

    #[test]
    fn a_prompt_reuses_the_blocks_an_earlier_one_shares_and_keeps_a_token_to_run() {
        let mut tree = PrefixTree::new(usize::MAX);
        assert_eq!(serve(&mut tree, &prompt(1, 3 * BLOCK + 10)), 0);
        assert_eq!(tree.stats().blocks, 3);
        // The same prompt reuses its three blocks; a longer one too; one that diverges
        // in the second block reuses only the first.
        assert_eq!(serve(&mut tree, &prompt(1, 3 * BLOCK + 10)), 3 * BLOCK);
        assert_eq!(serve(&mut tree, &prompt(1, 5 * BLOCK)), 3 * BLOCK);
        let mut diverging = prompt(1, 3 * BLOCK);
        diverging[BLOCK + 1] = 7;
        assert_eq!(serve(&mut tree, &diverging), BLOCK);
        // A prompt of exactly five blocks leaves its last block to run for the logits.
        assert_eq!(serve(&mut tree, &prompt(1, 5 * BLOCK)), 4 * BLOCK);
        assert_eq!(tree.stats().blocks, 5 + 2);
    }

    #[test]
    fn eviction_keeps_the_bound_and_drops_least_recently_used_leaves_first() {
        let mut tree = PrefixTree::new(4 * BLOCK_BYTES);
        serve(&mut tree, &prompt(1, 2 * BLOCK + 1));
        serve(&mut tree, &prompt(2, 2 * BLOCK + 1));
        assert_eq!(tree.stats().bytes as usize, 4 * BLOCK_BYTES);
        // Touch prompt 1, then add prompt 3: prompt 2, the least recently used, goes.
        assert_eq!(serve(&mut tree, &prompt(1, 2 * BLOCK + 1)), 2 * BLOCK);
        serve(&mut tree, &prompt(3, 2 * BLOCK + 1));
        let stats = tree.stats();
        assert!(stats.bytes as usize <= 4 * BLOCK_BYTES, "{stats:?}");
        assert_eq!(stats.evicted_blocks, 2);
        assert_eq!(serve(&mut tree, &prompt(1, 2 * BLOCK + 1)), 2 * BLOCK);
        assert_eq!(serve(&mut tree, &prompt(3, 2 * BLOCK + 1)), 2 * BLOCK);
        assert_eq!(serve(&mut tree, &prompt(2, 2 * BLOCK + 1)), 0);
    }

    #[test]
    fn a_prompt_longer_than_the_bound_keeps_its_first_blocks() {
        let mut tree = PrefixTree::new(2 * BLOCK_BYTES);
        serve(&mut tree, &prompt(1, 6 * BLOCK));
        assert_eq!(tree.stats().blocks, 2);
        assert_eq!(serve(&mut tree, &prompt(1, 6 * BLOCK)), 2 * BLOCK);
    }

    #[test]
    fn a_zero_bound_stores_nothing() {
        let mut tree = PrefixTree::new(0);
        serve(&mut tree, &prompt(1, 3 * BLOCK));
        assert_eq!(serve(&mut tree, &prompt(1, 3 * BLOCK)), 0);
        assert_eq!(tree.stats().blocks, 0);
    }

    #[test]
    fn pieces_are_aligned_to_blocks() {
        let cut: Vec<_> = pieces(0, 2 * BLOCK + 3).collect();
        assert_eq!(cut, vec![(0, BLOCK), (BLOCK, 2 * BLOCK), (2 * BLOCK, 2 * BLOCK + 3)]);
        let cut: Vec<_> = pieces(BLOCK, 2 * BLOCK).collect();
        assert_eq!(cut, vec![(BLOCK, 2 * BLOCK)]);
        assert_eq!(pieces(5, 5).count(), 0);
    }
}
