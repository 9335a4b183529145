//! Device memory: alloc, free, address, CPU map, host<->device copies.

use super::types::*;
use super::{guard, inp, out};
use crate::error::umdResult;
use crate::registry::{BUFFERS, CONTEXTS};
use std::ffi::c_void;
use std::sync::Arc;

/// Allocates `size` bytes of device memory on `context`'s device (accounted to the context),
/// mapped in the device's GPU address space. `flags`: 0 or UMD_MEM_READ_ONLY.
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemAlloc(
    context: umdContext,
    size: u64,
    flags: u32,
    buffer: *mut umdBuffer,
) -> umdResult {
    guard("umdMemAlloc", || {
        let buffer = out(buffer, "buffer")?;
        let ctx = CONTEXTS.get(context)?;
        let b = crate::memory::Buffer::alloc(&ctx, size, flags)?;
        *buffer = BUFFERS.insert(Arc::new(b));
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Frees a buffer. The caller must not free memory that submitted, unfinished work still uses.
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemFree(buffer: umdBuffer) -> umdResult {
    guard("umdMemFree", || {
        BUFFERS.remove(buffer)?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// The buffer's GPU virtual address (for recording commands).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemGetAddress(buffer: umdBuffer, address: *mut umdDevicePtr) -> umdResult {
    guard("umdMemGetAddress", || {
        let address = out(address, "address")?;
        *address = BUFFERS.get(buffer)?.va;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Maps the buffer for CPU access (the same pointer on every call; balance with umdMemUnmap).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemMap(buffer: umdBuffer, host: *mut *mut c_void) -> umdResult {
    guard("umdMemMap", || {
        let host = out(host, "host")?;
        let b = BUFFERS.get(buffer)?;
        *host = b.map()? as *mut c_void;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Balances one umdMemMap.
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemUnmap(buffer: umdBuffer) -> umdResult {
    guard("umdMemUnmap", || {
        BUFFERS.get(buffer)?.unmap()?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Copies `size` bytes from host memory to `buffer` at `offset` (synchronous).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemcpyHtoD(
    buffer: umdBuffer,
    offset: u64,
    src: *const c_void,
    size: u64,
) -> umdResult {
    guard("umdMemcpyHtoD", || {
        let b = BUFFERS.get(buffer)?;
        let _ = inp(src as *const u8, "src")?;
        let len = usize::try_from(size).unwrap_or(usize::MAX);
        b.check_copy(offset, size)?;
        // SAFETY: src is non-NULL and the caller promises `size` readable bytes.
        let data = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
        b.write(offset, data).map_err(|e| e.ctx(b.ctx_id))?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Copies `size` bytes from `buffer` at `offset` to host memory (synchronous; make sure the
/// work that writes it has completed: wait on its fence first).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemcpyDtoH(
    dst: *mut c_void,
    buffer: umdBuffer,
    offset: u64,
    size: u64,
) -> umdResult {
    guard("umdMemcpyDtoH", || {
        let b = BUFFERS.get(buffer)?;
        let _ = out(dst as *mut u8, "dst")?;
        b.check_copy(offset, size)?;
        let len = usize::try_from(size).unwrap_or(usize::MAX);
        // SAFETY: dst is non-NULL and the caller promises `size` writable bytes.
        let data = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
        b.read(offset, data).map_err(|e| e.ctx(b.ctx_id))?;
        Ok(umdResult::UMD_SUCCESS)
    })
}
