//! Process tree → Petri net (a sound, safe workflow net) and PNML export.

use std::collections::VecDeque;
use std::fmt::Write as _;

use rustc_hash::FxHashSet;

use crate::tree::{Operator, ProcessTree};

/// A workflow net: one source place marked initially, one sink place marked finally.
///
/// Transitions with `label: None` are silent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PetriNet {
    /// The number of places; place ids are `0..n_places`.
    pub n_places: usize,
    /// The transitions.
    pub transitions: Vec<Transition>,
    /// The place holding the initial token.
    pub source: usize,
    /// The place that holds the only token in the final marking.
    pub sink: usize,
}

/// One transition of a [`PetriNet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The visible label; `None` for a silent (tau) transition.
    pub label: Option<String>,
    /// Input places.
    pub inputs: Vec<usize>,
    /// Output places.
    pub outputs: Vec<usize>,
}

/// Translates a process tree into a workflow net with the same language.
///
/// Each activity becomes a labelled transition, `tau` a silent one. `X` shares its input
/// and output places among the children; `+` and `*` get silent split/join (enter/exit)
/// transitions so that their inner places are never shared with siblings.
///
/// # Example
///
/// ```
/// use flowmem_mining::{ProcessTree, tree_to_petri_net};
///
/// let net = tree_to_petri_net(&ProcessTree::parse("->( 'a', *( 'b', tau ) )")?);
/// assert!(net.accepts(&["a", "b", "b"]));
/// assert!(!net.accepts(&["a"]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn tree_to_petri_net(tree: &ProcessTree) -> PetriNet {
    let mut net = PetriNet { n_places: 2, transitions: Vec::new(), source: 0, sink: 1 };
    net.add_tree(tree, 0, 1);
    net
}

impl PetriNet {
    fn new_place(&mut self) -> usize {
        self.n_places += 1;
        self.n_places - 1
    }

    fn add_transition(&mut self, label: Option<String>, inputs: Vec<usize>, outputs: Vec<usize>) {
        self.transitions.push(Transition { label, inputs, outputs });
    }

    fn add_tree(&mut self, tree: &ProcessTree, from: usize, to: usize) {
        match tree {
            ProcessTree::Tau => self.add_transition(None, vec![from], vec![to]),
            ProcessTree::Activity { label } => self.add_transition(Some(label.clone()), vec![from], vec![to]),
            ProcessTree::Operator { operator: Operator::Sequence, children } => {
                let mut current = from;
                for (idx, child) in children.iter().enumerate() {
                    let next = if idx + 1 == children.len() { to } else { self.new_place() };
                    self.add_tree(child, current, next);
                    current = next;
                }
                if children.is_empty() {
                    self.add_transition(None, vec![from], vec![to]);
                }
            }
            ProcessTree::Operator { operator: Operator::Xor, children } => {
                for child in children {
                    self.add_tree(child, from, to);
                }
            }
            ProcessTree::Operator { operator: Operator::Parallel, children } => {
                let (mut starts, mut ends) = (Vec::new(), Vec::new());
                for child in children {
                    let (start, end) = (self.new_place(), self.new_place());
                    self.add_tree(child, start, end);
                    starts.push(start);
                    ends.push(end);
                }
                self.add_transition(None, vec![from], starts);
                self.add_transition(None, ends, vec![to]);
            }
            ProcessTree::Operator { operator: Operator::Loop, children } => {
                let (enter, middle) = (self.new_place(), self.new_place());
                self.add_transition(None, vec![from], vec![enter]);
                if let Some(body) = children.first() {
                    self.add_tree(body, enter, middle);
                }
                // Several redo children (not produced by the miner) are alternatives.
                for redo in children.iter().skip(1) {
                    self.add_tree(redo, middle, enter);
                }
                self.add_transition(None, vec![middle], vec![to]);
            }
        }
    }

    /// Whether the net can fire `trace` (with any silent transitions in between) from the
    /// initial marking to the final marking.
    #[must_use]
    pub fn accepts<S: AsRef<str>>(&self, trace: &[S]) -> bool {
        // Markings of a safe net are sets of places; explore (marking, position) pairs.
        let initial = self.marking_of(self.source);
        let goal = self.marking_of(self.sink);
        let mut seen: FxHashSet<(Vec<u8>, usize)> = FxHashSet::default();
        let mut queue = VecDeque::from([(initial, 0usize)]);
        while let Some((marking, pos)) = queue.pop_front() {
            if pos == trace.len() && marking == goal {
                return true;
            }
            if !seen.insert((marking.clone(), pos)) {
                continue;
            }
            for transition in &self.transitions {
                if !transition.inputs.iter().all(|&p| marking[p] > 0) {
                    continue;
                }
                let next_pos = match &transition.label {
                    None => pos,
                    Some(label) if pos < trace.len() && trace[pos].as_ref() == label => pos + 1,
                    Some(_) => continue,
                };
                let mut next = marking.clone();
                for &p in &transition.inputs {
                    next[p] -= 1;
                }
                for &p in &transition.outputs {
                    // Saturating: a net from a tree is safe, so this never exceeds 1.
                    next[p] = next[p].saturating_add(1);
                }
                queue.push_back((next, next_pos));
            }
        }
        false
    }

