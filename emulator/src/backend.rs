//! The official Cloud Spanner emulator, run as child processes behind the front.
//!
//! Layout of one running backend:
//!
//! ```text
//!   clients ──gRPC──▶ front (our port) ──gRPC──▶ emulator_main (internal port A)
//!   clients ──REST──▶ front (same port, HTTP/1.1) ──▶ gateway_main REST (internal port R)
//!                                                     └──gRPC──▶ front (so REST DDL is rewritten too)
//! ```
//!
//! `gateway_main` normally starts its own `emulator_main`; we start `emulator_main` ourselves
//! (so we own its process) and give the gateway a *placeholder* program as its "gRPC binary":
//! the placeholder only waits for its parent to exit. The gateway's REST handlers then dial the
//! front's gRPC port, which means REST admin calls (the official Rust admin clients use REST)
//! pass through the same queue rewriting as gRPC ones.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::reaper::Reaper;

/// The argument the gateway passes to its gRPC binary; the front binary recognises it and
/// becomes a placeholder (see [`run_placeholder_if_requested`]).
pub const PLACEHOLDER_FLAG: &str = "--host_port";

/// Errors starting or locating the official emulator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The emulator binaries were not found.
    #[error(
        "cannot find the Cloud Spanner emulator binaries (emulator_main, gateway_main); \
         install the Debian package google-cloud-cli-spanner-emulator or set \
         SPANNER_EMULATOR_BIN_DIR (looked in: {searched})"
    )]
    NotFound {
        /// The directories that were searched.
        searched: String,
    },
    /// A process could not be started or did not become ready.
    #[error("cannot start {what}")]
    Start {
        /// Which process.
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A process started but did not listen in time.
    #[error("{what} did not listen on {addr} within {timeout:?}")]
    NotReady {
        /// Which process.
        what: &'static str,
        /// The address it should have listened on.
        addr: SocketAddr,
        /// How long we waited.
        timeout: Duration,
    },
}

/// Where the official emulator binaries live.
#[derive(Debug, Clone)]
pub struct EmulatorBinaries {
    /// `emulator_main`: the gRPC emulator.
    pub emulator_main: PathBuf,
    /// `gateway_main`: the REST gateway.
    pub gateway_main: PathBuf,
}

