//! The exporter's own build and process metrics, named as every Prometheus
//! exporter names them (client_golang's process collector, exporter-toolkit's
//! `<exporter>_build_info`), so the panels and alerts operators already have
//! for their other exporters work on this one.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use crate::text::families::{counter_family, gauge_family, Num};

/// Writes `nats_delivery_exporter_build_info{version,revision,rustc_version} 1`.
#[derive(Debug, Default)]
pub struct BuildInfo;

/// The version, the commit and the compiler the binary was built from
/// (`unknown` where the build had no git checkout).
pub(crate) fn build_labels() -> [(&'static str, &'static str); 3] {
    [
        ("version", env!("CARGO_PKG_VERSION")),
        ("revision", env!("NATS_DELIVERY_REVISION")),
        ("rustc_version", env!("NATS_DELIVERY_RUSTC_VERSION")),
    ]
}

impl Collector for BuildInfo {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        gauge_family(
            &mut enc,
            "nats_delivery_exporter_build_info",
            "A metric with a constant '1' value labeled by version, revision and rustc_version \
             from which nats-delivery-exporter was built.",
            [(build_labels().to_vec(), Num::U(1))],
        )
    }
}

/// Writes the `process_*` families of the exporter's own process, read from
/// `/proc/self` at each scrape (absent on systems without `/proc`).
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One reading of the process, in the units of client_golang's collector.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProcessStats {
    /// User and system CPU time, in seconds.
    pub(crate) cpu_seconds: f64,
    /// Virtual memory size, in bytes.
    pub(crate) virtual_memory_bytes: u64,
    /// Resident set size, in bytes.
    pub(crate) resident_memory_bytes: u64,
    /// Start time since the Unix epoch, in seconds.
    pub(crate) start_time_seconds: f64,
    /// Open file descriptors.
    pub(crate) open_fds: u64,
    /// The soft limit of open file descriptors (absent when unlimited).
    pub(crate) max_fds: Option<u64>,
}

/// Why `/proc` could not be read as expected.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcessStatsError {
    /// A file under `/proc` could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// A file's content was not as the kernel writes it.
    #[error("unexpected content in {0}")]
    Format(&'static str),
}

impl ProcessStats {
    /// Reads the current process.
    pub(crate) fn read_self() -> Result<ProcessStats, ProcessStatsError> {
        let read = |path: &'static str| {
            std::fs::read_to_string(path).map_err(|source| ProcessStatsError::Read { path, source })
        };
        let stat = parse_stat(&read("/proc/self/stat")?)?;
        let boot_time = parse_boot_time(&read("/proc/stat")?)?;
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .map_err(|source| ProcessStatsError::Read {
                path: "/proc/self/fd",
                source,
            })?
            .count() as u64;
        let ticks = clock_ticks_per_second() as f64;
        Ok(ProcessStats {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
            virtual_memory_bytes: stat.vsize,
            resident_memory_bytes: stat.rss_pages.saturating_mul(page_size()),
            start_time_seconds: boot_time as f64 + stat.start_ticks as f64 / ticks,
            open_fds,
            max_fds: parse_max_open_files(&read("/proc/self/limits")?)?,
        })
    }
}

/// The fields of `/proc/<pid>/stat` the collector uses.
#[derive(Debug, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    start_ticks: u64,
    vsize: u64,
    rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so the fields are counted from its last `)`.
fn parse_stat(text: &str) -> Result<Stat, ProcessStatsError> {
    const PATH: &str = "/proc/self/stat";
    let after = text
        .rfind(')')
        .map(|i| &text[i + 1..])
        .ok_or(ProcessStatsError::Format(PATH))?;
    // Field 3 (state) is the first after the name.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, ProcessStatsError> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or(ProcessStatsError::Format(PATH))
    };
    Ok(Stat {
        utime: field(14)?,
        stime: field(15)?,
        start_ticks: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// The boot time (`btime`) of `/proc/stat`, in seconds since the epoch.
fn parse_boot_time(text: &str) -> Result<u64, ProcessStatsError> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(ProcessStatsError::Format("/proc/stat"))
}

/// The soft limit of "Max open files" in `/proc/<pid>/limits`.
fn parse_max_open_files(text: &str) -> Result<Option<u64>, ProcessStatsError> {
    const PATH: &str = "/proc/self/limits";
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .ok_or(ProcessStatsError::Format(PATH))?;
    match line.split_whitespace().next() {
        Some("unlimited") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ProcessStatsError::Format(PATH)),
        None => Err(ProcessStatsError::Format(PATH)),
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn clock_ticks_per_second() -> u64 {
    // USER_HZ on every Linux architecture, as client_golang's procfs assumes.
    100
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn page_size() -> u64 {
    // SAFETY: as above.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn page_size() -> u64 {
    4096
}

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let stats = match ProcessStats::read_self() {
            Ok(stats) => stats,
            Err(e) => {
                tracing::debug!(error = %e, "process metrics not written");
                return Ok(());
            }
        };
        let none: [(&str, &str); 0] = [];
        counter_family(
            &mut enc,
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            [(none, stats.cpu_seconds)],
        )?;
        let gauges = [
            (
                "process_open_fds",
                "Number of open file descriptors.",
                Num::U(stats.open_fds),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                Num::U(stats.virtual_memory_bytes),
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                Num::U(stats.resident_memory_bytes),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                Num::F(stats.start_time_seconds),
            ),
        ];
        if let Some(max) = stats.max_fds {
            gauge_family(
                &mut enc,
                "process_max_fds",
                "Maximum number of open file descriptors.",
                [(none, Num::U(max))],
            )?;
        }
        for (name, help, value) in gauges {
            gauge_family(&mut enc, name, help, [(none, value)])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let text = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 120 0 0 0 \
                    250 75 0 0 20 0 3 0 98765 123456789 2048 18446744073709551615";
        assert_eq!(
            parse_stat(text).unwrap(),
            Stat {
                utime: 250,
                stime: 75,
                start_ticks: 98765,
                vsize: 123456789,
                rss_pages: 2048,
            }
        );
        assert!(parse_stat("4242 no parenthesis").is_err());
        assert!(parse_stat("4242 (x) S 1 2").is_err());
    }

    #[test]
    fn limits_and_boot_time() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_open_files(limits).unwrap(), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_open_files(unlimited).unwrap(), None);
        assert!(parse_max_open_files("Max processes 10 10\n").is_err());
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1764780000\nprocesses 9\n").unwrap(),
            1764780000
        );
        assert!(parse_boot_time("cpu 1\n").is_err());
    }
}
