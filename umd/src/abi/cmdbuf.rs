//! Command buffers: create, begin, record each packet kind, end, destroy.
//!
//! Addresses are GPU virtual addresses (`umdMemGetAddress` + offset), as with device pointers in
//! other compute APIs: the GPU's MMU checks them when the work runs, and a bad one faults the
//! context (UMD_ERR_CTX_LOST on its fence, with the VA in the detail). Operand rules (sizes,
//! dimensions, alignment) are checked here, at record time.

use super::types::*;
use super::{guard_on, inp, out, On};
use crate::error::{umdResult, UmdError, UmdResult};
use crate::registry::{CMDBUFS, CONTEXTS};
use std::sync::Arc;
use uapi::packet;

/// Creates an empty command buffer on `context`.
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdBufCreate(context: umdContext, cmdbuf: *mut umdCmdBuf) -> umdResult {
    guard_on("umdCmdBufCreate", On::Context(context), || {
        let cmdbuf = out(cmdbuf, "cmdbuf")?;
        let ctx = CONTEXTS.get(context)?;
        ctx.device.check()?;
        *cmdbuf = CMDBUFS.insert(Arc::new(crate::cmdbuf::CmdBuf::new(ctx)));
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Destroys a command buffer (work already submitted from it is unaffected).
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdBufDestroy(cmdbuf: umdCmdBuf) -> umdResult {
    guard_on("umdCmdBufDestroy", On::CmdBuf(cmdbuf), || {
        CMDBUFS.remove(cmdbuf)?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Starts recording (discarding what was recorded before).
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdBufBegin(cmdbuf: umdCmdBuf) -> umdResult {
    guard_on("umdCmdBufBegin", On::CmdBuf(cmdbuf), || {
        CMDBUFS.get(cmdbuf)?.begin()?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Ends recording; the command buffer can then be submitted (any number of times) on the context
/// it was created on. Ending uploads the packets into one read-only device buffer, which the
/// memory statistics count like any other allocation (`umdMemStats.allocation_count` includes
/// one per ended command buffer; `umdMemGetContextStats` of its context too): it is device memory
/// the process holds until `umdCmdBufDestroy`.
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdBufEnd(cmdbuf: umdCmdBuf) -> umdResult {
    guard_on("umdCmdBufEnd", On::CmdBuf(cmdbuf), || {
        let cb = CMDBUFS.get(cmdbuf)?;
        cb.ctx.device.check()?;
        cb.end()?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

fn record(cmdbuf: umdCmdBuf, words: &[u32]) -> UmdResult<umdResult> {
    let cb = CMDBUFS.get(cmdbuf)?;
    cb.record(words)?;
    Ok(umdResult::UMD_SUCCESS)
}

/// Records a copy of `size` bytes from `src` to `dst` (non-overlapping). `size` 0 is
/// `UMD_ERR_INVALID_SIZE`, overlapping ranges `UMD_ERR_INVALID_ARGUMENT`; the detail names the
/// argument and its value (the rule for every record call: docs/libumd.md, "Work").
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdCopy(
    cmdbuf: umdCmdBuf,
    dst: umdDevicePtr,
    src: umdDevicePtr,
    size: u64,
) -> umdResult {
    guard_on("umdCmdCopy", On::CmdBuf(cmdbuf), || {
        record(cmdbuf, &packet::encode_copy(src, dst, size))
    })
}

/// Records a fill of `size` bytes (multiple of 4) at `dst` with a 32-bit pattern. `size` 0 or
/// not a multiple of 4 is `UMD_ERR_INVALID_SIZE`, naming the value.
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdFill(
    cmdbuf: umdCmdBuf,
    dst: umdDevicePtr,
    size: u64,
    pattern: u32,
) -> umdResult {
    guard_on("umdCmdFill", On::CmdBuf(cmdbuf), || {
        record(cmdbuf, &packet::encode_fill(dst, size, pattern))
    })
}

/// Records an int8 GEMM with int32 accumulation. `m`, `n`, `k` outside 1..=4096 are
/// `UMD_ERR_INVALID_SIZE`, a leading dimension below its row (`lda < k`, `ldb < n`, `ldc < n`)
/// `UMD_ERR_INVALID_ARGUMENT`, unknown `flags` or non-zero `reserved` `UMD_ERR_INVALID_FLAGS`;
/// the detail names the argument and its value.
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdGemmI8(cmdbuf: umdCmdBuf, args: *const umdGemmI8Args) -> umdResult {
    guard_on("umdCmdGemmI8", On::CmdBuf(cmdbuf), || {
        let a = inp(args, "args")?;
        if a.flags & !UMD_GEMM_ACCUMULATE != 0 || a.reserved != 0 {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_FLAGS,
                format!("umdGemmI8Args.flags 0x{:x} / reserved {} (defined flags: UMD_GEMM_ACCUMULATE; reserved must be 0).", a.flags, a.reserved),
            ));
        }
        let g = packet::GemmArgs {
            a: a.a,
            b: a.b,
            c: a.c,
            m: a.m,
            n: a.n,
            k: a.k,
            lda: a.lda,
            ldb: a.ldb,
            ldc: a.ldc,
            accumulate: a.flags & UMD_GEMM_ACCUMULATE != 0,
        };
        record(cmdbuf, &packet::encode_gemm(&g))
    })
}

/// Records an element-wise int32 op over `count` elements: UMD_ELTWISE_ADD / MUL (a, b) or
/// RELU (a; b must be 0).
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdEltwise(
    cmdbuf: umdCmdBuf,
    op: u32,
    count: u32,
    dst: umdDevicePtr,
    a: umdDevicePtr,
    b: umdDevicePtr,
) -> umdResult {
    guard_on("umdCmdEltwise", On::CmdBuf(cmdbuf), || {
        if op > UMD_ELTWISE_RELU {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_ARGUMENT,
                format!("element-wise op {op} is not UMD_ELTWISE_ADD, MUL or RELU (use umdCmdRequantize for requantisation)."),
            ));
        }
        record(cmdbuf, &packet::encode_eltwise(op, count, a, b, dst, 0, 0))
    })
}

/// Records requantisation of `count` int32 values at `src` to int8 at `dst`:
/// `dst = clamp(round(src * scale / 2^shift), -128, 127)`, rounding half up, shift <= 62.
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdRequantize(
    cmdbuf: umdCmdBuf,
    count: u32,
    dst: umdDevicePtr,
    src: umdDevicePtr,
    scale: i32,
    shift: u32,
) -> umdResult {
    guard_on("umdCmdRequantize", On::CmdBuf(cmdbuf), || {
        record(
            cmdbuf,
            &packet::encode_eltwise(packet::ELT_REQUANT, count, src, 0, dst, scale, shift),
        )
    })
}

/// Records a write of the device timestamp (u64 ns) to `dst` (8-byte aligned).
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdTimestamp(cmdbuf: umdCmdBuf, dst: umdDevicePtr) -> umdResult {
    guard_on("umdCmdTimestamp", On::CmdBuf(cmdbuf), || {
        record(cmdbuf, &packet::encode_timestamp(dst))
    })
}

/// Records a write of the 64-bit `value` to `dst` (8-byte aligned).
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdWriteValue(cmdbuf: umdCmdBuf, dst: umdDevicePtr, value: u64) -> umdResult {
    guard_on("umdCmdWriteValue", On::CmdBuf(cmdbuf), || {
        record(cmdbuf, &packet::encode_fence(dst, value, false))
    })
}

/// Records a wait until the 64-bit value at `addr` is >= `value`.
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdWaitValue(cmdbuf: umdCmdBuf, addr: umdDevicePtr, value: u64) -> umdResult {
    guard_on("umdCmdWaitValue", On::CmdBuf(cmdbuf), || {
        record(cmdbuf, &packet::encode_wait_mem(addr, value))
    })
}

/// Records the debug HANG packet (only when hang debugging is enabled; for timeout tests).
/// Without hang debugging: `UMD_ERR_SUBMIT_INVALID_PACKET`, the detail says how to enable it.
#[no_mangle]
#[must_use]
pub extern "C" fn umdCmdDebugHang(cmdbuf: umdCmdBuf) -> umdResult {
    guard_on("umdCmdDebugHang", On::CmdBuf(cmdbuf), || {
        record(cmdbuf, &packet::encode_hang())
    })
}
