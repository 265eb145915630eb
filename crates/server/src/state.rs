//! The one state every surface shares: the memory (a pool of read connections and one
//! writer), the tools and models handed over by the caller, the deployed graphs, the
//! token store, the catalog of workflow tools, and the server's own background tasks.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use flowmem_exec::{Runtime, ToolBox, ValidatedGraph};
use flowmem_llm::{ChatModel, EmbeddingModel};
use flowmem_memory::{MemoryError, MemoryStore, Retrieval, RetrievalMode, Retriever, StoreConfig};
use flowmem_model::Scope;
use flowmem_model::Trace;
use flowmem_tools::StateIsolation;

use crate::auth::TokenStore;
use crate::catalog::Catalog;
use crate::error::ServerError;
use crate::gateway::{Gateway, GatewayConfig};
use crate::learn::Induce;
use crate::otlp::{OtlpConfig, OtlpReceiver};
use crate::queue::LearnQueue;

/// How the server behaves; every field is a policy of the caller.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The memory database file.
    pub memory: PathBuf,
    /// The memory's store policy (dedup, bound per scope).
    pub store: StoreConfig,
    /// Read-only connections searches run on, at most this many at once.
    pub readers: usize,
    /// The most stored workflows offered as tools, the top ones by retention score.
    pub max_workflow_tools: usize,
    /// `find_workflows`' `k` when the client gives none.
    pub default_k: usize,
    /// The largest `k` a client may ask for.
    pub max_k: usize,
    /// Per-call tool state for stateful tool servers (τ²: `state_key`, `reset_state`).
    /// With it, each workflow call and graph run gets a freshly reset state of its own
    /// unless the client names one with the key argument.
    pub isolation: Option<StateIsolation>,
    /// How often the server looks for changes other processes made to the memory.
    pub poll_interval: Duration,
    /// How long Ctrl-C waits for calls in flight before closing the sessions.
    pub drain_timeout: Duration,
    /// The OpenAI-compatible memory gateway at `/v1`; `None` serves none.
    pub gateway: Option<GatewayConfig>,
    /// The OTLP/HTTP receiver at `/v1/traces` and `/v1/logs`; `None` serves none.
    pub otlp: Option<OtlpConfig>,
    /// Attempts at learning from one queued run (a gateway conversation or an OTLP
    /// trace) before it is marked failed.
    pub learn_attempts: u32,
    /// How `find_workflows` ranks; vector and hybrid need [`Parts::embedder`].
    pub retrieval: RetrievalMode,
    /// Directories holding scout runs (`flowmem scout --out`), each a run or a parent
    /// of runs, shown by the web UI's run pages.
    pub runs: Vec<PathBuf>,
}

impl ServeConfig {
    /// The defaults for `memory`: 2 readers, 50 workflow tools, `k` 5 (at most 50), no
    /// isolation, a 1 s poll, a 30 s drain, no gateway, no OTLP receiver, 3 attempts at
    /// learning from a queued run, BM25 retrieval, no scout runs.
    #[must_use]
    pub fn standard(memory: PathBuf) -> ServeConfig {
        ServeConfig {
            memory,
            store: StoreConfig::standard(),
            readers: 2,
            max_workflow_tools: 50,
            default_k: 5,
            max_k: 50,
            isolation: None,
            poll_interval: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(30),
            gateway: None,
            otlp: None,
            learn_attempts: 3,
            retrieval: RetrievalMode::Bm25,
            runs: Vec::new(),
        }
    }
}

/// A FlowScout graph served as `run_<name>`.
#[derive(Debug, Clone)]
pub struct DeployedGraph {
    /// The tool name, `run_<name>`.
    pub tool: String,
    /// The file it came from.
    pub path: PathBuf,
    /// The graph, validated against the tools it binds to.
    pub graph: ValidatedGraph,
}

