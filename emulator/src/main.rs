//! `spanner-queues-emulator`: the Cloud Spanner emulator with queue support.
//!
//! ```text
//! spanner-queues-emulator [--host 127.0.0.1] [--port 9010] [--rest-port 9020 | --no-rest-port]
//!                         [--backend HOST:PORT [--backend-rest HOST:PORT]]
//!                         [--lease-duration 10s] [--admission-wait 5s|off] [--log info]
//!                         [--exit-on-stdin-eof]
//! ```

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use spanner_queues_emulator::backend::{Placeholder, run_placeholder_if_requested};
use spanner_queues_emulator::front::FrontError;
use spanner_queues_emulator::{LocalEmulator, LocalEmulatorError, LocalEmulatorOptions};

/// Default log filter: our own info lines, transport crates quiet.
const DEFAULT_LOG: &str = "info,h2=warn,hyper=warn,hyper_util=warn,tower=warn";
/// Appended to a user-supplied `--log` filter so that `--log debug` shows queue operations, not
/// every HTTP/2 frame.
const QUIET_DEPENDENCIES: &str = "h2=warn,hyper=warn,hyper_util=warn,tower=warn";

/// spanner-queues-emulator: the Cloud Spanner emulator with queue support.
#[derive(Debug, Parser)]
#[command(name = "spanner-queues-emulator", args_override_self = true)]
struct Args {
    /// Address to listen on.
    #[arg(long, value_name = "HOST", default_value = "127.0.0.1")]
    host: IpAddr,
    /// gRPC and REST port.
    #[arg(long, value_name = "PORT", default_value_t = 9010)]
    port: u16,
    /// An extra port serving the same [default: 9020 when --port is 9010, the port the official
    /// clients use for REST (admin) calls].
    #[arg(long, value_name = "PORT", overrides_with = "no_rest_port")]
    rest_port: Option<u16>,
    /// Serve on --port only.
    #[arg(long, overrides_with = "rest_port")]
    no_rest_port: bool,
    /// Use an official emulator already running there (gRPC) instead of starting one from the
    /// installed Cloud SDK.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_addr)]
    backend: Option<SocketAddr>,
    /// The REST gateway of --backend (optional).
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_addr)]
    backend_rest: Option<SocketAddr>,
    /// Lease granted by RECEIVE and RENEWLEASE (a Go-style duration such as 10s or 1m30s; a bare
    /// number is seconds).
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    lease_duration: Duration,
    /// Admit a database's read-write transactions one at a time, in arrival order; a holder idle
    /// this long while others wait is aborted; `off` forwards them all at once.
    #[arg(long, value_name = "DUR|off", default_value = "5s", value_parser = parse_admission_wait)]
    admission_wait: AdmissionWait,
    /// Log filter (RUST_LOG syntax) [default: RUST_LOG, else info].
    #[arg(long, value_name = "FILTER")]
    log: Option<String>,
    /// Exit when standard input closes (lets a parent process that dies take the emulator down
    /// with it).
    #[arg(long)]
    exit_on_stdin_eof: bool,
    /// Print the id of the sources this binary was built from.
    #[arg(long)]
    build_id: bool,
}

impl Args {
    /// The extra port, from `--rest-port` / `--no-rest-port`.
    fn rest_port(&self) -> RestPort {
        match (self.no_rest_port, self.rest_port) {
            (true, _) => RestPort::Off,
            (false, Some(port)) => RestPort::Port(port),
            (false, None) => RestPort::Default,
        }
    }

    /// The log filter: `--log` (transport crates kept quiet), else `RUST_LOG`, else the default.
    fn log_filter(&self) -> String {
        match &self.log {
            Some(filter) => format!("{filter},{QUIET_DEPENDENCIES}"),
            None => std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_LOG.to_owned()),
        }
    }
}

/// `--admission-wait`: a duration, or `off`.
#[derive(Debug, Clone, Copy)]
struct AdmissionWait(Option<Duration>);

/// The extra port the front also listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RestPort {
    /// 9020 when the main port is 9010, none otherwise.
    Default,
    /// `--rest-port N`.
    Port(u16),
    /// `--no-rest-port`.
    Off,
}

/// The official clients reach an emulator's REST API (their admin clients use REST) by mapping
/// the port of `SPANNER_EMULATOR_HOST` from 9010 to 9020, as the official emulator's own ports
/// are. This is the client libraries' convention, not a documented contract: if they change it,
/// change this.
const OFFICIAL_GRPC_PORT: u16 = 9010;
/// See [`OFFICIAL_GRPC_PORT`].
const OFFICIAL_REST_PORT: u16 = 9020;

impl RestPort {
    fn resolve(self, grpc_port: u16) -> Option<u16> {
        match self {
            RestPort::Default => (grpc_port == OFFICIAL_GRPC_PORT).then_some(OFFICIAL_REST_PORT),
            RestPort::Port(port) => Some(port),
            RestPort::Off => None,
        }
    }
}

fn parse_addr(v: &str) -> Result<SocketAddr, String> {
    v.to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("invalid address {v} (expected HOST:PORT)"))
}

/// A Go-style duration (the format of `RECEIVE`'s `max_duration`: `10s`, `1m30s`, `500ms`),
/// or a bare number of seconds (`5`, `1.5`), as this flag has always taken.
fn parse_duration(v: &str) -> Result<Duration, String> {
    if let Ok(seconds) = v.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| format!("invalid duration {v}"));
    }
    spanner_queues_sql::parse_go_duration(v).map_err(|e| format!("invalid duration {v}: {e}"))
}

fn parse_admission_wait(v: &str) -> Result<AdmissionWait, String> {
    if v == "off" {
        Ok(AdmissionWait(None))
    } else {
        parse_duration(v).map(|wait| AdmissionWait(Some(wait)))
    }
}

