//! Console rate limit: a call site that fires in a loop (a forged handle passed 20,000 times, a
//! context destroyed with 100,000 leaked buffers) must not flood a terminal or a CI log, while
//! the file keeps every record.
//!
//! Per call site, at most [`BURST`] records reach the console in each [`WINDOW`]; the rest are
//! counted. When a window that suppressed records ends (the site's next record, the writer's
//! flush interval, or exit), one summary record says how many, from where, and which file has
//! them all. The summary is an ordinary WARN record of target `umd::log::limit` with typed
//! fields (`suppressed`, `site`, `site_module`), so `umd-log` reads it like any other, and it is
//! itself never limited.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use tracing::Metadata;

/// Records of one call site shown on the console per window.
pub(crate) const BURST: u32 = 5;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(1);
/// The summaries' target: exempt from the limit.
pub const TARGET: &str = "umd::log::limit";

struct Site {
    meta: &'static Metadata<'static>,
    start: Instant,
    shown: u32,
    suppressed: u64,
}

/// The per-call-site state (writer thread only).
#[derive(Default)]
pub struct ConsoleLimiter {
    sites: HashMap<usize, Site>,
}

/// A window that ended having suppressed records.
pub struct Suppressed {
    /// The call site.
    pub meta: &'static Metadata<'static>,
    /// How many of its records the console did not get.
    pub count: u64,
}

impl ConsoleLimiter {
    /// True when this record of `meta` may go to the console at `now`. A window that ended with
    /// suppressed records is returned in `ended` for its summary.
    pub fn admit(
        &mut self,
        meta: &'static Metadata<'static>,
        now: Instant,
        ended: &mut Vec<Suppressed>,
    ) -> bool {
        if meta.target() == TARGET {
            return true;
        }
        let key = meta as *const Metadata<'static> as usize;
        let s = self.sites.entry(key).or_insert(Site {
            meta,
            start: now,
            shown: 0,
            suppressed: 0,
        });
        if now.saturating_duration_since(s.start) >= WINDOW {
            if s.suppressed > 0 {
                ended.push(Suppressed {
                    meta: s.meta,
                    count: s.suppressed,
                });
            }
            s.start = now;
            s.shown = 0;
            s.suppressed = 0;
        }
        if s.shown < BURST {
            s.shown += 1;
            true
        } else {
            s.suppressed += 1;
            false
        }
    }

    /// Windows that ended by `now` (all of them when `all`, at exit or flush) with suppressed
    /// records; their counts restart.
    pub fn take_ended(&mut self, now: Instant, all: bool) -> Vec<Suppressed> {
        let mut v = Vec::new();
        for s in self.sites.values_mut() {
            if s.suppressed > 0 && (all || now.saturating_duration_since(s.start) >= WINDOW) {
                v.push(Suppressed {
                    meta: s.meta,
                    count: s.suppressed,
                });
                s.suppressed = 0;
                s.shown = 0;
                s.start = now;
            }
        }
        v
    }
}

/// Logs the summary of one suppressed window (a WARN of target [`TARGET`]).
pub fn say(s: &Suppressed, file: &str) {
    let site = format!(
        "{}:{}",
        s.meta.file().unwrap_or("-"),
        s.meta.line().unwrap_or(0)
    );
    tracing::warn!(
        target: "umd::log::limit",
        suppressed = s.count,
        site = %site,
        site_module = s.meta.target(),
        file = file,
        "{} similar console records suppressed (at most {BURST} per call site per second); the log file has them all",
        s.count
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Cs;
    impl tracing::callsite::Callsite for Cs {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            &META
        }
    }
    static CS: Cs = Cs;
    static META: Metadata<'static> = Metadata::new(
        "t",
        "umd::memory",
        tracing::Level::WARN,
        Some("umd/src/memory/mod.rs"),
        Some(7),
        None,
        tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&CS)),
        tracing::metadata::Kind::EVENT,
    );

    #[test]
    fn burst_then_suppressed_then_summary() {
        let mut l = ConsoleLimiter::default();
        let t0 = Instant::now();
        let mut ended = Vec::new();
        let shown = (0..20).filter(|_| l.admit(&META, t0, &mut ended)).count();
        assert_eq!(shown, BURST as usize);
        assert!(ended.is_empty());
        assert!(l.take_ended(t0, false).is_empty(), "window not over");
        // The next record after the window reports the 15 suppressed ones and is shown.
        assert!(l.admit(&META, t0 + WINDOW, &mut ended));
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].count, 15);
        for _ in 0..7 {
            l.admit(&META, t0 + WINDOW, &mut ended);
        }
        let at_exit = l.take_ended(t0 + WINDOW, true);
        assert_eq!(at_exit.len(), 1);
        assert_eq!(at_exit[0].count, 8 - BURST as u64);
        assert!(l.take_ended(t0 + WINDOW * 5, true).is_empty());
    }
}
