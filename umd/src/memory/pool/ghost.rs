//! Freed buffers remembered for use-after-free and double-free reports (the last [`GHOSTS`]
//! frees), and what an address handed to free-by-address turns out to be.

use super::history::Site;
use crate::caller::Callers;
use std::sync::Arc;

/// Freed buffers remembered for use-after-free and double-free reports.
pub(crate) const GHOSTS: usize = 1024;

/// A freed buffer, remembered for reports.
#[derive(Clone, Debug)]
pub struct Ghost {
    /// VA.
    pub va: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// Block bytes.
    pub size: u64,
    /// Buffer id.
    pub buffer: u64,
    /// Context it was allocated on.
    pub ctx_id: u64,
    /// Pool event number of the free.
    pub seq: u64,
    /// When.
    pub at_ns: u64,
    /// Where (history on).
    pub site: Option<Arc<Site>>,
    /// The application's allocating and freeing calls.
    pub callers: Callers,
}

impl Ghost {
    /// "buffer 12 (512 bytes at VA 0x200000, allocated on context 3 at main+0x1f (app+0x1234)),
    /// freed 4 ms ago at <site>": the application's calls (symbolized here, on the error path)
    /// when known, the history's site when on.
    pub fn describe(&self) -> String {
        // seq 0: freed in a context cache, which does not number events (the history is off).
        let ms = coarse_now_ns().saturating_sub(self.at_ns) as f64 / 1e6;
        let when = match (self.at_ns, self.seq) {
            (0, 0) => "at an unrecorded time".to_string(),
            (_, 0) => format!("{ms:.1} ms ago"),
            (0, seq) => format!("at pool event #{seq}"),
            (_, seq) => format!("{ms:.1} ms ago (pool event #{seq})"),
        };
        let site = match (&self.site, self.callers.free.describe()) {
            (Some(s), _) => format!(" at {}", s.describe()),
            (None, Some(c)) => format!(" at {c}"),
            (None, None) => " (set UMD_POOL_HISTORY=N to record where)".into(),
        };
        let born = match self.callers.alloc.describe() {
            Some(c) => format!(" at {c}"),
            None => String::new(),
        };
        format!(
            "buffer {} ({} bytes at VA {:#x}, allocated on context {}{born}), freed {when}{site}",
            self.buffer, self.requested, self.va, self.ctx_id
        )
    }
}

/// What an address is, for free-by-address.
#[derive(Clone, Debug)]
pub enum AddrInfo {
    /// The start of a live buffer.
    Live {
        /// Buffer id.
        buffer: u64,
        /// C handle, if registered.
        handle: u64,
        /// Context it was allocated on.
        ctx_id: u64,
    },
    /// Inside a live buffer, not at its start.
    Interior {
        /// Buffer id.
        buffer: u64,
        /// Its start.
        start: u64,
        /// Bytes asked for.
        requested: u64,
    },
    /// A freed buffer's address (most recent free first).
    Freed(Ghost),
    /// Pool memory never handed out, or not pool memory at all.
    Unknown {
        /// True if the address lies in a segment of this pool.
        in_pool: bool,
    },
}

/// CLOCK_MONOTONIC_COARSE in ns (a few ns: good enough for ages and "freed N ms ago").
pub fn coarse_now_ns() -> u64 {
    crate::error::detail::clock_ns(libc::CLOCK_MONOTONIC_COARSE)
}
