//! Simulator settings, read from the environment when a simulated device is first opened.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `UMD_SIM_DEVICES` | number of simulated GPUs (1..=8) | 1 |
//! | `UMD_SIM_MEM_MIB` | memory per GPU in MiB (16..=65536) | 1024 |
//! | `UMD_SIM_JOB_TIMEOUT_MS` | job timeout before a hang is declared (10..=600000) | 2000 |
//! | `UMD_SIM_HANG_DEBUG` | 1: the debug HANG packet is allowed (as the KMD's `hang_debug` parameter) | 0 |

/// Parsed simulator settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Simulated GPUs.
    pub devices: u32,
    /// Bytes of memory per GPU.
    pub mem_bytes: u64,
    /// Job timeout.
    pub job_timeout_ms: u64,
    /// HANG packets allowed.
    pub hang_debug: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            devices: 1,
            mem_bytes: 1024 << 20,
            job_timeout_ms: 2000,
            hang_debug: false,
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
            hang_debug: num("UMD_SIM_HANG_DEBUG", 0, 1, 0)? == 1,
        })
    }
}
