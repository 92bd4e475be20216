//! Python's official Spanner client for the cross-language test, installed on first use.
//!
//! The base interpreter is `$PYTHON` (default `python3`). If it already has the client with
//! queue support it is used as it is; otherwise the client is installed with pip into a virtual
//! environment under the target directory (`target/tmp/python-google-cloud-spanner-<version>`),
//! once per target directory. Two test processes that need it at once take turns through a file
//! lock, and tests within one process through a process-wide cell.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::OnceCell;

/// The client version the cross-language script is written against (the first with
/// `send`/`ack` on transactions and batches).
pub(crate) const CLIENT_VERSION: &str = "3.71.0";

/// How long creating the virtual environment and installing the client may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// A Python interpreter that can `import google.cloud.spanner` with queue support.
#[derive(Debug, Clone)]
pub(crate) struct PythonClient {
    /// The interpreter to run scripts with.
    pub(crate) interpreter: PathBuf,
    /// `google.cloud.spanner.__version__`.
    pub(crate) version: String,
}

static CLIENT: OnceCell<Result<PythonClient, String>> = OnceCell::const_new();

/// The interpreter with the client, installing it on first use; `Err` says why it cannot be had
/// and how to fix that.
pub(crate) async fn official_client() -> Result<PythonClient, String> {
    CLIENT.get_or_init(find_or_install).await.clone()
}

fn base_interpreter() -> PathBuf {
    std::env::var_os("PYTHON")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("python3"), PathBuf::from)
}

fn venv_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("python-google-cloud-spanner-{CLIENT_VERSION}"))
}

fn venv_python(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

/// Prints on the real stderr (libtest captures `eprintln!`).
pub(crate) fn notice(text: &str) {
    let _ = writeln!(std::io::stderr(), "cross-language test: {text}");
}

async fn find_or_install() -> Result<PythonClient, String> {
    let base = base_interpreter();
    if let Ok(version) = probe(&base).await {
        return Ok(PythonClient {
            interpreter: base,
            version,
        });
    }
    let venv = venv_dir();
    let python = venv_python(&venv);
    let fix = format!(
        "install it yourself with `{} -m pip install google-cloud-spanner=={CLIENT_VERSION}` \
         (or point PYTHON at an interpreter that has it), or make `{} -m venv` and PyPI work",
        base.display(),
        base.display()
    );
    // Another test process may be installing right now: wait for it, then reuse its work.
    let lock = lock_file(venv.with_extension("lock"))
        .await
        .map_err(|e| format!("cannot lock {}: {e}; {fix}", venv.display()))?;
    if let Ok(version) = probe(&python).await {
        drop(lock);
        return Ok(PythonClient {
            interpreter: python,
            version,
        });
    }
    notice(&format!(
        "installing Python's google-cloud-spanner {CLIENT_VERSION} with pip into {} (once per \
         target directory)",
        venv.display()
    ));
    let installed = install(&base, &venv).await;
    drop(lock);
    installed.map_err(|e| format!("{e}; {fix}"))?;
    let version = probe(&python)
        .await
        .map_err(|e| format!("the installed client does not load: {e}; {fix}"))?;
    Ok(PythonClient {
        interpreter: python,
        version,
    })
}

/// The client's version if `python` can import it with queue support.
async fn probe(python: &Path) -> Result<String, String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import google.cloud.spanner as s, google.cloud.spanner_v1.batch as b; \
             assert hasattr(b._BatchBase, 'send') and hasattr(b._BatchBase, 'ack'); \
             print(s.__version__)",
        ])
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// An exclusive lock on `path`, held until the returned file is dropped.
async fn lock_file(path: PathBuf) -> std::io::Result<std::fs::File> {
    tokio::task::spawn_blocking(move || {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        file.lock()?;
        Ok(file)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// A fresh virtual environment at `venv` with the client installed from PyPI.
async fn install(base: &Path, venv: &Path) -> Result<(), String> {
    if venv.exists() {
        // Left by an interrupted install.
        std::fs::remove_dir_all(venv)
            .map_err(|e| format!("cannot remove the broken {}: {e}", venv.display()))?;
    }
    run(Command::new(base).arg("-m").arg("venv").arg(venv)).await?;
    run(Command::new(venv_python(venv)).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &format!("google-cloud-spanner=={CLIENT_VERSION}"),
    ]))
    .await
}

async fn run(command: &mut Command) -> Result<(), String> {
    let what = format!("{:?}", command.as_std());
    let out = tokio::time::timeout(INSTALL_TIMEOUT, command.kill_on_drop(true).output())
        .await
        .map_err(|_| format!("{what} did not finish within {INSTALL_TIMEOUT:?}"))?
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
