//! Pool settings from the environment, read when a device's pool is created (first context).
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `UMD_POOL` | `on`: cache and sub-allocate; `off`: one kernel object per buffer, released at free (no caching: the raw pattern, for debugging) | `on` |
//! | `UMD_POOL_HISTORY` | events kept in the allocation history ring (0: off; 1..=1000000) | 0 |
//! | `UMD_POOL_RELEASE_THRESHOLD` | cached bytes kept at most (`512M`, `1G`, `1048576`; `none`: no limit) | none |
//!
//! A value that does not parse fails the call that creates the pool with
//! `UMD_ERR_INIT_BAD_CONFIG` naming the variable.

use crate::error::{umdResult, UmdError, UmdResult};

/// Parsed settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Caching on.
    pub enabled: bool,
    /// History ring capacity (0: off).
    pub history: usize,
    /// Release threshold in bytes (u64::MAX: none).
    pub release_threshold: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            enabled: true,
            history: 0,
            release_threshold: u64::MAX,
        }
    }
}

fn bad(var: &str, value: &str, want: &str) -> UmdError {
    UmdError::new(
        umdResult::UMD_ERR_INIT_BAD_CONFIG,
        format!("{var}={value:?} is not {want}."),
    )
}

/// Parses "512", "64K", "512M", "2G", "1GiB", "none".
pub fn parse_bytes(s: &str) -> Option<u64> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("none") || t.eq_ignore_ascii_case("unlimited") {
        return Some(u64::MAX);
    }
    let lower = t.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &lower[digits.len()..];
    let mult: u64 = match unit {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(mult)
}

impl Config {
    /// Reads the variables through `get` (the environment in production, a map in tests).
    pub fn from(get: impl Fn(&str) -> Option<String>) -> UmdResult<Config> {
        let mut c = Config::default();
        if let Some(v) = get("UMD_POOL") {
            c.enabled = match v.trim().to_ascii_lowercase().as_str() {
                "" | "on" | "1" | "true" => true,
                "off" | "0" | "false" => false,
                _ => return Err(bad("UMD_POOL", &v, "on or off")),
            };
        }
        if let Some(v) = get("UMD_POOL_HISTORY") {
            c.history = match v.trim().parse::<usize>() {
                Ok(n) if n <= 1_000_000 => n,
                _ => {
                    return Err(bad(
                        "UMD_POOL_HISTORY",
                        &v,
                        "a number of events in 0..=1000000",
                    ))
                }
            };
        }
        if let Some(v) = get("UMD_POOL_RELEASE_THRESHOLD") {
            c.release_threshold = parse_bytes(&v).ok_or_else(|| {
                bad(
                    "UMD_POOL_RELEASE_THRESHOLD",
                    &v,
                    "a byte count such as 536870912, 512M or 2G, or none",
                )
            })?;
        }
        Ok(c)
    }

    /// Reads the process environment.
    pub fn from_env() -> UmdResult<Config> {
        Config::from(|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> UmdResult<Config> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from(|k| m.get(k).cloned())
    }

    #[test]
    fn parses_and_names_the_bad_variable() {
        assert_eq!(cfg(&[]).unwrap(), Config::default());
        let c = cfg(&[
            ("UMD_POOL", "off"),
            ("UMD_POOL_HISTORY", "100"),
            ("UMD_POOL_RELEASE_THRESHOLD", "512M"),
        ])
        .unwrap();
        assert_eq!(
            c,
            Config {
                enabled: false,
                history: 100,
                release_threshold: 512 << 20
            }
        );
        for (k, v) in [
            ("UMD_POOL", "maybe"),
            ("UMD_POOL_HISTORY", "-1"),
            ("UMD_POOL_RELEASE_THRESHOLD", "12 parsecs"),
        ] {
            let e = cfg(&[(k, v)]).unwrap_err();
            assert_eq!(e.code, umdResult::UMD_ERR_INIT_BAD_CONFIG);
            assert!(e.message.starts_with(&format!("{k}=")), "{}", e.message);
        }
        assert_eq!(parse_bytes("1GiB"), Some(1 << 30));
        assert_eq!(parse_bytes("none"), Some(u64::MAX));
        assert_eq!(parse_bytes("99999999999T"), None);
    }
}
