//! The MCTS search tree: statistics, selection (Eq. 6) and backpropagation (Eq. 8).

use serde::{Deserialize, Serialize};

/// The index of a node in a [`SearchTree`].
pub type TreeNodeId = usize;

/// Search parameters, with the FlowScout paper's defaults in
/// [`SearchConfig::paper_defaults`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchConfig {
    /// Maximum iterations `J`.
    pub iterations: u32,
    /// Early-stopping patience `P`: iterations without validation improvement.
    pub patience: u32,
    /// Children a node may generate before selection descends past it.
    pub max_children: usize,
    /// The exploration coefficient at the first iteration.
    pub lambda_max: f64,
    /// The exploration coefficient at the last iteration.
    pub lambda_min: f64,
}

impl SearchConfig {
    /// `J = 30`, `P = 5`, three children per node, `λ` annealed from 1.4 to 0.1.
    ///
    /// The paper does not give `λ`'s range; `√2 ≈ 1.4` is the classic UCT constant.
    #[must_use]
    pub fn paper_defaults() -> SearchConfig {
        SearchConfig { iterations: 30, patience: 5, max_children: 3, lambda_max: 1.4, lambda_min: 0.1 }
    }
}

/// Cosine annealing of the exploration coefficient over the iteration budget:
/// `λ_t = λ_min + ½ (λ_max − λ_min)(1 + cos(π t / J))`.
///
/// `t = 0` gives `λ_max`; `t = J` gives `λ_min`. `t` past `J` stays at `λ_min`.
#[must_use]
pub fn cosine_lambda(iteration: u32, cfg: &SearchConfig) -> f64 {
    if cfg.iterations == 0 {
        return cfg.lambda_min;
    }
    let progress = f64::from(iteration.min(cfg.iterations)) / f64::from(cfg.iterations);
    cfg.lambda_min + 0.5 * (cfg.lambda_max - cfg.lambda_min) * (1.0 + (std::f64::consts::PI * progress).cos())
}

/// One candidate in the search tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeNode {
    /// The parent, `None` for the root.
    pub parent: Option<TreeNodeId>,
    /// Children in creation order.
    pub children: Vec<TreeNodeId>,
    /// Visit count `C`.
    pub visits: u64,
    /// Accumulated reward `W`.
    pub total_reward: f64,
    /// Whether this child stands for a failed expansion: an edit plan that never became a
    /// valid graph. It holds a child slot of its parent but is never selected.
    #[serde(default)]
    pub failed: bool,
}

impl TreeNode {
    /// Mean reward `Q = W / C` (0 for an unvisited node).
    #[must_use]
    pub fn mean_reward(&self) -> f64 {
        if self.visits == 0 { 0.0 } else { self.total_reward / self.visits as f64 }
    }
}

/// The MCTS statistics over candidate workflows. Node 0 is the root, `G⁰`.
///
/// The tree holds statistics only; the candidate graphs, edit plans and feedback are kept
/// by the caller, keyed by [`TreeNodeId`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchTree {
    // Invariant: never empty; nodes[0] is the root; a child's id is larger than its parent's.
    nodes: Vec<TreeNode>,
}

impl SearchTree {
    /// A tree holding the root, visited once with its simulation reward.
    #[must_use]
    pub fn new(root_reward: f64) -> SearchTree {
        SearchTree {
            nodes: vec![TreeNode {
                parent: None,
                children: Vec::new(),
                visits: 1,
                total_reward: root_reward,
                failed: false,
            }],
        }
    }

    /// The root's id.
    #[must_use]
    pub fn root(&self) -> TreeNodeId {
        0
    }

    /// The node with `id`.
    ///
    /// # Panics
    ///
    /// When `id` was not returned by this tree.
    #[must_use]
    pub fn node(&self, id: TreeNodeId) -> &TreeNode {
        &self.nodes[id]
    }

