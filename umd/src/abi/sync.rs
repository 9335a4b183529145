//! Submission, fences and waits.

use super::types::*;
use super::{guard_on, inp, out, slice, On};
use crate::error::{umdResult, UmdError};
use crate::registry::{CMDBUFS, CONTEXTS};

/// Submits `count` ended command buffers as one job on `context`, after the `num_waits` fences
/// in `waits` (from any context of the same device) signal. `*fence` receives the job's fence.
/// Batches larger than the kernel's per-ioctl limit are split transparently. Every command
/// buffer must have been created on `context` (`UMD_ERR_INVALID_ARGUMENT` naming the index and
/// both contexts otherwise); a command buffer can be submitted any number of times once ended.
#[no_mangle]
#[must_use]
pub extern "C" fn umdSubmit(
    context: umdContext,
    cmdbufs: *const umdCmdBuf,
    count: u32,
    waits: *const umdFence,
    num_waits: u32,
    fence: *mut umdFence,
) -> umdResult {
    guard_on("umdSubmit", On::Context(context), || {
        let fence = out(fence, "fence")?;
        let ctx = CONTEXTS.get(context)?;
        let handles = slice(cmdbufs, count, "cmdbufs")?;
        let waits = slice(waits, num_waits, "waits")?;
        let mut cbs = Vec::with_capacity(handles.len());
        for (i, &h) in handles.iter().enumerate() {
            cbs.push(CMDBUFS.get(h).map_err(|e| {
                UmdError {
                    message: format!("cmdbufs[{i}]: {}", e.message),
                    ..e
                }
                .ctx(ctx.id)
            })?);
        }
        let mut deps = Vec::with_capacity(waits.len());
        for (i, w) in waits.iter().enumerate() {
            let c = CONTEXTS.get(w.context).map_err(|e| {
                UmdError {
                    message: format!("waits[{i}].context: {}", e.message),
                    ..e
                }
                .ctx(ctx.id)
            })?;
            deps.push((c, w.seqno));
        }
        let seqno = crate::submit::submit(&ctx, &cbs, &deps)?;
        *fence = umdFence { context, seqno };
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// UMD_SUCCESS if the fence has signalled, UMD_STATUS_NOT_READY if not, or why it never will.
#[no_mangle]
#[must_use]
pub extern "C" fn umdFenceQuery(fence: *const umdFence) -> umdResult {
    guard_on("umdFenceQuery", On::Fence(fence), || {
        let f = inp(fence, "fence")?;
        let ctx = CONTEXTS.get(f.context)?;
        crate::submit::query(&ctx, f.seqno)
    })
}

/// Sleeps until the fence signals or `timeout_ns` passes (UMD_TIMEOUT_INFINITE: no limit).
/// Outcomes: UMD_SUCCESS; UMD_ERR_SYNC_TIMEOUT (still running); UMD_ERR_SYNC_INTERRUPTED
/// (a signal: call again); UMD_ERR_CTX_LOST (the context faulted or hung: the fence will never
/// signal; the detail names the fault); UMD_ERR_DEVICE_LOST; UMD_ERR_INVALID_HANDLE when
/// another thread destroys the context (umdContextDestroy) or closes its device (umdDeviceClose)
/// while this wait is blocked: the detail says "the context was destroyed by another thread
/// (umdContextDestroy) while this wait was blocked" or "the device was closed by another thread
/// (umdDeviceClose) while this wait was blocked", at once on both backends (docs/libumd.md,
/// "Closing under a blocked wait").
#[no_mangle]
#[must_use]
pub extern "C" fn umdFenceWait(fence: *const umdFence, timeout_ns: u64) -> umdResult {
    guard_on("umdFenceWait", On::Fence(fence), || {
        let f = inp(fence, "fence")?;
        let ctx = CONTEXTS.get(f.context)?;
        crate::submit::wait(&ctx, f.seqno, timeout_ns)?;
        Ok(umdResult::UMD_SUCCESS)
    })
}
