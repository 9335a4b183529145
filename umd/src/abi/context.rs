//! Contexts: create, destroy, state.

use super::types::*;
use super::{copy_versioned, guard, guard_on, out, struct_size, On};
use crate::error::umdResult;
use crate::registry::{BUFFERS, CMDBUFS, CONTEXTS, DEVICES};
use std::sync::Arc;

/// Creates a context on `device` with `priority` (UMD_PRIORITY_*). At most 64 contexts exist
/// per open device (`umdDeviceOpen`); the 65th is `UMD_ERR_CTX_LIMIT` (action
/// `UMD_ACTION_RELEASE_AND_RETRY`: destroy one, or open the device again), and so is a device
/// whose hardware contexts are all in use by other processes (the detail says which limit).
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
/// Buffers allocated on it that are still live are reported as leaks and freed: the first 32 one
/// WARN each (size, age, tag, VA, and the allocation's call site when UMD_POOL_HISTORY is on),
/// then one summary WARN with the totals grouped by call site; command buffers created on it
/// are destroyed.
/// A umdFenceWait blocked in another thread on this context fails with UMD_ERR_INVALID_HANDLE,
/// detail "the context was destroyed by another thread (umdContextDestroy) while this wait was
/// blocked", at once (both backends); the destroy itself still waits for the context's work
/// (docs/libumd.md, "Closing under a blocked wait").
#[no_mangle]
#[must_use]
pub extern "C" fn umdContextDestroy(context: umdContext) -> umdResult {
    let caller = crate::caller!();
    guard_on("umdContextDestroy", On::Context(context), || {
        let ctx = CONTEXTS.get(context)?;
        let r = ctx.close(crate::context::ClosedBy::ContextDestroy);
        CONTEXTS.remove(context)?;
        for (h, cb) in CMDBUFS.live() {
            if Arc::ptr_eq(&cb.ctx, &ctx) {
                let _ = CMDBUFS.remove(h);
            }
        }
        // Leak report (bounded: memory/leaks.rs); the buffers are freed, by this call.
        let mut leaked = Vec::new();
        for (h, b) in BUFFERS.live() {
            if b.ctx_id == ctx.id && BUFFERS.remove(h).is_ok() {
                b.set_free_caller(caller);
                leaked.push(b);
            }
        }
        crate::memory::leaks::report(ctx.id, "umdContextDestroy", &leaked);
        drop(leaked);
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
            UMD_CONTEXT_STATE_SIZE_V1 as usize,
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
            ban: s.ban,
            reserved2: 0,
            dep_context_id: match s.ban {
                uapi::ioctl::BAN_DEPENDENCY => ctx.device.context_named(s.dep_ctx_id).unwrap_or(0),
                _ => 0,
            },
            dep_seqno: s.dep_seqno,
        };
        copy_versioned(&v, state, dst.struct_size);
        Ok(umdResult::UMD_SUCCESS)
    })
}