impl EmulatorBinaries {
    /// Finds the binaries: `SPANNER_EMULATOR_BIN_DIR`, then the directory of the current
    /// executable (the container image puts them side by side), then the Cloud SDK
    /// (`gcloud info`), then the usual Debian install path.
    pub fn locate() -> Result<Self, BackendError> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(dir) = std::env::var_os("SPANNER_EMULATOR_BIN_DIR") {
            candidates.push(PathBuf::from(dir));
        }
        if let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
        {
            candidates.push(dir);
        }
        candidates.push(PathBuf::from(
            "/usr/lib/google-cloud-sdk/bin/cloud_spanner_emulator",
        ));
        for dir in &candidates {
            if let Some(found) = Self::in_dir(dir) {
                return Ok(found);
            }
        }
        if let Some(root) = gcloud_sdk_root() {
            let dir = root.join("bin").join("cloud_spanner_emulator");
            if let Some(found) = Self::in_dir(&dir) {
                return Ok(found);
            }
            candidates.push(dir);
        }
        Err(BackendError::NotFound {
            searched: candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    fn in_dir(dir: &Path) -> Option<Self> {
        let emulator_main = dir.join("emulator_main");
        let gateway_main = dir.join("gateway_main");
        (emulator_main.is_file() && gateway_main.is_file()).then_some(Self {
            emulator_main,
            gateway_main,
        })
    }
}

fn gcloud_sdk_root() -> Option<PathBuf> {
    let out = std::process::Command::new("gcloud")
        .args(["info", "--format=value(installation.sdk_root)"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let root = String::from_utf8(out.stdout).ok()?;
    let root = root.trim();
    (!root.is_empty()).then(|| PathBuf::from(root))
}

/// The program the gateway starts in place of `emulator_main`.
#[derive(Debug, Clone)]
pub enum Placeholder {
    /// Run this executable (the front binary itself, which recognises [`PLACEHOLDER_FLAG`]).
    Executable(PathBuf),
    /// Write a small `/bin/sh` script into this directory and run it (for an in-process front).
    ShellScriptIn(PathBuf),
}

/// If the current process was started by the gateway as its placeholder "gRPC binary", wait for
/// the parent to exit and return `true`; the caller should then exit.
pub fn run_placeholder_if_requested() -> bool {
    let requested = std::env::args().skip(1).any(|a| a == PLACEHOLDER_FLAG);
    if !requested {
        return false;
    }
    let parent = std::os::unix::process::parent_id();
    while std::os::unix::process::parent_id() == parent {
        std::thread::sleep(Duration::from_millis(500));
    }
    true
}

/// Picks a free TCP port on 127.0.0.1 (the listener is closed before returning, so a tiny
/// race with another process remains; callers retry on failure).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A child process watched by a task: its exit is logged as an error (the front cannot work
/// without it), and it is killed when [`Supervised::stop`] is called or the handle dropped.
#[derive(Debug)]
struct Supervised {
    pid: Option<u32>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Supervised {
    fn new(what: &'static str, mut child: Child) -> Self {
        let pid = child.id();
        forward_logs(what, child.stderr.take());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            tokio::select! {
                status = child.wait() => {
                    tracing::error!(
                        process = what,
                        ?status,
                        "{what} exited; the emulator cannot serve requests any more"
                    );
                }
                _ = stopped => {
                    let _ = child.kill().await;
                }
            }
        });
        Self {
            pid,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// A running `emulator_main` plus `gateway_main`, killed when stopped or dropped.
#[derive(Debug)]
pub struct OfficialEmulator {
    /// Kills both processes if this process dies without stopping them.
    reaper: Reaper,
    emulator: Supervised,
    gateway: Option<Supervised>,
    grpc_addr: SocketAddr,
    rest_addr: Option<SocketAddr>,
}

impl OfficialEmulator {
    /// Starts `emulator_main` on a free loopback port and waits until it accepts connections.
    pub async fn start_grpc(bins: &EmulatorBinaries) -> Result<Self, BackendError> {
        let port = free_port().map_err(|source| BackendError::Start {
            what: "emulator_main",
            source,
        })?;
        let grpc_addr = SocketAddr::from(([127, 0, 0, 1], port));
        let reaper = Reaper::start();
        let emulator = Command::new(&bins.emulator_main)
            .arg("--host_port")
            .arg(grpc_addr.to_string())
            // Each test uses its own database; the default limit of 100 is too tight.
            .arg("--override_max_databases_per_instance=10000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| BackendError::Start {
                what: "emulator_main",
                source,
            })?;
        if let Some(pid) = emulator.id() {
            reaper.watch(pid, &bins.emulator_main);
        }
        let emulator = Supervised::new("emulator_main", emulator);
        wait_listening("emulator_main", grpc_addr, Duration::from_secs(30)).await?;
        Ok(Self {
            reaper,
            emulator,
            gateway: None,
            grpc_addr,
            rest_addr: None,
        })
    }

    /// Starts `gateway_main` serving REST on a free loopback port and forwarding to `grpc_target`
    /// (normally the front), with `placeholder` as its gRPC binary.
    pub async fn start_gateway(
        &mut self,
        bins: &EmulatorBinaries,
        grpc_target: SocketAddr,
        placeholder: &Placeholder,
    ) -> Result<SocketAddr, BackendError> {
        let port = free_port().map_err(|source| BackendError::Start {
            what: "gateway_main",
            source,
        })?;
        // The gateway serves REST on the address it dials for gRPC (`--hostname`).
        let rest_addr = SocketAddr::new(grpc_target.ip(), port);
        let placeholder_path = match placeholder {
            Placeholder::Executable(path) => path.clone(),
            Placeholder::ShellScriptIn(dir) => {
                write_placeholder_script(dir).map_err(|source| BackendError::Start {
                    what: "gateway placeholder",
                    source,
                })?
            }
        };
        let gateway = Command::new(&bins.gateway_main)
            .arg("--hostname")
            .arg(grpc_target.ip().to_string())
            .arg("--grpc_port")
            .arg(grpc_target.port().to_string())
            .arg("--http_port")
            .arg(port.to_string())
            .arg("--grpc_binary")
            .arg(&placeholder_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| BackendError::Start {
                what: "gateway_main",
                source,
            })?;
        if let Some(pid) = gateway.id() {
            self.reaper.watch(pid, &bins.gateway_main);
        }
        let gateway = Supervised::new("gateway_main", gateway);
        // The gateway listens on the REST port only once its "gRPC binary" started.
        wait_listening("gateway_main", rest_addr, Duration::from_secs(30)).await?;
        self.gateway = Some(gateway);
        self.rest_addr = Some(rest_addr);
        Ok(rest_addr)
    }

    /// The gRPC address of `emulator_main`.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The REST address of `gateway_main`, once started.
    pub fn rest_addr(&self) -> Option<SocketAddr> {
        self.rest_addr
    }

    /// Process ids of the children, for an external reaper.
    pub fn pids(&self) -> Vec<u32> {
        [Some(&self.emulator), self.gateway.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|p| p.pid)
            .collect()
    }

    /// Kills both processes and waits for them.
    pub async fn stop(mut self) {
        if let Some(gateway) = self.gateway.take() {
            gateway.stop().await;
        }
        self.emulator.stop().await;
        self.reaper.disarm();
    }
}

fn write_placeholder_script(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    let path = dir.join("spanner-queues-gateway-placeholder.sh");
    // Waits while its parent (the gateway) lives; ignores the arguments the gateway passes.
    std::fs::write(
        &path,
        "#!/bin/sh\nwhile kill -0 \"$PPID\" 2>/dev/null; do sleep 1; done\n",
    )?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// Forwards a child's stderr to `tracing` at debug level (the official emulator is chatty at
/// start-up: protobuf "namespace conflict" warnings are harmless).
fn forward_logs(what: &'static str, stderr: Option<tokio::process::ChildStderr>) {
    let Some(stderr) = stderr else { return };
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            // glog lines start with a severity letter: I, W, E, F.
            match line.as_bytes().first() {
                Some(b'E' | b'F') => tracing::error!(process = what, "{line}"),
                _ => tracing::trace!(process = what, "{line}"),
            }
        }
    });
}

/// Waits until `addr` accepts TCP connections.
pub async fn wait_listening(
    what: &'static str,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<(), BackendError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(20);
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BackendError::NotReady {
                what,
                addr,
                timeout,
            });
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(250));
    }
}
