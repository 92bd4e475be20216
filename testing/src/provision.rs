//! Choosing and starting the process-wide backend.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use google_cloud_lro::Poller;
use google_cloud_spanner::client::Spanner;
use tokio::sync::OnceCell;

use super::HarnessError;
use spanner_queues_emulator::{LocalEmulator, LocalEmulatorOptions};

/// The default image tag, built by `emulator/docker/build-image.sh`.
pub const DEFAULT_IMAGE: &str = "spanner-queues-emulator:local";
/// Project id used with emulators.
const EMULATOR_PROJECT: &str = "spanner-queues-test";
/// Instance id used with emulators.
const EMULATOR_INSTANCE: &str = "test-instance";

/// Which backend the harness uses.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// A real Cloud Spanner instance (`SPANNER_QUEUES_TEST_INSTANCE`).
    CloudSpanner {
        /// `projects/P/instances/I`.
        instance: String,
    },
    /// An emulator that was already running (`SPANNER_EMULATOR_HOST`).
    ExistingEmulator {
        /// `host:port`.
        host: String,
    },
    /// The emulator image in a container started with the `docker` CLI.
    Container {
        /// The image reference.
        image: String,
        /// The container id.
        id: String,
    },
    /// The installed official emulator as child processes, with the queue front in-process.
    Processes {
        /// Process ids of the official emulator's processes.
        pids: Vec<u32>,
    },
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::CloudSpanner { instance } => write!(f, "cloud-spanner instance={instance}"),
            Mode::ExistingEmulator { host } => write!(f, "existing-emulator host={host}"),
            Mode::Container { image, id } => {
                write!(f, "container image={image} id={}", &id[..id.len().min(12)])
            }
            Mode::Processes { pids } => write!(
                f,
                "processes (installed emulator binaries, front in-process) pids={pids:?}"
            ),
        }
    }
}

/// The process-wide backend.
#[derive(Debug)]
pub(crate) struct Provisioned {
    pub(crate) mode: Mode,
    /// `host:port` for emulator modes.
    pub(crate) emulator_host: Option<String>,
    /// `projects/P/instances/I`.
    pub(crate) instance: String,
    _keep: Keep,
}

/// Things that must live as long as the process.
#[derive(Debug, Default)]
struct Keep {
    _local: Option<LocalEmulator>,
    _reaper: Option<Reaper>,
}

impl Provisioned {
    pub(crate) async fn spanner(&self) -> Result<Spanner, HarnessError> {
        let mut builder = Spanner::builder();
        if let Some(host) = &self.emulator_host {
            builder = builder.with_endpoint(format!("http://{host}"));
        }
        builder
            .build()
            .await
            .map_err(|e| HarnessError::Client(Box::new(e)))
    }
}

static RUNTIME: OnceLock<tokio::runtime::Handle> = OnceLock::new();
static PROVISIONED: OnceCell<Result<Arc<Provisioned>, String>> = OnceCell::const_new();

/// A runtime that lives as long as the process, for the in-process front (each
/// `#[tokio::test]` has its own runtime, which ends with the test).
pub(crate) fn runtime() -> &'static tokio::runtime::Handle {
    RUNTIME.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("spanner-queues-harness".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("spanner-queues-harness-rt")
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => {
                        let _ = tx.send(Some(runtime.handle().clone()));
                        runtime.block_on(std::future::pending::<()>());
                    }
                    Err(_) => {
                        let _ = tx.send(None);
                    }
                }
            })
            .ok()
            .and_then(|_| rx.recv().ok().flatten())
            .unwrap_or_else(|| panic!("spanner-queues harness: cannot start its runtime thread"))
    })
}

pub(crate) async fn provisioned() -> Result<Arc<Provisioned>, HarnessError> {
    let result = PROVISIONED
        .get_or_init(|| async {
            // Start on the long-lived runtime: the in-process front must outlive the test that
            // happened to start it.
            match runtime().spawn(provision()).await {
                Ok(result) => result.map(Arc::new),
                Err(join) => Err(format!("provisioning task failed: {join}")),
            }
        })
        .await;
    match result {
        Ok(p) => Ok(Arc::clone(p)),
        Err(reason) => Err(HarnessError::NoBackend(reason.clone())),
    }
}

/// Prints a harness notice on the real stderr (libtest captures `eprintln!` of passing tests).
pub(crate) fn notice(text: &str) {
    let _ = writeln!(std::io::stderr(), "spanner-queues harness: {text}");
}