fn main() -> ExitCode {
    // The REST gateway starts this binary as its placeholder "gRPC binary".
    if run_placeholder_if_requested() {
        return ExitCode::SUCCESS;
    }
    let args = Args::parse();
    if args.build_id {
        println!("{}", spanner_queues_emulator::BUILD_ID);
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(args.log_filter())
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let mut options = LocalEmulatorOptions::new();
    let rest_port = args.rest_port();
    let rest = rest_port
        .resolve(args.port)
        .map(|port| SocketAddr::new(args.host, port));
    options.listen = std::iter::once(SocketAddr::new(args.host, args.port))
        .chain(rest)
        .collect();
    options.existing_backend = args.backend;
    options.existing_rest = args.backend_rest;
    options.lease_duration = args.lease_duration;
    options.admission_wait = args.admission_wait.0;
    if let Ok(exe) = std::env::current_exe() {
        options.placeholder = Placeholder::Executable(exe);
    }
    let emulator = LocalEmulator::start(options).await.map_err(|e| {
        let message = spanner_queues_emulator::error_chain(&e);
        match (&e, rest) {
            (LocalEmulatorError::Front(FrontError::Bind { addr, .. }), Some(rest))
                if *addr == rest && rest_port == RestPort::Default =>
            {
                format!(
                    "{message}\nport {} serves REST next to gRPC port {} by default, because the \
                     official clients send REST (admin) calls to port {} when \
                     SPANNER_EMULATOR_HOST names port {}: free that port, pick another with \
                     --rest-port N, or pass --no-rest-port",
                    rest.port(),
                    args.port,
                    OFFICIAL_REST_PORT,
                    OFFICIAL_GRPC_PORT
                )
            }
            _ => message,
        }
    })?;
    let addrs: Vec<String> = emulator.addrs().iter().map(ToString::to_string).collect();
    // The official emulator has no persistence option.
    tracing::info!(
        "data is kept in memory only: instances, databases and messages are gone when this \
         emulator stops"
    );
    // Harnesses wait for this exact line.
    tracing::info!(
        "spanner-queues-emulator listening on {} (gRPC and REST)",
        addrs.join(", ")
    );
    wait_for_stop(args.exit_on_stdin_eof).await;
    tracing::info!("stopping");
    emulator.stop().await;
    Ok(())
}

async fn wait_for_stop(exit_on_stdin_eof: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match terminate.as_mut() {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let stdin_closed = async {
        if !exit_on_stdin_eof {
            return std::future::pending::<()>().await;
        }
        use tokio::io::AsyncReadExt;
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 256];
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminated => {}
        () = stdin_closed => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("spanner-queues-emulator").chain(argv.iter().copied()))
    }

    #[test]
    fn the_command_line_keeps_its_flags_and_defaults() {
        let parsed = args(&[]).expect("no flags");
        assert_eq!(parsed.host, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(parsed.port, 9010);
        assert_eq!(parsed.rest_port(), RestPort::Default);
        assert_eq!(parsed.lease_duration, Duration::from_secs(10));
        assert_eq!(parsed.admission_wait.0, Some(Duration::from_secs(5)));
        let parsed = args(&[
            "--host",
            "0.0.0.0",
            "--port",
            "7000",
            "--rest-port",
            "7001",
            "--backend",
            "127.0.0.1:9999",
            "--lease-duration",
            "1m30s",
            "--admission-wait",
            "off",
            "--log",
            "debug",
            "--exit-on-stdin-eof",
        ])
        .expect("every flag");
        assert_eq!(parsed.port, 7000);
        assert_eq!(parsed.rest_port(), RestPort::Port(7001));
        assert_eq!(
            parsed.backend,
            Some(SocketAddr::from(([127, 0, 0, 1], 9999)))
        );
        assert_eq!(parsed.lease_duration, Duration::from_secs(90));
        assert_eq!(parsed.admission_wait.0, None);
        assert!(parsed.log_filter().starts_with("debug,h2=warn"));
        assert!(parsed.exit_on_stdin_eof);
        // The last of --rest-port and --no-rest-port wins, as does a repeated flag.
        let parsed = args(&[
            "--rest-port",
            "7001",
            "--no-rest-port",
            "--port",
            "1",
            "--port",
            "2",
        ])
        .expect("overrides");
        assert_eq!((parsed.rest_port(), parsed.port), (RestPort::Off, 2));
        assert_eq!(
            args(&["--no-rest-port", "--rest-port", "7001"])
                .expect("overrides")
                .rest_port(),
            RestPort::Port(7001)
        );
    }

    #[test]
    fn durations_are_go_style_or_seconds() {
        for (text, want) in [
            ("10s", Duration::from_secs(10)),
            ("500ms", Duration::from_millis(500)),
            ("1.5m", Duration::from_secs(90)),
            ("1m30s", Duration::from_secs(90)),
            ("5", Duration::from_secs(5)),
            ("0.25", Duration::from_millis(250)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for text in ["", "-1s", "10 s", "1d", "forever"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
        for argv in [
            &["--lease-duration", "soon"][..],
            &["--admission-wait", "never"],
            &["--port", "99999"],
            &["--host", "localhost:1"],
            &["--backend", "nowhere"],
            &["--unknown"],
        ] {
            assert!(args(argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn rest_port_defaults_to_9020_only_next_to_9010() {
        assert_eq!(RestPort::Default.resolve(9010), Some(9020));
        assert_eq!(RestPort::Default.resolve(9011), None);
        assert_eq!(RestPort::Port(7000).resolve(9011), Some(7000));
        assert_eq!(RestPort::Off.resolve(9010), None);
    }
}
