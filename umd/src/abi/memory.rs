//! Device memory: alloc, free, address, CPU map, host<->device copies, and the caching pool's
//! statistics, trim, release threshold and allocation history.

use super::types::*;
use super::{copy_versioned, guard, guard_on, inp, out, struct_size, On};
use crate::error::{umdResult, UmdError, UmdResult};
use crate::memory::pool::stats::{Counter, Gauge};
use crate::memory::pool::{AddrInfo, Pool};
use crate::registry::{BUFFERS, CONTEXTS, DEVICES};
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

/// Index of the all-pools entry in the arrays of `umdMemStats`.
pub const UMD_MEM_POOL_ALL: u32 = 0;
/// Index of the small pool (requests up to 1 MiB, sub-allocated from 2 MiB slabs).
pub const UMD_MEM_POOL_SMALL: u32 = 1;
/// Index of the large pool (larger requests: their own kernel objects).
pub const UMD_MEM_POOL_LARGE: u32 = 2;

/// One gauge of the pool statistics (the shape of PyTorch's memory_stats entries).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umdMemCounter {
    /// Value now.
    pub current: u64,
    /// Highest value since the device was opened or umdMemResetPeakStats.
    pub peak: u64,
    /// Sum of all increases.
    pub allocated: u64,
    /// Sum of all decreases.
    pub freed: u64,
}

/// Statistics of a device's memory pool. Versioned: set `struct_size = sizeof(umdMemStats)`
/// (at least `UMD_MEM_STATS_SIZE_V1`). Every device allocation of the process counts, including
/// libumd's own upload of each ended command buffer (one read-only buffer per command buffer).
/// Arrays are indexed by UMD_MEM_POOL_ALL / SMALL / LARGE.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umdMemStats {
    /// In: sizeof(umdMemStats).
    pub struct_size: u32,
    /// 0 when UMD_POOL=off (one kernel object per buffer, nothing cached).
    pub pool_enabled: u32,
    /// Bytes held by live buffers (size-class rounded).
    pub allocated_bytes: [umdMemCounter; 3],
    /// Bytes callers asked for.
    pub requested_bytes: [umdMemCounter; 3],
    /// Bytes of kernel objects the pool holds.
    pub reserved_bytes: [umdMemCounter; 3],
    /// Allocated bytes plus freed bytes a submitted job may still use (reuse waits for its
    /// fence).
    pub active_bytes: [umdMemCounter; 3],
    /// Reserved minus allocated: free and fence-pending blocks kept for reuse.
    pub cached_bytes: [umdMemCounter; 3],
    /// Live buffers.
    pub allocation_count: [umdMemCounter; 3],
    /// Kernel objects held.
    pub segment_count: [umdMemCounter; 3],
    /// Live plus fence-pending blocks.
    pub active_count: [umdMemCounter; 3],
    /// Free plus fence-pending blocks.
    pub cached_count: [umdMemCounter; 3],
    /// Successful allocations.
    pub num_allocs: u64,
    /// Frees.
    pub num_frees: u64,
    /// Allocations served from cached memory (no kernel call).
    pub num_cache_hits: u64,
    /// Allocations that needed a new kernel object.
    pub num_cache_misses: u64,
    /// Kernel objects created.
    pub num_kernel_allocs: u64,
    /// Kernel objects released.
    pub num_kernel_frees: u64,
    /// Every backend call (ioctl or mmap) the pool made.
    pub num_kernel_calls: u64,
    /// Allocations retried after out of memory released the cache.
    pub num_alloc_retries: u64,
    /// Allocations that failed with UMD_ERR_MEM_OUT_OF_MEMORY.
    pub num_ooms: u64,
    /// Frees deferred because a submitted job could still use the buffer.
    pub num_deferred_frees: u64,
    /// umdMemTrim calls.
    pub num_trims: u64,
    /// Kernel objects released by trims, the release threshold or out-of-memory recovery.
    pub num_segments_released: u64,
    /// Largest free block now.
    pub largest_free_block: u64,
    /// Free bytes in blocks smaller than the largest recent request (they cannot serve it).
    pub fragmentation_bytes: u64,
    /// Largest request (rounded) among the last 64 allocations.
    pub largest_recent_request: u64,
    /// Cached bytes the pool keeps at most (UINT64_MAX: no limit).
    pub release_threshold: u64,
    /// Capacity of the history ring (0: off; UMD_POOL_HISTORY).
    pub history_capacity: u64,
    /// Events recorded so far (the ring keeps the last history_capacity).
    pub history_events: u64,
    /// Device memory in total.
    pub device_total: u64,
    /// Device memory free now (all processes).
    pub device_free: u64,
}