async fn provision() -> Result<Provisioned, String> {
    let started = std::time::Instant::now();
    let provisioned = choose_and_start().await?;
    notice(&format!(
        "mode={} instance={} (ready in {:.1?})",
        provisioned.mode,
        provisioned.instance,
        started.elapsed()
    ));
    Ok(provisioned)
}

async fn choose_and_start() -> Result<Provisioned, String> {
    if let Some(instance) = non_empty_env("SPANNER_QUEUES_TEST_INSTANCE") {
        return Ok(Provisioned {
            mode: Mode::CloudSpanner {
                instance: instance.clone(),
            },
            emulator_host: None,
            instance,
            _keep: Keep::default(),
        });
    }
    if let Some(host) = non_empty_env("SPANNER_EMULATOR_HOST") {
        let provisioned = Provisioned {
            mode: Mode::ExistingEmulator { host: host.clone() },
            emulator_host: Some(host),
            instance: format!("projects/{EMULATOR_PROJECT}/instances/{EMULATOR_INSTANCE}"),
            _keep: Keep::default(),
        };
        create_instance(&provisioned).await?;
        return Ok(provisioned);
    }
    let mut reasons = Vec::new();
    if std::env::var("SPANNER_QUEUES_HARNESS_NO_DOCKER").is_ok_and(|v| v == "1") {
        reasons.push("docker disabled by SPANNER_QUEUES_HARNESS_NO_DOCKER=1".to_owned());
    } else {
        match blocking(docker_available).await {
            Ok(()) => match start_container().await {
                Ok(provisioned) => return Ok(provisioned),
                Err(reason) => reasons.push(format!("container mode failed: {reason}")),
            },
            Err(reason) => reasons.push(reason),
        }
    }
    match start_processes().await {
        Ok(provisioned) => {
            notice(&format!(
                "not using a container ({}); using child processes",
                reasons.join("; ")
            ));
            Ok(provisioned)
        }
        Err(reason) => {
            reasons.push(format!("process mode failed: {reason}"));
            Err(reasons.join("; "))
        }
    }
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn emulator_provisioned(mode: Mode, addr: SocketAddr, keep: Keep) -> Provisioned {
    Provisioned {
        mode,
        emulator_host: Some(addr.to_string()),
        instance: format!("projects/{EMULATOR_PROJECT}/instances/{EMULATOR_INSTANCE}"),
        _keep: keep,
    }
}

async fn start_processes() -> Result<Provisioned, String> {
    let mut options = LocalEmulatorOptions::new();
    options.placeholder = spanner_queues_emulator::backend::Placeholder::ShellScriptIn(
        std::env::temp_dir().join(format!("spanner-queues-harness-{}", std::process::id())),
    );
    let local = LocalEmulator::start(options)
        .await
        .map_err(|e| spanner_queues_emulator::error_chain(&e))?;
    // `LocalEmulator` takes its child processes down with this process, however it ends.
    let addr = local.addr();
    let provisioned = emulator_provisioned(
        Mode::Processes {
            pids: local.child_pids(),
        },
        addr,
        Keep {
            _local: Some(local),
            ..Keep::default()
        },
    );
    create_instance(&provisioned).await?;
    Ok(provisioned)
}

fn docker_available() -> Result<(), String> {
    let output = run_with_timeout(
        Command::new("docker").args(["version", "--format", "{{.Server.Version}}"]),
        Duration::from_secs(15),
    )
    .map_err(|e| format!("no docker CLI ({e})"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "no Docker engine answers ({})",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The image's `spanner-queues.build-id` label: `None` if the image is missing, `Some("")` if
/// it has no such label (an image not built by our script).
fn image_build_id(image: &str) -> Option<String> {
    run_with_timeout(
        Command::new("docker").args([
            "image",
            "inspect",
            "--format",
            "{{ index .Config.Labels \"spanner-queues.build-id\" }}",
            image,
        ]),
        Duration::from_secs(30),
    )
    .ok()
    .filter(|o| o.status.success())
    .map(|o| {
        let id = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        if id == "<no value>" {
            String::new()
        } else {
            id
        }
    })
}

/// The build id a front binary reports.
fn binary_build_id(binary: &std::path::Path) -> Option<String> {
    run_with_timeout(
        Command::new(binary).arg("--build-id"),
        Duration::from_secs(10),
    )
    .ok()
    .filter(|o| o.status.success())
    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

/// Builds the default image with the repository's script, from the installed emulator binaries
/// and the front binary of this build.
fn build_default_image() -> Result<(), String> {
    let script = PathBuf::from(spanner_queues_emulator::IMAGE_BUILD_SCRIPT);
    if !script.is_file() {
        return Err(format!("image build script {} not found", script.display()));
    }
    // Package only a front built from the same sources as this library.
    let bin = front_binary_next_to_current_exe()
        .filter(|bin| binary_build_id(bin).as_deref() == Some(spanner_queues_emulator::BUILD_ID))
        .ok_or_else(|| {
            format!(
                "no spanner-queues-emulator binary of this build (id {}) next to the test \
                 binary; run `cargo test --workspace` or emulator/docker/build-image.sh",
                spanner_queues_emulator::BUILD_ID
            )
        })?;
    let mut command = Command::new("bash");
    command.arg(&script).env("SPANNER_QUEUES_FRONT_BIN", bin);
    notice(&format!(
        "building image {DEFAULT_IMAGE} with {}",
        script.display()
    ));
    let output = run_with_timeout(&mut command, Duration::from_secs(600))
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// `target/<profile>/spanner-queues-emulator` next to a test binary in `target/<profile>/deps/`.
fn front_binary_next_to_current_exe() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let candidate = profile_dir.join("spanner-queues-emulator");
    candidate.is_file().then_some(candidate)
}

async fn start_container() -> Result<Provisioned, String> {
    let image = std::env::var("SPANNER_EMULATOR_IMAGE")
        .ok()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
    let probe_image = image.clone();
    let probe = image.clone();
    let found = blocking(move || Ok::<_, String>(image_build_id(&probe))).await?;
    match found {
        // Our image, built from these sources.
        Some(id) if id == spanner_queues_emulator::BUILD_ID => {}
        // Another image that speaks queues (SPANNER_EMULATOR_IMAGE): use it as it is.
        Some(id) if id.is_empty() && image != DEFAULT_IMAGE => {}
        // Missing or stale: build it (from a front binary of this very build).
        Some(_) | None if image == DEFAULT_IMAGE => {
            if found.is_some() {
                notice(&format!(
                    "image {image} was built from other sources (build id {}, want {}); rebuilding",
                    found.as_deref().unwrap_or_default(),
                    spanner_queues_emulator::BUILD_ID
                ));
            }
            blocking(build_default_image).await?;
        }
        Some(_) => {}
        None => {
            return Err(format!(
                "image {image} is not present locally and no registry may be reachable; \
                 pull or build it first"
            ));
        }
    }
    let (id, port, reaper) = blocking(move || run_container(&image)).await?;
    let provisioned = emulator_provisioned(
        Mode::Container {
            image: probe_image,
            id: id.clone(),
        },
        SocketAddr::new(docker_host_ip(), port),
        Keep {
            _reaper: Some(reaper),
            ..Keep::default()
        },
    );
    create_instance(&provisioned).await?;
    Ok(provisioned)
}

/// How long a container may take to print its `listening on` line.
const CONTAINER_START_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts a container from `image` and waits until the emulator in it listens; returns its id,
/// the host port mapped to its port 9010, and the reaper that removes it when this process
/// ends. A container that fails to start is removed at once.
fn run_container(image: &str) -> Result<(String, u16, Reaper), String> {
    let publish = if docker_host_ip().is_loopback() {
        "127.0.0.1::9010"
    } else {
        "9010"
    };
    let output = run_with_timeout(
        Command::new("docker").args([
            "run",
            "--detach",
            "--publish",
            publish,
            "--label",
            "spanner-queues.harness=1",
            "--label",
            &format!("spanner-queues.owner-pid={}", std::process::id()),
            image,
        ]),
        Duration::from_secs(60),
    )
    .map_err(|e| format!("docker run {image}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "docker run {image} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let id = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let reaper = Reaper::remove_container(&id);
    // Removed at once if it does not come up; otherwise by the reaper when this process ends.
    let remove = |reason: String| {
        let _ = run_with_timeout(
            Command::new("docker").args(["rm", "--force", "--volumes", &id]),
            Duration::from_secs(30),
        );
        reason
    };
    wait_for_log_line(&id, "listening on", CONTAINER_START_TIMEOUT)
        .map_err(|e| remove(format!("container from {image} did not start: {e}")))?;
    let reaper = reaper.map_err(|e| remove(format!("cannot start the container reaper: {e}")))?;
    let port = mapped_port(&id).map_err(remove)?;
    Ok((id, port, reaper))
}

/// Follows a container's log until a line contains `needle`.
fn wait_for_log_line(id: &str, needle: &str, timeout: Duration) -> Result<(), String> {
    use std::io::BufRead as _;
    let mut logs = Command::new("docker")
        .args(["logs", "--follow", id])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("docker logs: {e}"))?;
    let stderr = logs
        .stderr
        .take()
        .ok_or_else(|| "docker logs has no stderr".to_owned())?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + timeout;
    let mut seen = Vec::new();
    let result = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(needle) => break Ok(()),
            Ok(line) => seen.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                break Err(format!(
                    "no {needle:?} within {timeout:?}; log: {}",
                    seen.join(" | ")
                ));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                break Err(format!("it exited; log: {}", seen.join(" | ")));
            }
        }
    };
    let _ = logs.kill();
    let _ = logs.wait();
    result
}

/// The host port Docker mapped to the container's port 9010.
fn mapped_port(id: &str) -> Result<u16, String> {
    let output = run_with_timeout(
        Command::new("docker").args(["port", id, "9010/tcp"]),
        Duration::from_secs(30),
    )
    .map_err(|e| format!("docker port: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    // One line per host address, e.g. `127.0.0.1:49153` (and `[::]:49153`).
    text.lines()
        .find_map(|line| line.trim().rsplit_once(':')?.1.parse().ok())
        .ok_or_else(|| {
            format!(
                "docker port {id} 9010/tcp gave no port: {} {}",
                text.trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            )
        })
}

/// Where published container ports are reached: the host of a `tcp://` `DOCKER_HOST`, else
/// this machine.
fn docker_host_ip() -> std::net::IpAddr {
    non_empty_env("DOCKER_HOST")
        .and_then(|host| {
            let rest = host.strip_prefix("tcp://")?;
            let host = rest.rsplit_once(':').map_or(rest, |(h, _)| h);
            std::net::ToSocketAddrs::to_socket_addrs(&(host, 0))
                .ok()?
                .next()
                .map(|a| a.ip())
        })
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]))
}

/// Runs blocking work (docker CLI calls) off the async worker threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("blocking task failed: {e}"))?
}

/// Creates the emulator instance (idempotent).
async fn create_instance(provisioned: &Provisioned) -> Result<(), String> {
    let spanner = provisioned
        .spanner()
        .await
        .map_err(|e| spanner_queues_emulator::error_chain(&e))?;
    let admin = spanner
        .instance_admin_builder()
        .build()
        .await
        .map_err(|e| format!("instance admin client: {e}"))?;
    let instance = google_cloud_spanner_admin_instance_v1::model::Instance::new()
        .set_name(&provisioned.instance)
        .set_config(format!(
            "projects/{EMULATOR_PROJECT}/instanceConfigs/emulator-config"
        ))
        .set_display_name("spanner-queues tests")
        .set_node_count(1);
    let result = admin
        .create_instance()
        .set_parent(format!("projects/{EMULATOR_PROJECT}"))
        .set_instance_id(EMULATOR_INSTANCE)
        .set_instance(instance)
        .poller()
        .until_done()
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(error)
            if error
                .status()
                .is_some_and(|s| s.code == google_cloud_gax::error::rpc::Code::AlreadyExists) =>
        {
            Ok(())
        }
        Err(error) => Err(format!(
            "creating instance {}: {}",
            provisioned.instance,
            spanner_queues_emulator::error_chain(&error)
        )),
    }
}

/// A unique database id (2–30 characters, lowercase).
pub(crate) fn database_id() -> String {
    let uuid = uuid::Uuid::new_v4().simple().to_string();
    format!("t{}", &uuid[..20])
}

/// A process that cleans up after the test process when the pipe from it closes (normal exit,
/// panic, or a kill signal alike).
#[derive(Debug)]
struct Reaper {
    _stdin: Mutex<ChildStdin>,
    _child: Child,
}

impl Reaper {
    fn spawn(script: &str) -> std::io::Result<Self> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("reaper has no stdin"))?;
        Ok(Self {
            _stdin: Mutex::new(stdin),
            _child: child,
        })
    }

    fn remove_container(id: &str) -> std::io::Result<Self> {
        Self::spawn(&format!(
            "cat >/dev/null; docker rm -f -v {id} >/dev/null 2>&1"
        ))
    }
}

/// Runs a command to completion, killing it after `timeout`.
fn run_with_timeout(
    command: &mut Command,
    timeout: Duration,
) -> std::io::Result<std::process::Output> {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(output) => output,
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("timed out after {timeout:?}"),
            ))
        }
    }
}
