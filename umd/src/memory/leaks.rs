//! The leak report at `umdContextDestroy` and `umdDeviceClose`: buffers still allocated are
//! named so the owner can find them, without turning one teardown into a flood.
//!
//! A framework that forgets a whole arena leaks tens of thousands of buffers at once; one WARN
//! each made a single destroy print 122,880 lines and take half a second, and overflowed the log
//! queue so the file lost most of them anyway. The report is bounded instead: the first
//! [`DETAILED`] leaks one WARN each (size, age, tag, VA, call site when `UMD_POOL_HISTORY` is
//! on), then one summary WARN with the totals and the leaks grouped by call site (the history's,
//! else the application's `umdMemAlloc` call, else the size class), largest groups first. Each
//! leak's record carries the application's call as its `caller` field (docs/logging.md, "Call
//! sites"). `umdMemDumpHistory` lists every live buffer.

use super::BufferRef;
use crate::caller::Caller;
use std::collections::HashMap;

/// Leaks logged one by one per report.
pub(crate) const DETAILED: usize = 32;
/// Groups named in the summary.
const GROUPS: usize = 5;

/// What a group of leaks has in common.
#[derive(PartialEq, Eq, Hash)]
enum Key {
    /// The history's backtrace.
    Site(String),
    /// The application's allocating call.
    Caller(Caller),
    /// The size class (nothing else known).
    Class(u64),
}

impl Key {
    fn name(&self) -> String {
        match self {
            Key::Site(s) => s.clone(),
            Key::Caller(c) => c.resolve().describe(),
            Key::Class(c) => format!("size class {c}"),
        }
    }
}

/// Logs the leak report for `leaked` (already removed from the handle table by the caller),
/// found at `at` (`umdContextDestroy` / `umdDeviceClose`) on context `ctx` (0: the device's
/// contexts).
pub fn report(ctx: u64, at: &str, leaked: &[BufferRef]) {
    if leaked.is_empty() {
        return;
    }
    let mut bytes = 0u64;
    // Grouped by what names the site cheaply (the address, the class); named once per group.
    let mut groups: HashMap<Key, (u64, u64)> = HashMap::new();
    for (i, b) in leaked.iter().enumerate() {
        bytes += b.size;
        let site = b.site.as_ref().map(|s| s.describe());
        if i < DETAILED {
            tracing::warn!(
                ctx = b.ctx_id,
                buffer = b.id,
                size = b.size,
                class = b.alloc_size,
                age_ms = b.born.elapsed().as_millis() as u64,
                tag = b.tag.as_deref().unwrap_or("-"),
                va = format_args!("{:#x}", b.va),
                site = site
                    .as_deref()
                    .unwrap_or("- (UMD_POOL_HISTORY=N records it)"),
                caller = b.caller.0 as u64,
                event = "leak",
                "leak: buffer still allocated at {at}; freeing it"
            );
        }
        let key = match (site, b.caller) {
            (Some(s), _) => Key::Site(s),
            (None, c) if c.0 != 0 => Key::Caller(c),
            (None, _) => Key::Class(b.alloc_size),
        };
        let g = groups.entry(key).or_default();
        g.0 += 1;
        g.1 += b.size;
    }
    let mut top: Vec<(String, (u64, u64))> =
        groups.into_iter().map(|(k, v)| (k.name(), v)).collect();
    top.sort_by(|a, b| {
        b.1 .1
            .cmp(&a.1 .1)
            .then(b.1 .0.cmp(&a.1 .0))
            .then(a.0.cmp(&b.0))
    });
    let by_site = top
        .iter()
        .take(GROUPS)
        .map(|(k, (n, b))| format!("{k}: {n} buffers, {b} bytes"))
        .collect::<Vec<_>>()
        .join("; ");
    let n = leaked.len();
    let unlisted = n.saturating_sub(DETAILED);
    tracing::warn!(
        ctx,
        buffers = n as u64,
        bytes,
        unlisted = unlisted as u64,
        groups = top.len() as u64,
        largest = by_site.as_str(),
        event = "leak_summary",
        "leak summary: {n} buffers ({bytes} bytes) were still allocated at {at}"
    );
}
