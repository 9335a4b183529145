//! Simulator settings, read from the environment when a simulated device is first opened.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `UMD_SIM_DEVICES` | number of simulated GPUs (1..=8) | 1 |
//! | `UMD_SIM_MEM_MIB` | memory per GPU in MiB (16..=65536) | 1024 |
//! | `UMD_SIM_JOB_TIMEOUT_MS` | job timeout before a hang is declared (10..=600000) | 2000 |
//! | `UMD_SIM_HANG_DEBUG` | 1: the debug HANG packet is allowed (as the KMD's `hang_debug` parameter) | 0 |
//! | `UMD_SIM_PUBLISH` | 1: each device publishes its debugfs views for `umd-smi` (`publish.rs`); 0: nothing is written | 1 |
//! | `UMD_SIM_DIR` | where the per-user directory `aigpu-sim-<uid>` of the published views is (an absolute path) | `/tmp` |
//! | `UMD_SIM_UAPI` | test hook: the UAPI version `MAJOR.MINOR` the simulated driver reports (libumd's version refusal; aigpu.ko's equivalent is the root-only debugfs file `inject_uapi_version`) | this libumd's |

/// Parsed simulator settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Simulated GPUs.
    pub devices: u32,
    /// Bytes of memory per GPU.
    pub mem_bytes: u64,
    /// Job timeout.
    pub job_timeout_ms: u64,
    /// Where it came from: the default, or `UMD_SIM_JOB_TIMEOUT_MS` (the job-timeout record's
    /// `timeout_source`).
    pub job_timeout_source: rules::report::TimeoutSource,
    /// HANG packets allowed.
    pub hang_debug: bool,
    /// The UAPI version reported by QUERY (major, minor).
    pub uapi: (u32, u32),
    /// Publish the devices' views for tools outside the process.
    pub publish: bool,
    /// The directory holding the per-user one (`None`: `/tmp`).
    pub publish_dir: Option<std::path::PathBuf>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            devices: 1,
            mem_bytes: 1024 << 20,
            job_timeout_ms: 2000,
            job_timeout_source: rules::report::TimeoutSource::Default,
            hang_debug: false,
            uapi: (uapi::UAPI_MAJOR, uapi::UAPI_MINOR),
            publish: true,
            publish_dir: None,
        }
    }
}

fn num(name: &str, lo: u64, hi: u64, default: u64) -> Result<u64, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(s) => match s.trim().parse::<u64>() {
            Ok(v) if (lo..=hi).contains(&v) => Ok(v),
            _ => Err(format!("{name}={s:?} is not a whole number in {lo}..={hi}")),
        },
    }
}

impl SimConfig {
    /// Reads the `UMD_SIM_*` variables; an invalid value is an error naming it.
    pub fn from_env() -> Result<SimConfig, String> {
        Ok(SimConfig {
            devices: num("UMD_SIM_DEVICES", 1, 8, 1)? as u32,
            mem_bytes: num("UMD_SIM_MEM_MIB", 16, 65536, 1024)? << 20,
            job_timeout_ms: num("UMD_SIM_JOB_TIMEOUT_MS", 10, 600_000, 2000)?,
            job_timeout_source: if std::env::var_os("UMD_SIM_JOB_TIMEOUT_MS").is_some() {
                rules::report::TimeoutSource::Environment
            } else {
                rules::report::TimeoutSource::Default
            },
            hang_debug: num("UMD_SIM_HANG_DEBUG", 0, 1, 0)? == 1,
            uapi: version("UMD_SIM_UAPI")?,
            publish: num("UMD_SIM_PUBLISH", 0, 1, 1)? == 1,
            publish_dir: absolute("UMD_SIM_DIR")?,
        })
    }
}

/// `MAJOR.MINOR` (each 0..=65535), default this libumd's UAPI version.
fn version(name: &str) -> Result<(u32, u32), String> {
    let Ok(s) = std::env::var(name) else {
        return Ok((uapi::UAPI_MAJOR, uapi::UAPI_MINOR));
    };
    let part = |p: &str| p.trim().parse::<u32>().ok().filter(|&v| v <= 65535);
    match s.split_once('.').map(|(a, b)| (part(a), part(b))) {
        Some((Some(a), Some(b))) => Ok((a, b)),
        _ => Err(format!(
            "{name}={s:?} is not a version MAJOR.MINOR (two whole numbers in 0..=65535)"
        )),
    }
}

/// An absolute directory path; unset or empty: `None`.
fn absolute(name: &str) -> Result<Option<std::path::PathBuf>, String> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => {
            let p = std::path::PathBuf::from(&v);
            if p.is_absolute() {
                Ok(Some(p))
            } else {
                Err(format!("{name}={v:?} is not an absolute path"))
            }
        }
    }
}