/// Per-context memory accounting. Versioned: set `struct_size = sizeof(umdMemContextStats)`
/// (at least `UMD_MEM_CONTEXT_STATS_SIZE_V1`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umdMemContextStats {
    /// In: sizeof(umdMemContextStats).
    pub struct_size: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// The context's id (as in log lines: ctx=N).
    pub context_id: u64,
    /// Bytes of live buffers allocated on the context (rounded).
    pub allocated_bytes: umdMemCounter,
    /// Bytes asked for.
    pub requested_bytes: umdMemCounter,
    /// Live buffers.
    pub allocation_count: umdMemCounter,
    /// Allocations.
    pub num_allocs: u64,
    /// Frees.
    pub num_frees: u64,
    /// Allocations served from cached memory.
    pub num_cache_hits: u64,
}

/// What umdMemAllocEx allocates. Versioned: set `struct_size = sizeof(umdMemAllocInfo)` (at
/// least `UMD_MEM_ALLOC_INFO_SIZE_V1`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct umdMemAllocInfo {
    /// sizeof(umdMemAllocInfo).
    pub struct_size: u32,
    /// 0 or UMD_MEM_READ_ONLY.
    pub flags: u32,
    /// Bytes (> 0).
    pub size: u64,
    /// Alignment of the GPU address: 0 for the default (512 bytes), else a power of two (page
    /// size and larger are honoured too).
    pub alignment: u64,
    /// Optional NUL-terminated label for leak reports, the history and the log (copied; NULL:
    /// none).
    pub tag: *const c_char,
}

fn counter(c: &Counter) -> umdMemCounter {
    umdMemCounter {
        current: c.current,
        peak: c.peak,
        allocated: c.allocated,
        freed: c.freed,
    }
}

fn gauge(g: &Gauge) -> [umdMemCounter; 3] {
    [counter(&g.0[0]), counter(&g.0[1]), counter(&g.0[2])]
}

