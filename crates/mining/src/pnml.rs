//! A PNML reader for place/transition nets, as PM4Py, ProM and [`PetriNet::to_pnml`]
//! write them.
//!
//! It reads the first `<net>`: places (named by their id, as PM4Py names them, with their
//! `initialMarking`), transitions (named by their id, labelled by their `<name>`, silent
//! when ProM's `toolspecific activity="$invisible$"` marks them), arcs with their
//! `inscription` weight, and ProM's `<finalmarkings>`. Pages are flattened. A file
//! without a final marking gets one token in every place without outgoing arcs.

use std::path::Path;

use quick_xml::events::{BytesStart, Event};
use rustc_hash::FxHashMap;

use crate::{Arc, MiningError, PetriNet, Transition};

/// Reads a PNML file.
///
/// # Errors
///
/// [`MiningError::Io`] when the file cannot be read, [`MiningError::Xml`] when it is not
/// well-formed XML, and [`MiningError::Pnml`] when it has no net, an arc names an unknown
/// node or joins two places or two transitions, or a number does not parse.
///
/// # Example
///
/// ```no_run
/// let net = flowmem_mining::read_pnml("model.pnml".as_ref())?;
/// println!("{} places, {} transitions", net.places.len(), net.transitions.len());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_pnml(path: &Path) -> Result<PetriNet, MiningError> {
    let text = std::fs::read_to_string(path).map_err(|source| MiningError::Io { path: path.to_path_buf(), source })?;
    parse_pnml(&text, path)
}

/// Parses PNML text; `path` only names the document in errors.
///
/// # Errors
///
/// As [`read_pnml`], without the I/O error.
///
/// # Example
///
/// ```
/// use flowmem_mining::{ProcessTree, parse_pnml, tree_to_petri_net};
///
/// let net = tree_to_petri_net(&ProcessTree::parse("->( 'a', X( 'b', tau ) )")?);
/// let back = parse_pnml(&net.to_pnml("demo"), "demo.pnml".as_ref())?;
/// assert_eq!(back.structure_text(), net.structure_text());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_pnml(text: &str, path: &Path) -> Result<PetriNet, MiningError> {
    let mut reader = quick_xml::Reader::from_str(text);
    let mut doc = Doc::default();
    let mut stack: Vec<Vec<u8>> = Vec::new();
    // Text arrives in pieces: plain runs and entity references (`&amp;`, `&#38;`).
    let mut pending = String::new();
    loop {
        let event = reader.read_event().map_err(|source| MiningError::Xml {
            path: path.to_path_buf(),
            position: reader.buffer_position(),
            source,
        })?;
        match event {
            Event::Text(content) => {
                pending.push_str(&content.decode().map_err(|e| pnml_error(path, format!("bad text: {e}")))?);
                continue;
            }
            Event::GeneralRef(reference) => {
                let name = reference.decode().map_err(|e| pnml_error(path, format!("bad reference: {e}")))?;
                let resolved = match reference.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    _ => quick_xml::escape::resolve_predefined_entity(&name)
                        .ok_or_else(|| pnml_error(path, format!("unknown entity `&{name};`")))?
                        .to_owned(),
                };
                pending.push_str(&resolved);
                continue;
            }
            _ => {}
        }
        if !pending.is_empty() {
            doc.text(&stack, std::mem::take(&mut pending).trim().to_owned(), path)?;
        }
        match event {
            Event::Start(start) => {
                doc.open(&start, &stack, path)?;
                stack.push(start.local_name().as_ref().to_vec());
            }
            Event::Empty(start) => doc.open(&start, &stack, path)?,
            Event::End(_) if stack.pop().as_deref() == Some(b"net".as_slice()) => doc.nets_seen += 1,
            Event::Eof => break,
            _ => {}
        }
    }
    doc.finish(path)
}

fn pnml_error(path: &Path, reason: String) -> MiningError {
    MiningError::Pnml { path: path.to_path_buf(), reason }
}

#[derive(Default)]
struct Doc {
    nets_seen: usize,
    places: Vec<String>,
    place_ids: FxHashMap<String, usize>,
    initial: Vec<u32>,
    transitions: Vec<Transition>,
    transition_ids: FxHashMap<String, usize>,
    // (source id, target id, weight)
    arcs: Vec<(String, String, u32)>,
    final_marking: Vec<(String, u32)>,
    saw_final: bool,
    current_final_place: Option<String>,
}

fn attr(start: &BytesStart<'_>, key: &[u8]) -> Option<String> {
    start
        .attributes()
        .flatten()
        .find(|a| a.key.as_ref() == key)
        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
}

fn ends_with(stack: &[Vec<u8>], tail: &[&str]) -> bool {
    stack.len() >= tail.len() && stack[stack.len() - tail.len()..].iter().zip(tail).all(|(a, b)| a == b.as_bytes())
}