/// What the caller builds and hands over: tools, models and graphs. The server never
/// builds a model or starts a tool server itself.
#[derive(Clone)]
pub struct Parts {
    /// The tools workflows run against (the MCP registry of `[[tools.mcp]]`).
    pub tools: Arc<dyn ToolBox>,
    /// The executor of deployed graphs (its tools are replaced per call when isolation
    /// is on); `None` serves no graphs.
    pub runtime: Option<Runtime>,
    /// The evaluator that judges reported runs; `None` makes `outcome` required.
    pub evaluator: Option<Arc<dyn ChatModel>>,
    /// How successful runs become workflows (rules unless a model is given).
    pub induce: Induce,
    /// The deployed graphs, from [`load_graphs`](crate::load_graphs).
    pub graphs: Vec<DeployedGraph>,
    /// The embedding model of vector and hybrid retrieval (queries, and the workflows
    /// learned here); `None` allows BM25 only.
    pub embedder: Option<Arc<dyn EmbeddingModel>>,
}

/// How long retrieval counts gather before they are written in one transaction.
const RETRIEVAL_BATCH: Duration = Duration::from_millis(50);

/// The number of finished graph traces kept for `flowmem://trace/{id}`.
const KEPT_TRACES: usize = 200;

/// The state shared by every surface and session of one server process.
pub struct AppState {
    pub(crate) cfg: ServeConfig,
    pub(crate) parts: Parts,
    pub(crate) tokens: TokenStore,
    /// Memory's templates: AWM's workflow text and the evaluator's prompt.
    pub(crate) prompts: flowmem_llm::Prompts,
    // Invariant: `readers` holds at most `cfg.readers` stores, and a store is taken only
    // with a permit of `reader_permits`, so a taker always finds one.
    readers: Mutex<Vec<MemoryStore>>,
    reader_permits: Semaphore,
    // The readers request handlers search a SQLite memory on in place (`retrieve`), one
    // per runtime worker: a worker runs one search at a time and never awaits during it,
    // so a free one is always there. Apart from `readers`, so that a `read` in the
    // blocking pool (the change poller's, the web UI's) never leaves a worker without
    // one; before they were apart, a search that found both shared readers taken went to
    // the blocking pool, held its reader the longer for the thread switches, and so sent
    // the next one there too, until four in ten searches at concurrency 64 took two
    // thread wakes more. Empty for a PostgreSQL memory, whose searches wait on a network.
    inline_readers: Mutex<Vec<MemoryStore>>,
    // All writes go through this one store, on blocking threads. A std mutex: it is held
    // only inside `spawn_blocking`.
    writer: Arc<Mutex<MemoryStore>>,
    pub(crate) catalog: watch::Sender<Arc<Catalog>>,
    retrievals: mpsc::UnboundedSender<Vec<String>>,
    retrievals_rx: Mutex<Option<mpsc::UnboundedReceiver<Vec<String>>>>,
    /// Calls in flight (tools/call bodies), drained at shutdown.
    pub(crate) calls: TaskTracker,
    /// HTTP replies still streaming (one per MCP POST), drained after the calls so that
    /// a finished call's answer reaches its client before the sessions close.
    pub(crate) replies: TaskTracker,
    /// The server's own tasks: the change poller, the retrieval counter, the
    /// per-session notifiers.
    pub(crate) background: TaskTracker,
    /// Cancelled when the server stops; background tasks end on it.
    pub(crate) stop: CancellationToken,
    stopping: AtomicBool,
    open_access: AtomicBool,
    traces: Mutex<VecDeque<(String, Arc<Trace>)>>,
    next_id: AtomicU64,
    /// The memory gateway, when configured.
    pub(crate) gateway: Option<Arc<Gateway>>,
    /// The OTLP receiver, when configured.
    pub(crate) otlp: Option<Arc<OtlpReceiver>>,
    /// The judge-and-induce queue the gateway and the OTLP receiver feed, and where
    /// `report_run` keeps the runs it learned from. Always there; an `Option` so that a
    /// state without one stays expressible.
    pub(crate) queue: Option<Arc<LearnQueue>>,
    /// How `find_workflows` retrieves.
    pub(crate) retriever: Retriever,
    /// The web UI's sign-in sessions.
    pub(crate) ui: crate::ui::Sessions,
}