    fn marking_of(&self, place: usize) -> Vec<u8> {
        let mut marking = vec![0u8; self.n_places];
        marking[place] = 1;
        marking
    }

    /// The net in PNML (the 2009 core grammar, with ProM's final-marking extension), for
    /// PM4Py (`pm4py.read_pnml`), ProM and other tools. Silent transitions carry ProM's
    /// `$invisible$` marker.
    #[must_use]
    pub fn to_pnml(&self, name: &str) -> String {
        let mut out = String::new();
        let place_id = |p: usize| match p {
            _ if p == self.source => "source".to_owned(),
            _ if p == self.sink => "sink".to_owned(),
            _ => format!("p_{p}"),
        };
        // Writing into a String cannot fail.
        let _ = writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(out, "<pnml>");
        let _ = writeln!(out, r#"  <net id="net1" type="http://www.pnml.org/version-2009/grammar/pnmlcoremodel">"#);
        let _ = writeln!(out, "    <name><text>{}</text></name>", escape(name));
        let _ = writeln!(out, r#"    <page id="n0">"#);
        for p in 0..self.n_places {
            let id = place_id(p);
            let _ = write!(out, r#"      <place id="{id}"><name><text>{id}</text></name>"#);
            if p == self.source {
                let _ = write!(out, "<initialMarking><text>1</text></initialMarking>");
            }
            let _ = writeln!(out, "</place>");
        }
        let mut n_tau = 0;
        for (idx, transition) in self.transitions.iter().enumerate() {
            match &transition.label {
                Some(label) => {
                    let _ = writeln!(
                        out,
                        r#"      <transition id="t_{idx}"><name><text>{}</text></name></transition>"#,
                        escape(label)
                    );
                }
                None => {
                    n_tau += 1;
                    let _ = writeln!(
                        out,
                        r#"      <transition id="t_{idx}"><name><text>tau_{n_tau}</text></name><toolspecific tool="ProM" version="6.4" activity="$invisible$" localNodeID="t_{idx}"/></transition>"#
                    );
                }
            }
        }
        let mut n_arcs = 0;
        for (idx, transition) in self.transitions.iter().enumerate() {
            for &p in &transition.inputs {
                n_arcs += 1;
                let _ = writeln!(out, r#"      <arc id="a_{n_arcs}" source="{}" target="t_{idx}"/>"#, place_id(p));
            }
            for &p in &transition.outputs {
                n_arcs += 1;
                let _ = writeln!(out, r#"      <arc id="a_{n_arcs}" source="t_{idx}" target="{}"/>"#, place_id(p));
            }
        }
        let _ = writeln!(out, "    </page>");
        let _ = writeln!(
            out,
            r#"    <finalmarkings><marking><place idref="{}"><text>1</text></place></marking></finalmarkings>"#,
            place_id(self.sink)
        );
        let _ = writeln!(out, "  </net>");
        let _ = writeln!(out, "</pnml>");
        out
    }
}

fn escape(text: &str) -> String {
    quick_xml::escape::escape(text).into_owned()
}

#[cfg(test)]
mod tests {
    use crate::{ProcessTree, tree_to_petri_net};

    fn net(text: &str) -> crate::PetriNet {
        tree_to_petri_net(&ProcessTree::parse(text).unwrap())
    }

    #[test]
    fn parallel_and_loop_languages() {
        let par = net("+( 'a', 'b' )");
        assert!(par.accepts(&["a", "b"]) && par.accepts(&["b", "a"]));
        assert!(!par.accepts(&["a"]) && !par.accepts(&["a", "a", "b"]));
        let choice_with_loop = net("X( *( 'a', 'b' ), 'c' )");
        assert!(choice_with_loop.accepts(&["a", "b", "a"]));
        assert!(!choice_with_loop.accepts(&["a", "b", "c"]));
        assert!(!choice_with_loop.accepts(&["a", "b"]));
    }

    #[test]
    fn pnml_names_every_node_and_escapes_labels() {
        let pnml = net("->( 'a&b', tau )").to_pnml("demo");
        assert!(pnml.contains("<text>a&amp;b</text>"));
        assert!(pnml.contains(r#"activity="$invisible$""#));
        assert!(pnml.contains(r#"<place idref="sink">"#));
        assert_eq!(pnml.matches("<arc ").count(), 4);
    }
}
