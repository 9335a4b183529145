//! Device memory: a buffer is a block of the device's caching pool ([`pool`]): a size-class
//! rounded piece of a GEM object bound into the device's GPU address space, with a persistent CPU
//! mapping of its kernel object made on first use (the device shares system memory, so
//! host<->device copies are CPU copies through that mapping).
//!
//! Every alloc and free is logged at INFO with the buffer id, size, VA and context, so a log
//! reader can pair them per context (docs/memory.md).

mod ids;
pub mod leaks;
mod oom;
pub mod pool;
pub mod va;

use crate::caller::{Caller, Callers};
use crate::context::Context;
use crate::device::Device;
use crate::error::{umdResult, UmdError, UmdResult};
use pool::history::Site;
use pool::size_class::{PoolKind, MIN_BLOCK};
use pool::{FreeNote, Grant, Pool, Request};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `umdMemAlloc` flag: the GPU may only read the buffer (writes fault).
pub const MEM_FLAG_READ_ONLY: u32 = 1 << 0;
/// Every defined `umdMemAlloc` flag.
pub const MEM_FLAGS_ALL: u32 = MEM_FLAG_READ_ONLY;

/// When a buffer was allocated (a coarse monotonic clock: a few ns, ms resolution).
#[derive(Clone, Copy, Debug)]
pub struct Born(u64);

impl Born {
    /// Now.
    pub fn now() -> Born {
        Born(pool::coarse_now_ns())
    }
    /// Time since.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(pool::coarse_now_ns().saturating_sub(self.0))
    }
}

/// What to allocate (the Rust side of `umdMemAllocInfo`).
#[derive(Clone, Debug, Default)]
pub struct AllocRequest<'a> {
    /// Bytes (> 0).
    pub size: u64,
    /// Alignment of the GPU address: 0 for the default (512 bytes), else a power of two.
    pub align: u64,
    /// `MEM_FLAG_*`.
    pub flags: u32,
    /// A label for leak reports, the history and the log.
    pub tag: Option<&'a str>,
    /// The application's call (the C ABI entry's return address; 0 for libumd's own).
    pub caller: Caller,
}

/// A shared reference to a buffer (what the handle table keeps and hands out): nothing holds a
/// buffer weakly, so it is `triomphe`'s `Arc`, one locked instruction cheaper to release than
/// the standard library's (docs/memory.md, "What a pair costs").
pub type BufferRef = triomphe::Arc<Buffer>;

/// A block the pool granted to a new buffer, with what the buffer keeps of the request.
struct Granted {
    id: u64,
    grant: Grant,
    tag: Option<Arc<str>>,
    site: Option<Arc<Site>>,
}

/// One device buffer.
pub struct Buffer {
    /// Process-unique id (logs: pairs alloc with free).
    pub id: u64,
    /// The context it was allocated on: its device, its pool and its account slot. The buffer
    /// holds the context's reference rather than one each to the device and the pool: the C
    /// entry point's handle lookup already took it, so a buffer costs no reference count of its
    /// own (docs/memory.md, "What a pair costs"). The context's teardown does not wait for its
    /// buffers: `Context::close` frees them and clears the jobs' references.
    ctx: Arc<Context>,
    /// Context id (accounting, leak reports).
    pub ctx_id: u64,
    /// Bytes the caller asked for.
    pub size: u64,
    /// Bytes reserved for it (its size class).
    pub alloc_size: u64,
    /// GPU VA.
    pub va: u64,
    /// When it was allocated (leak reports: age).
    pub born: Born,
    /// Allocation tag.
    pub tag: Option<Arc<str>>,
    /// Where it was allocated (history on).
    pub site: Option<Arc<Site>>,
    /// Pool it came from.
    pub kind: PoolKind,
    /// Served from cached memory.
    pub hit: bool,
    /// The application's allocating call (0: libumd's own buffer).
    pub caller: Caller,
    /// The application's freeing call, set by the C ABI just before the last reference goes.
    free_caller: AtomicUsize,
    grant: Grant,
    host: AtomicPtr<u8>,
    map_count: AtomicU32,
}

impl Buffer {
    /// What the handle table keeps of a destroyed buffer for the error of a later use of its
    /// handle (`crate::registry::BUFFERS`): its VA, id and context.
    pub fn tombstone(&self) -> [u64; 3] {
        [self.va, self.id, self.ctx_id]
    }

    /// The destroyed buffer a tombstone names, with where it was allocated and freed.
    pub fn describe_tombstone(kept: [u64; 3]) -> Option<String> {
        pool::describe_freed(kept[0], kept[1])
    }

    /// Allocates `size` bytes on `ctx`'s device.
    #[track_caller]
    pub fn alloc(ctx: &Arc<Context>, size: u64, flags: u32) -> UmdResult<Buffer> {
        Buffer::alloc_ex(
            ctx,
            &AllocRequest {
                size,
                flags,
                ..Default::default()
            },
        )
    }

    /// Allocates with an alignment and a tag.
    #[track_caller]
    pub fn alloc_ex(ctx: &Arc<Context>, r: &AllocRequest) -> UmdResult<Buffer> {
        Buffer::alloc_into(ctx.clone(), r, std::convert::identity)
    }

    /// Allocates on `ctx`, keeping the caller's reference to it (the C entry points hand over
    /// the one their handle lookup took), straight into the shared reference the handle table
    /// keeps (built in place: no copy of the buffer on the way).
    #[track_caller]
    pub fn alloc_on(ctx: Arc<Context>, r: &AllocRequest) -> UmdResult<BufferRef> {
        Buffer::alloc_into(ctx, r, BufferRef::new)
    }