impl AppState {
    /// Opens the memory at `cfg.memory` (a writer and `cfg.readers` readers), the token
    /// table, and builds the catalog of workflow tools.
    ///
    /// # Errors
    ///
    /// [`ServerError::Memory`] or [`ServerError::Database`] when the database cannot be
    /// opened or read.
    pub fn open(cfg: ServeConfig, parts: Parts) -> Result<Arc<AppState>, ServerError> {
        let writer = MemoryStore::open(&cfg.memory, cfg.store.clone())?;
        let tokens = TokenStore::open(&cfg.memory)?;
        let n_readers = cfg.readers.max(1);
        // One search index in memory for the whole process.
        let readers = (0..n_readers).map(|_| writer.open_sibling()).collect::<Result<Vec<_>, _>>()?;
        let n_inline = if writer.is_postgres() { 0 } else { runtime_workers() };
        let inline_readers = (0..n_inline).map(|_| writer.open_sibling()).collect::<Result<Vec<_>, _>>()?;
        // Load it now: a search may run on a request's worker thread (`retrieve`), and the
        // first should not stall it with the whole index log.
        writer.prepare_search()?;
        let catalog = Catalog::build(&writer, &cfg, &parts)?;
        let (retrievals, retrievals_rx) = mpsc::unbounded_channel();
        let open_access = tokens.count()? == 0;
        let prompts = flowmem_memory::prompts().map_err(|err| ServerError::Prompt(err.to_string()))?;
        let retriever = Retriever::new(cfg.retrieval, parts.embedder.clone())?;
        // Every server keeps the runs it learns from: `report_run`'s always, the
        // gateway's and the OTLP receiver's when they are on.
        let queue = Some(Arc::new(LearnQueue::open(&cfg.memory, cfg.learn_attempts, cfg.gateway.is_some())?));
        let gateway = match (&cfg.gateway, &queue) {
            (Some(gateway), Some(queue)) => {
                let retriever = Retriever::new(gateway.retrieval, parts.embedder.clone())?;
                Some(Arc::new(Gateway::open(gateway.clone(), queue.clone(), retriever)?))
            }
            _ => None,
        };
        let otlp = match &cfg.otlp {
            Some(otlp) => Some(Arc::new(OtlpReceiver::open(otlp.clone(), &cfg.memory)?)),
            None => None,
        };
        Ok(Arc::new(AppState {
            gateway,
            otlp,
            queue,
            retriever,
            ui: crate::ui::Sessions::new(),
            tokens,
            prompts,
            readers: Mutex::new(readers),
            reader_permits: Semaphore::new(n_readers),
            inline_readers: Mutex::new(inline_readers),
            writer: Arc::new(Mutex::new(writer)),
            catalog: watch::Sender::new(Arc::new(catalog)),
            retrievals,
            retrievals_rx: Mutex::new(Some(retrievals_rx)),
            calls: TaskTracker::new(),
            replies: TaskTracker::new(),
            background: TaskTracker::new(),
            stop: CancellationToken::new(),
            stopping: AtomicBool::new(false),
            open_access: AtomicBool::new(open_access),
            traces: Mutex::new(VecDeque::new()),
            next_id: AtomicU64::new(1),
            cfg,
            parts,
        }))
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &ServeConfig {
        &self.cfg
    }

    /// The token store of this memory.
    #[must_use]
    pub fn tokens(&self) -> &TokenStore {
        &self.tokens
    }

    /// Whether requests without a token pass: true only when the memory had no token
    /// when the server started (and then the server listens on loopback only).
    pub(crate) fn open_access(&self) -> bool {
        self.open_access.load(Ordering::Relaxed)
    }

    /// Refuses a non-loopback `addr` when the memory has no token; from then on, tokens
    /// are required if any exists.
    pub(crate) fn check_bind(&self, addr: SocketAddr) -> Result<(), ServerError> {
        let n_tokens = self.tokens.count()?;
        if n_tokens == 0 && !addr.ip().is_loopback() {
            let memory = std::path::PathBuf::from(flowmem_db::DbLocation::parse(self.cfg.memory.as_os_str()).display());
            return Err(ServerError::UnprotectedBind { addr, memory });
        }
        self.open_access.store(n_tokens == 0, Ordering::Relaxed);
        Ok(())
    }

    /// Whether the server is shutting down and refuses new calls.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Waits `period`, or less if the server stops meanwhile; returns at once once it
    /// has stopped. Says whether it has: the background tasks' one way to wait.
    pub(crate) async fn pause(&self, period: Duration) -> bool {
        if !self.stop.is_cancelled() {
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                () = self.stop.cancelled() => {}
            }
        }
        self.stop.is_cancelled()
    }

