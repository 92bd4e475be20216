//! CPU time and peak memory of this process (Linux).

use std::time::Duration;

/// User + system CPU time of the whole process so far (`CLOCK_PROCESS_CPUTIME_ID`).
pub(crate) fn process_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// Peak resident set size of this process so far, in KiB (`VmHWM`), if known.
pub(crate) fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
