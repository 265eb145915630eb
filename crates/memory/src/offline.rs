//! Offline AWM: induce from a training set into the memory, scoped per site or domain.

use std::collections::BTreeMap;

use serde::Serialize;

use flowmem_llm::EmbeddingModel;
use flowmem_model::{Scope, Trajectory};

use crate::error::InduceError;
use crate::induce::{self, Inducer, RuleConfig, SkipReason, SkippedCandidate};
use crate::retrieval::embed_workflows;
use crate::store::{AddOutcome, MemoryStore};

/// Options of [`induce_offline`].
#[derive(Clone, Copy)]
pub struct OfflineConfig<'a> {
    /// The inducer. Its own scope setting is replaced by the per-group scope.
    pub inducer: Inducer<'a>,
    /// Put every workflow in this scope; `None` groups the trajectories by their site
    /// and domain and scopes each group's workflows accordingly (AWM's per-website memory).
    pub scope: Option<&'a Scope>,
    /// For LM induction: trajectories per prompt within one scope.
    pub batch_size: usize,
    /// The embedding model whose vectors are stored with each new workflow (in the same
    /// transaction), or `None` to store workflows without vectors (vector retrieval
    /// embeds them later, [`sync_vectors`](crate::sync_vectors)).
    pub embedder: Option<&'a dyn EmbeddingModel>,
}

impl std::fmt::Debug for OfflineConfig<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfflineConfig")
            .field("inducer", &self.inducer)
            .field("scope", &self.scope)
            .field("batch_size", &self.batch_size)
            .field("embedder", &self.embedder.map(EmbeddingModel::name))
            .finish()
    }
}

/// What [`induce_offline`] did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[must_use]
pub struct OfflineReport {
    /// Trajectories read.
    pub n_trajectories: usize,
    /// Trajectories induced from (those not labelled unsuccessful).
    pub n_used: usize,
    /// Candidate workflows the inducer considered (summed [`Induction::proposed`]); each
    /// ends up in `added` or in `skipped`.
    ///
    /// [`Induction::proposed`]: crate::induce::Induction::proposed
    pub proposed: usize,
    /// Each workflow that passed the inducer's checks and what the store did with it,
    /// in induction order.
    pub added: Vec<Added>,
    /// Everything left out, with the reason.
    pub skipped: Vec<SkippedCandidate>,
}

/// One induced workflow and what the store did with it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Added {
    /// The workflow's description, as induced.
    pub description: String,
    /// The trajectories it was induced from.
    pub trajectory_ids: Vec<String>,
    /// Stored as new (with any evictions) or merged into a near-duplicate.
    #[serde(flatten)]
    pub outcome: AddOutcome,
}

impl std::fmt::Debug for Inducer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inducer::Rule(cfg) => f.debug_tuple("Rule").field(cfg).finish(),
            Inducer::Lm(cfg) => f.debug_tuple("Lm").field(cfg).finish(),
        }
    }
}

/// Induces workflows from a training set and stores them.
///
/// Trajectories labelled unsuccessful are left out and reported (AWM learns only from
/// successes when outcomes are known; unlabelled ones are used), and so are those a
/// stored workflow was already induced from ([`SkipReason::AlreadyLearned`]): a rerun
/// after an interrupted induction adds only what is missing. The rest are grouped by
/// scope (the override, or each trajectory's site and domain); each group is induced
/// separately (LM induction in batches of [`OfflineConfig::batch_size`]) and its
/// workflows are stored in that scope (with their vectors, when an embedder is given),
/// one transaction per batch as soon as the batch is induced, so a kill loses at most
/// the batch in flight.
///
/// # Errors
///
/// [`InduceError`] when the inducer model fails or the store cannot be written; the
/// batches stored before the failure stay stored.
pub async fn induce_offline(
    store: &mut MemoryStore,
    trajectories: &[Trajectory],
    cfg: &OfflineConfig<'_>,
) -> Result<OfflineReport, InduceError> {
    let mut report = OfflineReport { n_trajectories: trajectories.len(), ..OfflineReport::default() };
    let learned = store.learned_trajectory_ids()?;
    let mut groups: BTreeMap<(Option<String>, Option<String>), Vec<Trajectory>> = BTreeMap::new();
    for trajectory in trajectories {
        let reason = if trajectory.succeeded() == Some(false) {
            Some(SkipReason::Unsuccessful)
        } else if learned.contains(&trajectory.id) {
            Some(SkipReason::AlreadyLearned)
        } else {
            None
        };
        if let Some(reason) = reason {
            report.skipped.push(SkippedCandidate {
                trajectory_ids: vec![trajectory.id.clone()],
                description: None,
                reason,
            });
            continue;
        }
        report.n_used += 1;
        let scope = induce::scope_of(trajectory, cfg.scope);
        groups.entry((scope.site, scope.domain)).or_default().push(trajectory.clone());
    }
    for ((site, domain), members) in groups {
        let scope = Scope { site, domain };
        let batches: Vec<&[Trajectory]> = match cfg.inducer {
            Inducer::Rule(_) => vec![&members[..]],
            Inducer::Lm(_) => members.chunks(cfg.batch_size.max(1)).collect(),
        };
        for batch in batches {
            let induction = match cfg.inducer {
                Inducer::Rule(rule_cfg) => {
                    let rule_cfg = RuleConfig { scope: Some(scope.clone()), ..rule_cfg.clone() };
                    induce::rule(batch, &rule_cfg)
                }
                Inducer::Lm(lm_cfg) => {
                    let lm_cfg = crate::induce::LmConfig { scope: Some(scope.clone()), ..*lm_cfg };
                    induce::lm(batch, &lm_cfg).await?
                }
            };
            report.proposed += induction.proposed;
            report.skipped.extend(induction.skipped);
            let vectors = match cfg.embedder {
                Some(embedder) if !induction.workflows.is_empty() => {
                    Some(embed_workflows(embedder, &induction.workflows).await?)
                }
                _ => None,
            };
            let outcomes = store.add_all_with_vectors(&induction.workflows, vectors.as_ref())?;
            report.added.extend(induction.workflows.into_iter().zip(outcomes).map(|(workflow, outcome)| Added {
                description: workflow.description,
                trajectory_ids: workflow.provenance.trajectory_ids,
                outcome,
            }));
        }
    }
    Ok(report)
}
