//! Criterion benchmarks of the hot paths: XES reading, variant grouping and discovery.
//! The side-by-side comparison with PM4Py is `scripts/bench-mining.sh`.

#![allow(missing_docs)] // criterion's macros generate undocumented functions.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use flowmem_mining::{Variant, discover, read_xes};

fn shared(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/xes").join(file)
}

fn bench(c: &mut Criterion) {
    for file in ["07_bpic2013_incidents.xes.gz", "a22f0n00.xes.gz", "14_Billing_1t_per_variant.xes.gz"] {
        let path = shared(file);
        let xes = read_xes(&path).expect("shared log reads");
        let log = xes.to_event_log();
        c.bench_function(&format!("read_xes/{file}"), |b| b.iter(|| read_xes(black_box(&path))));
        c.bench_function(&format!("variants/{file}"), |b| b.iter(|| black_box(&xes).to_event_log()));
        c.bench_function(&format!("im/{file}"), |b| b.iter(|| discover(black_box(&log), Variant::Im)));
        c.bench_function(&format!("imf/{file}"), |b| b.iter(|| discover(black_box(&log), Variant::ImF { noise: 0.2 })));
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