    /// Starts the background tasks: the retrieval counter and the change poller. Call
    /// once per process, before serving.
    pub fn start_background(self: &Arc<Self>) {
        let receiver = self.retrievals_rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(receiver) = receiver {
            self.background.spawn(count_retrievals(self.clone(), receiver));
        }
        self.background.spawn(poll_changes(self.clone()));
        crate::queue::start(self);
        crate::gateway::start(self);
        crate::otlp::start(self);
    }

    /// Stops taking calls, waits up to the drain timeout for the calls in flight and then
    /// for their replies to be sent, then ends the background tasks (the retrieval
    /// counter writes what it holds first).
    pub async fn drain(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.calls.close();
        self.replies.close();
        tracing::info!(in_flight = self.calls.len(), "waiting for the calls in flight");
        let deadline = tokio::time::Instant::now() + self.cfg.drain_timeout;
        if tokio::time::timeout_at(deadline, self.calls.wait()).await.is_err() {
            tracing::warn!("calls still in flight after the drain timeout; closing anyway");
        } else if tokio::time::timeout_at(deadline, self.replies.wait()).await.is_err() {
            tracing::warn!("replies still being sent after the drain timeout; closing anyway");
        }
        self.stop.cancel();
        self.background.close();
        self.background.wait().await;
    }

    /// Runs `work` on a reader store on a blocking thread.
    pub(crate) async fn read<T, F>(self: &Arc<Self>, work: F) -> Result<T, ServerError>
    where
        T: Send + 'static,
        F: FnOnce(&MemoryStore) -> Result<T, MemoryError> + Send + 'static,
    {
        // The semaphore is never closed.
        let _permit = self.reader_permits.acquire().await.map_err(|err| ServerError::Join(err.to_string()))?;
        let state = self.clone();
        tokio::task::spawn_blocking(move || {
            // Invariant (see `readers`): a permit holder always finds a store.
            let Some(store) = take_from(&state.readers) else {
                return Err(ServerError::Join("no free memory reader".to_owned()));
            };
            work(&store).map_err(ServerError::from)
        })
        .await
        .map_err(|err| ServerError::Join(err.to_string()))?
    }

    /// Retrieves the `k` best workflows for `text` in `scope` as `retriever` ranks: the
    /// query is embedded here (when the mode needs it), the search runs on a reader.
    /// `find_workflows` and the gateway both retrieve through this; neither shows a
    /// hit's provenance, so the hits come without it (`get_workflow` reads it).
    /// Read-only; callers count what they show with [`AppState::count_retrieved`].
    pub(crate) async fn retrieve(
        self: &Arc<Self>,
        retriever: &Retriever,
        text: &str,
        scope: Scope,
        k: usize,
    ) -> Result<Retrieval, ServerError> {
        let (query, embed_ms) = retriever.query(text).await?;
        let query = query.without_provenance();
        let started = std::time::Instant::now();
        let hits = match take_from(&self.inline_readers) {
            // A search of a SQLite memory is a few hundred microseconds of CPU over the
            // in-memory index and cached pages: cheaper run here than handed to a
            // blocking thread and back (two thread wakes and switches per request).
            Some(store) => store.search_with(&query, &scope, k)?,
            None => self.read(move |store| store.search_with(&query, &scope, k)).await?,
        };
        let search_ms = started.elapsed().as_secs_f64() * 1000.0;
        Ok(Retrieval { mode: retriever.mode(), embed_ms, search_ms, hits })
    }

    /// Runs `work` on the writer store on a blocking thread. Each store write is one
    /// SQLite transaction.
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T, ServerError>
    where
        T: Send + 'static,
        F: FnOnce(&mut MemoryStore) -> Result<T, ServerError> + Send + 'static,
    {
        let writer = self.writer.clone();
        tokio::task::spawn_blocking(move || {
            let mut store = writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            work(&mut store)
        })
        .await
        .map_err(|err| ServerError::Join(err.to_string()))?
    }

