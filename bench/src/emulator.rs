//! The embedded emulator in a child process of its own, behind the counting proxy.
//!
//! The benchmark re-runs its own binary with `--serve-emulator`: that child starts the official
//! emulator's processes, the queue front (in-process, [`LocalEmulator`]) and, in front of it, a
//! [`FaultProxy`] with no faults armed, which counts every RPC by kind where it really happens,
//! for the SDK and for the hand-written baselines alike (see [`Stats::rpcs`] for the kinds).
//! Keeping them out of the benchmark's process means the benchmark's CPU time and memory are the
//! client's alone. The child answers, on its stdin, `stats` with one JSON line of RPC counts by
//! kind, `micros` with one of the microseconds RPCs took until their response headers, `rows`
//! with one of the rows their result sets returned, `pids` with one JSON list of the official
//! emulator's process ids; and shuts everything down when its stdin closes.
//!
//! [`Stats::rpcs`]: spanner_queues_fault_proxy::Stats::rpcs

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;

use spanner_queues_emulator::{LocalEmulator, LocalEmulatorOptions};
use spanner_queues_fault_proxy::{FaultProxy, RpcRecord, RpcStats};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Mutex;

use crate::BoxError;

/// RPC counts by kind.
pub(crate) type RpcCounts = BTreeMap<String, u64>;

/// The child process and its control pipe.
#[derive(Debug)]
pub(crate) struct Emulator {
    /// Where data clients connect (the counting proxy; gRPC only).
    pub(crate) endpoint: SocketAddr,
    /// The front itself, for admin clients (which speak REST).
    pub(crate) admin_endpoint: SocketAddr,
    control: Arc<Mutex<Control>>,
}

#[derive(Debug)]
struct Control {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Emulator {
    /// Starts the child and waits until it serves. Its stderr goes to `log`.
    pub(crate) async fn start(log: &std::path::Path) -> Result<Self, BoxError> {
        let exe = std::env::current_exe()?;
        let log = std::fs::File::create(log)?;
        let mut child = tokio::process::Command::new(exe)
            .arg("--serve-emulator")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin pipe")?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let mut stdout = BufReader::new(stdout).lines();
        let ready = stdout
            .next_line()
            .await?
            .ok_or("the emulator process ended before it was ready (see its log)")?;
        let mut addrs = ready
            .strip_prefix("READY ")
            .ok_or_else(|| format!("unexpected line from the emulator process: {ready}"))?
            .split_whitespace();
        let mut next_addr = || -> Result<SocketAddr, BoxError> {
            Ok(addrs.next().ok_or("missing address")?.parse()?)
        };
        let endpoint = next_addr()?;
        let admin_endpoint = next_addr()?;
        Ok(Self {
            endpoint,
            admin_endpoint,
            control: Arc::new(Mutex::new(Control {
                child,
                stdin: Some(stdin),
                stdout,
            })),
        })
    }

    /// RPC counts since the start.
    pub(crate) async fn rpcs(&self) -> Result<RpcCounts, BoxError> {
        let line = self.ask("stats").await?;
        Ok(serde_json::from_str(&line)?)
    }

    /// Microseconds RPCs took since the start (at the proxy, until the response headers),
    /// summed by kind.
    pub(crate) async fn rpc_micros(&self) -> Result<RpcCounts, BoxError> {
        let line = self.ask("micros").await?;
        Ok(serde_json::from_str(&line)?)
    }

    /// Rows returned in result sets since the start, by kind of RPC.
    pub(crate) async fn rpc_rows(&self) -> Result<RpcCounts, BoxError> {
        let line = self.ask("rows").await?;
        Ok(serde_json::from_str(&line)?)
    }

    /// The processes that serve: the child (the queue front and the counting proxy) and the
    /// official emulator's processes (`emulator_main`, `gateway_main`), its children.
    pub(crate) async fn pids(&self) -> Result<ServingPids, BoxError> {
        let line = self.ask("pids").await?;
        let official: Vec<u32> = serde_json::from_str(&line)?;
        let front = self
            .control
            .lock()
            .await
            .child
            .id()
            .ok_or("the emulator process ended")?;
        Ok(ServingPids { front, official })
    }

