//! Throwaway PostgreSQL clusters for tests: a real server from the machine's
//! PostgreSQL binaries, in a temporary directory, on a free loopback port, with trust
//! authentication, gone when the test is done.
//!
//! `initdb` and `pg_ctl` refuse to run as root, so when the tests run as root the
//! cluster's directory belongs to `nobody` and both run through
//! `su nobody -s /bin/sh -c …`. Clients (`createdb`, `psql`, the code under test)
//! connect over TCP as the `postgres` role from any user.
//!
//! Every cluster has a watchdog, a detached shell that stops the server and removes its
//! directory once the test process is gone, so neither a killed test run nor the
//! never-dropped [`PgCluster::shared`] leaves a server behind. It learns that from a
//! pipe: it reads until end of file, which comes when every copy of the write end is
//! closed, the test process's and those of the `initdb` or `pg_ctl start` it may have
//! left running, so it never tears down a cluster while one is still being set up.

use std::fs;
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tempfile::TempDir;

/// A PostgreSQL server started for a test, listening on `127.0.0.1` with trust
/// authentication for the `postgres` role, with a database named `flowmem`.
///
/// Dropping it stops the server (`pg_ctl stop -m immediate`) and removes its
/// directory. One cluster can serve many tests, each in a database of its own
/// ([`PgCluster::create_database`], [`PgCluster::fresh_database`]).
///
/// # Example
///
/// ```no_run
/// use flowmem_testsupport::PgCluster;
///
/// let cluster = PgCluster::start();
/// let url = cluster.url(); // postgres://postgres@127.0.0.1:PORT/flowmem
/// // ... run the code under test against `url`; on failure, show `cluster.log()`.
/// # let _ = url;
/// drop(cluster); // the server stops and its directory is removed
/// ```
#[derive(Debug)]
pub struct PgCluster {
    port: u16,
    programs: Programs,
    /// Holds `data/` (the cluster), `sock/` (its Unix socket) and `log`.
    /// Invariant: owned, with everything in it, by the user the server runs as.
    dir: TempDir,
    /// The write end of the watchdog's pipe. Declared after `dir`, so that it closes
    /// after the directory is gone and the watchdog finds nothing left to do.
    watchdog: OwnedFd,
}

/// The PostgreSQL programs, and the user they run as.
#[derive(Debug)]
struct Programs {
    /// The `bin` directory of the PostgreSQL version in use.
    bin: PathBuf,
    /// Whether they run as `nobody` (the tests run as root).
    as_nobody: bool,
}

/// Where Debian's `postgresql` packages put each version's programs.
const PG_LIB: &str = "/usr/lib/postgresql";

/// The script that installs the server programs when they are missing.
const SETUP_SCRIPT: &str = "bash scripts/setup/15-postgres.sh";

/// The database every cluster starts with, the one [`PgCluster::url`] names.
const DEFAULT_DATABASE: &str = "flowmem";

/// How many free ports to try when another process takes the chosen one first.
const START_ATTEMPTS: usize = 5;

/// Numbers the databases of [`PgCluster::fresh_database`] within this process.
static N_FRESH: AtomicU64 = AtomicU64::new(0);