    /// Queues `ids` to be counted as retrieved; the counter writes them in batches.
    pub(crate) fn count_retrieved(&self, ids: Vec<String>) {
        if !ids.is_empty() {
            // The receiver lives until the counter stops at shutdown; later hits are not
            // counted.
            let _ = self.retrievals.send(ids);
        }
    }

    /// Rebuilds the catalog from the memory and, if the tool list changed, publishes it,
    /// which sends `notifications/tools/list_changed` to every session.
    pub(crate) async fn refresh_catalog(self: &Arc<Self>) -> Result<(), ServerError> {
        let state = self.clone();
        let catalog = self.write(move |store| Catalog::build(store, &state.cfg, &state.parts)).await?;
        self.catalog.send_if_modified(|current| {
            if current.same_tools(&catalog) {
                false
            } else {
                *current = Arc::new(catalog);
                true
            }
        });
        Ok(())
    }

    /// A fresh id for a trace or a state key: process-unique, time-prefixed.
    pub(crate) fn fresh_id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let millis = chrono::Utc::now().timestamp_millis();
        format!("{prefix}-{millis:x}-{n}")
    }

    pub(crate) fn keep_trace(&self, id: String, trace: Arc<Trace>) {
        let mut traces = self.traces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if traces.len() == KEPT_TRACES {
            traces.pop_front();
        }
        traces.push_back((id, trace));
    }

    pub(crate) fn trace(&self, id: &str) -> Option<Arc<Trace>> {
        let traces = self.traces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        traces.iter().find(|(known, _)| known == id).map(|(_, trace)| trace.clone())
    }
}

/// How many worker threads the runtime this is called on has; outside a runtime, the
/// machine's cores (tokio's default).
fn runtime_workers() -> usize {
    tokio::runtime::Handle::try_current().map_or_else(
        |_| std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        |runtime| runtime.metrics().num_workers(),
    )
}

/// Takes a free store from `pool`, if it has one. It goes back when the lease drops.
fn take_from(pool: &Mutex<Vec<MemoryStore>>) -> Option<ReaderLease<'_>> {
    let store = pool.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
    store.map(|store| ReaderLease { pool, store: Some(store) })
}

/// A reader store taken from one of [`AppState`]'s pools. It goes back when dropped,
/// also when the work on it panicked, so that no pool loses a store (and every holder of
/// a `reader_permits` permit finds one in `readers`).
struct ReaderLease<'a> {
    pool: &'a Mutex<Vec<MemoryStore>>,
    // `Some` until dropped.
    store: Option<MemoryStore>,
}

impl std::ops::Deref for ReaderLease<'_> {
    type Target = MemoryStore;

    fn deref(&self) -> &MemoryStore {
        // Invariant: `store` is taken only in `drop`.
        self.store.as_ref().expect("a lease holds its store until dropped")
    }
}

impl Drop for ReaderLease<'_> {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            self.pool.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(store);
        }
    }
}

/// Writes queued retrieval counts, every batch that piled up in one transaction, until
/// the server stops; what is queued at the stop is still written.
async fn count_retrievals(state: Arc<AppState>, mut receiver: mpsc::UnboundedReceiver<Vec<String>>) {
    loop {
        let first = tokio::select! {
            ids = receiver.recv() => ids,
            () = state.stop.cancelled() => None,
        };
        let mut batch = first.unwrap_or_default();
        // Gather a moment's worth into one transaction: every write makes the readers
        // drop their page caches, and counts need not be instant.
        let stopping = state.pause(RETRIEVAL_BATCH).await;
        while let Ok(more) = receiver.try_recv() {
            batch.extend(more);
        }
        if !batch.is_empty() {
            let res = state
                .write(move |store| {
                    let ids: Vec<&str> = batch.iter().map(String::as_str).collect();
                    store.count_retrievals(&ids).map_err(ServerError::from)
                })
                .await;
            if let Err(err) = res {
                tracing::warn!(error = %err, "counting retrievals failed");
            }
        }
        if stopping {
            return;
        }
    }
}

