//! The `spanner-queues-emulator` binary as a user starts it: ports, the official clients, and
//! its child processes.
//!
//! Each test starts its own emulator on port 9010 of a random loopback address (127.x.y.z), so
//! the official clients' port convention (gRPC 9010, REST 9020) can be used without taking the
//! machine's real 9010. The emulator needs the installed official emulator binaries: without
//! them these tests skip with a notice, or fail under `SPANNER_QUEUES_REQUIRE_EMULATOR=1`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand::RngExt as _;

/// Set in the child run of this binary that plays the user's program.
const CLIENT_ENV: &str = "SPANNER_QUEUES_BINARY_TEST_CLIENT";

fn require_emulator() -> bool {
    std::env::var("SPANNER_QUEUES_REQUIRE_EMULATOR").is_ok_and(|v| v == "1" || v == "true")
}

fn notice(text: &str) {
    let _ = writeln!(std::io::stderr(), "binary test: {text}");
}

/// A loopback address whose ports 9010 and 9020 are both free.
fn free_loopback_ip() -> IpAddr {
    for _ in 0..50 {
        let [a, b, c]: [u8; 3] = rand::rng().random();
        let ip = IpAddr::V4(Ipv4Addr::new(127, a, b, c.max(2)));
        let free = |port| TcpListener::bind(SocketAddr::new(ip, port)).is_ok();
        if free(9010) && free(9020) {
            return ip;
        }
    }
    panic!(
        "no loopback address with ports 9010 and 9020 free (is something bound to 0.0.0.0:9010?)"
    );
}

/// A running front binary; killed when dropped.
struct Emulator {
    child: Child,
    /// Kept open: the emulator runs with `--exit-on-stdin-eof`.
    stdin: Option<ChildStdin>,
    /// The `listening on` line.
    listening: String,
    /// The lines before it.
    startup: String,
    /// Held so the reader thread keeps draining stderr (a full pipe would block the emulator).
    _stderr_lines: mpsc::Receiver<String>,
}

enum Started {
    Running(Emulator),
    /// Exited before listening, with its stderr.
    Exited(String),
}

fn start(args: &[&str]) -> Started {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spanner-queues-emulator"))
        .args(args)
        .arg("--exit-on-stdin-eof")
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start spanner-queues-emulator");
    let stdin = child.stdin.take();
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("listening on") => {
                return Started::Running(Emulator {
                    child,
                    stdin,
                    listening: line,
                    startup: seen,
                    _stderr_lines: rx,
                });
            }
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().expect("wait for the emulator");
                return Started::Exited(format!("{status}\n{seen}"));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("the emulator did not listen within 90 s:\n{seen}");
            }
        }
    }
}

