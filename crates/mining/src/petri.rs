//! Process tree → Petri net (the net PM4Py 2.7.23.11 builds, names included) and PNML
//! export.
//!
//! The conversion follows PM4Py's `to_petri_net` converter step by step, because
//! token-based replay depends on the exact structure: which silent transitions exist, and
//! the names of the places, which PM4Py's replay sorts by. It builds the block-structured
//! net (`tau` start/end transitions where the tree starts or ends with a loop, `init_loop`
//! and `loop` around loop bodies, `tauSplit`/`tauJoin` around parallel blocks, `skip` for
//! `tau` leaves), then applies PM4Py's simple reduction (a silent transition whose only
//! input place has one producer and no other consumer is merged into that producer, and
//! symmetrically on the output side) and drops places without producers or consumers.
//! The conformance parity tests compare a digest of the result with PM4Py's own net.

use std::collections::VecDeque;
use std::fmt::Write as _;

use rustc_hash::FxHashSet;

use crate::tree::{Operator, ProcessTree};

/// A place/transition net with an initial and a final marking.
///
/// Nets built by [`tree_to_petri_net`] are safe workflow nets: one token in `source`
/// initially, one in `sink` at the end. Nets read from PNML may be any net.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PetriNet {
    /// The place names; a place id indexes this vector.
    pub places: Vec<String>,
    /// The transitions.
    pub transitions: Vec<Transition>,
    /// Tokens per place initially, as `(place, tokens)` with positive tokens.
    pub initial_marking: Vec<(usize, u32)>,
    /// Tokens per place in the final marking, as `(place, tokens)` with positive tokens.
    pub final_marking: Vec<(usize, u32)>,
}

/// One transition of a [`PetriNet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The transition's id (PM4Py's name): for silent transitions of converted trees
    /// `skip_5`, `tauSplit_3`, …; for visible ones `t_<label>` here, a UUID in PM4Py.
    pub name: String,
    /// The visible label; `None` for a silent (tau) transition.
    pub label: Option<String>,
    /// Input arcs.
    pub inputs: Vec<Arc>,
    /// Output arcs.
    pub outputs: Vec<Arc>,
}

/// An arc between a transition and a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arc {
    /// The place id.
    pub place: usize,
    /// The number of tokens the arc moves (1 for nets from trees).
    pub weight: u32,
}

/// Translates a process tree into the workflow net PM4Py 2.7.23.11 builds for it (see
/// the module documentation), with the tree's language.
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
    let mut builder = Builder::default();
    let source = builder.new_place();
    let sink = builder.new_place();
    builder.places[source].name = "source".into();
    builder.places[sink].name = "sink".into();
    let initial_place = if tau_needed_at_start(tree) {
        let place = builder.new_place();
        let tau = builder.new_hidden("tau");
        builder.arc_pt(source, tau);
        builder.arc_tp(tau, place);
        place
    } else {
        source
    };
    let final_place = if tau_needed_at_end(tree) {
        let place = builder.new_place();
        let tau = builder.new_hidden("tau");
        builder.arc_pt(place, tau);
        builder.arc_tp(tau, sink);
        place
    } else {
        sink
    };
    builder.add(tree, Entity::Place(initial_place), Some(Entity::Place(final_place)));
    builder.reduce();
    for place in 0..builder.places.len() {
        let data = &builder.places[place];
        if data.alive && ((data.outputs.is_empty() && place != sink) || (data.inputs.is_empty() && place != source)) {
            builder.remove_place(place);
        }
    }
    builder.finish(source, sink)
}

impl PetriNet {
    /// The id of the place named `name`.
    #[must_use]
    pub fn place(&self, name: &str) -> Option<usize> {
        self.places.iter().position(|place| place == name)
    }

    /// Whether the net can fire `trace` (with any silent transitions in between) from the
    /// initial marking to the final marking.
    ///
    /// Meant for small, bounded nets: it explores (marking, position) pairs breadth first.
    #[must_use]
    pub fn accepts<S: AsRef<str>>(&self, trace: &[S]) -> bool {
        let initial = self.dense(&self.initial_marking);
        let goal = self.dense(&self.final_marking);
        let mut seen: FxHashSet<(Vec<u32>, usize)> = FxHashSet::default();
        let mut queue = VecDeque::from([(initial, 0usize)]);
        while let Some((marking, pos)) = queue.pop_front() {
            if pos == trace.len() && marking == goal {
                return true;
            }
            if !seen.insert((marking.clone(), pos)) {
                continue;
            }
            for transition in &self.transitions {
                if !transition.inputs.iter().all(|arc| marking[arc.place] >= arc.weight) {
                    continue;
                }
                let next_pos = match &transition.label {
                    None => pos,
                    Some(label) if pos < trace.len() && trace[pos].as_ref() == label => pos + 1,
                    Some(_) => continue,
                };
                let mut next = marking.clone();
                for arc in &transition.inputs {
                    next[arc.place] -= arc.weight;
                }
                for arc in &transition.outputs {
                    next[arc.place] = next[arc.place].saturating_add(arc.weight);
                }
                queue.push_back((next, next_pos));
            }
        }
        false
    }

