//! Per-sink level filters in the `RUST_LOG` syntax (`warn,umd::mem=debug`).
//!
//! Parsing and matching are `tracing-subscriber`'s `filter::Targets` (the `RUST_LOG` subset
//! without span and field filters, which this logger does not support: a directive with `[` is
//! rejected). A directive `target=level` enables events whose target starts with `target` at
//! `level` and worse; the most specific (longest) matching target wins; a bare `level` is the
//! default for everything else; with no default, unmatched targets are off.

use std::str::FromStr;
use tracing::Level;
use tracing_subscriber::filter::{LevelFilter, Targets};

/// One sink's filter.
#[derive(Clone, Debug)]
pub struct Filter {
    targets: Targets,
    max: LevelFilter,
}

impl Filter {
    /// Parses a filter; the error says which directive is wrong and why. Every directive is
    /// checked on its own, so no form is silently taken for something else: a bare word must be
    /// a level (`verbose` is not, and `Targets` would take it for a target and turn everything
    /// else off), a `target=level` pair needs a target that some libumd module starts with
    /// ([`super::targets::known`]) and a level, and at most one bare default level is given.
    pub fn parse(spec: &str) -> Result<Filter, String> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Ok(Filter::from_targets(Targets::new()));
        }
        let bad = |d: &str, why: String| {
            Err(format!(
                "log filter '{spec}': directive '{d}' {why} (expected e.g. 'warn,umd::memory=debug'; levels: {LEVELS})"
            ))
        };
        let mut cleaned: Vec<String> = Vec::new();
        let mut default_seen: Option<&str> = None;
        for d in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if d.contains(['[', '{', ']', '}']) {
                return bad(
                    d,
                    "is a span or field filter ([...]), which is not supported; use target=level pairs".into(),
                );
            }
            match d.split_once('=') {
                None => {
                    if parse_level(d).is_none() {
                        return bad(d, "is neither a level nor a target=level pair".into());
                    }
                    if let Some(first) = default_seen {
                        return bad(
                            d,
                            format!("is a second default level (after '{first}'); give one"),
                        );
                    }
                    default_seen = Some(d);
                    cleaned.push(d.to_ascii_lowercase());
                }
                Some((t, l)) => {
                    let (t, l) = (t.trim(), l.trim());
                    if t.is_empty() {
                        return bad(d, "has no target before '='".into());
                    }
                    if t.contains(|c: char| c.is_whitespace() || c == '=') || l.contains('=') {
                        return bad(d, "is not one target=level pair".into());
                    }
                    if parse_level(l).is_none() {
                        return bad(d, format!("has the unknown level '{l}'"));
                    }
                    if let Err(why) = check_target(t) {
                        return bad(d, why);
                    }
                    cleaned.push(format!("{t}={}", l.to_ascii_lowercase()));
                }
            }
        }
        Targets::from_str(&cleaned.join(","))
            .map(Filter::from_targets)
            .map_err(|e| format!("log filter '{spec}': {e} (expected e.g. 'warn,umd::memory=debug'; levels: {LEVELS})"))
    }

    /// A filter with only a default level.
    pub fn level(l: LevelFilter) -> Filter {
        Filter::from_targets(Targets::new().with_default(l))
    }

    fn from_targets(targets: Targets) -> Filter {
        let max = targets
            .iter()
            .map(|(_, l)| l)
            .chain(targets.default_level())
            .max()
            .unwrap_or(LevelFilter::OFF);
        Filter { targets, max }
    }

    /// Sets the level of `module` (or the default when `module` is `None` or empty), replacing
    /// any directive for exactly that module.
    pub fn with_module(&self, module: Option<&str>, level: LevelFilter) -> Filter {
        let t = self.targets.clone();
        match module.map(str::trim).filter(|m| !m.is_empty()) {
            None => Filter::from_targets(t.with_default(level)),
            Some(m) => Filter::from_targets(t.with_target(m, level)),
        }
    }

    /// True when an event of `level` from `target` passes.
    #[inline]
    pub fn enabled(&self, target: &str, level: &Level) -> bool {
        self.max >= *level && self.targets.would_enable(target, level)
    }

    /// The most verbose level any directive enables.
    pub fn max_level(&self) -> LevelFilter {
        self.max
    }
}