/// Starts the emulator, or returns `None` (after a notice) when the official emulator is not
/// installed and the environment does not require it.
fn start_running(args: &[&str]) -> Option<Emulator> {
    match start(args) {
        Started::Running(emulator) => Some(emulator),
        Started::Exited(output)
            if output.contains("cannot find the Cloud Spanner emulator binaries")
                && !require_emulator() =>
        {
            notice(&format!(
                "SKIPPING: the official emulator is not installed (set \
                 SPANNER_QUEUES_REQUIRE_EMULATOR=1 to make this an error): {output}"
            ));
            None
        }
        Started::Exited(output) => panic!("the emulator exited at start-up: {output}"),
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        // Closing stdin stops it cleanly (`--exit-on-stdin-eof`); a kill is the fallback.
        self.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn listens(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

/// Runs this test binary again as the user's program, with `SPANNER_EMULATOR_HOST` set the way
/// the README says (the official clients read it only from the environment).
fn run_client(emulator_host: &str) -> std::process::Output {
    Command::new(std::env::current_exe().expect("current test binary"))
        .args([
            "--exact",
            "client_creates_instance_and_database",
            "--nocapture",
        ])
        .env(CLIENT_ENV, "1")
        .env("SPANNER_EMULATOR_HOST", emulator_host)
        .output()
        .expect("run the client")
}

#[test]
fn port_9010_serves_rest_on_9020_for_the_official_admin_clients() {
    if std::env::var_os(CLIENT_ENV).is_some() {
        return;
    }
    let ip = free_loopback_ip();
    let Some(emulator) = start_running(&["--host", &ip.to_string(), "--port", "9010"]) else {
        return;
    };
    let grpc = SocketAddr::new(ip, 9010);
    let rest = SocketAddr::new(ip, 9020);
    assert!(
        emulator.listening.contains(&grpc.to_string())
            && emulator.listening.contains(&rest.to_string()),
        "the start-up line names both ports: {}",
        emulator.listening
    );
    assert!(listens(rest), "nothing listens on {rest}");

    let out = run_client(&grpc.to_string());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("CLIENT-OK"),
        "the official clients failed against {grpc}: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    drop(emulator);
}

/// The user's program: only `SPANNER_EMULATOR_HOST` tells it where the emulator is.
#[tokio::test]
async fn client_creates_instance_and_database() {
    if std::env::var_os(CLIENT_ENV).is_none() {
        return;
    }
    use google_cloud_lro::Poller as _;
    use google_cloud_spanner::client::Spanner;
    use google_cloud_spanner_admin_instance_v1::model::Instance;

    let spanner = Spanner::builder().build().await.expect("Spanner client");
    // Both admin clients speak REST: the client maps port 9010 to 9020.
    let instances = spanner
        .instance_admin_builder()
        .build()
        .await
        .expect("instance admin client");
    instances
        .create_instance()
        .set_parent("projects/p")
        .set_instance_id("inst")
        .set_instance(
            Instance::new()
                .set_name("projects/p/instances/inst")
                .set_config("projects/p/instanceConfigs/emulator-config")
                .set_display_name("binary test")
                .set_node_count(1),
        )
        .poller()
        .until_done()
        .await
        .expect("CreateInstance through the REST port");
    let databases = spanner
        .database_admin_builder()
        .build()
        .await
        .expect("database admin client");
    databases
        .create_database()
        .set_parent("projects/p/instances/inst")
        .set_create_statement("CREATE DATABASE db1")
        .set_extra_statements([
            "CREATE QUEUE Tasks (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
        ])
        .poller()
        .until_done()
        .await
        .expect("CreateDatabase with a queue through the REST port");
    let ddl = databases
        .get_database_ddl()
        .set_database("projects/p/instances/inst/databases/db1")
        .send()
        .await
        .expect("GetDatabaseDdl");
    assert!(
        ddl.statements
            .iter()
            .any(|s| s.starts_with("CREATE QUEUE Tasks")),
        "{:?}",
        ddl.statements
    );
    // And the data API on the gRPC port.
    let db = spanner
        .database_client("projects/p/instances/inst/databases/db1")
        .build()
        .await
        .expect("database client");
    let mut rows = db
        .single_use()
        .build()
        .execute_query("SELECT COUNT(*) FROM Tasks")
        .await
        .expect("query");
    let row = rows.next().await.expect("one row").expect("row");
    assert_eq!(row.get::<i64>(0).expect("count"), 0);
    println!("CLIENT-OK");
}

#[test]
fn no_rest_port_serves_only_the_main_port() {
    if std::env::var_os(CLIENT_ENV).is_some() {
        return;
    }
    let ip = free_loopback_ip();
    let Some(emulator) = start_running(&[
        "--host",
        &ip.to_string(),
        "--port",
        "9010",
        "--no-rest-port",
    ]) else {
        return;
    };
    assert!(listens(SocketAddr::new(ip, 9010)));
    assert!(
        !listens(SocketAddr::new(ip, 9020)),
        "--no-rest-port still listens on 9020"
    );
    assert!(
        !emulator.listening.contains(":9020"),
        "{}",
        emulator.listening
    );
}

#[test]
fn rest_port_option_picks_the_extra_port() {
    if std::env::var_os(CLIENT_ENV).is_some() {
        return;
    }
    let ip = free_loopback_ip();
    let extra = TcpListener::bind(SocketAddr::new(ip, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let extra = extra.to_string();
    let Some(emulator) = start_running(&[
        "--host",
        &ip.to_string(),
        "--port",
        "9010",
        "--rest-port",
        &extra,
    ]) else {
        return;
    };
    assert!(listens(SocketAddr::new(ip, extra.parse().expect("port"))));
    assert!(!listens(SocketAddr::new(ip, 9020)));
    assert!(
        emulator.listening.contains(&format!(":{extra}")),
        "{}",
        emulator.listening
    );
}

#[test]
fn a_taken_9020_is_a_clear_error() {
    if std::env::var_os(CLIENT_ENV).is_some() {
        return;
    }
    let (ip, _taken) = (0..20)
        .find_map(|_| {
            let ip = free_loopback_ip();
            TcpListener::bind(SocketAddr::new(ip, 9020))
                .ok()
                .map(|taken| (ip, taken))
        })
        .expect("take port 9020 of a loopback address");
    match start(&["--host", &ip.to_string(), "--port", "9010"]) {
        Started::Running(emulator) => {
            panic!("started although 9020 is taken: {}", emulator.listening)
        }
        Started::Exited(output)
            if output.contains("cannot find the Cloud Spanner emulator binaries")
                && !require_emulator() =>
        {
            notice("SKIPPING: the official emulator is not installed");
        }
        Started::Exited(output) => {
            for needle in [
                &format!("{ip}:9020") as &str,
                "--rest-port",
                "--no-rest-port",
                "exit status: 1",
            ] {
                assert!(
                    output.contains(needle),
                    "{needle:?} missing from:\n{output}"
                );
            }
        }
    }
}

/// Running processes whose parent is `parent`, as (pid, name).
fn children_of(parent: u32) -> Vec<(u32, String)> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some((name, state, ppid)) = stat(pid) else {
            continue;
        };
        if ppid == parent && state != 'Z' {
            children.push((pid, name));
        }
    }
    children
}

/// (name, state, parent pid) from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(String, char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_owned();
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((name, state, ppid))
}

/// Running, not a zombie (a killed orphan stays a zombie until its new parent reaps it).
fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(_, state, _)| state != 'Z')
}

#[test]
fn sigkill_of_the_front_takes_its_children_down() {
    if std::env::var_os(CLIENT_ENV).is_some() {
        return;
    }
    let ip = free_loopback_ip();
    let Some(mut emulator) = start_running(&["--host", &ip.to_string(), "--port", "9010"]) else {
        return;
    };
    assert!(
        emulator.startup.contains("data is kept in memory only"),
        "no start-up line about where data lives:\n{}",
        emulator.startup
    );
    let front = emulator.child.id();
    let children: Vec<(u32, String)> = children_of(front)
        .into_iter()
        .filter(|(_, name)| name == "emulator_main" || name == "gateway_main")
        .collect();
    let mut names: Vec<&str> = children.iter().map(|(_, n)| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["emulator_main", "gateway_main"], "{children:?}");

    emulator.child.kill().expect("SIGKILL the front");
    emulator.child.wait().expect("reap the front");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<&(u32, String)> = children.iter().filter(|(pid, _)| alive(*pid)).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running 20 s after the front was SIGKILLed: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
