//! The `oom` record: on an out-of-memory (or larger-than-the-device) failure, what each context
//! of the device holds, so the reader sees who has the memory, not only who was refused it
//! (docs/tools.md, "Fact records").

use crate::context::Context;
use crate::error::{umdResult, UmdError};
use crate::registry::CONTEXTS;
use std::sync::Arc;

/// Logs the `oom` record when `e` is an out-of-memory failure of a `size`-byte request on
/// `ctx` (`holders`: `ctx:bytes` by size, largest first).
#[cold]
#[inline(never)]
pub(super) fn said(ctx: &Context, size: u64, e: &UmdError) {
    if e.code != umdResult::UMD_ERR_MEM_OUT_OF_MEMORY && e.code != umdResult::UMD_ERR_MEM_TOO_LARGE
    {
        return;
    }
    let mut held: Vec<(u64, u64)> = CONTEXTS
        .live()
        .into_iter()
        .filter(|(_, c)| Arc::ptr_eq(&c.device, &ctx.device))
        .map(|(_, c)| (c.id, c.pool.ctx_stats(c.acct).allocated_bytes.current))
        .collect();
    held.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let holders = held
        .iter()
        .map(|(c, b)| format!("{c}:{b}"))
        .collect::<Vec<_>>()
        .join(",");
    tracing::error!(
        ctx = ctx.id,
        event = "oom",
        size,
        mem_total = ctx.device.info.mem_total,
        holders = holders.as_str(),
        "out of device memory: who holds it"
    );
}