    /// A marking given as `(place, tokens)` pairs as one count per place.
    #[must_use]
    pub fn dense(&self, marking: &[(usize, u32)]) -> Vec<u32> {
        let mut out = vec![0; self.places.len()];
        for &(place, tokens) in marking {
            out[place] += tokens;
        }
        out
    }

    /// The net's structure as text, one line per transition (silent ones by name,
    /// visible ones by quoted label, with the sorted names of their input and output
    /// places), sorted, then the places and both markings: equal texts mean equal nets up
    /// to the names of visible transitions. The conformance parity tests compare its MD5
    /// with the same text PM4Py's net gives.
    #[must_use]
    pub fn structure_text(&self) -> String {
        let names = |arcs: &[Arc]| {
            let mut names: Vec<&str> = arcs.iter().map(|arc| self.places[arc.place].as_str()).collect();
            names.sort_unstable();
            names.join(",")
        };
        let mut lines: Vec<String> = self
            .transitions
            .iter()
            .map(|t| {
                let name = t.label.as_ref().map_or_else(|| t.name.clone(), |label| format!("'{label}'"));
                format!("T {name} | {} | {}", names(&t.inputs), names(&t.outputs))
            })
            .collect();
        lines.sort();
        let mut places: Vec<&str> = self.places.iter().map(String::as_str).collect();
        places.sort_unstable();
        lines.push(format!("P {}", places.join(" ")));
        for (tag, marking) in [("I", &self.initial_marking), ("F", &self.final_marking)] {
            let mut entries: Vec<String> =
                marking.iter().map(|&(place, tokens)| format!("{}:{tokens}", self.places[place])).collect();
            entries.sort();
            lines.push(format!("{tag} {}", entries.join(" ")));
        }
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }

