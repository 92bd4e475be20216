//! Child processes die with their parent, whatever kills it.
//!
//! A [`Reaper`] is a small `/bin/sh` process started before the children it watches. The parent
//! holds the write end of its standard input and tells it each child's pid and name. When that
//! pipe closes without a "disarm" line (the parent exited, panicked or was SIGKILLed: the
//! kernel closes the pipe in every case), the reaper kills the children that are still running
//! under the name it was given, so a recycled pid is never hit. A parent that stops its children
//! itself disarms the reaper first.
//!
//! `PR_SET_PDEATHSIG` would need `unsafe` (`pre_exec`), and it fires when the *thread* that
//! spawned the child ends, which in a thread pool is not when the process ends.

use std::io::Write as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// Reads `PID NAME` lines until end of input; on `disarm` exits at once; at end of input kills
/// each pid whose `/proc/PID/comm` is still NAME (or every pid where there is no `/proc`).
/// Ignores the signals a terminal or a process-group kill sends, so it outlives its parent.
const SCRIPT: &str = r#"
trap '' INT TERM HUP QUIT
watched=""
while read -r pid name; do
  [ "$pid" = disarm ] && exit 0
  watched="$watched $pid:$name"
done
for entry in $watched; do
  pid=${entry%%:*}; name=${entry#*:}
  if [ -r "/proc/$pid/comm" ]; then
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] && kill -9 "$pid" 2>/dev/null
  elif [ ! -d /proc/self ]; then
    kill -9 "$pid" 2>/dev/null
  fi
done
exit 0
"#;

/// Kills the watched child processes when the current process goes away.
#[derive(Debug)]
pub(crate) struct Reaper {
    stdin: Mutex<Option<ChildStdin>>,
    child: Option<Child>,
}

impl Reaper {
    /// Starts the reaper process. Where that is impossible (no `/bin/sh`, as in the `FROM
    /// scratch` image) or needless (this process is a namespace's init, PID 1, whose death
    /// kills every process in its namespace), the children are not watched.
    pub(crate) fn start() -> Self {
        if std::process::id() == 1 {
            return Self::none();
        }
        let spawned = Command::new("/bin/sh")
            .arg("-c")
            .arg(SCRIPT)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match spawned {
            Ok(mut child) => Self {
                stdin: Mutex::new(child.stdin.take()),
                child: Some(child),
            },
            Err(error) => {
                tracing::warn!(
                    "cannot start /bin/sh to watch the emulator's child processes ({error}): if \
                     this process is killed, they may outlive it"
                );
                Self::none()
            }
        }
    }

    fn none() -> Self {
        Self {
            stdin: Mutex::new(None),
            child: None,
        }
    }

    /// Watches the child with process id `pid`, whose kernel name (`/proc/PID/comm`, at most
    /// 15 bytes) is the first 15 bytes of `program`'s file name.
    pub(crate) fn watch(&self, pid: u32, program: &std::path::Path) {
        let name = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let comm: String = name
            .chars()
            .filter(|c| !c.is_whitespace())
            .take(15)
            .collect();
        self.send(&format!("{pid} {comm}\n"));
    }

    /// The children are stopped by their parent: exit without killing anything.
    pub(crate) fn disarm(&self) {
        self.send("disarm\n");
        if let Ok(mut stdin) = self.stdin.lock() {
            stdin.take();
        }
    }

    fn send(&self, line: &str) {
        let Ok(mut stdin) = self.stdin.lock() else {
            return;
        };
        if let Some(pipe) = stdin.as_mut()
            && pipe
                .write_all(line.as_bytes())
                .and_then(|()| pipe.flush())
                .is_err()
        {
            // The reaper is gone (someone killed it): the children are not watched any more.
            tracing::warn!(
                "the child-process reaper exited; if this process is killed, its emulator \
                 processes may outlive it"
            );
            stdin.take();
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // Closing stdin makes the reaper act (or exit, if disarmed); it then exits by itself.
        if let Ok(mut stdin) = self.stdin.lock() {
            stdin.take();
        }
        // Collect it once it has exited so no zombie is left, without blocking here.
        if let Some(mut child) = self.child.take() {
            let _ = std::thread::Builder::new()
                .name("spanner-queues-reaper-wait".into())
                .spawn(move || child.wait());
        }
    }
}
