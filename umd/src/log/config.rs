//! Logging configuration from the environment (read once, at initialisation; everything but
//! the queue and ring sizes can be changed later through the C ABI). A bad value never fails
//! the driver: the default is used and a WARN says which variable was ignored and why.

use super::filter::Filter;
use super::format::Format;
use super::rotate::{default_dir, FileConfig};
use std::path::PathBuf;
use std::time::Duration;
use tracing_subscriber::filter::LevelFilter;

/// What a caller does when the queue is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Wait for room up to this long, then drop (counted): `UMD_LOG_OVERFLOW=block`.
    Block(Duration),
    /// Drop at once (counted). The default: logging never makes the driver wait.
    Drop,
}

/// Everything the pipeline needs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Console (stderr) filter.
    pub console: Filter,
    /// File filter.
    pub file: Filter,
    /// Console format.
    pub console_format: Format,
    /// File format.
    pub file_format: Format,
    /// File sink.
    pub file_cfg: FileConfig,
    /// The directory was not given (UMD_LOG_DIR unset): fall back to /tmp/aigpu-<uid> when the
    /// default cannot be created.
    pub dir_is_default: bool,
    /// Queue capacity (records).
    pub queue: usize,
    /// Full-queue policy.
    pub overflow: Overflow,
    /// Periodic flush interval.
    pub flush_interval: Duration,
    /// How long an ERROR waits for its record to reach the file.
    pub error_flush: Duration,
    /// How often a failed file sink is retried.
    pub retry: Duration,
    /// Emergency ring records.
    pub ring: usize,
    /// Runs (processes) whose files are kept in the directory (0: keep everything).
    pub max_runs: u32,
    /// Install the fatal-signal handlers.
    pub signals: bool,
    /// The TSC may stand in for CLOCK_MONOTONIC where it is safe (`clock.rs`).
    pub tsc: bool,
    /// Variables that were ignored, to be logged once the pipeline runs.
    pub warnings: Vec<Warning>,
}

/// A variable that was ignored, and why (logged once at WARN with `variable=<name>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The variable's name.
    pub variable: String,
    /// The whole sentence.
    pub text: String,
}

/// Every environment variable libumd reads (docs/logging.md, docs/libumd.md). A set variable
/// of one of its families (`UMD_LOG*`, `UMD_SIM*`, `UMD_POOL*`, `UMD_BACK*`) that is not
/// here is a typo and is said once; `umd/tests/env_names.rs` keeps this list equal to the names
/// the sources read.
pub const VARIABLES: &[&str] = &[
    "UMD_BACKEND",
    "UMD_LOG",
    "UMD_LOG_BLOCK_MS",
    "UMD_LOG_CONSOLE",
    "UMD_LOG_CONSOLE_FORMAT",
    "UMD_LOG_DIR",
    "UMD_LOG_ERROR_FLUSH_MS",
    "UMD_LOG_FILE",
    "UMD_LOG_FILE_FORMAT",
    "UMD_LOG_FLUSH_MS",
    "UMD_LOG_FORMAT",
    "UMD_LOG_MAX_BYTES",
    "UMD_LOG_MAX_FILES",
    "UMD_LOG_MAX_RUNS",
    "UMD_LOG_OVERFLOW",
    "UMD_LOG_QUEUE",
    "UMD_LOG_RETRY_MS",
    "UMD_LOG_RING",
    "UMD_LOG_SIGNALS",
    "UMD_LOG_TSC",
    "UMD_POOL",
    "UMD_POOL_HISTORY",
    "UMD_POOL_RELEASE_THRESHOLD",
    "UMD_SIM_DEVICES",
    "UMD_SIM_DIR",
    "UMD_SIM_HANG_DEBUG",
    "UMD_SIM_JOB_TIMEOUT_MS",
    "UMD_SIM_MEM_MIB",
    "UMD_SIM_PUBLISH",
    "UMD_SIM_UAPI",
];

pub const FAMILIES: &[&str] = &["UMD_LOG", "UMD_SIM", "UMD_POOL", "UMD_BACK"];

/// Set variables that look like libumd's but are not: (name, the closest real one).
pub fn unknown_variables(names: impl Iterator<Item = String>) -> Vec<(String, &'static str)> {
    let mut v: Vec<(String, &'static str)> = names
        .filter(|n| FAMILIES.iter().any(|f| n.starts_with(f)) && !VARIABLES.contains(&n.as_str()))
        .map(|n| {
            let closest = VARIABLES
                .iter()
                .copied()
                .min_by_key(|k| strsim::levenshtein(k, &n))
                .unwrap_or("UMD_LOG");
            (n, closest)
        })
        .collect();
    v.sort();
    v
}

/// Default file size limit (128 MB; docs/logging.md, "Sinks and files").
pub(crate) const DEFAULT_MAX_BYTES: u64 = 128 << 20;
/// Default number of files kept.
pub(crate) const DEFAULT_MAX_FILES: u32 = 5;
/// Default queue capacity.
pub(crate) const DEFAULT_QUEUE: usize = 16_384;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `123`, `64k`, `128M`, `1G` (binary multiples).
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let mul = match s[i..].to_ascii_lowercase().as_str() {
                "k" | "kb" | "kib" => 1 << 10,
                "m" | "mb" | "mib" => 1 << 20,
                "g" | "gb" | "gib" => 1 << 30,
                _ => return None,
            };
            (&s[..i], mul)
        }
        None => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