impl Doc {
    fn open(&mut self, start: &BytesStart<'_>, stack: &[Vec<u8>], path: &Path) -> Result<(), MiningError> {
        if self.nets_seen > 0 {
            return Ok(());
        }
        let name = start.local_name();
        let inside = |tag: &str| stack.last().is_some_and(|last| last == tag.as_bytes());
        match name.as_ref() {
            b"place" if ends_with(stack, &["finalmarkings", "marking"]) => {
                self.saw_final = true;
                self.current_final_place = attr(start, b"idref");
            }
            b"marking" if inside("finalmarkings") => self.saw_final = true,
            b"place" => {
                let id = attr(start, b"id").ok_or_else(|| pnml_error(path, "a place has no `id`".into()))?;
                self.place_ids.insert(id.clone(), self.places.len());
                self.places.push(id);
                self.initial.push(0);
            }
            b"transition" => {
                let id = attr(start, b"id").ok_or_else(|| pnml_error(path, "a transition has no `id`".into()))?;
                self.transition_ids.insert(id.clone(), self.transitions.len());
                self.transitions.push(Transition {
                    name: id.clone(),
                    label: Some(id),
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                });
            }
            b"toolspecific" if inside("transition") => {
                if attr(start, b"activity").as_deref() == Some("$invisible$")
                    && let Some(last) = self.transitions.last_mut()
                {
                    last.label = None;
                }
            }
            b"arc" => {
                let source = attr(start, b"source").ok_or_else(|| pnml_error(path, "an arc has no `source`".into()))?;
                let target = attr(start, b"target").ok_or_else(|| pnml_error(path, "an arc has no `target`".into()))?;
                self.arcs.push((source, target, 1));
            }
            _ => {}
        }
        Ok(())
    }

    fn text(&mut self, stack: &[Vec<u8>], value: String, path: &Path) -> Result<(), MiningError> {
        if self.nets_seen > 0 || value.is_empty() {
            return Ok(());
        }
        let number = |what: &str| {
            value.parse::<u32>().map_err(|_| pnml_error(path, format!("{what} `{value}` is not a token count")))
        };
        if ends_with(stack, &["finalmarkings", "marking", "place", "text"]) {
            let tokens = number("final marking")?;
            if let Some(place) = self.current_final_place.take() {
                self.final_marking.push((place, tokens));
            }
        } else if ends_with(stack, &["place", "initialMarking", "text"]) {
            let tokens = number("initial marking")?;
            if let Some(last) = self.initial.last_mut() {
                *last = tokens;
            }
        } else if ends_with(stack, &["transition", "name", "text"]) {
            if let Some(last) = self.transitions.last_mut()
                && last.label.is_some()
            {
                last.label = Some(value);
            }
        } else if ends_with(stack, &["arc", "inscription", "text"]) {
            let weight = number("arc inscription")?;
            if let Some(last) = self.arcs.last_mut() {
                last.2 = weight;
            }
        }
        Ok(())
    }

    fn finish(mut self, path: &Path) -> Result<PetriNet, MiningError> {
        if self.places.is_empty() && self.transitions.is_empty() {
            return Err(pnml_error(path, "no `<net>` with places or transitions".into()));
        }
        for (source, target, weight) in std::mem::take(&mut self.arcs) {
            match (self.place_ids.get(&source), self.transition_ids.get(&target)) {
                (Some(&place), Some(&t)) => self.transitions[t].inputs.push(Arc { place, weight }),
                _ => match (self.transition_ids.get(&source), self.place_ids.get(&target)) {
                    (Some(&t), Some(&place)) => self.transitions[t].outputs.push(Arc { place, weight }),
                    _ => {
                        return Err(pnml_error(
                            path,
                            format!("arc `{source}` → `{target}` does not join a place and a transition of the net"),
                        ));
                    }
                },
            }
        }
        let initial_marking =
            self.initial.iter().enumerate().filter(|&(_, &n)| n > 0).map(|(place, &n)| (place, n)).collect();
        let final_marking = if self.saw_final {
            let mut marking = Vec::new();
            for (id, tokens) in &self.final_marking {
                let place = *self
                    .place_ids
                    .get(id)
                    .ok_or_else(|| pnml_error(path, format!("the final marking names unknown place `{id}`")))?;
                if *tokens > 0 {
                    marking.push((place, *tokens));
                }
            }
            marking
        } else {
            (0..self.places.len())
                .filter(|&place| !self.transitions.iter().any(|t| t.inputs.iter().any(|arc| arc.place == place)))
                .map(|place| (place, 1))
                .collect()
        };
        Ok(PetriNet { places: self.places, transitions: self.transitions, initial_marking, final_marking })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::parse_pnml;

    #[test]
    fn reads_weights_invisible_transitions_and_infers_the_final_marking() {
        let text = r#"<pnml><net id="n"><page id="p">
<place id="i"><initialMarking><text>2</text></initialMarking></place>
<place id="o"/>
<transition id="t1"><name><text>pay &amp; go</text></name></transition>
<transition id="h"><toolspecific tool="ProM" activity="$invisible$"/></transition>
<arc id="a1" source="i" target="t1"><inscription><text>2</text></inscription></arc>
<arc id="a2" source="t1" target="o"/>
<arc id="a3" source="o" target="h"/>
<place id="end"/>
<arc id="a4" source="h" target="end"/>
</page></net></pnml>"#;
        let net = parse_pnml(text, Path::new("x.pnml")).unwrap();
        assert_eq!(net.places, ["i", "o", "end"]);
        assert_eq!(net.initial_marking, [(0, 2)]);
        assert_eq!(net.transitions[0].label.as_deref(), Some("pay & go"));
        assert_eq!(net.transitions[0].inputs[0].weight, 2);
        assert_eq!(net.transitions[1].label, None);
        // No `<finalmarkings>`: the one place without outgoing arcs holds the final token.
        assert_eq!(net.final_marking, [(2, 1)]);
    }

    #[test]
    fn an_arc_between_two_places_names_both() {
        let text =
            r#"<pnml><net id="n"><place id="a"/><place id="b"/><arc id="x" source="a" target="b"/></net></pnml>"#;
        let err = parse_pnml(text, Path::new("bad.pnml")).unwrap_err().to_string();
        assert!(err.contains("bad.pnml") && err.contains("`a` → `b`"), "{err}");
    }
}
