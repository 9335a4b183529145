//! Device memory: a buffer is a GEM object bound into the device's GPU address space, with an
//! optional persistent CPU mapping (the device shares system memory, so host<->device copies
//! are CPU copies through that mapping). The caching pool of issue 6 sits above this layer.

pub mod va;

use crate::backend::HostMap;
use crate::context::Context;
use crate::device::Device;
use crate::errmap::Op;
use crate::error::{umdResult, UmdError, UmdResult};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use uapi::ioctl::{VM_ACCESS_READ, VM_ACCESS_WRITE};

static NEXT_BUFFER_ID: AtomicU64 = AtomicU64::new(1);

/// `umdMemAlloc` flag: the GPU may only read the buffer (writes fault).
pub const MEM_FLAG_READ_ONLY: u32 = 1 << 0;
/// Every defined `umdMemAlloc` flag.
pub const MEM_FLAGS_ALL: u32 = MEM_FLAG_READ_ONLY;

/// One device buffer.
pub struct Buffer {
    /// Process-unique id (logs: pairs alloc with free).
    pub id: u64,
    /// Device it lives on.
    pub device: Arc<Device>,
    /// Context it was allocated on (accounting, leak reports).
    pub ctx_id: u64,
    /// Bytes the caller asked for.
    pub size: u64,
    /// Bytes reserved (page multiple).
    pub alloc_size: u64,
    /// GPU VA.
    pub va: u64,
    gem: u32,
    host: Mutex<Option<HostMap>>,
    map_count: Mutex<u32>,
    /// When it was allocated (leak reports: age).
    pub born: Instant,
}