impl PgCluster {
    /// Creates a cluster in a new temporary directory, starts its server on a free
    /// loopback port and creates the `flowmem` database. Takes one to two seconds.
    ///
    /// # Panics
    ///
    /// When no `/usr/lib/postgresql/*/bin/initdb` exists (the message names the setup
    /// script, `bash scripts/setup/15-postgres.sh`), or when `initdb`, the server or
    /// `createdb` fails (the message holds their output or the server log).
    ///
    /// # Example
    ///
    /// ```no_run
    /// let cluster = flowmem_testsupport::PgCluster::start();
    /// assert_ne!(cluster.port(), 0);
    /// ```
    #[must_use]
    pub fn start() -> PgCluster {
        let programs = Programs { bin: bin_dir(), as_nobody: running_as_root() };
        let dir = tempfile::Builder::new()
            .prefix("flowmem-pg-")
            .tempdir()
            .expect("creating a temporary directory for a PostgreSQL cluster");
        fs::create_dir(dir.path().join("sock")).expect("creating the cluster's socket directory");
        if programs.as_nobody {
            check(
                &Command::new("chown").arg("-R").arg("nobody").arg(dir.path()).output(),
                "chown -R nobody (initdb refuses to run as root)",
            );
        }
        let watchdog = spawn_watchdog(&programs, dir.path());
        // From here on a panic drops the cluster, which stops whatever server started.
        let mut cluster = PgCluster { port: 0, programs, dir, watchdog };
        cluster.initdb();
        cluster.start_server();
        cluster.createdb(DEFAULT_DATABASE);
        cluster
    }

