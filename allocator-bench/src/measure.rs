//! What the workloads report: wall time, minor faults and peak RSS from `getrusage`, current
//! RSS from `/proc/self/statm`, huge-backed bytes from `/proc/self/smaps_rollup`, THP counters
//! from `/proc/vmstat`, the machine's THP setting, and the global allocator's name and (under
//! hugealloc) its statistics. Figures the kernel does not provide read as `None`, never panic.

use std::time::{Duration, Instant};

use crate::global;
fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::getrusage(who, &mut r) };
    r
}

/// Minor page faults of the process so far.
pub fn minor_faults() -> u64 {
    rusage(libc::RUSAGE_SELF).ru_minflt as u64
}

/// Minor page faults of the calling thread so far.
pub fn thread_minor_faults() -> u64 {
    rusage(libc::RUSAGE_THREAD).ru_minflt as u64
}

/// Peak resident set size in KiB.
pub fn peak_rss_kib() -> u64 {
    rusage(libc::RUSAGE_SELF).ru_maxrss as u64
}

/// Current resident set size in KiB.
pub fn rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    Some(pages * page / 1024)
}

/// `AnonHugePages` of the whole process in KiB (bytes actually backed by PMD huge pages).
pub fn anon_huge_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    kib_field(&s, "AnonHugePages:")
}

fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A counter of `/proc/vmstat` (system-wide; other processes add to it).
pub fn vmstat(name: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/vmstat").ok()?;
    s.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

/// The active word of a `/sys/kernel/mm/transparent_hugepage/` file, e.g. `madvise`.
pub fn thp_setting(file: &str) -> String {
    std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{file}"))
        .ok()
        .and_then(|s| {
            let open = s.find('[')?;
            let close = s[open..].find(']')? + open;
            Some(s[open + 1..close].to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// A snapshot of the counters a phase is measured by.
#[derive(Clone, Copy)]
pub struct Mark {
    at: Instant,
    minflt: u64,
    thread_minflt: u64,
    thp_fault_alloc: Option<u64>,
}

/// What happened between a `Mark` and now.
#[derive(Clone, Copy, Debug)]
pub struct Delta {
    pub wall: Duration,
    pub minflt: u64,
    /// Minor faults of the thread that took the first mark (meaningful when the same thread
    /// takes both).
    pub thread_minflt: u64,
    /// System-wide huge page faults (other processes may add a few).
    pub thp_fault_alloc: Option<u64>,
}

impl Mark {
    pub fn now() -> Mark {
        Mark {
            at: Instant::now(),
            minflt: minor_faults(),
            thread_minflt: thread_minor_faults(),
            thp_fault_alloc: vmstat("thp_fault_alloc"),
        }
    }

    /// From this mark to now.
    pub fn delta(&self) -> Delta {
        self.delta_to(&Mark::now())
    }

    /// From this mark to a later one.
    pub fn delta_to(&self, later: &Mark) -> Delta {
        Delta {
            wall: later.at.duration_since(self.at),
            minflt: later.minflt.saturating_sub(self.minflt),
            thread_minflt: later.thread_minflt.saturating_sub(self.thread_minflt),
            thp_fault_alloc: match (later.thp_fault_alloc, self.thp_fault_alloc) {
                (Some(b), Some(a)) => Some(b.saturating_sub(a)),
                _ => None,
            },
        }
    }
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

/// A KiB figure as MiB with one decimal, or `n/a`.
pub fn mib(kib: Option<u64>) -> String {
    kib.map_or_else(
        || "n/a".to_string(),
        |k| format!("{:.1}", k as f64 / 1024.0),
    )
}

/// The median of some durations (the lower middle one for an even count).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() - 1) / 2]
}

/// Prints the header every subcommand starts with: allocator, its THP policy, the machine's
/// THP setting.
pub fn print_header(subcommand: &str) {
    println!("subcommand: {subcommand}");
    println!("allocator: {}", global::allocator());
    if global::global() == global::Global::System {
        if let Some(p) = global::malloc_provider() {
            println!("malloc_provider: {p}");
        }
    }
    if let Some(p) = global::hugealloc_policy() {
        println!("hugealloc_thp_policy: {p}");
    }
    for var in [
        "HUGEALLOC_CONF",
        "_RJEM_MALLOC_CONF",
        "MALLOC_CONF",
        "LD_PRELOAD",
    ] {
        if let Ok(v) = std::env::var(var) {
            println!("env {var}={v}");
        }
    }
    println!(
        "system_thp: enabled={} defrag={}",
        thp_setting("enabled"),
        thp_setting("defrag")
    );
}

/// Prints the process-wide figures every subcommand ends with, then hugealloc's statistics
/// when it is the global allocator.
pub fn print_footer() {
    println!("peak_rss_mib: {:.1}", peak_rss_kib() as f64 / 1024.0);
    println!("rss_mib: {}", mib(rss_kib()));
    println!("anon_huge_mib: {}", mib(anon_huge_kib()));
    println!("minor_faults_total: {}", minor_faults());
    if let Some(stats) = global::hugealloc_stats() {
        println!("hugealloc stats (MiB):");
        for (name, value, doc) in stats.fields() {
            println!(
                "  {name:>15}: {:>10.1}   {doc}",
                value as f64 / (1u64 << 20) as f64
            );
        }
    }
}

/// The `resident` figure of hugealloc's statistics in MiB, or `-` under another allocator.
pub fn allocator_resident_mib() -> String {
    global::hugealloc_stats().map_or_else(
        || "-".to_string(),
        |s| format!("{:.1}", s.resident as f64 / (1u64 << 20) as f64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_parse() {
        let t = "Rss:  100 kB\nAnonHugePages:    2048 kB\n";
        assert_eq!(kib_field(t, "AnonHugePages:"), Some(2048));
        assert_eq!(kib_field(t, "Missing:"), None);
    }

    #[test]
    fn median_of_odd_and_even() {
        let d = Duration::from_millis;
        assert_eq!(median(vec![d(3), d(1), d(2)]), d(2));
        assert_eq!(median(vec![d(4), d(1), d(3), d(2)]), d(2));
    }

    #[test]
    fn readers_do_not_panic() {
        let _ = (rss_kib(), anon_huge_kib(), vmstat("thp_fault_alloc"));
        assert!(minor_faults() > 0);
        assert!(!thp_setting("enabled").is_empty());
    }
}
