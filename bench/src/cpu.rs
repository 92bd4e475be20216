//! CPU time and peak memory of this process, CPU time of others and of the machine (Linux).

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

/// User + system CPU seconds used so far by the processes `pids` (all their threads; from
/// `/proc/PID/stat`). A process that has ended counts 0.
pub(crate) fn pids_cpu_seconds(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // The fields after the parenthesised command name: utime and stime are the 14th
            // and 15th of the line, the 12th and 13th after the name.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / CLOCK_TICKS)
        })
        .sum()
}

/// The command name of process `pid` (`/proc/PID/comm`), if it runs.
pub(crate) fn process_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_owned())
}

/// `/proc` counts CPU time in clock ticks of `USER_HZ`, 100 per second on Linux (the kernel's
/// ABI, whatever its internal tick rate).
const CLOCK_TICKS: f64 = 100.0;

/// The whole machine's CPU time so far, in seconds summed over every core: (busy, total),
/// from the first line of `/proc/stat` (busy = total - idle - iowait).
pub(crate) fn machine_cpu_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user and nice).
    let total: f64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0.0);
    Some(((total - idle) / CLOCK_TICKS, total / CLOCK_TICKS))
}