    /// The hex MD5 digest of [`PetriNet::structure_text`].
    #[must_use]
    pub fn structure_digest(&self) -> String {
        crate::md5::digest(self.structure_text().as_bytes()).iter().fold(String::new(), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
    }

    /// The net in PNML (the 2009 core grammar, with ProM's final-marking extension), for
    /// PM4Py (`pm4py.read_pnml`), ProM, other tools and [`read_pnml`](crate::read_pnml).
    /// Silent transitions carry ProM's `$invisible$` marker.
    #[must_use]
    pub fn to_pnml(&self, name: &str) -> String {
        let mut out = String::new();
        let place_id = |p: usize| escape(&self.places[p]);
        // Writing into a String cannot fail.
        let _ = writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#);
        let _ = writeln!(out, "<pnml>");
        let _ = writeln!(out, r#"  <net id="net1" type="http://www.pnml.org/version-2009/grammar/pnmlcoremodel">"#);
        let _ = writeln!(out, "    <name><text>{}</text></name>", escape(name));
        let _ = writeln!(out, r#"    <page id="n0">"#);
        let initial = self.dense(&self.initial_marking);
        for (p, &tokens) in initial.iter().enumerate() {
            let id = place_id(p);
            let _ = write!(out, r#"      <place id="{id}"><name><text>{id}</text></name>"#);
            if tokens > 0 {
                let _ = write!(out, "<initialMarking><text>{tokens}</text></initialMarking>");
            }
            let _ = writeln!(out, "</place>");
        }
        for transition in &self.transitions {
            match &transition.label {
                Some(label) => {
                    let _ = writeln!(
                        out,
                        r#"      <transition id="{}"><name><text>{}</text></name></transition>"#,
                        escape(&transition.name),
                        escape(label)
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        r#"      <transition id="{id}"><name><text>{id}</text></name><toolspecific tool="ProM" version="6.4" activity="$invisible$" localNodeID="{id}"/></transition>"#,
                        id = escape(&transition.name)
                    );
                }
            }
        }
        let mut n_arcs = 0;
        for transition in &self.transitions {
            let id = escape(&transition.name);
            for (arcs, incoming) in [(&transition.inputs, true), (&transition.outputs, false)] {
                for arc in arcs {
                    n_arcs += 1;
                    let (from, to) =
                        if incoming { (place_id(arc.place), id.clone()) } else { (id.clone(), place_id(arc.place)) };
                    let _ = write!(out, r#"      <arc id="a{n_arcs}" source="{from}" target="{to}">"#);
                    if arc.weight != 1 {
                        let _ = write!(out, "<inscription><text>{}</text></inscription>", arc.weight);
                    }
                    let _ = writeln!(out, "</arc>");
                }
            }
        }
        let _ = writeln!(out, "    </page>");
        let _ = write!(out, "    <finalmarkings><marking>");
        for &(place, tokens) in &self.final_marking {
            let _ = write!(out, r#"<place idref="{}"><text>{tokens}</text></place>"#, place_id(place));
        }
        let _ = writeln!(out, "</marking></finalmarkings>");
        let _ = writeln!(out, "  </net>");
        let _ = writeln!(out, "</pnml>");
        out
    }
}

fn escape(text: &str) -> String {
    quick_xml::escape::escape(text).into_owned()
}

/// A node a subtree is attached to: PM4Py's converter passes places or transitions.
#[derive(Clone, Copy)]
enum Entity {
    Place(usize),
    Transition(usize),
}

#[derive(Default)]
struct PlaceData {
    name: String,
    alive: bool,
    // Transitions with an arc into / out of this place; an entry per arc.
    inputs: Vec<usize>,
    outputs: Vec<usize>,
}

struct TransitionData {
    name: String,
    label: Option<String>,
    alive: bool,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
}

/// The net under construction, with removable nodes and PM4Py's name counters.
#[derive(Default)]
struct Builder {
    places: Vec<PlaceData>,
    transitions: Vec<TransitionData>,
    n_hidden: usize,
}

impl Builder {
    fn new_place(&mut self) -> usize {
        let name = format!("p_{}", self.places.len() + 1);
        self.places.push(PlaceData { name, alive: true, ..PlaceData::default() });
        self.places.len() - 1
    }

    fn new_hidden(&mut self, kind: &str) -> usize {
        self.n_hidden += 1;
        let name = format!("{kind}_{}", self.n_hidden);
        self.push_transition(name, None)
    }

    fn push_transition(&mut self, name: String, label: Option<String>) -> usize {
        self.transitions.push(TransitionData { name, label, alive: true, inputs: Vec::new(), outputs: Vec::new() });
        self.transitions.len() - 1
    }

    fn arc_pt(&mut self, place: usize, transition: usize) {
        self.places[place].outputs.push(transition);
        self.transitions[transition].inputs.push(place);
    }

    fn arc_tp(&mut self, transition: usize, place: usize) {
        self.transitions[transition].outputs.push(place);
        self.places[place].inputs.push(transition);
    }

    /// PM4Py's `recursively_add_tree`: attaches `tree` between `initial` and `last`,
    /// returning the subtree's final place.
    fn add(&mut self, tree: &ProcessTree, initial: Entity, last: Option<Entity>) -> usize {
        let initial_place = match initial {
            Entity::Place(place) => place,
            Entity::Transition(transition) => {
                let place = self.new_place();
                self.arc_tp(transition, place);
                place
            }
        };
        let final_place = match last {
            Some(Entity::Place(place)) => place,
            other => {
                let place = self.new_place();
                if let Some(Entity::Transition(transition)) = other {
                    self.arc_pt(place, transition);
                }
                place
            }
        };
        match tree {
            ProcessTree::Tau | ProcessTree::Activity { .. } => {
                let transition = match tree {
                    ProcessTree::Activity { label } => {
                        let mut name = format!("t_{label}");
                        while self.transitions.iter().any(|t| t.name == name) {
                            name.push('\'');
                        }
                        self.push_transition(name, Some(label.clone()))
                    }
                    _ => self.new_hidden("skip"),
                };
                self.arc_pt(initial_place, transition);
                self.arc_tp(transition, final_place);
            }
            ProcessTree::Operator { operator: Operator::Xor, children } => {
                for child in children {
                    self.add(child, Entity::Place(initial_place), Some(Entity::Place(final_place)));
                }
            }
            ProcessTree::Operator { operator: Operator::Parallel, children } => {
                let split = self.new_hidden("tauSplit");
                self.arc_pt(initial_place, split);
                let join = self.new_hidden("tauJoin");
                self.arc_tp(join, final_place);
                for child in children {
                    self.add(child, Entity::Transition(split), Some(Entity::Transition(join)));
                }
            }
            ProcessTree::Operator { operator: Operator::Sequence, children } => {
                let mut current = initial_place;
                for (idx, child) in children.iter().enumerate() {
                    let last = (idx + 1 == children.len()).then_some(Entity::Place(final_place));
                    current = self.add(child, Entity::Place(current), last);
                }
            }
            ProcessTree::Operator { operator: Operator::Loop, children } => {
                let body_start = self.new_place();
                let init_loop = self.new_hidden("init_loop");
                self.arc_pt(initial_place, init_loop);
                self.arc_tp(init_loop, body_start);
                let loop_back = self.new_hidden("loop");
                match children.as_slice() {
                    [] => {}
                    [body] => {
                        self.add(body, Entity::Place(body_start), Some(Entity::Place(final_place)));
                        self.arc_pt(final_place, loop_back);
                        self.arc_tp(loop_back, body_start);
                    }
                    [body, redos @ ..] => {
                        let body_end = self.add(body, Entity::Place(body_start), None);
                        let mut redo_end = None;
                        for redo in redos {
                            redo_end = Some(self.add(redo, Entity::Place(body_end), redo_end.map(Entity::Place)));
                        }
                        self.add(&ProcessTree::Tau, Entity::Place(body_end), Some(Entity::Place(final_place)));
                        if let Some(redo_end) = redo_end {
                            self.arc_pt(redo_end, loop_back);
                        }
                        self.arc_tp(loop_back, body_start);
                    }
                }
            }
        }
        final_place
    }

    /// PM4Py's `apply_simple_reduction`: single-entry, then single-exit silent
    /// transitions are merged away until neither rule applies.
    fn reduce(&mut self) {
        loop {
            let before = self.n_alive();
            while self.reduce_single_entry() {}
            while self.reduce_single_exit() {}
            if self.n_alive() >= before {
                return;
            }
        }
    }

    fn n_alive(&self) -> (usize, usize) {
        (self.transitions.iter().filter(|t| t.alive).count(), self.places.iter().filter(|p| p.alive).count())
    }

    /// Merges one silent transition `t` whose only input place is fed by exactly one
    /// arc and consumed only by `t` into that place's producer.
    fn reduce_single_entry(&mut self) -> bool {
        for t in 0..self.transitions.len() {
            let data = &self.transitions[t];
            if !data.alive || data.label.is_some() || data.inputs.len() != 1 {
                continue;
            }
            let place = data.inputs[0];
            let place_data = &self.places[place];
            if place_data.inputs.len() != 1 || !place_data.outputs.iter().all(|&o| o == t) {
                continue;
            }
            let producer = place_data.inputs[0];
            let targets = self.transitions[t].outputs.clone();
            self.remove_transition(t);
            self.remove_place(place);
            for target in targets {
                self.arc_tp(producer, target);
            }
            return true;
        }
        false
    }

    /// Merges one silent transition `t` whose only output place has exactly one consumer
    /// arc and is produced only by `t` into that place's consumer.
    fn reduce_single_exit(&mut self) -> bool {
        for t in 0..self.transitions.len() {
            let data = &self.transitions[t];
            if !data.alive || data.label.is_some() || data.outputs.len() != 1 {
                continue;
            }
            let place = data.outputs[0];
            let place_data = &self.places[place];
            if place_data.outputs.len() != 1
                || !place_data.inputs.iter().all(|&i| i == t)
                || place_data.inputs.is_empty()
            {
                continue;
            }
            let consumer = place_data.outputs[0];
            let sources = self.transitions[t].inputs.clone();
            self.remove_transition(t);
            self.remove_place(place);
            for source in sources {
                self.arc_pt(source, consumer);
            }
            return true;
        }
        false
    }

    fn remove_transition(&mut self, t: usize) {
        let data = &mut self.transitions[t];
        data.alive = false;
        let (inputs, outputs) = (std::mem::take(&mut data.inputs), std::mem::take(&mut data.outputs));
        for place in inputs {
            self.places[place].outputs.retain(|&o| o != t);
        }
        for place in outputs {
            self.places[place].inputs.retain(|&i| i != t);
        }
    }

    fn remove_place(&mut self, place: usize) {
        let data = &mut self.places[place];
        data.alive = false;
        let (inputs, outputs) = (std::mem::take(&mut data.inputs), std::mem::take(&mut data.outputs));
        for t in inputs {
            self.transitions[t].outputs.retain(|&p| p != place);
        }
        for t in outputs {
            self.transitions[t].inputs.retain(|&p| p != place);
        }
    }

    fn finish(self, source: usize, sink: usize) -> PetriNet {
        let mut ids = vec![usize::MAX; self.places.len()];
        let mut places = Vec::new();
        for (old, data) in self.places.into_iter().enumerate() {
            if data.alive {
                ids[old] = places.len();
                places.push(data.name);
            }
        }
        let arcs = |list: Vec<usize>| list.into_iter().map(|p| Arc { place: ids[p], weight: 1 }).collect();
        let transitions = self
            .transitions
            .into_iter()
            .filter(|t| t.alive)
            .map(|t| Transition { name: t.name, label: t.label, inputs: arcs(t.inputs), outputs: arcs(t.outputs) })
            .collect();
        PetriNet { places, transitions, initial_marking: vec![(ids[source], 1)], final_marking: vec![(ids[sink], 1)] }
    }
}

/// PM4Py's `check_tau_mandatory_at_initial_marking`: the tree is a choice or parallel
/// block, or a loop can be reached by first children (or, from the first child, by last
/// children).
fn tau_needed_at_start(tree: &ProcessTree) -> bool {
    let ProcessTree::Operator { operator, children } = tree else { return false };
    let initial_loop = match children.first() {
        Some(ProcessTree::Operator { operator: Operator::Loop, .. }) => true,
        Some(first @ ProcessTree::Operator { .. }) => ends_with_loop(first),
        _ => false,
    };
    initial_loop || starts_with_loop(tree) || matches!(operator, Operator::Xor | Operator::Parallel)
}

/// PM4Py's `check_tau_mandatory_at_final_marking`.
fn tau_needed_at_end(tree: &ProcessTree) -> bool {
    let ProcessTree::Operator { operator, .. } = tree else { return false };
    ends_with_loop(tree) || ends_in_loop_operator(tree) || matches!(operator, Operator::Xor | Operator::Parallel)
}

/// PM4Py's `check_loop_to_first_operator`: a loop on the path of first children,
/// this node included.
fn starts_with_loop(tree: &ProcessTree) -> bool {
    match tree {
        ProcessTree::Operator { operator: Operator::Loop, .. } => true,
        ProcessTree::Operator { children, .. } => children.first().is_some_and(starts_with_loop),
        _ => false,
    }
}

/// PM4Py's `check_loop_to_last_operator`: a loop on the path of last children, this
/// node included.
fn ends_in_loop_operator(tree: &ProcessTree) -> bool {
    match tree {
        ProcessTree::Operator { operator: Operator::Loop, .. } => true,
        ProcessTree::Operator { children, .. } => children.last().is_some_and(ends_in_loop_operator),
        _ => false,
    }
}

/// PM4Py's `check_terminal_loop`: a loop among the last children below this node.
fn ends_with_loop(tree: &ProcessTree) -> bool {
    match tree {
        ProcessTree::Operator { children, .. } => match children.last() {
            Some(ProcessTree::Operator { operator: Operator::Loop, .. }) => true,
            Some(last @ ProcessTree::Operator { .. }) => ends_with_loop(last),
            _ => false,
        },
        _ => false,
    }
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
    fn the_running_example_gives_pm4py_s_net() {
        // PM4Py 2.7.23.11 builds this net for the tree (printed by its converter).
        let net = net(
            "->( 'register request', *( ->( +( 'check ticket', X( 'examine thoroughly', 'examine casually' ) ), 'decide' ), 'reinitiate request' ), X( 'reject request', 'pay compensation' ) )",
        );
        let text = net.structure_text();
        for line in [
            "T 'decide' | p_11,p_9 | p_6",
            "T 'reinitiate request' | p_6 | p_5",
            "T skip_5 | p_6 | p_4",
            "T tauSplit_3 | p_5 | p_10,p_8",
            "P p_10 p_11 p_4 p_5 p_6 p_8 p_9 sink source",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert_eq!(net.transitions.len(), 10);
    }

    #[test]
    fn pnml_names_every_node_and_escapes_labels() {
        let pnml = net("->( 'a&b', tau )").to_pnml("demo");
        assert!(pnml.contains("<text>a&amp;b</text>"));
        assert!(pnml.contains(r#"<place idref="sink">"#));
    }
}
