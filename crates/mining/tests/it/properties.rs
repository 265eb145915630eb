//! Property tests: IM's fitness guarantee, and Petri nets that accept exactly their tree's
//! language up to a length bound.

use flowmem_mining::{EventLogBuilder, Operator, ProcessTree, Variant, discover, tree_to_petri_net};
use proptest::prelude::*;

fn trace() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "c", "d", "e"]), 0..7)
}

fn tree() -> impl Strategy<Value = ProcessTree> {
    let leaf = prop_oneof![
        1 => Just(ProcessTree::Tau),
        4 => prop::sample::select(vec!["a", "b", "c"]).prop_map(ProcessTree::activity),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            (
                prop::sample::select(vec![Operator::Sequence, Operator::Xor, Operator::Parallel]),
                prop::collection::vec(inner.clone(), 2..4)
            )
                .prop_map(|(operator, children)| ProcessTree::operator(operator, children)),
            (inner.clone(), inner).prop_map(|(body, redo)| ProcessTree::operator(Operator::Loop, vec![body, redo])),
        ]
    })
}

/// Every word over `alphabet` with at most `max_len` letters.
fn all_words(alphabet: &[&str], max_len: usize) -> Vec<Vec<String>> {
    let mut words = vec![Vec::new()];
    let mut frontier: Vec<Vec<String>> = vec![Vec::new()];
    for _ in 0..max_len {
        frontier = frontier
            .iter()
            .flat_map(|word| {
                alphabet.iter().map(move |a| {
                    let mut next = word.clone();
                    next.push((*a).to_owned());
                    next
                })
            })
            .collect();
        words.extend(frontier.iter().cloned());
    }
    words
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn every_trace_replays_on_the_im_tree(traces in prop::collection::vec(trace(), 1..9)) {
        let mut builder = EventLogBuilder::new();
        for trace in &traces {
            builder.push_trace(trace.iter().copied());
        }
        let tree = discover(&builder.build(), Variant::Im);
        let net = tree_to_petri_net(&tree);
        for trace in &traces {
            prop_assert!(net.accepts(trace), "trace {:?} does not replay on {}", trace, tree);
        }
    }

    #[test]
    fn petri_net_language_equals_tree_language(tree in tree()) {
        const MAX_LEN: usize = 4;
        let language = tree.language(MAX_LEN);
        let net = tree_to_petri_net(&tree);
        for word in all_words(&["a", "b", "c"], MAX_LEN) {
            prop_assert_eq!(
                net.accepts(&word),
                language.contains(&word),
                "word {:?} on {}", word, tree
            );
        }
    }

    #[test]
    fn folding_keeps_the_language(tree in tree()) {
        prop_assert_eq!(tree.language(4), tree.clone().fold().language(4), "{}", tree);
    }

    #[test]
    fn printing_round_trips(tree in tree()) {
        let text = tree.to_string();
        prop_assert_eq!(ProcessTree::parse(&text).map(|t| t.to_string()), Ok(text));
    }
}
