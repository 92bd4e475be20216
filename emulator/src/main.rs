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

use spanner_queues_emulator::backend::{Placeholder, run_placeholder_if_requested};
use spanner_queues_emulator::front::FrontError;
use spanner_queues_emulator::{LocalEmulator, LocalEmulatorError, LocalEmulatorOptions};

const USAGE: &str = "\
spanner-queues-emulator: the Cloud Spanner emulator with queue support

USAGE:
    spanner-queues-emulator [OPTIONS]

OPTIONS:
    --host HOST              address to listen on [default: 127.0.0.1]
    --port PORT              gRPC and REST port [default: 9010]
    --rest-port PORT         an extra port serving the same [default: 9020 when --port is 9010,
                             the port the official clients use for REST (admin) calls]
    --no-rest-port           serve on --port only
    --backend HOST:PORT      use an official emulator already running there (gRPC) instead of
                             starting one from the installed Cloud SDK
    --backend-rest HOST:PORT the REST gateway of --backend (optional)
    --lease-duration DUR     lease granted by RECEIVE and RENEWLEASE [default: 10s]
    --admission-wait DUR|off admit a database's read-write transactions one at a time, in
                             arrival order; a holder idle this long while others wait is
                             aborted; `off` forwards them all at once [default: 5s]
    --log LEVEL              log filter (RUST_LOG syntax) [default: info]
    --exit-on-stdin-eof      exit when standard input closes (lets a parent process that dies
                             take the emulator down with it)
    --build-id               print the id of the sources this binary was built from
    -h, --help               print this help
";

/// Default log filter: our own info lines, transport crates quiet.
const DEFAULT_LOG: &str = "info,h2=warn,hyper=warn,hyper_util=warn,tower=warn";
/// Appended to a user-supplied `--log` filter so that `--log debug` shows queue operations, not
/// every HTTP/2 frame.
const QUIET_DEPENDENCIES: &str = "h2=warn,hyper=warn,hyper_util=warn,tower=warn";

/// Marker returned by the argument parser for `--build-id`.
const BUILD_ID_REQUEST: &str = "\u{0}build-id";

#[derive(Debug)]
struct Args {
    host: IpAddr,
    port: u16,
    rest_port: RestPort,
    backend: Option<SocketAddr>,
    backend_rest: Option<SocketAddr>,
    lease: Duration,
    admission_wait: Option<Duration>,
    log: String,
    exit_on_stdin_eof: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        host: IpAddr::from([127, 0, 0, 1]),
        port: 9010,
        rest_port: RestPort::Default,
        backend: None,
        backend_rest: None,
        lease: Duration::from_secs(10),
        admission_wait: Some(spanner_queues_emulator::front::DEFAULT_ADMISSION_WAIT),
        log: std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_LOG.to_owned()),
        exit_on_stdin_eof: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--host" => {
                let v = value("--host")?;
                args.host = v.parse().map_err(|_| format!("invalid --host {v}"))?;
            }
            "--port" => args.port = parse_port(&value("--port")?)?,
            "--rest-port" => args.rest_port = RestPort::Port(parse_port(&value("--rest-port")?)?),
            "--no-rest-port" => args.rest_port = RestPort::Off,
            "--backend" => args.backend = Some(parse_addr(&value("--backend")?)?),
            "--backend-rest" => args.backend_rest = Some(parse_addr(&value("--backend-rest")?)?),
            "--lease-duration" => {
                let v = value("--lease-duration")?;
                args.lease = parse_duration(&v)?;
            }
            "--admission-wait" => {
                let v = value("--admission-wait")?;
                args.admission_wait = if v == "off" {
                    None
                } else {
                    Some(parse_duration(&v)?)
                };
            }
            "--log" => args.log = format!("{},{}", value("--log")?, QUIET_DEPENDENCIES),
            "--exit-on-stdin-eof" => args.exit_on_stdin_eof = true,
            "-h" | "--help" => return Err(String::new()),
            "--build-id" => return Err(BUILD_ID_REQUEST.to_owned()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

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

fn parse_port(v: &str) -> Result<u16, String> {
    v.parse().map_err(|_| format!("invalid port {v}"))
}

fn parse_addr(v: &str) -> Result<SocketAddr, String> {
    v.to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("invalid address {v} (expected HOST:PORT)"))
}

fn parse_duration(v: &str) -> Result<Duration, String> {
    let (number, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let number: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {v}"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" | "" => number,
        "m" => number * 60.0,
        _ => return Err(format!("invalid duration {v} (use ms, s or m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("invalid duration {v}"))
}

fn main() -> ExitCode {
    // The REST gateway starts this binary as its placeholder "gRPC binary".
    if run_placeholder_if_requested() {
        return ExitCode::SUCCESS;
    }
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) if message.is_empty() => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) if message == BUILD_ID_REQUEST => {
            println!("{}", spanner_queues_emulator::BUILD_ID);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&args.log)
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
    let rest = args
        .rest_port
        .resolve(args.port)
        .map(|port| SocketAddr::new(args.host, port));
    options.listen = std::iter::once(SocketAddr::new(args.host, args.port))
        .chain(rest)
        .collect();
    options.existing_backend = args.backend;
    options.existing_rest = args.backend_rest;
    options.lease_duration = args.lease;
    options.admission_wait = args.admission_wait;
    if let Ok(exe) = std::env::current_exe() {
        options.placeholder = Placeholder::Executable(exe);
    }
    let emulator = LocalEmulator::start(options).await.map_err(|e| {
        let message = spanner_queues_emulator::error_chain(&e);
        match (&e, rest) {
            (LocalEmulatorError::Front(FrontError::Bind { addr, .. }), Some(rest))
                if *addr == rest && args.rest_port == RestPort::Default =>
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

    #[test]
    fn rest_port_defaults_to_9020_only_next_to_9010() {
        assert_eq!(RestPort::Default.resolve(9010), Some(9020));
        assert_eq!(RestPort::Default.resolve(9011), None);
        assert_eq!(RestPort::Port(7000).resolve(9011), Some(7000));
        assert_eq!(RestPort::Off.resolve(9010), None);
    }
}