    /// How many candidates the tree holds, the root included.
    #[must_use]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a tree holds at least its root.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Selection (Eq. 6): descend from the root; stop at the first node with fewer than
    /// `max_children` children; otherwise move to the child maximising
    /// `Q^c + λ_t · sqrt(ln C^m / C^c)`. Ties go to the earlier child.
    ///
    /// Failed children and exhausted subtrees (full nodes whose children are all failed or
    /// exhausted) are never entered. Returns `None` when the whole tree is exhausted.
    #[must_use]
    pub fn select(&self, iteration: u32, cfg: &SearchConfig) -> Option<TreeNodeId> {
        let lambda = cosine_lambda(iteration, cfg);
        let mut current = self.root();
        loop {
            let node = &self.nodes[current];
            if node.children.len() < cfg.max_children {
                return Some(current);
            }
            current = self.best_child(node, lambda, cfg)?;
        }
    }

    /// The selection score of `child` under a parent with `parent_visits` visits.
    #[must_use]
    pub fn uct_score(&self, child: TreeNodeId, parent_visits: u64, lambda: f64) -> f64 {
        let node = &self.nodes[child];
        if node.visits == 0 {
            return f64::INFINITY;
        }
        let exploration = ((parent_visits.max(1) as f64).ln() / node.visits as f64).sqrt();
        node.mean_reward() + lambda * exploration
    }

    fn best_child(&self, node: &TreeNode, lambda: f64, cfg: &SearchConfig) -> Option<TreeNodeId> {
        let mut best = None;
        let mut best_score = f64::NEG_INFINITY;
        for &child in &node.children {
            if self.exhausted(child, cfg) {
                continue;
            }
            let score = self.uct_score(child, node.visits, lambda);
            if best.is_none() || score > best_score {
                best = Some(child);
                best_score = score;
            }
        }
        best
    }

    /// Whether nothing under `id` can be expanded any more.
    fn exhausted(&self, id: TreeNodeId, cfg: &SearchConfig) -> bool {
        let node = &self.nodes[id];
        node.failed
            || (node.children.len() >= cfg.max_children
                && node.children.iter().all(|&child| self.exhausted(child, cfg)))
    }

    /// Expansion plus backpropagation (Eq. 8): adds a child of `parent` whose simulation
    /// returned `reward`, then adds one visit and `reward` to every node on the path from
    /// the child up to the root.
    pub fn add_child(&mut self, parent: TreeNodeId, reward: f64) -> TreeNodeId {
        let id = self.nodes.len();
        self.nodes.push(TreeNode {
            parent: Some(parent),
            children: Vec::new(),
            visits: 0,
            total_reward: 0.0,
            failed: false,
        });
        self.nodes[parent].children.push(id);
        self.backpropagate(id, reward);
        id
    }

    /// Records a failed expansion of `parent` (an edit plan that never validated): the
    /// parent still uses up one of its child slots, so a node whose proposals keep failing
    /// is not selected forever. Returns the placeholder child, which has no visits and is
    /// never selected.
    pub fn add_failed_child(&mut self, parent: TreeNodeId) -> TreeNodeId {
        let id = self.nodes.len();
        self.nodes.push(TreeNode {
            parent: Some(parent),
            children: Vec::new(),
            visits: 0,
            total_reward: 0.0,
            failed: true,
        });
        self.nodes[parent].children.push(id);
        id
    }

    fn backpropagate(&mut self, from: TreeNodeId, reward: f64) {
        let mut current = Some(from);
        while let Some(id) = current {
            let node = &mut self.nodes[id];
            node.visits += 1;
            node.total_reward += reward;
            current = node.parent;
        }
    }

    /// The ids from the root down to `id`.
    #[must_use]
    pub fn path_to(&self, id: TreeNodeId) -> Vec<TreeNodeId> {
        let mut path = vec![id];
        let mut current = self.nodes[id].parent;
        while let Some(parent) = current {
            path.push(parent);
            current = self.nodes[parent].parent;
        }
        path.reverse();
        path
    }
}

