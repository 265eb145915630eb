//! Integration tests of flowmem-mining, one module per topic.

use std::path::{Path, PathBuf};

/// The shared XES logs (`../shared/data/xes`), with PM4Py's trees of them.
fn xes_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/xes")
}

/// The logs in [`xes_dir`] not in `listed`.
fn logs_not_in(listed: &[&str]) -> Vec<String> {
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(xes_dir()).expect("shared XES folder") {
        let name = entry.expect("dir entry").file_name().to_string_lossy().into_owned();
        if (name.ends_with(".xes") || name.ends_with(".xes.gz")) && !listed.contains(&name.as_str()) {
            missing.push(name);
        }
    }
    missing
}

/// One test per shared XES log, each calling `$check` with the log's file name, and
/// `$every`, which fails when the shared folder holds a log the list lacks.
macro_rules! per_shared_log {
    ($check:path, $every:ident) => {
        per_shared_log!(@tests $check, $every,
            running_example_gz => "01_running-example.xes.gz",
            teleclaims => "02_teleclaims.xes.gz",
            repair_example => "03_repairExample.xes.gz",
            reviewing => "04_reviewing.xes.gz",
            bpic2013_incidents => "07_bpic2013_incidents.xes.gz",
            receipt => "08_receipt.xes.gz",
            orders => "10_orders.xes.gz",
            tickets => "11_tickets.xes.gz",
            roadtraffic_per_variant => "12_roadtraffic_1t_per_variant.xes.gz",
            sepsis_per_variant => "13_SEPSIS_1t_per_variant.xes.gz",
            billing_per_variant => "14_Billing_1t_per_variant.xes.gz",
            a22f0n00 => "a22f0n00.xes.gz",
            a22f0n20 => "a22f0n20.xes.gz",
            helpdesk => "helpdesk.xes.gz",
            interval_event_log => "interval_event_log.xes",
            roadtraffic100traces => "roadtraffic100traces.xes",
            running_example => "running-example.xes",
        );
    };
    (@tests $check:path, $every:ident, $($name:ident => $file:literal,)*) => {
        $(#[test] fn $name() { $check($file); })*

        #[test]
        fn $every() {
            let missing = crate::logs_not_in(&[$($file),*]);
            assert!(missing.is_empty(), "logs without a test: {missing:?}");
        }
    };
}

mod conformance_parity;
mod dataflow;
mod parity;
mod properties;
mod skeleton;
