//! Call sites and the allocation history ring (`UMD_POOL_HISTORY=N`).
//!
//! A [`Site`] is where an allocation or free came from: the Rust caller's `file:line` (free to
//! record) and, when the history is on, up to [`SITE_FRAMES`] return addresses outside libumd
//! taken with glibc's `backtrace(3)` and resolved when printed (`crate::caller`: `dladdr(3)`,
//! cached) — for a C program, `abi_test+0x2a3c` (feed it to `addr2line -e abi_test`) or
//! `main+0x1f (abi_test+0x2a3c)` when the program exports its symbols.
//!
//! The ring keeps the last N events (alloc, reuse, free, deferred free, segment create and
//! release, out of memory); [`History::json_lines`] prints them one JSON object per line.

use crate::caller::Caller;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::fmt::Write as _;
use std::panic::Location;
use std::sync::{Arc, OnceLock};

/// Return addresses kept per site.
pub(crate) const SITE_FRAMES: usize = 3;

/// Where a call came from.
#[derive(Clone, Debug)]
pub struct Site {
    /// The Rust caller (for C callers: the ABI entry point).
    pub rust: &'static Location<'static>,
    frames: [usize; SITE_FRAMES],
    n: usize,
}

/// The path of libumd's own module.
fn own_module() -> Option<&'static str> {
    static OWN: OnceLock<Option<String>> = OnceLock::new();
    OWN.get_or_init(|| {
        Caller(own_module as *const () as usize)
            .resolve()
            .module
            .clone()
    })
    .as_deref()
}

impl Site {
    /// The Rust caller only (no stack walk).
    pub fn here(rust: &'static Location<'static>) -> Site {
        Site {
            rust,
            frames: [0; SITE_FRAMES],
            n: 0,
        }
    }

    /// The Rust caller plus the first return addresses outside libumd (a few microseconds:
    /// only with the history on).
    pub fn capture(rust: &'static Location<'static>) -> Site {
        let mut buf = [std::ptr::null_mut::<c_void>(); 32];
        // SAFETY: buf has room for 32 entries and backtrace writes at most that many.
        let got = unsafe { libc::backtrace(buf.as_mut_ptr(), buf.len() as libc::c_int) };
        let own = own_module();
        let mut s = Site::here(rust);
        let mut left_libumd = false;
        for &ip in buf.iter().take(got.max(0) as usize) {
            let ip = ip as usize;
            if s.n == SITE_FRAMES {
                break;
            }
            let r = Caller(ip).resolve();
            let Some(module) = r.module.as_deref() else {
                continue;
            };
            if Some(module) == own && !left_libumd {
                continue;
            }
            // The first frame outside libumd is its caller; when that is the C library's thread
            // start, libumd is linked into the caller's own object (a Rust program) and only the
            // Rust location says where.
            let file = module.rsplit('/').next().unwrap_or(module);
            if !left_libumd && file.starts_with("libc.so") {
                break;
            }
            left_libumd = true;
            s.frames[s.n] = ip;
            s.n += 1;
        }
        s
    }

    /// "abi_test+0x2a3c <- main+0x1f (abi_test+0x2b10) (via umd/src/abi/memory.rs:25)".
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, &ip) in self.frames[..self.n].iter().enumerate() {
            if i > 0 {
                out.push_str(" <- ");
            }
            out.push_str(&Caller(ip).resolve().describe());
        }
        if self.n == 0 {
            let _ = write!(out, "{}:{}", self.rust.file(), self.rust.line());
        } else {
            let _ = write!(out, " (via {}:{})", self.rust.file(), self.rust.line());
        }
        out
    }
}

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A buffer was allocated from a new kernel object.
    Alloc,
    /// A buffer was allocated from cached memory.
    Reuse,
    /// A buffer was freed; its block is reusable now.
    Free,
    /// A buffer was freed while a submitted job may still use it; reuse waits for the fence.
    FreeDeferred,
    /// A deferred block's fence signalled: reusable now.
    Recycle,
    /// The pool created a kernel object.
    SegmentAlloc,
    /// The pool released a kernel object.
    SegmentRelease,
    /// An allocation failed: out of memory.
    Oom,
}

impl EventKind {
    /// JSON name.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Alloc => "alloc",
            EventKind::Reuse => "reuse",
            EventKind::Free => "free",
            EventKind::FreeDeferred => "free_deferred",
            EventKind::Recycle => "recycle",
            EventKind::SegmentAlloc => "segment_alloc",
            EventKind::SegmentRelease => "segment_release",
            EventKind::Oom => "oom",
        }
    }
}