/// Watches the memory's revision and refreshes the catalog when another process (or
/// this one) inserted or deleted workflows: every `poll_interval`, and at once when a
/// PostgreSQL memory notifies.
async fn poll_changes(state: Arc<AppState>) {
    let mut seen = state.catalog.borrow().revision;
    // A PostgreSQL memory says when its index log grows; polling covers the rest.
    let wake = Arc::new(tokio::sync::Notify::new());
    let woken = Arc::clone(&wake);
    let _listener = MemoryStore::watch(&state.cfg.memory, move || woken.notify_one());
    loop {
        tokio::select! {
            () = tokio::time::sleep(state.cfg.poll_interval) => {}
            () = wake.notified() => {}
            () = state.stop.cancelled() => return,
        }
        let revision = match state.read(MemoryStore::revision).await {
            Ok(revision) => revision,
            Err(err) => {
                tracing::warn!(error = %err, "reading the memory revision failed");
                continue;
            }
        };
        if revision != seen {
            if let Err(err) = state.refresh_catalog().await {
                tracing::warn!(error = %err, "refreshing the workflow tools failed");
                continue;
            }
            seen = revision;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use flowmem_memory::MemoryError;
    use flowmem_tools::{Registry, ToolsConfig};

    use super::{AppState, Parts, ServeConfig};

    /// A server on an empty memory in `dir` with one shared reader and no tools.
    async fn one_reader_state(dir: &tempfile::TempDir) -> Arc<AppState> {
        let mut cfg = ServeConfig::standard(dir.path().join("memory.db"));
        cfg.readers = 1;
        let tools = Registry::connect(&ToolsConfig::empty()).await.unwrap();
        let parts = Parts {
            tools: Arc::new(tools),
            runtime: None,
            evaluator: None,
            induce: crate::learn::Induce::Rules,
            graphs: Vec::new(),
            embedder: None,
        };
        AppState::open(cfg, parts).unwrap()
    }

    /// A panic in the work on a reader must not cost the pool its store: with one reader,
    /// a lost store would fail every later read with "no free memory reader".
    #[tokio::test]
    async fn a_reader_goes_back_to_the_pool_when_the_work_on_it_panics() {
        let dir = tempfile::tempdir().unwrap();
        let state = one_reader_state(&dir).await;

        let panicked = state.read(|_| -> Result<(), MemoryError> { panic!("a bug in the work") }).await;
        assert!(panicked.is_err(), "the panic is the read's error");
        for _ in 0..3 {
            state.read(flowmem_memory::MemoryStore::revision).await.expect("the reader is back in the pool");
        }
        let scope = flowmem_model::Scope::default();
        let retriever = flowmem_memory::Retriever::bm25();
        let found = state.retrieve(&retriever, "book a flight", scope, 3).await.unwrap();
        assert!(found.hits.is_empty(), "an empty memory finds nothing");
        state.read(flowmem_memory::MemoryStore::revision).await.expect("the in-place search gave its reader back");
    }

    /// A search on a request's worker never waits for the readers the blocking pool
    /// uses: with the one shared reader held by a slow read, it still answers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_search_in_place_does_not_wait_for_the_shared_readers() {
        let dir = tempfile::tempdir().unwrap();
        let state = one_reader_state(&dir).await;
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (taken, is_taken) = tokio::sync::oneshot::channel();
        let slow = tokio::spawn({
            let state = state.clone();
            async move {
                state
                    .read(move |store| {
                        let _ = taken.send(());
                        held.recv().ok();
                        store.revision()
                    })
                    .await
            }
        });
        is_taken.await.expect("the slow read holds the shared reader");

        let retriever = flowmem_memory::Retriever::bm25();
        let search = state.retrieve(&retriever, "book a flight", flowmem_model::Scope::default(), 3);
        let found = tokio::time::timeout(std::time::Duration::from_secs(10), search).await;
        release.send(()).unwrap();
        let found = found.expect("the search did not wait for the shared reader").unwrap();
        assert!(found.hits.is_empty(), "an empty memory finds nothing");
        slow.await.unwrap().expect("the slow read finishes once released");
    }
}
