//! CPU time and peak memory of this process, from `/proc` (Linux).

use std::sync::OnceLock;
use std::time::Duration;

/// User + system CPU time of the whole process so far (zero where `/proc` is missing).
pub(crate) fn process_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may contain spaces), from field 3 (`state`) on:
    // utime is field 14, stime field 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    let total = ticks(11) + ticks(12);
    Duration::from_secs_f64(total as f64 / clock_ticks() as f64)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 when it cannot be read).
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|t| *t > 0)
            .unwrap_or(100)
    })
}

/// Peak resident set size of this process so far, in KiB (`VmHWM`), if known.
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
