//! What the process costs: CPU time and resident memory, read from `/proc/self` (Linux).

use std::time::Duration;

/// Cores available to this process.
#[must_use]
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// User + system CPU time this process has used so far (`/proc/self/stat`, fields 14 and 15).
/// Zero when it cannot be read.
#[must_use]
pub fn cpu_time() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    let ticks = |i: usize| {
        fields
            .get(i - 3)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let total = ticks(14) + ticks(15);
    // USER_HZ is 100 on every Linux this runs on (getconf CLK_TCK).
    Duration::from_millis(total * 10)
}

/// Memory figures of this process, in KiB (`/proc/self/status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rss {
    /// Resident set size now (`VmRSS`).
    pub rss_kib: u64,
    /// Peak resident set size (`VmHWM`).
    pub hwm_kib: u64,
}

/// Resident memory now and at its peak.
#[must_use]
pub fn rss() -> Rss {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    Rss {
        rss_kib: field("VmRSS:"),
        hwm_kib: field("VmHWM:"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc() {
        let before = cpu_time();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(cpu_time() >= before);
        let r = rss();
        assert!(r.rss_kib > 0 && r.hwm_kib >= r.rss_kib);
    }
}
