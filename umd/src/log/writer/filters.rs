//! The sink filters as the writer applies them: the current pair (console, file) and the
//! generations before it, so that a record is judged by the filters in force when it was logged
//! (docs/logging.md, "Levels and filters").

use super::super::filter::Filter;
use std::sync::Arc;

/// Sink filters, swapped as a whole on change.
#[derive(Clone, Debug)]
pub struct Filters {
    /// Console filter.
    pub console: Filter,
    /// File filter.
    pub file: Filter,
    /// CLOCK_MONOTONIC ns from which these filters apply (0: from the start).
    pub since_ns: u64,
    /// The filters in force before `since_ns`. The writer judges a record by the filters of
    /// the time it was logged, not of the time it is written (a level switched off again right
    /// after a burst must not drop the burst); a few generations back are kept (`HISTORY`).
    pub before: Option<Arc<Filters>>,
}

/// Filter generations kept behind the current one ([`Filters::before`]).
pub(crate) const HISTORY: usize = 8;

impl Filters {
    /// The filters in force at `mono_ns` (the oldest kept, for a record older than all).
    pub fn at(&self, mono_ns: u64) -> &Filters {
        let mut f = self;
        while mono_ns < f.since_ns {
            match &f.before {
                Some(b) => f = b,
                None => break,
            }
        }
        f
    }

    /// `console` and `file` from `mono_ns` on, with `self` (cut to [`HISTORY`] generations)
    /// before.
    pub fn then(self: &Arc<Filters>, console: Filter, file: Filter, mono_ns: u64) -> Filters {
        Filters {
            console,
            file,
            since_ns: mono_ns,
            before: Some(trimmed(self, HISTORY - 1)),
        }
    }
}

/// `f` with at most `keep` generations behind it.
fn trimmed(f: &Arc<Filters>, keep: usize) -> Arc<Filters> {
    let before = match (&f.before, keep) {
        (None, _) => return f.clone(),
        (Some(_), 0) => None,
        (Some(b), k) => Some(trimmed(b, k - 1)),
    };
    Arc::new(Filters {
        console: f.console.clone(),
        file: f.file.clone(),
        since_ns: f.since_ns,
        before,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn level(l: tracing_subscriber::filter::LevelFilter) -> Filter {
        Filter::level(l)
    }

    /// A record is judged by the filters of the time it was logged; the history is cut to
    /// `HISTORY` generations, and a record older than all of them gets the oldest kept.
    #[test]
    fn filters_of_the_time_a_record_was_logged() {
        use tracing_subscriber::filter::LevelFilter as L;
        let mut f = Arc::new(Filters {
            console: level(L::WARN),
            file: level(L::INFO),
            since_ns: 0,
            before: None,
        });
        // Generation k (from k * 100 ns on) lets DEBUG into the file when k is odd.
        for k in 1..=20u64 {
            let file = if k % 2 == 1 { L::DEBUG } else { L::INFO };
            f = Arc::new(f.then(level(L::WARN), level(file), k * 100));
        }
        let debug_in_file = |ns: u64| f.at(ns).file.enabled("t", &Level::DEBUG);
        assert!(!debug_in_file(2000), "generation 20");
        assert!(debug_in_file(1999), "generation 19");
        assert!(debug_in_file(1950));
        assert!(!debug_in_file(1899), "generation 18");
        let mut depth = 0;
        let mut g: &Filters = &f;
        while let Some(b) = &g.before {
            depth += 1;
            g = b;
        }
        assert_eq!(depth, HISTORY);
        // Older than the oldest generation kept (12, from 1200 ns): that one.
        assert_eq!(g.since_ns, 1200);
        assert!(!debug_in_file(5));
    }
}