/// One history record.
#[derive(Clone, Debug)]
pub struct Event {
    /// Pool-wide event number (1, 2, ...).
    pub seq: u64,
    /// CLOCK_MONOTONIC ns.
    pub t_ns: u64,
    /// What.
    pub kind: EventKind,
    /// Context id (0: none).
    pub ctx: u64,
    /// Buffer id (0: a segment event).
    pub buffer: u64,
    /// GPU VA.
    pub va: u64,
    /// Block or segment bytes.
    pub size: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// Small or large.
    pub pool: &'static str,
    /// Allocation tag.
    pub tag: Option<Arc<str>>,
    /// Call site.
    pub site: Option<Arc<Site>>,
}

/// What the pool says about one happening; [`History`] adds the event number and the time.
pub(crate) struct Note<'a> {
    /// What.
    pub kind: EventKind,
    /// Context id (0: none).
    pub ctx: u64,
    /// Buffer id (0: a segment event).
    pub buffer: u64,
    /// GPU VA.
    pub va: u64,
    /// Block or segment bytes.
    pub size: u64,
    /// Bytes asked for (0: not a request).
    pub requested: u64,
    /// Small or large.
    pub pool: super::size_class::PoolKind,
    /// Allocation tag.
    pub tag: Option<&'a Arc<str>>,
    /// Call site.
    pub site: Option<&'a Arc<Site>>,
}

impl Note<'_> {
    /// A segment's creation or release (no context, buffer or request).
    pub fn segment(kind: EventKind, va: u64, size: u64, pool: super::size_class::PoolKind) -> Self {
        Note {
            kind,
            ctx: 0,
            buffer: 0,
            va,
            size,
            requested: 0,
            pool,
            tag: None,
            site: None,
        }
    }
}

/// The ring.
pub struct History {
    cap: usize,
    ring: VecDeque<Event>,
    /// Events recorded (including dropped ones).
    pub total: u64,
}

fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl History {
    /// A ring of `cap` events.
    pub fn new(cap: usize) -> History {
        History {
            cap,
            ring: VecDeque::with_capacity(cap.min(1 << 16)),
            total: 0,
        }
    }
    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.cap
    }
    /// Appends, dropping the oldest when full.
    pub fn push(&mut self, e: Event) {
        self.total += 1;
        if self.ring.len() == self.cap {
            self.ring.pop_front();
        }
        self.ring.push_back(e);
    }
    /// The events, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.ring.iter()
    }
    /// One JSON object per line, oldest first.
    pub fn json_lines(&self) -> String {
        let mut out = String::with_capacity(self.ring.len() * 160);
        for e in &self.ring {
            let _ = write!(
                out,
                "{{\"seq\":{},\"t_ns\":{},\"event\":\"{}\",\"ctx\":{},\"buffer\":{},\"va\":\"{:#x}\",\"size\":{},\"requested\":{},\"pool\":\"{}\"",
                e.seq, e.t_ns, e.kind.name(), e.ctx, e.buffer, e.va, e.size, e.requested, e.pool
            );
            if let Some(t) = &e.tag {
                out.push_str(",\"tag\":");
                json_str(&mut out, t);
            }
            if let Some(s) = &e.site {
                out.push_str(",\"site\":");
                json_str(&mut out, &s.describe());
            }
            out.push_str("}\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn ring_drops_oldest_and_prints_json() {
        let mut h = History::new(2);
        for i in 1..=3 {
            h.push(Event {
                seq: i,
                t_ns: 10 * i,
                kind: EventKind::Alloc,
                ctx: 1,
                buffer: i,
                va: 0x1000,
                size: 512,
                requested: 100,
                pool: "small",
                tag: Some("a\"b".into()),
                site: Some(Arc::new(Site::here(Location::caller()))),
            });
        }
        assert_eq!(h.total, 3);
        let j = h.json_lines();
        assert_eq!(j.lines().count(), 2);
        assert!(j.starts_with("{\"seq\":2,\"t_ns\":20,\"event\":\"alloc\",\"ctx\":1,\"buffer\":2,\"va\":\"0x1000\",\"size\":512,\"requested\":100,\"pool\":\"small\",\"tag\":\"a\\\"b\",\"site\":\"umd/src/memory/pool/history.rs:"), "{j}");
    }
}
