//! PM4Py 2.7.23.11 parity on every shared XES log: counts, IM and IMf(0.2) trees.

use flowmem_mining::{ProcessTree, Variant, discover, read_xes};

fn expected(file: &str) -> serde_json::Value {
    let path = crate::xes_dir().join("pm4py-trees.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let all: serde_json::Value = serde_json::from_str(&text).expect("pm4py-trees.json is JSON");
    all["logs"][file].clone()
}

fn canonical(text: &str) -> String {
    ProcessTree::parse(text)
        .unwrap_or_else(|e| panic!("PM4Py tree does not parse: {e}: {text}"))
        .canonical()
        .to_string()
}

/// Checks one log: counts, then both trees; reports every mismatch at once.
fn check(file: &str) {
    let want = expected(file);
    assert!(want.is_object(), "{file} is missing from pm4py-trees.json");
    let xes = read_xes(&crate::xes_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let log = xes.to_event_log();
    let mut problems = Vec::new();
    let counts = [
        ("cases", log.n_cases()),
        ("events", log.n_events()),
        ("activities", log.activities().len() as u64),
        // PM4Py's `get_variants` counts variants in file order; its miner sorts by time.
        ("variants", xes.to_event_log_in_file_order().variants().len() as u64),
    ];
    for (name, ours) in counts {
        if want[name].as_u64() != Some(ours) {
            problems.push(format!("{name}: ours {ours}, PM4Py {}", want[name]));
        }
    }
    for (key, variant) in [("im_tree", Variant::Im), ("imf02_tree", Variant::ImF { noise: 0.2 })] {
        let theirs = want[key].as_str().expect("tree string");
        let tree = discover(&log, variant);
        let ours = tree.canonical().to_string();
        if ours != canonical(theirs) {
            problems.push(format!("{key}:\n  ours:  {ours}\n  PM4Py: {}", canonical(theirs)));
        } else if tree.to_string() != theirs {
            problems.push(format!("{key} printed order differs:\n  ours:  {tree}\n  PM4Py: {theirs}"));
        }
    }
    assert!(problems.is_empty(), "{file}:\n{}", problems.join("\n"));
}

per_shared_log!(check, every_shared_log_has_a_parity_test);