impl Buffer {
    /// Allocates `size` bytes on `ctx`'s device and binds them at a fresh VA.
    pub fn alloc(ctx: &Context, size: u64, flags: u32) -> UmdResult<Buffer> {
        let dev = &ctx.device;
        dev.check()?;
        if flags & !MEM_FLAGS_ALL != 0 {
            crate::bail!(
                UMD_ERR_INVALID_FLAGS,
                "umdMemAlloc flags 0x{flags:x} has unknown bits (defined: 0x{MEM_FLAGS_ALL:x})."
            );
        }
        if size == 0 {
            crate::bail!(UMD_ERR_INVALID_SIZE, "requested size is 0 bytes.");
        }
        let total = dev.info.mem_total;
        let alloc_size = match size.checked_next_multiple_of(uapi::PAGE_SIZE) {
            Some(s) if s <= dev.info.max_bo_size.min(total) => s,
            _ => {
                return Err(UmdError::new(
                    umdResult::UMD_ERR_MEM_TOO_LARGE,
                    format!(
                        "requested {size} bytes but the device has {total} bytes in all and its largest object is {} bytes; this request can never succeed.",
                        dev.info.max_bo_size
                    ),
                )
                .ctx(ctx.id));
            }
        };
        let gem = dev.backend.gem_create(alloc_size).map_err(|e| {
            let mut err = dev.fail(Op::Memory, e, &format!("GEM create of {alloc_size} bytes"));
            if err.code == umdResult::UMD_ERR_MEM_OUT_OF_MEMORY {
                let used = dev.backend.query().map(|q| q.mem_used).unwrap_or(0);
                err.message = format!(
                    "out of device memory: requested {size} bytes ({alloc_size} reserved), device total {total} bytes, in use {used} bytes, free {} bytes. {}",
                    total.saturating_sub(used),
                    err.message
                );
            }
            err.ctx(ctx.id)
        })?;
        let access = if flags & MEM_FLAG_READ_ONLY != 0 {
            VM_ACCESS_READ
        } else {
            VM_ACCESS_READ | VM_ACCESS_WRITE
        };
        let va = dev
            .va
            .lock()
            .ok()
            .and_then(|mut v| v.alloc(alloc_size, uapi::PAGE_SIZE));
        let Some(va) = va else {
            let _ = dev.backend.gem_close(gem);
            crate::bail!(
                UMD_ERR_MEM_OUT_OF_MEMORY,
                "GPU virtual address space exhausted for {alloc_size} bytes."
            );
        };
        if let Err(e) = dev.backend.vm_bind(gem, va, 0, alloc_size, access) {
            if let Ok(mut v) = dev.va.lock() {
                v.free(va, alloc_size);
            }
            let _ = dev.backend.gem_close(gem);
            return Err(dev
                .fail(
                    Op::Memory,
                    e,
                    &format!("VM bind of {alloc_size} bytes at 0x{va:x}"),
                )
                .ctx(ctx.id));
        }
        let id = NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            ctx = ctx.id,
            buffer = id,
            size,
            va = format_args!("{va:#x}"),
            "alloc"
        );
        Ok(Buffer {
            id,
            device: dev.clone(),
            ctx_id: ctx.id,
            size,
            alloc_size,
            va,
            gem,
            host: Mutex::new(None),
            map_count: Mutex::new(0),
            born: Instant::now(),
        })
    }

    /// The persistent CPU mapping, created on first use.
    fn host(&self) -> UmdResult<*mut u8> {
        let mut h = self
            .host
            .lock()
            .map_err(|_| UmdError::new(umdResult::UMD_ERR_INTERNAL, "buffer lock poisoned"))?;
        if let Some(m) = *h {
            return Ok(m.ptr);
        }
        let m = self
            .device
            .backend
            .gem_mmap(self.gem, self.alloc_size)
            .map_err(|e| self.device.fail(Op::Memory, e, "CPU mapping of a buffer"))?;
        *h = Some(m);
        Ok(m.ptr)
    }

    /// `umdMemMap`: the CPU address of the buffer (the same on every call).
    pub fn map(&self) -> UmdResult<*mut u8> {
        self.device.check()?;
        let p = self.host()?;
        if let Ok(mut n) = self.map_count.lock() {
            *n += 1;
        }
        Ok(p)
    }

    /// `umdMemUnmap`: balances one `map`.
    pub fn unmap(&self) -> UmdResult<()> {
        let mut n = self
            .map_count
            .lock()
            .map_err(|_| UmdError::new(umdResult::UMD_ERR_INTERNAL, "lock poisoned"))?;
        if *n == 0 {
            crate::bail!(
                UMD_ERR_MEM_NOT_MAPPED,
                "buffer {} (VA 0x{:x}) is not mapped: umdMemUnmap without a matching umdMemMap.",
                self.id,
                self.va
            );
        }
        *n -= 1;
        Ok(())
    }

    /// Checks a copy range before any pointer is formed from it.
    pub fn check_copy(&self, offset: u64, len: u64) -> UmdResult<()> {
        self.check_range(offset, len)
            .map_err(|e| e.ctx(self.ctx_id))
    }

    fn check_range(&self, offset: u64, len: u64) -> UmdResult<()> {
        if len == 0 {
            crate::bail!(UMD_ERR_INVALID_SIZE, "copy size is 0 bytes.");
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_RANGE,
                format!(
                    "offset {offset} + size {len} runs past the end of the {}-byte buffer {}.",
                    self.size, self.id
                ),
            )),
        }
    }

    /// Host -> device copy (CPU copy through the mapping: the device shares system memory).
    pub fn write(&self, offset: u64, src: &[u8]) -> UmdResult<()> {
        self.device.check()?;
        self.check_range(offset, src.len() as u64)?;
        let p = self.host()?;
        // SAFETY: [offset, offset+len) lies inside the buffer (checked above) and the mapping
        // covers alloc_size >= size bytes; src is a valid slice that cannot overlap device
        // memory handed out by this allocator.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p.add(offset as usize), src.len()) };
        Ok(())
    }

    /// Device -> host copy.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> UmdResult<()> {
        self.device.check()?;
        self.check_range(offset, dst.len() as u64)?;
        let p = self.host()?;
        // SAFETY: as in `write`.
        unsafe {
            std::ptr::copy_nonoverlapping(p.add(offset as usize), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Ok(mut h) = self.host.lock() {
            if let Some(m) = h.take() {
                let _ = self.device.backend.gem_munmap(m);
            }
        }
        // After device loss the kernel objects go with the file; unbinding would only fail.
        if !self.device.is_lost() {
            let _ = self.device.backend.vm_unbind(self.va, self.alloc_size);
        }
        if let Ok(mut v) = self.device.va.lock() {
            v.free(self.va, self.alloc_size);
        }
        let _ = self.device.backend.gem_close(self.gem);
        tracing::info!(
            ctx = self.ctx_id,
            buffer = self.id,
            size = self.size,
            va = format_args!("{:#x}", self.va),
            "free"
        );
    }
}
