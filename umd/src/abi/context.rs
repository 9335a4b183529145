//! Contexts: create, destroy, state.

use super::types::*;
use super::{copy_versioned, guard, guard_on, out, struct_size, On};
use crate::error::umdResult;
use crate::registry::{BUFFERS, CMDBUFS, CONTEXTS, DEVICES};
use std::sync::Arc;

/// Creates a context on `device` with `priority` (UMD_PRIORITY_*).
#[no_mangle]
#[must_use]
pub extern "C" fn umdContextCreate(
    device: umdDevice,
    priority: umdPriority,
    context: *mut umdContext,
) -> umdResult {
    guard("umdContextCreate", || {
        let context = out(context, "context")?;
        let dev = DEVICES.get(device)?;
        let c = crate::context::Context::create(&dev, priority)?;
        *context = CONTEXTS.insert(Arc::new(c));
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Destroys a context after its submitted work completes (bounded by the driver's job timeout).
/// Buffers allocated on it that are still live are reported as leaks (WARN, one line each: size,
/// age, tag, VA, and the allocation's call site when UMD_POOL_HISTORY is on, then a summary line)
/// and freed; command buffers created on it are destroyed.
#[no_mangle]
#[must_use]
pub extern "C" fn umdContextDestroy(context: umdContext) -> umdResult {
    guard_on("umdContextDestroy", On::Context(context), || {
        let ctx = CONTEXTS.get(context)?;
        let r = ctx.destroy();
        CONTEXTS.remove(context)?;
        for (h, cb) in CMDBUFS.live() {
            if Arc::ptr_eq(&cb.ctx, &ctx) {
                let _ = CMDBUFS.remove(h);
            }
        }
        // Leak report: one WARN line per buffer still allocated (size, age, tag, and the call
        // site when the history is on), then a summary; the buffers are freed.
        let (mut n, mut bytes) = (0u64, 0u64);
        for (h, b) in BUFFERS.live() {
            if b.ctx_id == ctx.id {
                n += 1;
                bytes += b.size;
                let site = b.site.as_ref().map(|s| s.describe());
                tracing::warn!(
                    ctx = ctx.id,
                    buffer = b.id,
                    size = b.size,
                    class = b.alloc_size,
                    age_ms = b.born.elapsed().as_millis() as u64,
                    tag = b.tag.as_deref().unwrap_or("-"),
                    va = format_args!("{:#x}", b.va),
                    site = site
                        .as_deref()
                        .unwrap_or("- (UMD_POOL_HISTORY=N records it)"),
                    "leak: buffer still allocated at umdContextDestroy; freeing it"
                );
                let _ = BUFFERS.remove(h);
            }
        }
        if n > 0 {
            tracing::warn!(
                ctx = ctx.id,
                buffers = n,
                bytes,
                "leak summary: {n} buffers ({bytes} bytes) were still allocated at umdContextDestroy"
            );
        }
        if let Ok(mut q) = ctx.inflight.lock() {
            q.clear();
        }
        r.map(|_| umdResult::UMD_SUCCESS)
    })
}

/// Reads the context's reset status, fault and progress (set `state->struct_size` first).
/// Works on a lost context (that is when it is needed); fails with UMD_ERR_DEVICE_LOST once the
/// device is lost.
#[no_mangle]
#[must_use]
pub extern "C" fn umdContextGetState(
    context: umdContext,
    state: *mut umdContextState,
) -> umdResult {
    guard_on("umdContextGetState", On::Context(context), || {
        let dst = out(state, "state")?;
        struct_size(
            dst.struct_size,
            std::mem::size_of::<umdContextState>(),
            "umdContextState",
        )?;
        let ctx = CONTEXTS.get(context)?;
        let s = ctx.state()?;
        let v = umdContextState {
            struct_size: std::mem::size_of::<umdContextState>() as u32,
            reset_status: s.reset_status,
            hung: s.hung,
            fault_type: s.fault_type,
            fault_va: s.fault_va,
            fault_access: s.fault_access,
            reserved: 0,
            fault_offset: s.fault_offset,
            completed_seqno: s.completed_seqno,
            submitted_seqno: s.submitted_seqno,
        };
        copy_versioned(&v, state, dst.struct_size);
        Ok(umdResult::UMD_SUCCESS)
    })
}