    /// The buffer `r` asks for on `ctx`, handed to `into`. Out of memory also logs the `oom`
    /// record (who holds the device's memory: [`oom::said`]).
    #[inline(always)]
    #[track_caller]
    fn alloc_into<R>(
        ctx: Arc<Context>,
        r: &AllocRequest,
        into: impl FnOnce(Buffer) -> R,
    ) -> UmdResult<R> {
        let Granted {
            id,
            grant: g,
            tag,
            site,
        } = match Buffer::take_block(&ctx, r, std::panic::Location::caller()) {
            Ok(granted) => granted,
            Err(e) => {
                oom::said(&ctx, r.size, &e);
                return Err(e);
            }
        };
        Ok(into(Buffer {
            id,
            ctx_id: ctx.id,
            size: r.size,
            alloc_size: g.size,
            va: g.va,
            born: Born::now(),
            tag,
            site,
            kind: g.kind,
            hit: g.hit,
            caller: r.caller,
            free_caller: AtomicUsize::new(0),
            grant: g,
            host: AtomicPtr::new(std::ptr::null_mut()),
            map_count: AtomicU32::new(0),
            ctx,
        }))
    }

    /// Validates the request, takes a block from the pool and logs the `alloc` record.
    #[inline(always)]
    fn take_block(
        ctx: &Context,
        r: &AllocRequest,
        caller: &'static std::panic::Location<'static>,
    ) -> UmdResult<Granted> {
        let dev = &ctx.device;
        dev.check()?;
        let (size, flags) = (r.size, r.flags);
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
        let limit = dev.info.max_bo_size.min(total);
        if r.align != 0 && (!r.align.is_power_of_two() || r.align > limit) {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_ARGUMENT,
                format!(
                    "alignment {} is not a power of two no larger than the device's largest object ({limit} bytes); use 0 for the default ({MIN_BLOCK} bytes).",
                    r.align
                ),
            )
            .ctx(ctx.id));
        }
        match size.checked_next_multiple_of(uapi::PAGE_SIZE) {
            Some(s) if s <= limit => {}
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
        }
        let pool = &ctx.pool;
        let site = pool.history_on().then(|| Arc::new(Site::capture(caller)));
        let tag: Option<Arc<str>> = r.tag.map(Arc::from);
        let id = ids::next();
        let g = pool.alloc(
            dev,
            &Request {
                size,
                align: r.align.max(MIN_BLOCK),
                read_only: flags & MEM_FLAG_READ_ONLY != 0,
                buffer_id: id,
                ctx_id: ctx.id,
                acct: ctx.acct,
                tag: tag.clone(),
                site: site.clone(),
            },
        )?;
        crate::record!(
            INFO,
            "alloc",
            ctx = ctx.id,
            buffer = id,
            size,
            va = g.va,
            class = g.size,
            pool = g.kind.name(),
            hit = g.hit,
            tag = tag.as_deref().unwrap_or(""),
            caller = r.caller.0 as u64,
        );
        Ok(Granted {
            id,
            grant: g,
            tag,
            site,
        })
    }

    /// The device it lives on.
    pub fn device(&self) -> &Arc<Device> {
        &self.ctx.device
    }

    /// Records the application's freeing call (the C ABI, before it drops its reference).
    pub fn set_free_caller(&self, c: Caller) {
        self.free_caller.store(c.0, Ordering::Relaxed);
    }

    /// The pool block (submit: the command buffer's own packets).
    pub fn block(&self) -> u32 {
        self.grant.block
    }

    /// The pool it came from.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.ctx.pool
    }

    /// Registers the C handle (for free by address).
    pub fn set_handle(&self, handle: u64) {
        self.ctx.pool.set_handle(&self.grant, handle);
    }

    /// The persistent CPU mapping, created on first use.
    fn host(&self) -> UmdResult<*mut u8> {
        let p = self.host.load(Ordering::Acquire);
        if !p.is_null() {
            return Ok(p);
        }
        let p = self
            .ctx
            .pool
            .host_ptr(&self.ctx.device, self.grant.seg, self.grant.offset)?;
        self.host.store(p, Ordering::Release);
        Ok(p)
    }

    /// `umdMemMap`: the CPU address of the buffer (the same on every call).
    pub fn map(&self) -> UmdResult<*mut u8> {
        self.ctx.device.check()?;
        let p = self.host()?;
        self.map_count.fetch_add(1, Ordering::AcqRel);
        Ok(p)
    }

    /// `umdMemUnmap`: balances one `map`.
    pub fn unmap(&self) -> UmdResult<()> {
        if self
            .map_count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_err()
        {
            crate::bail!(
                UMD_ERR_MEM_NOT_MAPPED,
                "buffer {} (VA 0x{:x}) is not mapped: umdMemUnmap without a matching umdMemMap.",
                self.id,
                self.va
            );
        }
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
        self.ctx.device.check()?;
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
        self.ctx.device.check()?;
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
        // The block goes back to the pool; it is reused only after every job that used it has
        // completed (the pool gates reuse on their fences), and its kernel object stays mapped.
        let site = self
            .ctx
            .pool
            .history_on()
            .then(|| Arc::new(Site::capture(std::panic::Location::caller())));
        let free = Caller(self.free_caller.load(Ordering::Relaxed));
        self.ctx.pool.free(
            &self.ctx.device,
            &self.grant,
            FreeNote {
                at_ns: pool::coarse_now_ns(),
                site,
                callers: Callers {
                    alloc: self.caller,
                    free,
                },
            },
        );
        crate::record!(
            INFO,
            "free",
            ctx = self.ctx_id,
            buffer = self.id,
            size = self.size,
            va = self.va,
            caller = free.0 as u64,
        );
    }
}