impl std::fmt::Display for Filter {
    /// The canonical form, parseable by [`Filter::parse`]: `target=level` pairs sorted by
    /// target, then the default level ("off" when there are no directives).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut v: Vec<(&str, LevelFilter)> = self.targets.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        let mut first = true;
        for (t, l) in v {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{t}={}", level_str(l))?;
        }
        if let Some(l) = self.targets.default_level() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            f.write_str(level_str(l))?;
        }
        if first {
            f.write_str("off")?;
        }
        Ok(())
    }
}

/// Checks a directive's target: a module path, and when it is libumd's own (`umd`, `umd::...`)
/// one that some module starts with ([`super::targets::known`]): a typo such as `umd::memroy`
/// would otherwise match nothing and leave the module off. A Rust program that links the crate
/// may log under its own targets (they go through the same subscriber), so those pass.
pub fn check_target(t: &str) -> Result<(), String> {
    let is_path = t
        .split("::")
        .all(|seg| !seg.is_empty() && seg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    if !is_path {
        return Err(format!(
            "names '{t}', which is not a target (a module path such as umd::memory)"
        ));
    }
    let ours = t == "umd" || t.starts_with("umd::");
    if ours && !super::targets::known(t) {
        return Err(format!(
            "names '{t}', which matches no libumd module (targets are module paths such as umd::memory, umd::submit, umd::backend::sim)"
        ));
    }
    Ok(())
}

/// The level names a filter accepts, for messages.
const LEVELS: &str = "off error warn info debug trace";

/// A level name (any case) or number 0..5, as in the `RUST_LOG` syntax.
/// (`LevelFilter::from_str` takes "" for ERROR, which would make `umd::memory=` mean error.)
fn parse_level(s: &str) -> Option<LevelFilter> {
    if s.is_empty() {
        return None;
    }
    LevelFilter::from_str(s).ok()
}

fn level_str(l: LevelFilter) -> &'static str {
    match l {
        LevelFilter::OFF => "off",
        LevelFilter::ERROR => "error",
        LevelFilter::WARN => "warn",
        LevelFilter::INFO => "info",
        LevelFilter::DEBUG => "debug",
        _ => "trace",
    }
}

/// `LevelFilter` from the C level number (`UMD_LOG_LEVEL_OFF` 0 .. `UMD_LOG_LEVEL_TRACE` 5).
pub fn level_from_i32(v: i32) -> Option<LevelFilter> {
    Some(match v {
        0 => LevelFilter::OFF,
        1 => LevelFilter::ERROR,
        2 => LevelFilter::WARN,
        3 => LevelFilter::INFO,
        4 => LevelFilter::DEBUG,
        5 => LevelFilter::TRACE,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_match_and_display() {
        let f = Filter::parse("warn, umd::mem=debug").unwrap();
        assert!(f.enabled("umd::mem", &Level::DEBUG));
        assert!(f.enabled("umd::mem::va", &Level::DEBUG));
        assert!(!f.enabled("umd::mem", &Level::TRACE));
        assert!(!f.enabled("umd::device", &Level::INFO));
        assert!(f.enabled("umd::device", &Level::WARN));
        assert_eq!(f.max_level(), LevelFilter::DEBUG);
        let g = Filter::parse(&f.to_string()).unwrap();
        assert_eq!(g.to_string(), f.to_string());
        let h = f.with_module(Some("umd::mem"), LevelFilter::ERROR);
        assert!(!h.enabled("umd::mem", &Level::WARN));
        assert_eq!(h.max_level(), LevelFilter::WARN);
        let d = h.with_module(None, LevelFilter::TRACE);
        assert!(d.enabled("x", &Level::TRACE));
        assert!(Filter::parse("umd=loud").is_err());
        for bad in [
            "verbose",
            "umd::memroy=debug",
            "umd::x=debug",
            "my-app=debug",
            "=debug",
            "umd::memory=",
            "debug,info",
            "umd::memory=debug=trace",
            "umd memory=debug",
            "umd::memory=debug]",
        ] {
            let e = Filter::parse(bad).expect_err(bad);
            assert!(e.contains("directive '"), "{bad}: {e}");
        }
        assert_eq!(
            Filter::parse("verbose").unwrap_err(),
            "log filter 'verbose': directive 'verbose' is neither a level nor a target=level pair (expected e.g. 'warn,umd::memory=debug'; levels: off error warn info debug trace)"
        );
        assert_eq!(
            Filter::parse(" WARN , umd::mem = DEBUG ,")
                .unwrap()
                .to_string(),
            "umd::mem=debug,warn"
        );
        assert!(Filter::parse("umd[{ctx}]=debug").is_err());
        assert_eq!(Filter::parse("").unwrap().to_string(), "off");
    }
}
