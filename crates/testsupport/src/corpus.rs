//! A synthetic workflow memory of any size, shaped like τ-bench retail, for benches.
//!
//! Tool names come from `tau-bench/retail/tools.json` in the shared data, words from
//! the retail task instructions, and the queries a bench should search with are the
//! instructions of the test split ([`retail_queries`]). The generator is deterministic:
//! the same `seed` gives the same corpus.

use flowmem_model::{Scope, Workflow};
use serde_json::{Value, json};

use crate::paths::shared_data_dir;

/// A small deterministic generator (a 64-bit LCG); benches need no statistical quality.
#[derive(Debug, Clone)]
pub struct Lcg(pub u64);

impl Lcg {
    /// The next number.
    pub fn next_index(&mut self) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as usize
    }

    /// One of `items`, which must not be empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.next_index() % items.len()]
    }
}

fn retail_file(file: &str) -> String {
    let path = shared_data_dir().join("tau-bench/retail").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()))
}

fn instructions(file: &str) -> Vec<String> {
    retail_file(file)
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let value: Value = serde_json::from_str(line).expect("the task file is JSONL");
            value["instruction"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

/// The instructions of τ-bench retail's test tasks: realistic queries for a corpus
/// built by [`synthetic_workflows`].
///
/// # Panics
///
/// When the shared data is missing or malformed.
#[must_use]
pub fn retail_queries() -> Vec<String> {
    instructions("tasks_test.jsonl")
}

/// `n` distinct workflows: descriptions of 6–15 retail words (ending in `#index`, so no
/// two are equal), 2–6 steps calling retail tools with `{order_id}`, and a domain
/// among retail, airline, telecom and shopping.
///
/// # Panics
///
/// When the shared data is missing or malformed.
#[must_use]
pub fn synthetic_workflows(n: usize, seed: u64) -> Vec<Workflow> {
    let words: Vec<String> = instructions("tasks_train.jsonl")
        .iter()
        .flat_map(|text| text.split_whitespace())
        .map(|word| word.trim_matches(|ch: char| !ch.is_alphanumeric()).to_lowercase())
        .filter(|word| word.len() > 2)
        .collect();
    let tools: Vec<Value> = serde_json::from_str(&retail_file("tools.json")).expect("tools.json is a JSON array");
    let tools: Vec<String> =
        tools.iter().filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned)).collect();
    let domains = ["retail", "airline", "telecom", "shopping"];
    let mut rng = Lcg(seed);
    (0..n)
        .map(|idx| {
            let n_words = 6 + rng.next_index() % 10;
            let description: Vec<&str> = (0..n_words).map(|_| rng.pick(&words).as_str()).collect();
            let n_steps = 2 + rng.next_index() % 5;
            let steps: Vec<Value> = (0..n_steps)
                .map(|_| {
                    let reasoning: Vec<&str> = (0..5).map(|_| rng.pick(&words).as_str()).collect();
                    json!({"state": "", "reasoning": reasoning.join(" "),
                           "action": {"tool": rng.pick(&tools), "args": {"order_id": "{order_id}"}}})
                })
                .collect();
            let mut workflow: Workflow = serde_json::from_value(json!({
                "description": format!("{} #{idx}", description.join(" ")),
                "steps": steps,
            }))
            .expect("the generated workflow is valid");
            workflow.scope = Scope { site: None, domain: Some(rng.pick(&domains).to_string()) };
            workflow
        })
        .collect()
}

/// Latencies in milliseconds, summarised by percentile.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    sorted: Vec<f64>,
}

impl Latencies {
    /// Sorts `ms` once for every later percentile.
    #[must_use]
    pub fn new(mut ms: Vec<f64>) -> Latencies {
        ms.sort_by(f64::total_cmp);
        Latencies { sorted: ms }
    }

    /// The `p`-quantile (`0.0..=1.0`) by the nearest-rank rule; 0 when empty.
    #[must_use]
    pub fn quantile(&self, p: f64) -> f64 {
        if self.sorted.is_empty() {
            return 0.0;
        }
        let rank = ((self.sorted.len() as f64 * p).ceil() as usize).clamp(1, self.sorted.len());
        self.sorted[rank - 1]
    }

    /// The largest latency; 0 when empty.
    #[must_use]
    pub fn max(&self) -> f64 {
        self.sorted.last().copied().unwrap_or(0.0)
    }

    /// How many latencies there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Latencies;

    #[test]
    fn quantiles_follow_the_nearest_rank_rule() {
        let latencies = Latencies::new((1..=100).rev().map(f64::from).collect());
        assert_eq!(latencies.quantile(0.5), 50.0);
        assert_eq!(latencies.quantile(0.99), 99.0);
        assert_eq!(latencies.quantile(1.0), 100.0);
        assert_eq!(latencies.quantile(0.0), 1.0);
        assert_eq!(latencies.max(), 100.0);
        assert_eq!(Latencies::new(Vec::new()).quantile(0.5), 0.0);
    }
}
