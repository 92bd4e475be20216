//! A test that panics midway leaves no emulator container or process behind.
//!
//! The parent test runs this same binary again, selecting `child_provisions_then_panics`, which
//! takes a database from the harness, reports what the harness started, and panics. The parent
//! then checks that the container / child processes are gone.

use std::io::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use spanner_queues_testing::{self as harness, Mode};

const CHILD_ENV: &str = "SPANNER_QUEUES_CLEANUP_CHILD";

/// Does its work only as the child of `panicking_test_leaves_nothing_behind` (which checks the
/// outcome); run on its own it returns at once.
#[tokio::test]
async fn child_provisions_then_panics() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let db = harness::setup()
        .without_sdk_tables()
        .try_create()
        .await
        .expect("the child needs a backend");
    let report = match db.mode() {
        Mode::Container { id, .. } => format!("CLEANUP-CONTAINER={id}"),
        Mode::Processes { pids } => {
            let pids: Vec<String> = pids.iter().map(ToString::to_string).collect();
            format!("CLEANUP-PIDS={}", pids.join(","))
        }
        other => format!("CLEANUP-NOTHING={other}"),
    };
    let mut out = std::io::stdout();
    writeln!(out, "{report}").expect("stdout");
    out.flush().expect("stdout");
    panic!("deliberate panic midway through a test");
}

fn run_child(extra_env: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().expect("current test binary");
    let mut command = Command::new(exe);
    command
        .args(["--exact", "child_provisions_then_panics", "--nocapture"])
        .env(CHILD_ENV, "1")
        .env_remove("SPANNER_EMULATOR_HOST")
        .env_remove("SPANNER_QUEUES_TEST_INSTANCE");
    for (k, v) in extra_env {
        command.env(k, v);
    }
    let output = command.output().expect("run the child test");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "the child test must fail (it panics); stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("deliberate panic") || stderr.contains("deliberate panic"),
        "the child failed for another reason:\n{stdout}\n{stderr}"
    );
    stdout
}

/// Polls an external condition (a container or process going away) with a deadline.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "still present after 30 s: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn process_running(pid: &str) -> bool {
    // A zombie (state Z) is dead, only not yet reaped by its new parent.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit(')')
                .next()
                .map(|rest| rest.trim_start().to_owned())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
}

fn check_cleanup(stdout: &str) -> &'static str {
    if let Some(id) = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CLEANUP-CONTAINER="))
    {
        let id = id.trim().to_owned();
        wait_until(&format!("container {id}"), || {
            let out = Command::new("docker")
                .args(["ps", "-a", "-q", "--no-trunc", "--filter"])
                .arg(format!("id={id}"))
                .output()
                .expect("docker ps");
            String::from_utf8_lossy(&out.stdout).trim().is_empty()
        });
        "container"
    } else if let Some(pids) = stdout.lines().find_map(|l| l.strip_prefix("CLEANUP-PIDS=")) {
        let pids: Vec<&str> = pids.trim().split(',').filter(|p| !p.is_empty()).collect();
        assert_eq!(
            pids.len(),
            2,
            "emulator_main and gateway_main expected: {pids:?}"
        );
        for pid in pids {
            wait_until(&format!("process {pid}"), || !process_running(pid));
        }
        "processes"
    } else {
        panic!("the child did not report what it started:\n{stdout}");
    }
}

/// The image can be built: `target/<profile>/spanner-queues-emulator` is of this build (it is
/// under `cargo test --workspace`, not under `cargo test -p spanner-queues-testing`).
fn front_of_this_build() -> bool {
    let exe = std::env::current_exe().expect("current test binary");
    let Some(front) = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("spanner-queues-emulator"))
    else {
        return false;
    };
    Command::new(front)
        .arg("--build-id")
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).trim() == spanner_queues_emulator::BUILD_ID
        })
}

#[test]
fn panicking_test_leaves_nothing_behind() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    // The default choice (a container when a Docker engine answers), then child processes.
    let first = check_cleanup(&run_child(&[]));
    let docker_answers = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    if docker_answers
        && front_of_this_build()
        && std::env::var_os("SPANNER_QUEUES_HARNESS_NO_DOCKER").is_none()
    {
        // A broken image must not hide behind the fallback to child processes.
        assert_eq!(
            first, "container",
            "a Docker engine answers and the front binary is built, yet no container was used"
        );
    }
    let second = check_cleanup(&run_child(&[("SPANNER_QUEUES_HARNESS_NO_DOCKER", "1")]));
    assert_eq!(second, "processes");
    let _ = writeln!(
        std::io::stderr(),
        "cleanup verified after a panic: {first}, then {second}"
    );
}