fn device_pool(device: umdDevice) -> UmdResult<(Arc<crate::device::Device>, Arc<Pool>)> {
    let dev = DEVICES.get(device)?;
    let pool = Pool::for_device(&dev)?;
    Ok((dev, pool))
}

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
    let caller = crate::caller!();
    guard_on("umdMemAlloc", On::Context(context), || {
        let buffer = out(buffer, "buffer")?;
        let req = crate::memory::AllocRequest {
            size,
            flags,
            caller,
            ..Default::default()
        };
        let b = crate::memory::Buffer::alloc_on(CONTEXTS.get(context)?, &req)?;
        *buffer = BUFFERS.insert_with(b, crate::memory::Buffer::set_handle);
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Allocates with an alignment and a tag (`info->struct_size = sizeof(umdMemAllocInfo)`).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemAllocEx(
    context: umdContext,
    info: *const umdMemAllocInfo,
    buffer: *mut umdBuffer,
) -> umdResult {
    let caller = crate::caller!();
    guard_on("umdMemAllocEx", On::Context(context), || {
        let buffer = out(buffer, "buffer")?;
        let i = inp(info, "info")?;
        struct_size(
            i.struct_size,
            UMD_MEM_ALLOC_INFO_SIZE_V1 as usize,
            "umdMemAllocInfo",
        )?;
        let ctx = CONTEXTS.get(context)?;
        let tag = if i.tag.is_null() {
            None
        } else {
            // SAFETY: a non-NULL tag is a NUL-terminated string (documented in umd.h).
            Some(unsafe { CStr::from_ptr(i.tag) }.to_string_lossy())
        };
        let req = crate::memory::AllocRequest {
            size: i.size,
            align: i.alignment,
            flags: i.flags,
            tag: tag.as_deref(),
            caller,
        };
        let b = crate::memory::Buffer::alloc_on(ctx, &req)?;
        *buffer = BUFFERS.insert_with(b, crate::memory::Buffer::set_handle);
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Frees the buffer whose GPU address is `address`, allocated on `context` (the device-pointer
/// style of frameworks). Errors: UMD_ERR_MEM_DOUBLE_FREE (already freed),
/// UMD_ERR_MEM_WRONG_CONTEXT (allocated on another context), UMD_ERR_MEM_INVALID_FREE (not the
/// start of a live buffer of this device: foreign, never allocated, or an interior address).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemFreeAddress(context: umdContext, address: umdDevicePtr) -> umdResult {
    let caller = crate::caller!();
    guard_on("umdMemFreeAddress", On::Context(context), || {
        let ctx = CONTEXTS.get(context)?;
        let e = |code, msg: String| Err(UmdError::new(code, msg).ctx(ctx.id).fault_va(address));
        match ctx.pool.classify(address) {
            AddrInfo::Live {
                buffer,
                handle,
                ctx_id,
            } => {
                if ctx_id != ctx.id {
                    return e(
                        umdResult::UMD_ERR_MEM_WRONG_CONTEXT,
                        format!("{address:#x} is buffer {buffer}, allocated on context {ctx_id}; it was freed through context {}. Free it on the context that allocated it.", ctx.id),
                    );
                }
                match BUFFERS.get(handle) {
                    Ok(b) if b.id == buffer => {
                        drop(b);
                        BUFFERS.remove(handle)?.set_free_caller(caller);
                        Ok(umdResult::UMD_SUCCESS)
                    }
                    _ => e(
                        umdResult::UMD_ERR_MEM_INVALID_FREE,
                        format!("{address:#x} is buffer {buffer}, an internal buffer of libumd (not one from umdMemAlloc)."),
                    ),
                }
            }
            AddrInfo::Interior {
                buffer,
                start,
                requested,
            } => e(
                umdResult::UMD_ERR_MEM_INVALID_FREE,
                format!("{address:#x} is {} bytes into buffer {buffer} ({requested} bytes at {start:#x}); free takes the buffer's start address.", address - start),
            ),
            AddrInfo::Freed(g) => e(
                umdResult::UMD_ERR_MEM_DOUBLE_FREE,
                format!("double free of {address:#x}: {}.", g.describe()),
            ),
            AddrInfo::Unknown { in_pool } => e(
                umdResult::UMD_ERR_MEM_INVALID_FREE,
                if in_pool {
                    format!("{address:#x} is pool memory not allocated to any buffer (never allocated, or freed more than {} frees ago).", crate::memory::pool::ghost_capacity())
                } else {
                    format!("{address:#x} was never allocated on this device (a foreign pointer, one from another device or device open, or garbage).")
                },
            ),
        }
    })
}

/// Frees a buffer. Freeing while submitted work still uses it is safe: the pool reuses the memory
/// only after that work's fence signals (but a later submit that uses it fails with
/// UMD_ERR_MEM_USE_AFTER_FREE).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemFree(buffer: umdBuffer) -> umdResult {
    let caller = crate::caller!();
    guard_on("umdMemFree", On::Buffer(buffer), || {
        BUFFERS.remove(buffer)?.set_free_caller(caller);
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// The buffer's GPU virtual address (for recording commands).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemGetAddress(buffer: umdBuffer, address: *mut umdDevicePtr) -> umdResult {
    guard_on("umdMemGetAddress", On::Buffer(buffer), || {
        let address = out(address, "address")?;
        *address = BUFFERS.get(buffer)?.va;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Maps the buffer for CPU access (the same pointer on every call; balance with umdMemUnmap).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemMap(buffer: umdBuffer, host: *mut *mut c_void) -> umdResult {
    guard_on("umdMemMap", On::Buffer(buffer), || {
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
    guard_on("umdMemUnmap", On::Buffer(buffer), || {
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
    guard_on("umdMemcpyHtoD", On::Buffer(buffer), || {
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
    guard_on("umdMemcpyDtoH", On::Buffer(buffer), || {
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

/// Fills `*stats` with the statistics of `device`'s memory pool (set `stats->struct_size`).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemGetStats(device: umdDevice, stats: *mut umdMemStats) -> umdResult {
    guard("umdMemGetStats", || {
        let dst = out(stats, "stats")?;
        struct_size(
            dst.struct_size,
            UMD_MEM_STATS_SIZE_V1 as usize,
            "umdMemStats",
        )?;
        let (dev, pool) = device_pool(device)?;
        let s = pool.stats();
        let used = dev.backend.query().map(|q| q.mem_used).unwrap_or(0);
        let v = umdMemStats {
            struct_size: std::mem::size_of::<umdMemStats>() as u32,
            pool_enabled: s.pool_enabled as u32,
            allocated_bytes: gauge(&s.allocated_bytes),
            requested_bytes: gauge(&s.requested_bytes),
            reserved_bytes: gauge(&s.reserved_bytes),
            active_bytes: gauge(&s.active_bytes),
            cached_bytes: gauge(&s.cached_bytes),
            allocation_count: gauge(&s.allocation_count),
            segment_count: gauge(&s.segment_count),
            active_count: gauge(&s.active_count),
            cached_count: gauge(&s.cached_count),
            num_allocs: s.num_allocs,
            num_frees: s.num_frees,
            num_cache_hits: s.num_cache_hits,
            num_cache_misses: s.num_cache_misses,
            num_kernel_allocs: s.num_kernel_allocs,
            num_kernel_frees: s.num_kernel_frees,
            num_kernel_calls: s.num_kernel_calls,
            num_alloc_retries: s.num_alloc_retries,
            num_ooms: s.num_ooms,
            num_deferred_frees: s.num_deferred_frees,
            num_trims: s.num_trims,
            num_segments_released: s.num_segments_released,
            largest_free_block: s.largest_free_block,
            fragmentation_bytes: s.fragmentation_bytes,
            largest_recent_request: s.largest_recent_request,
            release_threshold: s.release_threshold,
            history_capacity: s.history_capacity,
            history_events: s.history_events,
            device_total: dev.info.mem_total,
            device_free: dev.info.mem_total.saturating_sub(used),
        };
        copy_versioned(&v, stats, dst.struct_size);
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Fills `*stats` with the memory accounting of `context` (set `stats->struct_size`).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemGetContextStats(
    context: umdContext,
    stats: *mut umdMemContextStats,
) -> umdResult {
    guard_on("umdMemGetContextStats", On::Context(context), || {
        let dst = out(stats, "stats")?;
        struct_size(
            dst.struct_size,
            UMD_MEM_CONTEXT_STATS_SIZE_V1 as usize,
            "umdMemContextStats",
        )?;
        let ctx = CONTEXTS.get(context)?;
        let s = ctx.pool.ctx_stats(ctx.acct);
        let v = umdMemContextStats {
            struct_size: std::mem::size_of::<umdMemContextStats>() as u32,
            reserved: 0,
            context_id: ctx.id,
            allocated_bytes: counter(&s.allocated_bytes),
            requested_bytes: counter(&s.requested_bytes),
            allocation_count: counter(&s.allocation_count),
            num_allocs: s.num_allocs,
            num_frees: s.num_frees,
            num_cache_hits: s.num_cache_hits,
        };
        copy_versioned(&v, stats, dst.struct_size);
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Sets every peak of the device's pool statistics (and of its contexts) to the current value.
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemResetPeakStats(device: umdDevice) -> umdResult {
    guard("umdMemResetPeakStats", || {
        let (_, pool) = device_pool(device)?;
        pool.reset_peaks();
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Returns cached memory to the kernel until at most `keep_bytes` stay cached (0: everything
/// that can go). Only whole kernel objects with no live buffer can go, and blocks that submitted
/// work may still use stay until their fence signals. `*released_bytes` (may be NULL) receives
/// what was released.
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemTrim(
    device: umdDevice,
    keep_bytes: u64,
    released_bytes: *mut u64,
) -> umdResult {
    guard("umdMemTrim", || {
        let (dev, pool) = device_pool(device)?;
        dev.check()?;
        let r = pool.trim(&dev, keep_bytes);
        if !released_bytes.is_null() {
            *out(released_bytes, "released_bytes")? = r;
        }
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Keeps at most `bytes` cached: after each free, cached kernel objects beyond it are released
/// (UINT64_MAX: no limit, the default; UMD_POOL_RELEASE_THRESHOLD sets it at start). Applies
/// now too.
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemSetReleaseThreshold(device: umdDevice, bytes: u64) -> umdResult {
    guard("umdMemSetReleaseThreshold", || {
        let (dev, pool) = device_pool(device)?;
        pool.set_release_threshold(&dev, bytes);
        crate::log::story::set_by_api(
            "pool_release_threshold",
            &bytes.to_string(),
            "umdMemSetReleaseThreshold",
        );
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Copies the allocation history (UMD_POOL_HISTORY=N; one JSON object per line, oldest first,
/// NUL-terminated) into `buf`. `*written` receives the bytes needed including the NUL; with
/// `buf` NULL and `buf_size` 0 only that size is returned. A too small buffer fails with
/// UMD_ERR_INVALID_SIZE (nothing written). With the history off the text is empty.
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemDumpHistory(
    device: umdDevice,
    buf: *mut c_char,
    buf_size: u64,
    written: *mut u64,
) -> umdResult {
    guard("umdMemDumpHistory", || {
        let written = out(written, "written")?;
        let (_, pool) = device_pool(device)?;
        let text = pool.history_json();
        let need = text.len() as u64 + 1;
        *written = need;
        if buf.is_null() && buf_size == 0 {
            return Ok(umdResult::UMD_SUCCESS);
        }
        let _ = out(buf, "buf")?;
        if buf_size < need {
            crate::bail!(
                UMD_ERR_INVALID_SIZE,
                "the history needs {need} bytes (with the NUL); buf_size is {buf_size}."
            );
        }
        // SAFETY: buf is non-NULL and the caller promises buf_size >= need writable bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, text.len());
            *buf.add(text.len()) = 0;
        }
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Writes the allocation history as JSON lines to the file `path` (created or truncated).
#[no_mangle]
#[must_use]
pub extern "C" fn umdMemDumpHistoryToFile(device: umdDevice, path: *const c_char) -> umdResult {
    guard("umdMemDumpHistoryToFile", || {
        let _ = inp(path, "path")?;
        // SAFETY: path is a non-NULL NUL-terminated string (caller contract).
        let p = unsafe { CStr::from_ptr(path) }
            .to_string_lossy()
            .into_owned();
        let (_, pool) = device_pool(device)?;
        std::fs::write(&p, pool.history_json()).map_err(|e| {
            UmdError::new(
                umdResult::UMD_ERR_INVALID_ARGUMENT,
                format!("cannot write the history to {p:?}: {e}."),
            )
        })?;
        Ok(umdResult::UMD_SUCCESS)
    })
}