impl Config {
    /// The configuration from `UMD_LOG*` variables (see docs/logging.md for the list).
    pub fn from_env() -> Config {
        let mut warnings: Vec<Warning> = Vec::new();
        let mut warn = |variable: &str, text: String| {
            warnings.push(Warning {
                variable: variable.to_string(),
                text,
            })
        };
        for (name, closest) in
            unknown_variables(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()))
        {
            warn(
                &name,
                format!("{name} is not a variable libumd reads and is ignored (did you mean {closest}? the variables are listed in docs/libumd.md)"),
            );
        }
        // A filter variable: None when unset or invalid (then with a warning). A bad filter
        // leaves that sink at its default: a typo never turns logging off.
        let mut filter = |name: &str, default: &str| -> Option<Filter> {
            let v = var(name)?;
            match Filter::parse(&v) {
                Ok(f) => Some(f),
                Err(e) => {
                    warn(
                        name,
                        format!("{name} ignored: {e}; using the default ({default})"),
                    );
                    None
                }
            }
        };
        let both = filter("UMD_LOG", "console warn, file info");
        let console = filter("UMD_LOG_CONSOLE", "warn")
            .or_else(|| both.clone())
            .unwrap_or_else(|| Filter::level(LevelFilter::WARN));
        let file = filter("UMD_LOG_FILE", "info")
            .or(both)
            .unwrap_or_else(|| Filter::level(LevelFilter::INFO));

        let mut num = |name: &str, default: u64, min: u64, max: u64| -> u64 {
            match var(name) {
                None => default,
                Some(v) => match parse_bytes(&v) {
                    Some(n) if (min..=max).contains(&n) => n,
                    _ => {
                        warn(name, format!(
                            "{name}='{v}' ignored: expected a number from {min} to {max}; using {default}"
                        ));
                        default
                    }
                },
            }
        };
        let max_bytes = num("UMD_LOG_MAX_BYTES", DEFAULT_MAX_BYTES, 4096, u64::MAX / 2);
        let max_files = num("UMD_LOG_MAX_FILES", DEFAULT_MAX_FILES as u64, 1, 1000) as u32;
        let max_runs = num("UMD_LOG_MAX_RUNS", 10, 0, 100_000) as u32;
        let queue = num("UMD_LOG_QUEUE", DEFAULT_QUEUE as u64, 1, 1 << 22) as usize;
        let block_ms = num("UMD_LOG_BLOCK_MS", 100, 0, 60_000);
        let flush_ms = num("UMD_LOG_FLUSH_MS", 1000, 1, 3_600_000);
        // 0: an ERROR never waits for the disk; the emergency ring holds it at once and the
        // writer, woken by it, writes it to the file within about a millisecond.
        let error_flush_ms = num("UMD_LOG_ERROR_FLUSH_MS", 0, 0, 60_000);
        let retry_ms = num("UMD_LOG_RETRY_MS", 5000, 1, 3_600_000);
        let ring = num(
            "UMD_LOG_RING",
            super::ring::DEFAULT_RECORDS as u64,
            16,
            65_536,
        ) as usize;

        let mut fmt = |name: &str| -> Format {
            match var(name) {
                None => Format::Text,
                Some(v) => Format::parse(&v).unwrap_or_else(|| {
                    warn(
                        name,
                        format!("{name}='{v}' ignored: expected text or json; using text"),
                    );
                    Format::Text
                }),
            }
        };
        let both_fmt = fmt("UMD_LOG_FORMAT");
        let console_format = match var("UMD_LOG_CONSOLE_FORMAT") {
            Some(_) => fmt("UMD_LOG_CONSOLE_FORMAT"),
            None => both_fmt,
        };
        let file_format = match var("UMD_LOG_FILE_FORMAT") {
            Some(_) => fmt("UMD_LOG_FILE_FORMAT"),
            None => both_fmt,
        };

        let overflow = match var("UMD_LOG_OVERFLOW").as_deref().map(str::trim) {
            None | Some("drop") => Overflow::Drop,
            Some("block") => Overflow::Block(Duration::from_millis(block_ms)),
            Some(v) => {
                warn(
                    "UMD_LOG_OVERFLOW",
                    format!("UMD_LOG_OVERFLOW='{v}' ignored: expected drop or block; using drop"),
                );
                Overflow::Drop
            }
        };
        // On/off switches, both on by default: one spelling rule for all of them.
        let mut switch = |name: &str, what: &str| match var(name).as_deref().map(str::trim) {
            None | Some("1" | "on" | "yes") => true,
            Some("0" | "off" | "no") => false,
            Some(v) => {
                warn(
                    name,
                    format!("{name}='{v}' ignored: expected 0 or 1; {what} stays on"),
                );
                true
            }
        };
        let signals = switch("UMD_LOG_SIGNALS", "the fatal-signal hook");
        let tsc = switch("UMD_LOG_TSC", "the TSC time stamp");
        let (dir, dir_is_default) = match var("UMD_LOG_DIR") {
            Some(d) => (PathBuf::from(d), false),
            None => (default_dir(), true),
        };
        Config {
            console,
            file,
            console_format,
            file_format,
            file_cfg: FileConfig {
                dir,
                // SAFETY: getpid has no preconditions.
                stem: format!("umd-{}", unsafe { libc::getpid() }),
                max_bytes,
                max_files,
            },
            dir_is_default,
            queue,
            overflow,
            flush_interval: Duration::from_millis(flush_ms),
            error_flush: Duration::from_millis(error_flush_ms),
            retry: Duration::from_millis(retry_ms),
            ring,
            max_runs,
            signals,
            tsc,
            warnings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn bytes() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("64k"), Some(65536));
        assert_eq!(parse_bytes("128MiB"), Some(128 << 20));
        assert_eq!(parse_bytes("1 G"), Some(1 << 30));
        assert_eq!(parse_bytes("12x"), None);
    }
}