    /// The cluster every test of this process shares, started on first use. Give each
    /// test its own database with [`PgCluster::fresh_database`].
    ///
    /// It is never dropped: its watchdog stops the server and removes its directory as
    /// soon as the test process exits.
    ///
    /// # Panics
    ///
    /// As [`PgCluster::start`], on first use.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use flowmem_testsupport::PgCluster;
    ///
    /// let url = PgCluster::shared().fresh_database(); // isolated from other tests
    /// # let _ = url;
    /// ```
    #[must_use]
    pub fn shared() -> &'static PgCluster {
        static SHARED: OnceLock<PgCluster> = OnceLock::new();
        SHARED.get_or_init(PgCluster::start)
    }

    /// The URL of the `flowmem` database: `postgres://postgres@127.0.0.1:PORT/flowmem`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// let cluster = flowmem_testsupport::PgCluster::start();
    /// assert_eq!(cluster.url(), format!("postgres://postgres@127.0.0.1:{}/flowmem", cluster.port()));
    /// ```
    #[must_use]
    pub fn url(&self) -> String {
        self.url_of(DEFAULT_DATABASE)
    }

    /// Creates the database `name` and returns its URL, like [`PgCluster::url`]'s.
    ///
    /// # Panics
    ///
    /// When `name` is not 1 to 63 ASCII letters, digits, `_` or `-` (so that it needs
    /// no escaping in a URL and PostgreSQL keeps it whole), or when it exists already.
    ///
    /// # Example
    ///
    /// ```no_run
    /// let cluster = flowmem_testsupport::PgCluster::start();
    /// let url = cluster.create_database("memory_store");
    /// assert!(url.ends_with("/memory_store"));
    /// ```
    #[must_use]
    pub fn create_database(&self, name: &str) -> String {
        assert!(
            (1..=63).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "database name {name:?}: use 1 to 63 ASCII letters, digits, `_` or `-`"
        );
        self.createdb(name);
        self.url_of(name)
    }

    /// Creates a database with a name no other call in this process gets
    /// (`t<pid>_<n>`) and returns its URL.
    ///
    /// # Example
    ///
    /// ```no_run
    /// let cluster = flowmem_testsupport::PgCluster::shared();
    /// assert_ne!(cluster.fresh_database(), cluster.fresh_database());
    /// ```
    #[must_use]
    pub fn fresh_database(&self) -> String {
        let n = N_FRESH.fetch_add(1, Ordering::Relaxed);
        self.create_database(&format!("t{}_{n}", std::process::id()))
    }

    /// The TCP port the server listens on, on `127.0.0.1`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// let cluster = flowmem_testsupport::PgCluster::start();
    /// let psql = std::process::Command::new("psql")
    ///     .args(["-h", "127.0.0.1", "-p", &cluster.port().to_string(), "-U", "postgres", "-d", "flowmem"])
    ///     .args(["-Atc", "select 1"])
    ///     .output()
    ///     .unwrap();
    /// assert_eq!(String::from_utf8_lossy(&psql.stdout).trim(), "1");
    /// ```
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server log so far, for assertion messages; a note saying why when it cannot
    /// be read.
    ///
    /// # Example
    ///
    /// ```no_run
    /// let cluster = flowmem_testsupport::PgCluster::start();
    /// let ok = true; // ... run the code under test
    /// assert!(ok, "server log:\n{}", cluster.log());
    /// ```
    #[must_use]
    pub fn log(&self) -> String {
        let path = self.log_path();
        fs::read_to_string(&path).unwrap_or_else(|err| format!("(cannot read {}: {err})", path.display()))
    }

    /// The temporary directory that holds the cluster (`data/`), its socket (`sock/`)
    /// and its `log`; dropping the cluster removes it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// let cluster = flowmem_testsupport::PgCluster::start();
    /// let dir = cluster.dir().to_path_buf();
    /// drop(cluster);
    /// assert!(!dir.exists());
    /// ```
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn url_of(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn data_dir(&self) -> PathBuf {
        data_dir(self.dir())
    }

    fn log_path(&self) -> PathBuf {
        self.dir().join("log")
    }

    fn initdb(&self) {
        let args = [
            "-D",
            &path_str(&self.data_dir()),
            "--auth=trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ]
        .map(str::to_owned);
        check(&self.as_owner("initdb", &args).output(), "initdb");
    }

    /// Starts the server on a free port, trying another when someone else binds the
    /// chosen one between our probe and the server's bind.
    fn start_server(&mut self) {
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let options = format!(
                "-c listen_addresses=127.0.0.1 -p {port} -k {} -c fsync=off -c max_connections=200",
                // pg_ctl hands these options to a shell.
                shell_quote(&path_str(&self.dir().join("sock")))
            );
            let args =
                ["-D", &path_str(&self.data_dir()), "-l", &path_str(&self.log_path()), "-w", "-o", &options, "start"]
                    .map(str::to_owned);
            let log_before = self.log().len();
            let output = self.as_owner("pg_ctl", &args).output();
            if output.as_ref().is_ok_and(|output| output.status.success()) {
                self.port = port;
                return;
            }
            let log = self.log();
            let port_taken = log.get(log_before..).is_some_and(|new| new.contains("Address already in use"));
            assert!(port_taken, "pg_ctl start failed: {}\nserver log:\n{log}", said(&output));
        }
        panic!("pg_ctl start: {START_ATTEMPTS} free ports were taken before the server bound them:\n{}", self.log());
    }

    fn createdb(&self, name: &str) {
        let output = Command::new(self.programs.bin.join("createdb"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", name])
            .stdin(Stdio::null())
            .output();
        check(&output, &format!("createdb {name}"));
    }

    /// The PostgreSQL program `program` with `args`, run as the cluster's owner, with
    /// the watchdog's pipe as its standard input, so that the watchdog waits for it.
    fn as_owner(&self, program: &str, args: &[String]) -> Command {
        let mut command = self.programs.command(program, args);
        match self.watchdog.try_clone() {
            Ok(pipe) => command.stdin(pipe),
            Err(_) => command.stdin(Stdio::null()),
        };
        command
    }
}

impl Programs {
    /// `program` with `args`, run as the cluster's owner, from `/`.
    fn command(&self, program: &str, args: &[String]) -> Command {
        let mut command = if self.as_nobody {
            let mut su = Command::new("su");
            su.args(["nobody", "-s", "/bin/sh", "-c"]).arg(self.program_line(program, args));
            su
        } else {
            let mut direct = Command::new(self.bin.join(program));
            direct.args(args);
            direct
        };
        // `nobody` may not enter the test's working directory.
        command.current_dir("/").stdin(Stdio::null());
        command
    }

    /// [`Programs::command`] as a shell command line.
    fn line(&self, program: &str, args: &[String]) -> String {
        let line = self.program_line(program, args);
        if self.as_nobody { format!("su nobody -s /bin/sh -c {}", shell_quote(&line)) } else { line }
    }

    /// `program` with `args` as a shell command line, run as whoever runs the line.
    fn program_line(&self, program: &str, args: &[String]) -> String {
        let mut line = shell_quote(&path_str(&self.bin.join(program)));
        for arg in args {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        line
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // Fails harmlessly when no server runs (start failed before it); the directory
        // goes with `self.dir` after this.
        let args = ["-D", &path_str(&self.data_dir()), "stop", "-m", "immediate", "-w"].map(str::to_owned);
        let _ = self.as_owner("pg_ctl", &args).stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

/// Starts the watchdog of the cluster in `dir` and returns the write end of its pipe.
///
/// It is a detached shell, in a process group of its own so that a Ctrl-C to the test
/// run does not reach it, that reads its standard input to the end and then stops the
/// server and removes the directory, unless [`Drop`] removed it first.
fn spawn_watchdog(programs: &Programs, dir: &Path) -> OwnedFd {
    let stop =
        programs.line("pg_ctl", &["-D", &path_str(&data_dir(dir)), "stop", "-m", "immediate", "-w"].map(str::to_owned));
    let dir = shell_quote(&path_str(dir));
    // The outer shell exits at once, so the watchdog is nobody's child to reap. An
    // asynchronous list reads /dev/null unless told otherwise, hence fd 3.
    let script = format!(
        "exec 3<&0; ( cat >/dev/null; if [ -d {dir} ]; then {stop}; rm -rf {dir}; fi ) <&3 3<&- >/dev/null 2>&1 &"
    );
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg(script)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the cluster's watchdog");
    let pipe = shell.stdin.take().expect("the watchdog's piped stdin");
    let status = shell.wait();
    assert!(status.as_ref().is_ok_and(|status| status.success()), "starting the cluster's watchdog: {status:?}");
    pipe.into()
}

fn data_dir(dir: &Path) -> PathBuf {
    dir.join("data")
}

/// The `bin` directory of the newest PostgreSQL under [`PG_LIB`] that has `initdb`.
fn bin_dir() -> PathBuf {
    let newest = fs::read_dir(PG_LIB)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: Vec<u32> =
                entry.file_name().to_str()?.split('.').map(str::parse).collect::<Result<_, _>>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max();
    match newest {
        Some((_, bin)) => bin,
        None => panic!(
            "no PostgreSQL server ({PG_LIB}/*/bin/initdb): run `{SETUP_SCRIPT}` (from the repository root) first"
        ),
    }
}

/// Whether this process runs with effective user id 0, read from `/proc/self/status`
/// (else from `id -u`).
fn running_as_root() -> bool {
    let from_proc = fs::read_to_string("/proc/self/status").ok().and_then(|status| {
        let uids = status.lines().find_map(|line| line.strip_prefix("Uid:"))?;
        Some(uids.split_whitespace().nth(1)? == "0")
    });
    from_proc.unwrap_or_else(|| {
        let id = Command::new("id").arg("-u").output().expect("running `id -u`");
        String::from_utf8_lossy(&id.stdout).trim() == "0"
    })
}

/// A port nobody listens on at `127.0.0.1` right now.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
    listener.local_addr().expect("the bound address").port()
}

/// Panics, with what the command said, unless it ran and succeeded.
fn check(output: &std::io::Result<Output>, what: &str) {
    let succeeded = output.as_ref().is_ok_and(|output| output.status.success());
    assert!(succeeded, "{what} failed: {}", said(output));
}

/// How a command ended and what it printed.
fn said(output: &std::io::Result<Output>) -> String {
    match output {
        Ok(output) => format!(
            "{}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(err) => format!("it did not start: {err}"),
    }
}

/// `text` as one word for `sh`: in single quotes, each `'` written `'\''`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn path_str(path: &Path) -> String {
    path.to_str().unwrap_or_else(|| panic!("{} is not UTF-8", path.display())).to_owned()
}
