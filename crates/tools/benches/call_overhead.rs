//! The registry's overhead per call over a bare rmcp client, both calling
//! server-everything's `echo` over stdio, measured side by side in one run.
//!
//! Run with `cargo bench -p flowmem-tools --bench call_overhead`. Criterion reports each
//! variant; the final lines print the mean per call of each, measured interleaved, and
//! their ratio (registry / bare).
#![allow(clippy::print_stdout, missing_docs)]

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use flowmem_tools::{CallStatus, Registry, ToolsConfig};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value};

fn everything() -> std::path::PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.deps/node/node_modules/.bin/mcp-server-everything");
    assert!(path.exists(), "`{}` is missing; run `scripts/setup/20-mcp-servers.sh`", path.display());
    path
}

fn echo_args() -> Map<String, Value> {
    let mut args = Map::new();
    args.insert("message".to_owned(), Value::String("benchmark".to_owned()));
    args
}

async fn bare_client() -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(everything());
    cmd.arg("stdio");
    let (process, _) = TokioChildProcess::builder(cmd).stderr(std::process::Stdio::null()).spawn().unwrap();
    ().serve(process).await.unwrap()
}

async fn registry() -> Registry {
    let text =
        format!("[[tools.mcp]]\nname = \"everything\"\ncommand = \"{}\"\nargs = [\"stdio\"]\n", everything().display());
    let doc: toml::Value = toml::from_str(&text).unwrap();
    Registry::connect(&ToolsConfig::from_toml(&doc, None).unwrap()).await.unwrap()
}

async fn bare_echo(client: &RunningService<RoleClient, ()>) {
    let params = CallToolRequestParams::new("echo").with_arguments(black_box(echo_args()));
    let result = client.peer().call_tool(params).await.unwrap();
    assert_ne!(result.is_error, Some(true));
    black_box(result);
}

async fn registry_echo(registry: &Registry) {
    let invocation = registry.invoke("echo", black_box(echo_args())).await;
    assert_eq!(invocation.status, CallStatus::Ok);
    drop(black_box(invocation));
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (client, registry) = runtime.block_on(async { (bare_client().await, registry().await) });

    let mut group = c.benchmark_group("echo");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("bare_rmcp", |b| b.to_async(&runtime).iter(|| bare_echo(&client)));
    group.bench_function("registry", |b| b.to_async(&runtime).iter(|| registry_echo(&registry)));
    group.finish();

    // Interleaved rounds so both variants see the same machine load.
    let rounds = 20;
    let per_round = 100;
    let (mut bare, mut reg) = (Duration::ZERO, Duration::ZERO);
    runtime.block_on(async {
        for _ in 0..rounds {
            let start = Instant::now();
            for _ in 0..per_round {
                bare_echo(&client).await;
            }
            bare += start.elapsed();
            let start = Instant::now();
            for _ in 0..per_round {
                registry_echo(&registry).await;
            }
            reg += start.elapsed();
        }
    });
    let n = f64::from(rounds * per_round);
    let bare_us = bare.as_secs_f64() * 1e6 / n;
    let reg_us = reg.as_secs_f64() * 1e6 / n;
    println!(
        "side by side, {} calls each: bare rmcp {bare_us:.1} µs/call, registry {reg_us:.1} µs/call",
        rounds * per_round
    );
    println!("registry overhead: {:.1} µs/call, ratio registry/bare = {:.3}", reg_us - bare_us, reg_us / bare_us);

    runtime.block_on(async {
        registry.shutdown().await;
        drop(client);
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
