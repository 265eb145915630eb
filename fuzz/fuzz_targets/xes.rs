//! The XES reader on a file of any bytes, then what import and mining make of the log.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(log) = flowmem_mining::parse_xes(data, "log.xes".as_ref()) else { return };
    let _ = log.to_event_log();
    let _ = log.to_event_log_in_file_order();
    let trajectories = log.to_trajectories("xes:log.xes");
    assert_eq!(trajectories.len(), log.cases.len());
    for remark in &log.remarks {
        let _ = remark.to_string();
    }
});
