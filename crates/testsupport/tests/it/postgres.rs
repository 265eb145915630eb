//! Throwaway PostgreSQL clusters: they start, serve isolated databases to a real
//! client (`psql`), and leave neither a server nor a directory behind, whether dropped
//! or shared until the test process exits.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use flowmem_testsupport::PgCluster;

/// Set in the child test process of
/// [`the_shared_cluster_stops_when_the_test_process_exits`]: where it writes the shared
/// cluster's port and directory.
const CHILD_REPORT: &str = "FLOWMEM_TEST_PG_CHILD_REPORT";

/// What `psql` prints for `query` on the database at `url`.
fn psql(url: &str, query: &str) -> String {
    let output = Command::new("/usr/bin/psql").args(["-d", url, "-Atc", query]).output().expect("running psql");
    assert!(output.status.success(), "psql {url}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn accepts_connections(port: u16) -> bool {
    TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], port)), Duration::from_secs(1)).is_ok()
}

/// The processes whose command line names `dir` (the server's, the watchdog's).
fn processes_naming(dir: &Path) -> String {
    let pgrep = Command::new("pgrep").arg("-af").arg(dir).output().expect("running pgrep");
    String::from_utf8_lossy(&pgrep.stdout).into_owned()
}

/// Waits up to `timeout` until nothing listens on `port`, `dir` is gone and no process
/// names it; whether it came to that.
fn wait_gone(port: u16, dir: &Path, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !accepts_connections(port) && !dir.exists() && processes_naming(dir).is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        // The watchdog is a process of its own, not our child: nothing to wait on.
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_cluster_serves_isolated_databases_and_leaves_nothing_when_dropped() {
    let cluster = PgCluster::start();
    let port = cluster.port();
    let dir = cluster.dir().to_path_buf();
    assert_eq!(cluster.url(), format!("postgres://postgres@127.0.0.1:{port}/flowmem"));
    assert_eq!(psql(&cluster.url(), "select current_database()"), "flowmem", "log:\n{}", cluster.log());

    let first = cluster.create_database("first_db");
    let second = cluster.create_database("second-db");
    assert_eq!(first, format!("postgres://postgres@127.0.0.1:{port}/first_db"));
    assert_eq!(psql(&first, "select 1"), "1");
    assert_eq!(psql(&second, "select 1"), "1");
    assert_eq!(psql(&first, "select current_database()"), "first_db");
    assert_eq!(psql(&second, "select current_database()"), "second-db");
    // A table in one database is not in the other.
    psql(&first, "create table only_here (x int)");
    assert_eq!(psql(&first, "select count(*) from pg_tables where tablename = 'only_here'"), "1");
    assert_eq!(psql(&second, "select count(*) from pg_tables where tablename = 'only_here'"), "0");
    assert!(cluster.log().contains("ready to accept connections"), "log:\n{}", cluster.log());

    drop(cluster);
    assert!(!accepts_connections(port), "port {port} still accepts connections after the drop");
    assert!(!dir.exists(), "{} is still there after the drop", dir.display());
}

#[test]
fn a_bad_database_name_is_refused_before_postgres_sees_it() {
    let cluster = PgCluster::shared();
    let refused = std::panic::catch_unwind(|| cluster.create_database("a/b"));
    let message = refused.expect_err("a name with `/` is refused");
    let message = message.downcast_ref::<String>().expect("a formatted panic message");
    assert!(message.contains("\"a/b\""), "{message}");
}

#[test]
fn the_shared_cluster_is_one_cluster_with_a_fresh_database_per_call() {
    let first = PgCluster::shared();
    let second = PgCluster::shared();
    assert_eq!(first.port(), second.port());
    assert_eq!(first.dir(), second.dir());
    let one = first.fresh_database();
    let two = second.fresh_database();
    assert_ne!(one, two);
    psql(&one, "create table mine (x int)");
    assert_eq!(psql(&two, "select count(*) from pg_tables where tablename = 'mine'"), "0");
}

/// Statics are never dropped: the shared cluster's watchdog stops it once the process
/// is gone. This test runs itself again as a child process that starts the shared
/// cluster and exits, then watches the server go away.
#[test]
fn the_shared_cluster_stops_when_the_test_process_exits() {
    if let Some(report) = std::env::var_os(CHILD_REPORT) {
        let cluster = PgCluster::shared();
        std::fs::write(report, format!("{}\n{}", cluster.port(), cluster.dir().display())).expect("writing the report");
        return;
    }
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let report = scratch.path().join("report");
    // The name libtest gives this test in the `it` binary.
    let name = "postgres::the_shared_cluster_stops_when_the_test_process_exits";
    let child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--test-threads=1"])
        .env(CHILD_REPORT, &report)
        .output()
        .expect("running the test binary again");
    let said = format!("{}{}", String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
    assert!(child.status.success(), "the child test failed:\n{said}");
    assert!(said.contains("1 passed"), "the child ran no test:\n{said}");
    let text = std::fs::read_to_string(&report).expect("the child's report");
    let (port, dir) = text.split_once('\n').expect("port and directory");
    let port: u16 = port.parse().expect("a port");
    let dir = PathBuf::from(dir);
    assert!(
        wait_gone(port, &dir, Duration::from_secs(20)),
        "the shared cluster of an exited process is still there: port {port} open {}, {} exists {}, processes:\n{}",
        accepts_connections(port),
        dir.display(),
        dir.exists(),
        processes_naming(&dir)
    );
}
