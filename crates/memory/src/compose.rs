//! Snowballing: a new workflow that contains a stored one is stored as composed of it.

use flowmem_model::Workflow;

/// The ids of the stored workflows that `new` is composed of.
///
/// A stored workflow `w` is a part of `new` when `w` has fewer steps than `new` and its
/// tool-name sequence is a sub-sequence of `new`'s (in order, not necessarily
/// adjacent; a prefix is the commonest case). Only the largest parts are kept: a part
/// whose sequence is itself a sub-sequence of another part, or which another part is
/// already composed of, is reached through that one. The result is in `stored` order.
#[must_use]
pub fn composition(new: &Workflow, stored: &[Workflow]) -> Vec<String> {
    let new_tools = tools(new);
    let parts: Vec<&Workflow> = stored
        .iter()
        .filter(|old| old.id != new.id && !old.steps.is_empty() && old.steps.len() < new.steps.len())
        .filter(|old| is_subsequence(&tools(old), &new_tools))
        .collect();
    parts
        .iter()
        .filter(|part| {
            !parts.iter().any(|other| {
                other.id != part.id
                    && (other.composed_of.contains(&part.id)
                        || (other.steps.len() > part.steps.len() && is_subsequence(&tools(part), &tools(other))))
            })
        })
        .map(|part| part.id.clone())
        .collect()
}

fn tools(workflow: &Workflow) -> Vec<&str> {
    workflow.steps.iter().map(|step| step.action.tool.as_str()).collect()
}

/// Whether `short` occurs in `long` in order (not necessarily adjacent).
fn is_subsequence(short: &[&str], long: &[&str]) -> bool {
    let mut rest = long.iter();
    short.iter().all(|wanted| rest.any(|tool| tool == wanted))
}

/// One line of a composition tree: the depth (0 for a root) and the workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeLine<'a> {
    /// How deep the workflow is nested.
    pub depth: usize,
    /// The workflow.
    pub workflow: &'a Workflow,
    /// Whether it already appeared higher up the same branch (a cycle in corrupt data).
    pub repeated: bool,
}

/// The composition hierarchy of `workflows` as an indented outline: each root followed
/// by its parts, recursively. With `root`, the one workflow of that id is the root;
/// without, every workflow that no other one is composed of is. Parts that are not
/// among `workflows` are left out.
#[must_use]
pub fn composition_tree<'a>(workflows: &'a [Workflow], root: Option<&str>) -> Vec<TreeLine<'a>> {
    let is_part = |id: &str| workflows.iter().any(|other| other.composed_of.iter().any(|part| part == id));
    let mut lines = Vec::new();
    let roots = workflows.iter().filter(|workflow| match root {
        Some(root) => workflow.id == root,
        None => !is_part(&workflow.id),
    });
    for root in roots {
        walk(root, workflows, 0, &mut Vec::new(), &mut lines);
    }
    lines
}

fn walk<'a>(
    workflow: &'a Workflow,
    all: &'a [Workflow],
    depth: usize,
    path: &mut Vec<&'a str>,
    lines: &mut Vec<TreeLine<'a>>,
) {
    let repeated = path.contains(&workflow.id.as_str());
    lines.push(TreeLine { depth, workflow, repeated });
    if repeated {
        return;
    }
    path.push(&workflow.id);
    for part_id in &workflow.composed_of {
        if let Some(part) = all.iter().find(|candidate| &candidate.id == part_id) {
            walk(part, all, depth + 1, path, lines);
        }
    }
    path.pop();
}

#[cfg(test)]
mod tests {
    use flowmem_model::{Workflow, WorkflowAction, WorkflowStep};

    use super::{composition, composition_tree, is_subsequence};

    fn workflow(id: &str, tools: &[&str], parts: &[&str]) -> Workflow {
        Workflow {
            id: id.to_owned(),
            description: id.to_owned(),
            steps: tools
                .iter()
                .map(|tool| WorkflowStep {
                    state: String::new(),
                    reasoning: String::new(),
                    action: WorkflowAction {
                        tool: (*tool).to_owned(),
                        args: Default::default(),
                        sources: Default::default(),
                    },
                })
                .collect(),
            scope: Default::default(),
            provenance: Default::default(),
            stats: Default::default(),
            composed_of: parts.iter().map(|part| (*part).to_owned()).collect(),
            retired: None,
        }
    }

    #[test]
    fn subsequences_keep_order() {
        assert!(is_subsequence(&["a", "c"], &["a", "b", "c"]));
        assert!(!is_subsequence(&["c", "a"], &["a", "b", "c"]));
    }

    #[test]
    fn only_the_largest_parts_are_referenced() {
        let small = workflow("small", &["find_user", "get_user"], &[]);
        let mid = workflow("mid", &["find_user", "get_user", "get_order"], &["small"]);
        let other = workflow("other", &["list", "cancel"], &[]);
        let same_length = workflow("same", &["find_user", "get_user", "get_order", "cancel"], &[]);
        let new = workflow("new", &["find_user", "get_user", "get_order", "cancel"], &[]);
        let stored = [small, mid, other, same_length];
        assert_eq!(composition(&new, &stored), ["mid"]);
        let unrelated = workflow("u", &["x", "y", "z"], &[]);
        assert!(composition(&unrelated, &stored).is_empty());
    }

    #[test]
    fn the_tree_nests_parts_under_their_wholes() {
        let all = [
            workflow("small", &["a", "b"], &[]),
            workflow("big", &["a", "b", "c"], &["small"]),
            workflow("lone", &["x", "y"], &[]),
        ];
        let lines: Vec<(usize, &str)> =
            composition_tree(&all, None).iter().map(|line| (line.depth, line.workflow.id.as_str())).collect();
        assert_eq!(lines, [(0, "big"), (1, "small"), (0, "lone")]);
        let small: Vec<(usize, &str)> =
            composition_tree(&all, Some("small")).iter().map(|line| (line.depth, line.workflow.id.as_str())).collect();
        assert_eq!(small, [(0, "small")]);
    }
}