    /// Sends one command to the child and reads its one-line answer.
    async fn ask(&self, command: &str) -> Result<String, BoxError> {
        let mut control = self.control.lock().await;
        let stdin = control.stdin.as_mut().ok_or("emulator stopped")?;
        stdin.write_all(format!("{command}\n").as_bytes()).await?;
        stdin.flush().await?;
        Ok(control
            .stdout
            .next_line()
            .await?
            .ok_or("the emulator process ended")?)
    }

    /// Stops the child (closing its stdin makes it stop the emulator) and waits for it.
    pub(crate) async fn stop(self) {
        let mut control = self.control.lock().await;
        control.stdin = None;
        let wait = tokio::time::timeout(std::time::Duration::from_secs(30), control.child.wait());
        if wait.await.is_err() {
            let _ = control.child.kill().await;
        }
    }
}

/// Process ids of what serves the benchmark's clients.
#[derive(Debug, Clone)]
pub(crate) struct ServingPids {
    /// The `--serve-emulator` child: the queue front and the counting proxy.
    pub(crate) front: u32,
    /// The official emulator's processes.
    pub(crate) official: Vec<u32>,
}

/// The `--serve-emulator` child: runs until its stdin closes.
pub(crate) async fn serve() -> Result<(), BoxError> {
    let emulator = LocalEmulator::start(LocalEmulatorOptions::new()).await?;
    let mut proxy = FaultProxy::builder(emulator.addr().to_string());
    if rpc_log() {
        proxy = proxy.with_rpc_observer(log_rpc);
    }
    let proxy = proxy.start().await?;
    let mut out = tokio::io::stdout();
    out.write_all(format!("READY {} {}\n", proxy.addr(), emulator.addr()).as_bytes())
        .await?;
    out.flush().await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        let per_kind = |measure: fn(&RpcStats) -> u64| -> RpcCounts {
            proxy
                .stats()
                .rpcs
                .iter()
                .map(|(kind, rpc)| (kind.clone(), measure(rpc)))
                .collect()
        };
        let answer = match line.trim() {
            "stats" => serde_json::to_string(&per_kind(|rpc| rpc.calls))?,
            "micros" => serde_json::to_string(&per_kind(|rpc| {
                u64::try_from(rpc.time_to_headers.as_micros()).unwrap_or(u64::MAX)
            }))?,
            "rows" => serde_json::to_string(&per_kind(|rpc| rpc.rows))?,
            "pids" => serde_json::to_string(&emulator.child_pids())?,
            _ => continue,
        };
        out.write_all(format!("{answer}\n").as_bytes()).await?;
        out.flush().await?;
    }
    proxy.stop().await;
    emulator.stop().await;
    Ok(())
}

/// Whether to log every RPC with its timing (`SPANNER_QUEUES_BENCH_RPC_LOG=1`): one line per
/// RPC on the emulator process's stderr (the section's `emulator-<section>.log`), for finding
/// where time goes.
pub(crate) fn rpc_log() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SPANNER_QUEUES_BENCH_RPC_LOG").is_some_and(|v| v == "1"))
}

/// `rpc <kind> <start, µs since the epoch> <µs until the response headers>`.
fn log_rpc(rpc: &RpcRecord<'_>) {
    let start = rpc
        .sent
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    let took = rpc.time_to_headers.as_micros();
    eprintln!("rpc {} {start} {took}", rpc.kind);
}

/// `after - before`, per kind, without zero entries.
pub(crate) fn diff(after: &RpcCounts, before: &RpcCounts) -> RpcCounts {
    after
        .iter()
        .filter_map(|(kind, n)| {
            let d = n.saturating_sub(before.get(kind).copied().unwrap_or(0));
            (d > 0).then(|| (kind.clone(), d))
        })
        .collect()
}