#[cfg(test)]
mod tests {
    use crate::tree::{SearchConfig, SearchTree, cosine_lambda};

    fn cfg() -> SearchConfig {
        SearchConfig { iterations: 10, patience: 5, max_children: 3, lambda_max: 1.0, lambda_min: 0.0 }
    }

    #[test]
    fn cosine_schedule_matches_hand_computed_values() {
        let cfg = cfg();
        assert!((cosine_lambda(0, &cfg) - 1.0).abs() < 1e-12);
        assert!((cosine_lambda(5, &cfg) - 0.5).abs() < 1e-12);
        assert!(cosine_lambda(10, &cfg).abs() < 1e-12);
        // t = 2.5/10: 0.5 * (1 + cos(π/4)) = 0.853553...
        let cfg4 = SearchConfig { iterations: 4, ..cfg };
        assert!((cosine_lambda(1, &cfg4) - 0.853_553_390_593_273_7).abs() < 1e-12);
        assert!(cosine_lambda(99, &cfg4).abs() < 1e-12);
    }

    #[test]
    fn selection_stops_at_a_node_with_fewer_than_three_children() {
        let cfg = cfg();
        let mut tree = SearchTree::new(0.5);
        let root = tree.root();
        tree.add_child(root, 0.2);
        tree.add_child(root, 0.9);
        assert_eq!(tree.select(0, &cfg), Some(root));
        tree.add_child(root, 0.4);
        // Now the root is full, so selection must descend to a child.
        assert_ne!(tree.select(0, &cfg), Some(root));
    }

    #[test]
    fn backpropagation_updates_the_whole_path() {
        let mut tree = SearchTree::new(0.5);
        let a = tree.add_child(0, 0.25);
        let b = tree.add_child(a, 0.75);
        assert_eq!(tree.node(0).visits, 3);
        assert!((tree.node(0).total_reward - 1.5).abs() < 1e-12);
        assert_eq!(tree.node(a).visits, 2);
        assert!((tree.node(a).mean_reward() - 0.5).abs() < 1e-12);
        assert_eq!(tree.node(b).visits, 1);
        assert_eq!(tree.path_to(b), vec![0, a, b]);
    }

    #[test]
    fn uct_picks_by_hand_computed_score() {
        // Root with three children: rewards 0.9 (visited twice via a grandchild), 0.5, 0.6.
        let mut tree = SearchTree::new(0.0);
        let a = tree.add_child(0, 0.9);
        tree.add_child(0, 0.5);
        let c = tree.add_child(0, 0.6);
        tree.add_child(a, 0.1);
        // Root: C = 5. a: C = 2, Q = 0.5. b: C = 1, Q = 0.5. c: C = 1, Q = 0.6.
        // λ = 1: score(a) = 0.5 + sqrt(ln 5 / 2) = 1.3971; score(b) = 0.5 + sqrt(ln 5) = 1.7686;
        // score(c) = 0.6 + 1.2686 = 1.8686 → c.
        let full = cfg();
        assert!((tree.uct_score(a, 5, 1.0) - 1.397061289).abs() < 1e-6);
        assert_eq!(tree.select(0, &full), Some(c));
        // λ = 0 (last iteration): pure exploitation, c still has the best mean (0.6).
        assert_eq!(tree.select(10, &full), Some(c));
    }

    #[test]
    fn failed_expansions_use_up_child_slots_and_are_never_selected() {
        let cfg = cfg();
        let mut tree = SearchTree::new(0.5);
        let good = tree.add_child(0, 0.1);
        tree.add_failed_child(0);
        tree.add_failed_child(0);
        assert_eq!(tree.node(0).visits, 2);
        // The root is full; the only live child is `good`, which has room.
        assert_eq!(tree.select(0, &cfg), Some(good));
        for _ in 0..3 {
            tree.add_failed_child(good);
        }
        // Every path now ends in failed children: the search is exhausted.
        assert_eq!(tree.select(0, &cfg), None);
    }
}
