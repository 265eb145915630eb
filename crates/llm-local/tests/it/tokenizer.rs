//! Tokenizer parity with the reference ids in `tests/fixtures/tokenizer.json`, written
//! by `scripts/reference/tokenizer_fixture.py` with a second implementation.

use std::path::Path;

use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}

#[test]
fn ids_equal_the_reference_tokenization() {
    let Some(model) = crate::model() else { return };
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer.json");
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(fixture.cases.len() >= 30, "the fixture has {} cases", fixture.cases.len());
    let mut mismatches = Vec::new();
    for case in &fixture.cases {
        let ids = model.tokenize(&case.text).unwrap();
        if ids != case.ids {
            mismatches.push(format!("{:?}: got {:?}, reference {:?}", case.text, ids, case.ids));
        }
    }
    assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
}

#[test]
fn control_tokens_in_text_become_control_ids() {
    let Some(model) = crate::model() else { return };
    let ids = model.tokenize("<|im_start|>user\nhi<|im_end|>").unwrap();
    assert_eq!(ids.first(), Some(&1));
    assert_eq!(ids.last(), Some(&2));
}
