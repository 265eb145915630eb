//! Seeded, reproducible `opt : val : test` splits of a record set.

use serde::{Deserialize, Serialize};

use crate::EvalError;

/// Relative sizes of the three parts, such as FlowScout's `5 : 2 : 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitRatios {
    /// Weight of the optimisation set `D_opt`.
    pub opt: u32,
    /// Weight of the validation set `D_val`.
    pub val: u32,
    /// Weight of the held-out test set.
    pub test: u32,
}

impl SplitRatios {
    /// FlowScout's `opt : val : test = 5 : 2 : 3`.
    pub const FLOWSCOUT: SplitRatios = SplitRatios { opt: 5, val: 2, test: 3 };
}

/// A record set cut into three parts. Each part keeps the input order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Split<T> {
    /// The optimisation set.
    pub opt: Vec<T>,
    /// The validation set.
    pub val: Vec<T>,
    /// The test set.
    pub test: Vec<T>,
}

/// Splits `items` by `ratios`, reproducibly for a given `seed`.
///
/// Which part an item lands in depends only on the seed, its id and the set of ids, never
/// on the input order or on a random-number crate's version: every item gets the key
/// `mix(seed, FNV-1a(id))` (SplitMix64), items are ranked by key, and the ranking is cut
/// at sizes given by the largest-remainder method, so the sizes are as close to the
/// ratios as whole numbers allow. Items with equal ids are ranked by input position.
///
/// # Errors
///
/// [`EvalError::InvalidRatios`] when all three weights are zero.
///
/// # Example
///
/// ```
/// use flowmem_eval::{SplitRatios, split};
/// let ids: Vec<String> = (0..10).map(|i| i.to_string()).collect();
/// let parts = split(ids.clone(), |id| id.as_str(), 7, SplitRatios::FLOWSCOUT)?;
/// assert_eq!((parts.opt.len(), parts.val.len(), parts.test.len()), (5, 2, 3));
/// assert_eq!(parts, split(ids, |id| id.as_str(), 7, SplitRatios::FLOWSCOUT)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn split<T>(items: Vec<T>, id: impl Fn(&T) -> &str, seed: u64, ratios: SplitRatios) -> Result<Split<T>, EvalError> {
    let sizes = part_sizes(items.len(), ratios)?;
    let mut ranked: Vec<(u64, usize)> =
        items.iter().enumerate().map(|(idx, item)| (splitmix64(seed ^ fnv1a(id(item).as_bytes())), idx)).collect();
    ranked.sort_unstable();
    // part_of[input index] = 0 (opt), 1 (val) or 2 (test).
    let mut part_of = vec![0u8; items.len()];
    for (rank, &(_, idx)) in ranked.iter().enumerate() {
        part_of[idx] = if rank < sizes[0] {
            0
        } else if rank < sizes[0] + sizes[1] {
            1
        } else {
            2
        };
    }
    let mut res = Split {
        opt: Vec::with_capacity(sizes[0]),
        val: Vec::with_capacity(sizes[1]),
        test: Vec::with_capacity(sizes[2]),
    };
    for (item, part) in items.into_iter().zip(part_of) {
        match part {
            0 => res.opt.push(item),
            1 => res.val.push(item),
            _ => res.test.push(item),
        }
    }
    Ok(res)
}

/// Sizes of the three parts for `n` items: the largest-remainder apportionment.
fn part_sizes(n: usize, ratios: SplitRatios) -> Result<[usize; 3], EvalError> {
    let weights = [ratios.opt as u128, ratios.val as u128, ratios.test as u128];
    let total: u128 = weights.iter().sum();
    if total == 0 {
        return Err(EvalError::InvalidRatios);
    }
    let n = n as u128;
    let mut sizes = weights.map(|w| (n * w / total) as usize);
    let remainders = weights.map(|w| n * w % total);
    let mut left = n as usize - sizes.iter().sum::<usize>();
    // Hand out the rest by largest remainder; ties go to the earlier part.
    let mut order = [0usize, 1, 2];
    order.sort_by(|&a, &b| remainders[b].cmp(&remainders[a]).then(a.cmp(&b)));
    for part in order {
        if left == 0 {
            break;
        }
        if remainders[part] > 0 {
            sizes[part] += 1;
            left -= 1;
        }
    }
    Ok(sizes)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use crate::split::{SplitRatios, part_sizes, split};

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("task-{i}")).collect()
    }

    fn check_sizes(n: usize, expect: [usize; 3]) {
        assert_eq!(part_sizes(n, SplitRatios::FLOWSCOUT).unwrap(), expect, "n = {n}");
    }

    #[test]
    fn sizes_follow_five_two_three() {
        check_sizes(0, [0, 0, 0]);
        check_sizes(10, [5, 2, 3]);
        check_sizes(50, [25, 10, 15]);
        // 114 * (0.5, 0.2, 0.3) = 57, 22.8, 34.2.
        check_sizes(114, [57, 23, 34]);
        // 1 * (0.5, 0.2, 0.3): the largest remainder is opt's.
        check_sizes(1, [1, 0, 0]);
        check_sizes(7, [4, 1, 2]);
    }

    #[test]
    fn zero_ratios_are_an_error() {
        assert!(part_sizes(3, SplitRatios { opt: 0, val: 0, test: 0 }).is_err());
    }

    #[test]
    fn same_seed_same_split_whatever_the_input_order() {
        let forward = split(ids(40), |s| s.as_str(), 3, SplitRatios::FLOWSCOUT).unwrap();
        let mut reversed_input = ids(40);
        reversed_input.reverse();
        let mut reversed = split(reversed_input, |s| s.as_str(), 3, SplitRatios::FLOWSCOUT).unwrap();
        reversed.opt.reverse();
        reversed.val.reverse();
        reversed.test.reverse();
        assert_eq!(forward, reversed);
    }

    #[test]
    fn different_seeds_give_different_splits_of_the_same_items() {
        let a = split(ids(40), |s| s.as_str(), 1, SplitRatios::FLOWSCOUT).unwrap();
        let b = split(ids(40), |s| s.as_str(), 2, SplitRatios::FLOWSCOUT).unwrap();
        assert_ne!(a.opt, b.opt);
        let mut all: Vec<String> = b.opt.into_iter().chain(b.val).chain(b.test).collect();
        all.sort();
        let mut expected = ids(40);
        expected.sort();
        assert_eq!(all, expected);
    }

    #[test]
    fn a_known_seed_gives_a_known_split() {
        // Pins the algorithm: a change here breaks every split users have published.
        // The expected text comes from an independent Python rendering of the algorithm.
        let parts = split(ids(10), |s| s.as_str(), 42, SplitRatios::FLOWSCOUT).unwrap();
        let text = format!("val={:?} test={:?}", parts.val, parts.test);
        assert_eq!(text, PINNED_42, "the split for seed 42 changed");
    }

    const PINNED_42: &str = r#"val=["task-2", "task-7"] test=["task-3", "task-5", "task-6"]"#;
}
