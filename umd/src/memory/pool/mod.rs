//! The caching buffer pool (design §6, issue 6).
//!
//! One pool per open device (per GPU address space), shared by its contexts, behind one mutex
//! (the model of PyTorch's CUDA caching allocator), with a small cache per context in front of it
//! that serves the hit path without that mutex ([`cache`]: exact statistics, fence-gated reuse
//! and validation unchanged). Requests are rounded to size classes
//! ([`size_class`]); small ones are sub-allocated from 2 MiB slabs, large ones get their own
//! kernel object; freed blocks are kept, coalesced with free neighbours and reused best-fit
//! ([`block::Bins`]); a block freed while a submitted job may still use it waits for that job's
//! fence before it is reused. Everything goes through the [`Backend`](crate::backend::Backend)
//! trait, so the pool runs unchanged over the simulator and the kernel driver.
//!
//! Submit validation: a command buffer's memory accesses are collected at `umdCmdBufEnd`
//! (sorted by address); at submit [`Pool::check_and_pin`] maps each to its block through a
//! sorted index of segments, rejects accesses to freed memory or past the end of a buffer, and
//! pins the blocks; after the kernel accepted the job, [`Pool::stamp`] records (context, seqno)
//! on each, which is what gates their reuse.

pub mod block;
mod cache;
pub mod config;
pub mod history;
pub mod size_class;
pub mod slab;
pub mod stats;

use crate::backend::KmdError;
use crate::device::Device;
use crate::errmap::{code_for, Op};
use crate::error::{umdResult, UmdError, UmdResult};
use block::{Bins, Block, State, NIL};
use cache::{Budget, Cache, Slot, CACHES, DIMS};
use config::Config;
use history::{Event, EventKind, History, Site};
use size_class::{pool_for, round, PoolKind, SLAB_SIZE};
use slab::Segment;
use stats::{human, CtxStats, Stats};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use uapi::ioctl::{VM_ACCESS_READ, VM_ACCESS_WRITE};

const PAGE: u64 = uapi::PAGE_SIZE;
/// Most blocks kept on quick lists (uncoalesced) per bin set.
const QUICK_MAX: usize = 4096;
/// Freed buffers remembered for use-after-free and double-free reports.
pub(crate) const GHOSTS: usize = 1024;
/// How long out-of-memory recovery waits for the fences of deferred frees.
const OOM_FENCE_WAIT_NS: u64 = 10_000_000_000;

/// Completion of one context's jobs as the pool sees it (updated by every wait and query on the
/// context, and by the pool's own polls).
#[derive(Debug, Default)]
pub struct Timeline {
    /// Highest completed sequence number seen.
    pub completed: AtomicU64,
    /// The context was reset as guilty: its jobs will never run again.
    pub lost: AtomicBool,
}

impl Timeline {
    /// Notes that every job up to `seqno` completed.
    pub fn complete(&self, seqno: u64) {
        self.completed.fetch_max(seqno, Ordering::AcqRel);
    }
}

/// One memory access of a recorded command buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    /// First byte.
    pub va: u64,
    /// Bytes.
    pub len: u64,
    /// Byte offset of the packet in its command buffer.
    pub offset: u32,
    /// Written (else read).
    pub write: bool,
}

/// What an allocation asks for.
#[derive(Clone, Debug)]
pub struct Request {
    /// Bytes (> 0).
    pub size: u64,
    /// Alignment (power of two, >= 512).
    pub align: u64,
    /// Bind read-only.
    pub read_only: bool,
    /// The buffer's id (logs, history, reports).
    pub buffer_id: u64,
    /// Context id.
    pub ctx_id: u64,
    /// Account slot of the context.
    pub acct: u32,
    /// Allocation tag.
    pub tag: Option<Arc<str>>,
    /// Call site (history on).
    pub site: Option<Arc<Site>>,
}

/// What the pool handed out. (Laid out as three 16-byte units: a hit copies it whole, and the
/// caller's wide loads then forward from wide stores instead of stalling on narrow ones.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct Grant {
    /// Block id (give it back to [`Pool::free`]).
    pub block: u32,
    /// Segment.
    pub seg: u32,
    /// Account slot of the allocating context.
    pub acct: u32,
    /// Slot in that context's cache (`u32::MAX`: not delegated).
    pub slot: u32,
    /// Offset in the segment.
    pub offset: u64,
    /// GPU VA.
    pub va: u64,
    /// Block bytes (the size class).
    pub size: u64,
    /// Pool.
    pub kind: PoolKind,
    /// Served from cached memory (no kernel call).
    pub hit: bool,
}

/// When and where a free happened.
#[derive(Clone, Debug, Default)]
pub struct FreeNote {
    /// CLOCK_MONOTONIC(_COARSE) ns, 0 if unknown.
    pub at_ns: u64,
    /// Call site (history on).
    pub site: Option<Arc<Site>>,
}

/// A freed buffer, remembered for reports.
#[derive(Clone, Debug)]
pub struct Ghost {
    /// VA.
    pub va: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// Block bytes.
    pub size: u64,
    /// Buffer id.
    pub buffer: u64,
    /// Context it was allocated on.
    pub ctx_id: u64,
    /// Pool event number of the free.
    pub seq: u64,
    /// When.
    pub at_ns: u64,
    /// Where (history on).
    pub site: Option<Arc<Site>>,
}

impl Ghost {
    /// "buffer 12 (512 bytes at VA 0x200000, context 3), freed 4 ms ago at <site>".
    pub fn describe(&self) -> String {
        // seq 0: freed in a context cache, which does not number events (the history is off).
        let ms = coarse_now_ns().saturating_sub(self.at_ns) as f64 / 1e6;
        let when = match (self.at_ns, self.seq) {
            (0, 0) => "at an unrecorded time".to_string(),
            (_, 0) => format!("{ms:.1} ms ago"),
            (0, seq) => format!("at pool event #{seq}"),
            (_, seq) => format!("{ms:.1} ms ago (pool event #{seq})"),
        };
        let site = match &self.site {
            Some(s) => format!(" at {}", s.describe()),
            None => " (set UMD_POOL_HISTORY=N to record where)".into(),
        };
        format!(
            "buffer {} ({} bytes at VA {:#x}, allocated on context {}), freed {when}{site}",
            self.buffer, self.requested, self.va, self.ctx_id
        )
    }
}

/// What an address is, for free-by-address.
#[derive(Clone, Debug)]
pub enum AddrInfo {
    /// The start of a live buffer.
    Live {
        /// Buffer id.
        buffer: u64,
        /// C handle, if registered.
        handle: u64,
        /// Context it was allocated on.
        ctx_id: u64,
    },
    /// Inside a live buffer, not at its start.
    Interior {
        /// Buffer id.
        buffer: u64,
        /// Its start.
        start: u64,
        /// Bytes asked for.
        requested: u64,
    },
    /// A freed buffer's address (most recent free first).
    Freed(Ghost),
    /// Pool memory never handed out, or not pool memory at all.
    Unknown {
        /// True if the address lies in a segment of this pool.
        in_pool: bool,
    },
}

/// A block's fields as validation reads them (see `Inner::view`).
struct BlockView {
    state: State,
    seg: u32,
    offset: u64,
    buffer: u64,
    requested: u64,
    ctx_id: u64,
    handle: u64,
}

struct Account {
    ctx_id: u64,
    kmd_id: u32,
    timeline: Arc<Timeline>,
    live: bool,
    stats: CtxStats,
}

enum SegErr {
    Oom(Option<KmdError>, String),
    Other(UmdError),
}

struct Inner {
    enabled: bool,
    blocks: Vec<Block>,
    free_slots: Vec<u32>,
    segs: Vec<Segment>,
    free_segs: Vec<u32>,
    index: BTreeMap<u64, u32>,
    bins: [Bins; 4],
    pending: VecDeque<u32>,
    empty: VecDeque<(u32, u64)>,
    accounts: Vec<Account>,
    free_accounts: Vec<u32>,
    stats: Stats,
    ghosts: Vec<Ghost>,
    ghost_at: usize,
    handles: Vec<u64>,
    history: Option<History>,
    recent: [u64; 64],
    recent_at: usize,
    seq: u64,
    scratch: Vec<u32>,
    last_mark: (u64, u64, u64, usize),
    unpins: u64,
    /// The context caches (also reached without this mutex: see [`cache`]).
    caches: Arc<[Cache]>,
    /// Caches may serve (pool on, history off, no release threshold).
    fast: bool,
    /// Account slots < CACHES of registered contexts.
    registered: u64,
    /// Tokens the caches hold (see `cache.rs`).
    tokens: u64,
    /// Free blocks taken back from caches (a reused buffer).
    flushed: Vec<cache::Parked>,
    /// Account of the context whose allocation or free is running.
    acct: u32,
}

/// A device's pool.
pub struct Pool {
    /// The device it belongs to.
    pub device_id: u64,
    device: Weak<Device>,
    /// Settings.
    pub config: Config,
    release_threshold: AtomicU64,
    caches: Arc<[Cache]>,
    inner: Mutex<Inner>,
}

static POOLS: Mutex<Vec<Arc<Pool>>> = Mutex::new(Vec::new());

fn pools() -> MutexGuard<'static, Vec<Arc<Pool>>> {
    let mut v = POOLS.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|p| p.device.strong_count() > 0);
    v
}

/// How many freed buffers the pool remembers for reports.
pub fn ghost_capacity() -> usize {
    GHOSTS
}

/// CLOCK_MONOTONIC_COARSE in ns (a few ns: good enough for ages and "freed N ms ago").
pub fn coarse_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; the clock exists on every Linux since 2.6.32.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn bin_of(kind: PoolKind, ro: bool) -> usize {
    (kind == PoolKind::Large) as usize * 2 + ro as usize
}

impl Pool {
    /// The pool of `dev`, created on first use with the settings of the environment
    /// (`UMD_ERR_INIT_BAD_CONFIG` naming the variable if one does not parse).
    pub fn for_device(dev: &Arc<Device>) -> UmdResult<Arc<Pool>> {
        let mut v = pools();
        if let Some(p) = v.iter().find(|p| p.device_id == dev.id) {
            return Ok(p.clone());
        }
        let p = Arc::new(Pool::new(dev, Config::from_env()?));
        v.push(p.clone());
        Ok(p)
    }

    /// Installs a pool with explicit settings for `dev` (tests, benchmarks); fails with
    /// `UMD_ERR_INVALID_STATE` if the device already has one.
    pub fn install(dev: &Arc<Device>, config: Config) -> UmdResult<Arc<Pool>> {
        let mut v = pools();
        if v.iter().any(|p| p.device_id == dev.id) {
            crate::bail!(
                UMD_ERR_INVALID_STATE,
                "device {} already has a memory pool (install it before the first context).",
                dev.id
            );
        }
        let p = Arc::new(Pool::new(dev, config));
        v.push(p.clone());
        Ok(p)
    }

    fn new(dev: &Arc<Device>, config: Config) -> Pool {
        let history = (config.history > 0).then(|| History::new(config.history));
        let caches: Arc<[Cache]> = (0..CACHES).map(|_| Cache::default()).collect();
        tracing::debug!(
            device = dev.id,
            enabled = config.enabled,
            history = config.history,
            release_threshold = config.release_threshold,
            "memory pool created"
        );
        Pool {
            device_id: dev.id,
            device: Arc::downgrade(dev),
            release_threshold: AtomicU64::new(config.release_threshold),
            caches: caches.clone(),
            inner: Mutex::new(Inner {
                enabled: config.enabled,
                blocks: Vec::new(),
                free_slots: Vec::new(),
                segs: Vec::new(),
                free_segs: Vec::new(),
                index: BTreeMap::new(),
                bins: Default::default(),
                pending: VecDeque::new(),
                empty: VecDeque::new(),
                accounts: Vec::new(),
                free_accounts: Vec::new(),
                stats: Stats::default(),
                ghosts: Vec::with_capacity(GHOSTS),
                ghost_at: 0,
                handles: Vec::new(),
                history,
                recent: [0; 64],
                recent_at: 0,
                seq: 0,
                scratch: Vec::new(),
                last_mark: (0, 0, 0, usize::MAX),
                unpins: 0,
                caches,
                fast: config.enabled && config.history == 0 && config.release_threshold == u64::MAX,
                registered: 0,
                tokens: 0,
                flushed: Vec::new(),
                acct: NIL,
            }),
            config,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when the history ring is on (callers capture call sites only then).
    pub fn history_on(&self) -> bool {
        self.config.history > 0
    }

    /// Registers a context; returns its account slot.
    pub fn register(&self, ctx_id: u64, kmd_id: u32, timeline: Arc<Timeline>) -> u32 {
        let mut g = self.lock();
        g.unpins += 1; // an epoch for the pending scan: accounts changed
        let acc = Account {
            ctx_id,
            kmd_id,
            timeline,
            live: true,
            stats: CtxStats {
                ctx_id,
                ..Default::default()
            },
        };
        let slot = match g.free_accounts.pop() {
            Some(slot) => {
                g.accounts[slot as usize] = acc;
                slot
            }
            None => {
                g.accounts.push(acc);
                (g.accounts.len() - 1) as u32
            }
        };
        if let Some(c) = self.caches.get(slot as usize) {
            c.lock().reset(ctx_id, g.fast);
            g.registered |= 1 << slot;
        }
        slot
    }

    /// Forgets a destroyed context: its jobs are finished or cancelled, so the fences it
    /// stamped on blocks no longer gate their reuse.
    pub fn unregister(&self, dev: &Device, acct: u32) {
        let mut g = self.lock();
        let inner = &mut *g;
        if let Some(a) = inner.accounts.get_mut(acct as usize) {
            a.live = false;
        }
        if (acct as usize) < CACHES {
            // Its cache goes back to the pool: free blocks to the bins, live ones (buffers that
            // outlive the context) to the pool's records, the budget to the gauges.
            inner.caches[acct as usize].lock().active = false;
            inner.flush_cache(acct as usize, true);
            inner.revoke(acct as usize, true);
            inner.registered &= !(1 << acct);
        }
        for b in inner.blocks.iter_mut() {
            b.uses.retain(|(s, _)| *s != acct);
        }
        for c in inner.caches.iter() {
            for s in c.lock().slots.iter_mut() {
                s.uses.retain(|u| u.0 != acct);
            }
        }
        inner.free_accounts.push(acct);
        inner.process_pending(dev);
        let t = self.release_threshold.load(Ordering::Relaxed);
        inner.release_empty(dev, t);
    }

    /// Per-context accounting of `acct`.
    pub fn ctx_stats(&self, acct: u32) -> CtxStats {
        if let Some(c) = self.caches.get(acct as usize) {
            return c.lock().ctx_stats();
        }
        let g = self.lock();
        g.accounts
            .get(acct as usize)
            .map(|a| a.stats.clone())
            .unwrap_or_default()
    }

    /// Allocates a block for `req`. The caller has checked the size against the device
    /// (`UMD_ERR_MEM_TOO_LARGE`) and the flags.
    #[inline(always)]
    pub fn alloc(&self, dev: &Device, req: &Request) -> UmdResult<Grant> {
        // The hit path: this context's cache, without the pool mutex.
        if let Some(c) = self.caches.get(req.acct as usize) {
            if c.parked.load(Ordering::Relaxed) != 0 {
                if let Some(g) = c.lock().alloc(req) {
                    return Ok(*g);
                }
            }
        }
        self.alloc_slow(dev, req)
    }

    #[inline(never)]
    fn alloc_slow(&self, dev: &Device, req: &Request) -> UmdResult<Grant> {
        let limit = dev.info.max_bo_size.min(dev.info.mem_total);
        let align = req.align.max(size_class::MIN_BLOCK);
        let kind = pool_for(req.size, align);
        let fit = round(req.size, kind).filter(|c| *c <= limit);
        let page = size_class::align_up(req.size, PAGE).unwrap_or(u64::MAX);
        let mut g = self.lock();
        let inner = &mut *g;
        let class = if inner.enabled {
            fit.unwrap_or(page)
        } else {
            page
        };
        inner.acct = req.acct;
        if inner.enabled {
            if !inner.pending.is_empty() {
                // Blocks whose fences were seen signalled (waits and queries update the
                // timelines): atomics only, no kernel call.
                inner.process_pending(dev);
            }
            if let Some(id) = inner.take(req.acct, kind, req.read_only, class, align) {
                return Ok(inner.grant(id, req, class, true));
            }
            if !inner.pending.is_empty() {
                // Ask the kernel how far the contexts got before creating a new object.
                inner.refresh(dev, false);
                if inner.process_pending(dev) > 0 {
                    if let Some(id) = inner.take(req.acct, kind, req.read_only, class, align) {
                        return Ok(inner.grant(id, req, class, true));
                    }
                }
            }
            // Free blocks parked in other contexts' caches (left alone until now: taking them
            // would stall the threads using them), before a new kernel object.
            if inner.flush_caches() > 0 {
                if let Some(id) = inner.take(req.acct, kind, req.read_only, class, align) {
                    return Ok(inner.grant(id, req, class, true));
                }
            }
        }
        let (seg_size, seg_align) = if inner.enabled && kind == PoolKind::Small {
            (SLAB_SIZE, SLAB_SIZE)
        } else {
            (class, align.max(size_class::LARGE_GRANULE))
        };
        let mut released = 0;
        let mut retried = false;
        loop {
            match inner.new_segment(dev, kind, req.read_only, seg_size, seg_align) {
                Ok(seg) => {
                    let first = inner.segs[seg as usize].first;
                    let id = inner.take_block(first, kind, class, align);
                    inner.stats.num_cache_misses += 1;
                    return Ok(inner.grant(id, req, class, false));
                }
                Err(SegErr::Oom(..)) if !retried => {
                    retried = true;
                    inner.stats.num_alloc_retries += 1;
                    inner.refresh(dev, true);
                    inner.process_pending(dev);
                    if inner.enabled {
                        if let Some(id) = inner.take(req.acct, kind, req.read_only, class, align) {
                            return Ok(inner.grant(id, req, class, true));
                        }
                    }
                    released = inner.release_empty(dev, 0);
                    tracing::warn!(
                        ctx = req.ctx_id,
                        requested = req.size,
                        released,
                        "device out of memory: released cached pool memory, retrying once"
                    );
                }
                Err(SegErr::Oom(kmd, what)) => {
                    inner.note(req, class);
                    inner.revoke_all(true); // the detail reads true gauges
                    inner.stats.num_ooms += 1;
                    inner.event(
                        EventKind::Oom,
                        req.ctx_id,
                        req.buffer_id,
                        0,
                        class,
                        req.size,
                        kind,
                        None,
                        None,
                    );
                    return Err(inner.oom_error(dev, req, class, kind, released, kmd, &what));
                }
                Err(SegErr::Other(e)) => return Err(e.ctx(req.ctx_id)),
            }
        }
    }

    /// Returns the block of `grant`. Reuse waits for the fences of the jobs that used it.
    #[inline(always)]
    pub fn free(&self, dev: &Device, grant: &Grant, note: FreeNote) {
        if let (Some(c), true) = (self.caches.get(grant.acct as usize), grant.slot != NIL) {
            // The hit path's other half: back into the context's cache when idle.
            if c.lock().free(grant, note.at_ns, || dev.is_lost()) {
                if c.parked.load(Ordering::Relaxed) == 0 {
                    c.parked.store(1, Ordering::Relaxed);
                }
                return;
            }
        }
        self.free_slow(dev, grant, note)
    }

    #[inline(never)]
    fn free_slow(&self, dev: &Device, grant: &Grant, note: FreeNote) {
        let block = grant.block;
        let mut g = self.lock();
        let inner = &mut *g;
        inner.acct = grant.acct;
        let live = match inner.blocks.get(block as usize).map(|b| b.state) {
            Some(State::Live) => true,
            Some(State::Cached) => inner.undelegate_live(block),
            _ => false,
        };
        if !live {
            tracing::error!(block, "pool: free of a block that is not live (driver bug)");
            return;
        }
        inner.free_live(dev, block, note);
        let t = self.release_threshold.load(Ordering::Relaxed);
        if inner.stats.cached_bytes.all().current > t {
            inner.release_empty(dev, t);
        }
    }

    /// Registers the C handle of the buffer holding the block of `grant` (free by address).
    pub fn set_handle(&self, grant: &Grant, handle: u64) {
        if let Some(c) = self.caches.get(grant.acct as usize) {
            if let Some(s) = c.lock().slot_mut(grant.slot, grant.block) {
                s.handle = handle;
                return;
            }
        }
        let mut g = self.lock();
        let inner = &mut *g;
        if inner.state(grant.block) == Some(State::Cached) {
            inner.with_slot(grant.block, |s| s.handle = handle);
        } else if let Some(h) = inner.handles.get_mut(grant.block as usize) {
            *h = handle;
        }
    }

    /// CPU address of `offset` in segment `seg` (mapping the segment on first use).
    pub fn host_ptr(&self, dev: &Device, seg: u32, offset: u64) -> UmdResult<*mut u8> {
        let mut g = self.lock();
        let inner = &mut *g;
        let s = inner
            .segs
            .get_mut(seg as usize)
            .filter(|s| s.alive)
            .ok_or_else(|| UmdError::new(umdResult::UMD_ERR_INTERNAL, "segment gone"))?;
        let m = match s.host {
            Some(m) => m,
            None => {
                inner.stats.num_kernel_calls += 1;
                let m = dev
                    .backend
                    .gem_mmap(s.gem, s.size)
                    .map_err(|e| dev.fail(Op::Memory, e, "CPU mapping of a pool segment"))?;
                s.host = Some(m);
                m
            }
        };
        // SAFETY: offset < segment size (the caller's block lies inside the segment), so the
        // result stays inside the mapping.
        Ok(unsafe { m.ptr.add(offset as usize) })
    }

    /// Releases cached memory (waiting for nothing: blocks still used by running jobs stay)
    /// until at most `keep` cached bytes remain. Returns the bytes released.
    pub fn trim(&self, dev: &Device, keep: u64) -> u64 {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.stats.num_trims += 1;
        inner.flush_caches();
        inner.refresh(dev, false);
        inner.process_pending(dev);
        let r = inner.release_empty(dev, keep);
        tracing::info!(device = dev.id, released = r, keep, "pool trimmed");
        r
    }

    /// Sets the release threshold (cached bytes kept at most) and applies it now.
    pub fn set_release_threshold(&self, dev: &Device, bytes: u64) {
        self.release_threshold.store(bytes, Ordering::Relaxed);
        let mut g = self.lock();
        // Caches hold free memory the threshold could not release: off while one is set.
        let fast = g.enabled && g.history.is_none() && bytes == u64::MAX;
        if fast != g.fast {
            g.fast = fast;
            for i in bits(g.registered) {
                g.caches[i].lock().active = fast;
            }
            if !fast {
                g.flush_caches();
                g.revoke_all(true);
            }
        }
        g.release_empty(dev, bytes);
    }

    /// Resets every peak to its current value.
    pub fn reset_peaks(&self) {
        let mut g = self.lock();
        g.revoke_all(true); // `current` becomes the true value
        g.stats.reset_peaks();
        for a in g.accounts.iter_mut() {
            a.stats.reset_peaks();
        }
        for c in g.caches.iter() {
            c.lock().stats.reset_peaks();
        }
    }

    /// A snapshot of the statistics (computes the largest free block and fragmentation).
    pub fn stats(&self) -> Stats {
        let mut g = self.lock();
        // Report the coalesced view (cached and quick blocks merged), as if every free had
        // coalesced.
        g.flush_caches();
        g.flush_all_quick();
        let mut s = g.stats.clone();
        let mut recent = g.recent.iter().copied().max().unwrap_or(0);
        // Add what the caches did on their own; take their budgets out of `current`.
        for c in g.caches.iter() {
            let d = c.lock();
            let (counts, budget) = (d.counts(), d.budget());
            for kind in [PoolKind::Small, PoolKind::Large] {
                let (c, b) = (&counts[cache::k(kind)], &budget[cache::k(kind)]);
                s.fold(kind, [c[0], c[1], c[2]], [c[3], c[4], c[5]], b);
            }
            recent = recent.max(d.recent.iter().copied().max().unwrap_or(0));
        }
        s.largest_recent_request = recent;
        let (largest, frag) = g.free_profile(recent);
        s.largest_free_block = largest;
        s.fragmentation_bytes = frag;
        s.release_threshold = self.release_threshold.load(Ordering::Relaxed);
        s.pool_enabled = g.enabled;
        s.history_capacity = g.history.as_ref().map_or(0, |h| h.capacity() as u64);
        s.history_events = g.history.as_ref().map_or(0, |h| h.total);
        s
    }

    /// The history as JSON lines (empty when off).
    pub fn history_json(&self) -> String {
        self.lock()
            .history
            .as_ref()
            .map(|h| h.json_lines())
            .unwrap_or_default()
    }

    /// The history events (oldest first).
    pub fn history_events(&self) -> Vec<Event> {
        self.lock()
            .history
            .as_ref()
            .map(|h| h.events().cloned().collect())
            .unwrap_or_default()
    }

    /// What `va` is (free by address).
    pub fn classify(&self, va: u64) -> AddrInfo {
        let g = self.lock();
        match g.lookup(va) {
            Some(id) => {
                let (b, ghost) = g.view(id);
                let start = g.segs[b.seg as usize].va + b.offset;
                match b.state {
                    State::Live if start == va => AddrInfo::Live {
                        buffer: b.buffer,
                        handle: b.handle,
                        ctx_id: b.ctx_id,
                    },
                    State::Live => AddrInfo::Interior {
                        buffer: b.buffer,
                        start,
                        requested: b.requested,
                    },
                    _ => match ghost.filter(|_| start == va) {
                        Some(gh) => AddrInfo::Freed(gh),
                        None => match g.ghost_at(va, true) {
                            Some(gh) => AddrInfo::Freed(gh.clone()),
                            None => AddrInfo::Unknown { in_pool: true },
                        },
                    },
                }
            }
            None => match g.ghost_at(va, true) {
                Some(gh) => AddrInfo::Freed(gh.clone()),
                None => AddrInfo::Unknown { in_pool: false },
            },
        }
    }

    /// Checks every access of the command buffers about to be submitted and pins the blocks
    /// they use. `cmdbufs`: (index in the submit, accesses sorted by VA, the block holding the
    /// packets). On success the caller must [`Pool::stamp`] or [`Pool::unpin`] the result.
    pub fn check_and_pin(
        &self,
        dev: &Device,
        cmdbufs: &[(usize, &[Access], u32)],
    ) -> UmdResult<Vec<u32>> {
        let _ = dev;
        let mut g = self.lock();
        let inner = &mut *g;
        let mut pinned: Vec<u32> = Vec::with_capacity(cmdbufs.len() * 2);
        for &(i, accesses, own) in cmdbufs {
            if inner.pin(own) {
                pinned.push(own);
            }
            let mut cur: (u64, u64) = (1, 0); // [start, end) of the last live block checked
            for a in accesses {
                if a.len == 0 || (a.va >= cur.0 && a.va.saturating_add(a.len) <= cur.1) {
                    continue;
                }
                match inner.check_and_pin_access(i, a) {
                    Ok(Some((id, start, end))) => {
                        pinned.push(id);
                        cur = (start, end);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        inner.unpin(&pinned);
                        return Err(e);
                    }
                }
            }
        }
        Ok(pinned)
    }

    /// Records that the job `seqno` of the context with account `acct` uses `pinned`, and
    /// unpins them.
    pub fn stamp(&self, pinned: &[u32], acct: u32, seqno: u64) {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.unpins += 1;
        let Some(tl) = inner
            .accounts
            .get(acct as usize)
            .map(|a| a.timeline.clone())
        else {
            return;
        };
        for &id in pinned {
            if inner.state(id) == Some(State::Cached) {
                inner.with_slot(id, |s| {
                    s.pins = s.pins.saturating_sub(1);
                    match s.uses.iter_mut().find(|u| u.0 == acct) {
                        Some(u) => u.1 = u.1.max(seqno),
                        None => s.uses.push((acct, seqno, tl.clone())),
                    }
                });
                continue;
            }
            let b = &mut inner.blocks[id as usize];
            b.pins = b.pins.saturating_sub(1);
            match b.uses.iter_mut().find(|(s, _)| *s == acct) {
                Some(u) => u.1 = u.1.max(seqno),
                None => b.uses.push((acct, seqno)),
            }
        }
    }

    /// Unpins blocks of a submit that failed.
    pub fn unpin(&self, pinned: &[u32]) {
        self.lock().unpin(pinned);
    }
}

/// Takes budgets given back by a cache out of the gauges' `current`, and their tokens out of
/// `tokens` (every token stands for one block: on the allocated or on the cached side).
fn unbudget(stats: &mut Stats, tokens: &mut u64, b: &Budget) {
    for kind in [PoolKind::Small, PoolKind::Large] {
        let b = &b[cache::k(kind)];
        *tokens -= b[2] + b[4];
        for (d, &n) in b.iter().enumerate() {
            if n > 0 {
                stats.shift(kind, d, n, false);
            }
        }
    }
}

/// The indices of the set bits of `m`.
fn bits(m: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |i| m & (1 << i) != 0)
}

impl Inner {
    /// Remembers a request's class (largest recent request): in the context's cache, which
    /// keeps each context's last 64, or in the pool's ring for contexts without one.
    fn note(&mut self, req: &Request, class: u64) {
        if let Some(c) = self.caches.get(req.acct as usize) {
            let mut d = c.lock();
            if d.ctx_id == req.ctx_id {
                d.note(class);
                return;
            }
        }
        self.recent[self.recent_at % 64] = class;
        self.recent_at += 1;
    }

    /// Before raising the gauges of `kind` by `up` (per budget dimension): if that would pass
    /// a peak while caches may hold tokens, revokes those of the dimensions concerned (the
    /// allocated side, or everything when a cached gauge would pass), so that `current` is the
    /// true value and the peak the operation sets is exact.
    /// `flush`: the caller's blocks are in a consistent state (no free block out of its bin).
    fn room(&mut self, kind: PoolKind, up: [u64; DIMS], flush: bool) {
        let pass = |d: usize, st: &mut Stats| up[d] > 0 && st.would_peak(kind, d, up[d]);
        if self.tokens == 0 || !(0..DIMS).any(|d| pass(d, &mut self.stats)) {
            return;
        }
        // Taking back the operating context's free blocks (and their tokens) usually suffices
        // and costs it little: only then everyone's tokens.
        if flush && self.flush_own(self.acct) > 0 && !(0..DIMS).any(|d| pass(d, &mut self.stats)) {
            return;
        }
        if (3..DIMS).any(|d| pass(d, &mut self.stats)) {
            self.revoke_all(true);
        } else if (0..3).any(|d| pass(d, &mut self.stats)) {
            self.revoke_all(false);
        }
    }

    /// Takes back the free blocks of the cache of account `acct`, if it has any.
    fn flush_own(&mut self, acct: u32) -> usize {
        match self.caches.get(acct as usize) {
            Some(c) if c.parked.load(Ordering::Relaxed) != 0 => {
                self.flush_cache(acct as usize, false)
            }
            _ => 0,
        }
    }

    /// Takes the caches' tokens back: those of the allocated side, or (`cached`) all.
    fn revoke_all(&mut self, cached: bool) {
        if self.tokens > 0 {
            // Only registered contexts' caches hold tokens (unregister takes them back).
            for i in bits(self.registered) {
                self.revoke(i, cached);
            }
        }
    }

    /// Takes cache `i`'s tokens back (see [`cache::CacheData::revoke`]).
    fn revoke(&mut self, i: usize, cached: bool) {
        let b = self.caches[i].lock().revoke(cached);
        unbudget(&mut self.stats, &mut self.tokens, &b);
    }

    /// Takes the free blocks of every cache back (to the quick lists); returns how many.
    fn flush_caches(&mut self) -> usize {
        let mut n = 0;
        for i in bits(self.registered) {
            if self.caches[i].parked.load(Ordering::Relaxed) > 0 {
                n += self.flush_cache(i, false);
            }
        }
        n
    }

    /// Takes the free blocks of cache `i` back (`live`: its live ones too, whose buffers
    /// outlive their context); returns how many.
    fn flush_cache(&mut self, i: usize, live: bool) -> usize {
        let mut out = std::mem::take(&mut self.flushed);
        let mut lives = Vec::new();
        let mut b = [[0; DIMS]; 2];
        let ctx_id = {
            let c = &self.caches[i];
            let mut d = c.lock();
            d.drain(&mut out, live.then_some(&mut lives), &mut b);
            c.parked.store(0, Ordering::Relaxed);
            d.ctx_id
        };
        unbudget(&mut self.stats, &mut self.tokens, &b);
        let n = out.len() + lives.len();
        for s in lives {
            self.adopt_live(s, ctx_id);
        }
        for p in out.drain(..) {
            if p.hit {
                // (Else the pool's free of its last buffer already left this ghost.)
                self.remember(Ghost {
                    va: p.va,
                    requested: p.requested,
                    size: p.size,
                    buffer: p.buffer,
                    ctx_id,
                    seq: 0,
                    at_ns: p.at_ns,
                    site: None,
                });
            }
            self.make_free(None, p.block);
        }
        self.flushed = out;
        n
    }

    /// Takes delegated live block `id` back from its cache; false if its slot is not live.
    fn undelegate_live(&mut self, id: u32) -> bool {
        let (acct, slot) = {
            let b = &self.blocks[id as usize];
            (b.acct, b.slot)
        };
        let Some(c) = self.caches.get(acct as usize) else {
            return false;
        };
        let mut b = [[0; DIMS]; 2];
        let (s, ctx_id) = {
            let mut d = c.lock();
            (d.take_live(slot, id, &mut b), d.ctx_id)
        };
        unbudget(&mut self.stats, &mut self.tokens, &b);
        match s {
            Some(s) => {
                self.adopt_live(s, ctx_id);
                true
            }
            None => false,
        }
    }

    /// Records a live block coming back from a cache in the pool's own fields.
    fn adopt_live(&mut self, s: Slot, ctx_id: u64) {
        let id = s.g.block;
        self.handles[id as usize] = s.handle;
        let b = &mut self.blocks[id as usize];
        b.state = State::Live;
        b.slot = NIL;
        b.buffer = s.buffer;
        b.requested = s.requested;
        b.ctx_id = ctx_id;
        b.pins = s.pins;
        b.uses = s.uses.iter().map(|u| (u.0, u.1)).collect();
    }

    fn new_block(&mut self, b: Block) -> u32 {
        match self.free_slots.pop() {
            Some(id) => {
                self.blocks[id as usize] = b;
                self.handles[id as usize] = 0;
                id
            }
            None => {
                self.blocks.push(b);
                self.handles.push(0);
                (self.blocks.len() - 1) as u32
            }
        }
    }

    fn kill_block(&mut self, id: u32) {
        let b = &mut self.blocks[id as usize];
        b.state = State::Dead;
        b.uses.clear();
        self.free_slots.push(id);
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        kind: EventKind,
        ctx: u64,
        buffer: u64,
        va: u64,
        size: u64,
        requested: u64,
        pool: PoolKind,
        tag: Option<&Arc<str>>,
        site: Option<&Arc<Site>>,
    ) {
        self.seq += 1;
        if let Some(h) = self.history.as_mut() {
            h.push(Event {
                seq: self.seq,
                t_ns: crate::error::detail::mono_ns(),
                kind,
                ctx,
                buffer,
                va,
                size,
                requested,
                pool: pool.name(),
                tag: tag.cloned(),
                site: site.cloned(),
            });
        }
    }

    /// A free block for `class` bytes aligned to `align`, carved out of the best-fitting bin.
    fn take(&mut self, acct: u32, kind: PoolKind, ro: bool, class: u64, align: u64) -> Option<u32> {
        let gran = kind.granule();
        let need = if align > gran {
            class.checked_add(align - gran)?
        } else {
            class
        };
        let bin = bin_of(kind, ro);
        if align <= gran {
            if let Some(id) = self.bins[bin].quick_pop(&mut self.blocks, class) {
                return Some(id);
            }
        }
        // Blocks parked in the context's own cache are free memory too: best fit sees them
        // (coalesced). Other contexts' caches are left alone until a new kernel object would be
        // needed (`Pool::alloc`): taking them would stall the threads using them.
        if self.flush_own(acct) > 0 && align <= gran {
            if let Some(id) = self.bins[bin].quick_pop(&mut self.blocks, class) {
                return Some(id);
            }
        }
        if self.bins[bin].quick_len > 0 {
            self.flush_quick(bin);
        }
        let id = self.bins[bin].find(&self.blocks, need)?;
        Some(self.take_block(id, kind, class, align))
    }

    /// Coalesces every quick block of bin set `bin` into the ordinary bins.
    fn flush_quick(&mut self, bin: usize) {
        let mut ids = std::mem::take(&mut self.scratch);
        self.bins[bin].quick_drain(&mut self.blocks, &mut ids);
        for &id in &ids {
            // Quick blocks are already accounted free and off their segment's busy count.
            self.coalesce_and_bin(id);
        }
        ids.clear();
        self.scratch = ids;
    }

    /// Coalesces every quick block of every bin set.
    fn flush_all_quick(&mut self) {
        for bin in 0..4 {
            if self.bins[bin].quick_len > 0 {
                self.flush_quick(bin);
            }
        }
    }

    /// Carves `class` bytes aligned to `align` out of free block `id` (in a bin or fresh).
    fn take_block(&mut self, id: u32, kind: PoolKind, class: u64, align: u64) -> u32 {
        let bin = {
            let s = &self.segs[self.blocks[id as usize].seg as usize];
            bin_of(s.kind, s.read_only)
        };
        self.bins[bin].remove(&mut self.blocks, id);
        let gran = kind.granule();
        let mut id = id;
        let (seg_va, off) = {
            let b = &self.blocks[id as usize];
            (self.segs[b.seg as usize].va, b.offset)
        };
        let start = seg_va + off;
        let pad = size_class::align_up(start, align).unwrap_or(start) - start;
        if pad > 0 {
            let rest = self.split(id, pad);
            self.bins[bin].insert(&mut self.blocks, id);
            id = rest;
        }
        if self.blocks[id as usize].size - class >= gran {
            let tail = self.split(id, class);
            self.bins[bin].insert(&mut self.blocks, tail);
        }
        id
    }

    /// Splits free block `id` at `at` bytes; returns the new block (the part after `at`).
    fn split(&mut self, id: u32, at: u64) -> u32 {
        let (seg, off, size, next) = {
            let b = &self.blocks[id as usize];
            (b.seg, b.offset, b.size, b.next)
        };
        let mut nb = Block::new(seg, off + at, size - at);
        nb.prev = id;
        nb.next = next;
        let nid = self.new_block(nb);
        if next != NIL {
            self.blocks[next as usize].prev = nid;
        }
        let b = &mut self.blocks[id as usize];
        b.size = at;
        b.next = nid;
        self.segs[seg as usize].set_head(off + at, nid);
        let kind = self.segs[seg as usize].kind;
        self.room(kind, [0, 0, 0, 0, 1], false);
        self.stats.cached_count.add(kind, 1);
        nid
    }

    /// Marks `id` live for `req` (of size class `class`) and accounts it.
    fn grant(&mut self, id: u32, req: &Request, class: u64, hit: bool) -> Grant {
        let (seg, offset, size) = {
            let b = &mut self.blocks[id as usize];
            b.state = State::Live;
            b.buffer = req.buffer_id;
            b.requested = req.size;
            b.ctx_id = req.ctx_id;
            b.acct = req.acct;
            b.uses.clear();
            b.pins = 0;
            (b.seg, b.offset, b.size)
        };
        let s = &mut self.segs[seg as usize];
        if s.busy == 0 {
            // Not empty any more: an entry on the empty list is now stale.
            s.epoch += 1;
            s.listed = false;
        }
        s.busy += 1;
        let (kind, va) = (s.kind, s.va + offset);
        self.room(kind, [size, req.size, 1, 0, 0], true);
        let st = &mut self.stats;
        st.allocated_bytes.add(kind, size);
        st.requested_bytes.add(kind, req.size);
        st.active_bytes.add(kind, size);
        st.cached_bytes.sub(kind, size);
        st.allocation_count.add(kind, 1);
        st.active_count.add(kind, 1);
        st.cached_count.sub(kind, 1);
        st.num_allocs += 1;
        if hit {
            st.num_cache_hits += 1;
        }
        // Per-context accounting (in the context's cache when it has one).
        let g = Grant {
            block: id,
            seg,
            offset,
            va,
            size,
            kind,
            hit,
            acct: req.acct,
            slot: NIL,
        };
        if let Some(c) = self.caches.get(req.acct as usize) {
            let mut d = c.lock();
            if d.ctx_id == req.ctx_id {
                d.note(class);
                let st = &d.stats;
                if st.allocated_bytes.current + size > st.allocated_bytes.peak
                    || st.requested_bytes.current + req.size > st.requested_bytes.peak
                    || st.allocation_count.current >= st.allocation_count.peak
                {
                    // A new peak of the context: its `current` must be true first.
                    let b = d.revoke(false);
                    unbudget(&mut self.stats, &mut self.tokens, &b);
                }
                d.stats.on_alloc(size, req.size, hit);
            }
        } else {
            self.note(req, class);
            if let Some(a) = self.accounts.get_mut(req.acct as usize) {
                if a.ctx_id == req.ctx_id {
                    a.stats.on_alloc(size, req.size, hit);
                }
            }
        }
        let ev = if hit {
            EventKind::Reuse
        } else {
            EventKind::Alloc
        };
        self.event(
            ev,
            req.ctx_id,
            req.buffer_id,
            va,
            size,
            req.size,
            kind,
            req.tag.as_ref(),
            req.site.as_ref(),
        );
        g
    }

    fn unpin(&mut self, pinned: &[u32]) {
        self.unpins += 1;
        for &id in pinned {
            if self.state(id) == Some(State::Cached) {
                self.with_slot(id, |s| s.pins = s.pins.saturating_sub(1));
            } else {
                let b = &mut self.blocks[id as usize];
                b.pins = b.pins.saturating_sub(1);
            }
        }
    }

    /// [`Inner::check_access`], and pins the live block the access lies in. A block delegated to
    /// a context's cache can be freed by its owner without the pool mutex, between the check
    /// (which reads its cache slot) and the pin (which locks that slot again); the pin then
    /// fails, and the access is checked again: now it reports the use after free. A block
    /// freed and handed out again in that window is live again, and pinning it is right.
    fn check_and_pin_access(&mut self, i: usize, a: &Access) -> UmdResult<Option<(u32, u64, u64)>> {
        for _ in 0..4 {
            match self.check_access(i, a)? {
                Some((id, start, end)) => {
                    if self.pin(id) {
                        return Ok(Some((id, start, end)));
                    }
                }
                None => return Ok(None),
            }
        }
        // Freed and reallocated under the check four times in a row: the application frees
        // and allocates this memory while submitting work that uses it.
        Err(UmdError::new(
            umdResult::UMD_ERR_MEM_USE_AFTER_FREE,
            format!(
                "command buffer #{i} accesses {:#x}..{:#x}, memory that another thread freed and reallocated \
                 while this submit was checking it (four times in a row); the submit was not made",
                a.va,
                a.va.saturating_add(a.len)
            ),
        ))
    }

    /// Pins live block `id` (a submit is checking it); false if it is not live.
    fn pin(&mut self, id: u32) -> bool {
        match self.state(id) {
            Some(State::Live) => {
                self.blocks[id as usize].pins += 1;
                true
            }
            Some(State::Cached) => self
                .with_slot(id, |s| {
                    s.pins += s.live as u32;
                    s.live
                })
                .unwrap_or(false),
            _ => false,
        }
    }

    fn state(&self, id: u32) -> Option<State> {
        self.blocks.get(id as usize).map(|b| b.state)
    }

    /// Runs `f` on the cache slot of delegated block `id`.
    fn with_slot<R>(&self, id: u32, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
        let b = &self.blocks[id as usize];
        let mut d = self.caches.get(b.acct as usize)?.lock();
        d.slot_mut(b.slot, id).map(f)
    }

    /// Block `id` as validation sees it: a delegated block's live fields and state come from its
    /// cache slot (Live, or Free with the ghost of its last buffer).
    fn view(&self, id: u32) -> (BlockView, Option<Ghost>) {
        let b = &self.blocks[id as usize];
        let mut v = BlockView {
            state: b.state,
            seg: b.seg,
            offset: b.offset,
            buffer: b.buffer,
            requested: b.requested,
            ctx_id: b.ctx_id,
            handle: self.handles.get(id as usize).copied().unwrap_or(0),
        };
        if b.state != State::Cached {
            return (v, None);
        }
        let Some(c) = self.caches.get(b.acct as usize) else {
            return (v, None);
        };
        let mut d = c.lock();
        let ctx_id = d.ctx_id;
        let Some(s) = d.slot_mut(b.slot, id) else {
            return (v, None);
        };
        (v.buffer, v.requested, v.ctx_id, v.handle) = (s.buffer, s.requested, ctx_id, s.handle);
        if s.live {
            v.state = State::Live;
            return (v, None);
        }
        v.state = State::Free;
        let ghost = Ghost {
            va: s.g.va,
            requested: s.requested,
            size: s.g.size,
            buffer: s.buffer,
            ctx_id,
            seq: 0,
            at_ns: s.at_ns,
            site: None,
        };
        (v, Some(ghost))
    }

    /// Live -> pending or free.
    fn free_live(&mut self, dev: &Device, id: u32, note: FreeNote) {
        let lost = dev.is_lost();
        let (seg, size, requested, buffer, ctx_id, acct, offset) = {
            let b = &self.blocks[id as usize];
            (
                b.seg,
                b.size,
                b.requested,
                b.buffer,
                b.ctx_id,
                b.acct,
                b.offset,
            )
        };
        let (kind, va) = {
            let s = &self.segs[seg as usize];
            (s.kind, s.va + offset)
        };
        self.handles[id as usize] = 0;
        self.room(kind, [0, 0, 0, size, 1], true);
        let st = &mut self.stats;
        st.allocated_bytes.sub(kind, size);
        st.requested_bytes.sub(kind, requested);
        st.cached_bytes.add(kind, size);
        st.allocation_count.sub(kind, 1);
        st.cached_count.add(kind, 1);
        st.num_frees += 1;
        let deferred = !self.reusable(id, lost);
        // Per-context accounting; a block reusable at once may go to the context's cache.
        let delegated = match self.caches.get(acct as usize) {
            Some(_) => self.account_free(id, acct, ctx_id, !deferred, note.at_ns),
            None => {
                if let Some(a) = self.accounts.get_mut(acct as usize) {
                    if a.ctx_id == ctx_id {
                        a.stats.on_free(size, requested);
                    }
                }
                false
            }
        };
        let ev = if deferred {
            EventKind::FreeDeferred
        } else {
            EventKind::Free
        };
        self.event(
            ev,
            ctx_id,
            buffer,
            va,
            size,
            requested,
            kind,
            None,
            note.site.as_ref(),
        );
        let g = Ghost {
            va,
            requested,
            size,
            buffer,
            ctx_id,
            seq: self.seq,
            at_ns: note.at_ns,
            site: note.site,
        };
        self.remember(g);
        if deferred {
            self.blocks[id as usize].state = State::Pending;
            self.pending.push_back(id);
            self.stats.num_deferred_frees += 1;
        } else {
            self.stats.active_bytes.sub(kind, size);
            self.stats.active_count.sub(kind, 1);
            if !delegated {
                self.make_free(Some(dev), id);
            }
        }
    }

    /// Accounts the free of live block `id` to its context's cache (account `acct` < CACHES)
    /// and, when `reusable`, hands the block to that cache with the token of the allocated side
    /// its free just made room for (the gauges' `current` does not move). Returns true if the
    /// cache took the block.
    fn account_free(
        &mut self,
        id: u32,
        acct: u32,
        ctx_id: u64,
        reusable: bool,
        at_ns: u64,
    ) -> bool {
        let b = &self.blocks[id as usize];
        let seg = &self.segs[b.seg as usize];
        let g = Grant {
            block: id,
            seg: b.seg,
            acct,
            slot: NIL,
            offset: b.offset,
            va: seg.va + b.offset,
            size: b.size,
            kind: seg.kind,
            hit: true,
        };
        let (requested, buffer, ro) = (b.requested, b.buffer, seg.read_only);
        let slot = {
            let mut d = self.caches[acct as usize].lock();
            if d.ctx_id != ctx_id {
                return false;
            }
            d.stats.on_free(g.size, requested);
            // Only a size the context asked for lately: in a stream of varied sizes, parking
            // every block would cost more than the few hits it buys.
            if !reusable || !d.active || !d.asked_lately(g.size) {
                return false;
            }
            let Some(slot) = d.insert(g, ro, buffer, requested, at_ns) else {
                return false;
            };
            let st = &mut d.stats;
            st.allocated_bytes.current += g.size;
            st.requested_bytes.current += requested;
            st.allocation_count.current += 1;
            slot
        };
        self.caches[acct as usize]
            .parked
            .store(1, Ordering::Relaxed);
        for (d, n) in [(0, g.size), (1, requested), (2, 1)] {
            self.stats.shift(g.kind, d, n, true);
        }
        self.tokens += 1;
        let b = &mut self.blocks[id as usize];
        b.state = State::Cached;
        b.slot = slot;
        true
    }

    /// Keeps a freed buffer for reports (a ring: overwrites the oldest in place).
    fn remember(&mut self, g: Ghost) {
        if self.ghosts.len() < GHOSTS {
            self.ghosts.push(g);
        } else {
            self.ghosts[self.ghost_at % GHOSTS] = g;
        }
        self.ghost_at = self.ghost_at.wrapping_add(1);
    }

    /// What changes whenever a pending block may have become reusable: every term only grows
    /// (completed seqnos, lost and retired contexts, unpins) except the pending count, so
    /// comparing the tuple is exact.
    fn progress_mark(&self, lost: bool) -> (u64, u64, u64, usize) {
        let (mut done, mut flags) = (0u64, lost as u64);
        for a in &self.accounts {
            let t = &a.timeline;
            done = done.wrapping_add(t.completed.load(Ordering::Acquire));
            flags += t.lost.load(Ordering::Acquire) as u64 + !a.live as u64;
        }
        (done, flags, self.unpins, self.pending.len())
    }

    fn signalled(&self, slot: u32, seq: u64) -> bool {
        match self.accounts.get(slot as usize) {
            Some(a) if a.live => {
                a.timeline.lost.load(Ordering::Acquire)
                    || a.timeline.completed.load(Ordering::Acquire) >= seq
            }
            _ => true,
        }
    }

    fn reusable(&self, id: u32, lost: bool) -> bool {
        let b = &self.blocks[id as usize];
        b.pins == 0 && (lost || b.uses.iter().all(|&(s, q)| self.signalled(s, q)))
    }

    /// Moves pending blocks whose fences signalled to the bins; returns how many.
    fn process_pending(&mut self, dev: &Device) -> usize {
        let lost = dev.is_lost();
        // Skip the scan unless some context progressed (or a pin went) since the last one:
        // allocations while a long job holds many deferred blocks stay O(contexts).
        let mark = self.progress_mark(lost);
        if mark == self.last_mark {
            return 0;
        }
        self.last_mark = mark;
        let mut moved = 0;
        let mut i = 0;
        while i < self.pending.len() {
            let id = self.pending[i];
            if self.reusable(id, lost) {
                self.pending.swap_remove_back(i);
                let (seg, size, buffer, ctx, off) = {
                    let b = &self.blocks[id as usize];
                    (b.seg, b.size, b.buffer, b.ctx_id, b.offset)
                };
                let (kind, va) = {
                    let s = &self.segs[seg as usize];
                    (s.kind, s.va + off)
                };
                self.stats.active_bytes.sub(kind, size);
                self.stats.active_count.sub(kind, 1);
                self.event(
                    EventKind::Recycle,
                    ctx,
                    buffer,
                    va,
                    size,
                    0,
                    kind,
                    None,
                    None,
                );
                self.make_free(Some(dev), id);
                moved += 1;
            } else {
                i += 1;
            }
        }
        moved
    }

    /// Asks the backend how far the contexts that pending blocks wait for have got (`wait`:
    /// block until their fences signal, bounded; out-of-memory recovery only).
    fn refresh(&mut self, dev: &Device, wait: bool) {
        if dev.is_lost() {
            return;
        }
        let mut need: Vec<(u32, u64)> = Vec::new();
        for &id in &self.pending {
            for &(s, q) in &self.blocks[id as usize].uses {
                if !self.signalled(s, q) {
                    match need.iter_mut().find(|(ns, _)| *ns == s) {
                        Some(n) => n.1 = n.1.max(q),
                        None => need.push((s, q)),
                    }
                }
            }
        }
        for (slot, seq) in need {
            let (kmd, tl) = {
                let a = &self.accounts[slot as usize];
                (a.kmd_id, a.timeline.clone())
            };
            self.stats.num_kernel_calls += 1;
            if wait {
                let deadline = crate::error::detail::mono_ns().saturating_add(OOM_FENCE_WAIT_NS);
                if let Ok(done) = dev.backend.wait(kmd, seq, deadline) {
                    tl.complete(done);
                    continue;
                }
                self.stats.num_kernel_calls += 1;
            }
            if let Ok(st) = dev.backend.ctx_state(kmd) {
                tl.complete(st.completed_seqno);
                if st.reset_status == uapi::ioctl::RESET_GUILTY {
                    tl.lost.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Pending or live -> free: straight onto the quick list when possible, else coalesced with
    /// free neighbours and binned; an emptied segment is listed for release (released at once
    /// with the pool off).
    fn make_free(&mut self, dev: Option<&Device>, id: u32) {
        let seg = self.blocks[id as usize].seg;
        {
            let b = &mut self.blocks[id as usize];
            b.uses.clear();
            b.pins = 0;
        }
        let s = &mut self.segs[seg as usize];
        s.busy = s.busy.saturating_sub(1);
        let bin = bin_of(s.kind, s.read_only);
        if self.enabled && self.bins[bin].quick_len < QUICK_MAX {
            // Emptied segments are found when the quick lists are flushed (before any release).
            self.bins[bin].quick_push(&mut self.blocks, id);
            return;
        }
        let merged = self.coalesce_and_bin(id);
        let s = &self.segs[seg as usize];
        if !self.enabled && s.busy == 0 && self.blocks[merged as usize].size == s.size {
            if let Some(dev) = dev {
                self.release_segment(dev, seg);
            }
        }
    }

    /// Lists `seg` as empty (once per emptiness).
    fn list_empty(&mut self, seg: u32) {
        let s = &mut self.segs[seg as usize];
        if !s.listed {
            s.listed = true;
            self.empty.push_back((seg, s.epoch));
            if self.empty.len() > 2 * self.segs.len() + 16 {
                // Drop stale entries (segments that were reused since they were listed).
                let segs = &self.segs;
                self.empty
                    .retain(|&(g, e)| segs[g as usize].alive && segs[g as usize].epoch == e);
            }
        }
    }

    /// Marks `id` free, merges it with free neighbours, bins the result; returns its id.
    fn coalesce_and_bin(&mut self, id: u32) -> u32 {
        self.blocks[id as usize].state = State::Free;
        let seg = self.blocks[id as usize].seg;
        let (kind, ro) = {
            let s = &self.segs[seg as usize];
            (s.kind, s.read_only)
        };
        let bin = bin_of(kind, ro);
        let mut id = id;
        let next = self.blocks[id as usize].next;
        if next != NIL && self.blocks[next as usize].state == State::Free {
            self.bins[bin].remove(&mut self.blocks, next);
            self.merge(id, next);
        }
        let prev = self.blocks[id as usize].prev;
        if prev != NIL && self.blocks[prev as usize].state == State::Free {
            self.bins[bin].remove(&mut self.blocks, prev);
            self.merge(prev, id);
            id = prev;
        }
        self.bins[bin].insert(&mut self.blocks, id);
        let s = &self.segs[seg as usize];
        if self.enabled && s.busy == 0 && self.blocks[id as usize].size == s.size {
            self.list_empty(seg);
        }
        id
    }

    /// `a` absorbs its next neighbour `b` (both free, `b` unlinked from the bins).
    fn merge(&mut self, a: u32, b: u32) {
        let (bsize, bnext, boff, seg) = {
            let x = &self.blocks[b as usize];
            (x.size, x.next, x.offset, x.seg)
        };
        self.blocks[a as usize].size += bsize;
        self.blocks[a as usize].next = bnext;
        if bnext != NIL {
            self.blocks[bnext as usize].prev = a;
        }
        self.segs[seg as usize].clear_head(boff);
        let kind = self.segs[seg as usize].kind;
        self.stats.cached_count.sub(kind, 1);
        self.kill_block(b);
    }

    fn new_segment(
        &mut self,
        dev: &Device,
        kind: PoolKind,
        ro: bool,
        size: u64,
        align: u64,
    ) -> Result<u32, SegErr> {
        self.stats.num_kernel_calls += 1;
        let gem = match dev.backend.gem_create(size) {
            Ok(g) => g,
            Err(e) if code_for(Op::Memory, &e) == umdResult::UMD_ERR_MEM_OUT_OF_MEMORY => {
                return Err(SegErr::Oom(Some(e), format!("GEM create of {size} bytes")))
            }
            Err(e) => {
                return Err(SegErr::Other(dev.fail(
                    Op::Memory,
                    e,
                    &format!("GEM create of {size} bytes"),
                )))
            }
        };
        self.stats.num_kernel_allocs += 1;
        let va = dev
            .va
            .lock()
            .ok()
            .and_then(|mut v| v.alloc(size, align.max(PAGE)));
        let Some(va) = va else {
            self.close_gem(dev, gem);
            return Err(SegErr::Oom(
                None,
                format!("GPU virtual address space exhausted for {size} bytes"),
            ));
        };
        let access = if ro {
            VM_ACCESS_READ
        } else {
            VM_ACCESS_READ | VM_ACCESS_WRITE
        };
        self.stats.num_kernel_calls += 1;
        if let Err(e) = dev.backend.vm_bind(gem, va, 0, size, access) {
            if let Ok(mut v) = dev.va.lock() {
                v.free(va, size);
            }
            self.close_gem(dev, gem);
            let what = format!("VM bind of {size} bytes at {va:#x}");
            return Err(
                if code_for(Op::Memory, &e) == umdResult::UMD_ERR_MEM_OUT_OF_MEMORY {
                    SegErr::Oom(Some(e), what)
                } else {
                    SegErr::Other(dev.fail(Op::Memory, e, &what))
                },
            );
        }
        let seg_id = match self.free_segs.last() {
            Some(&s) => s,
            None => self.segs.len() as u32,
        };
        let first = self.new_block(Block::new(seg_id, 0, size));
        let seg = Segment::new(gem, va, size, kind, ro, first);
        if self.free_segs.pop().is_some() {
            self.segs[seg_id as usize] = seg;
        } else {
            self.segs.push(seg);
        }
        self.index.insert(va, seg_id);
        self.bins[bin_of(kind, ro)].insert(&mut self.blocks, first);
        self.room(kind, [0, 0, 0, size, 1], false);
        let st = &mut self.stats;
        st.reserved_bytes.add(kind, size);
        st.cached_bytes.add(kind, size);
        st.segment_count.add(kind, 1);
        st.cached_count.add(kind, 1);
        self.event(EventKind::SegmentAlloc, 0, 0, va, size, 0, kind, None, None);
        tracing::debug!(
            device = dev.id,
            gem,
            va = format_args!("{va:#x}"),
            size,
            pool = kind.name(),
            "pool: segment created"
        );
        Ok(seg_id)
    }

    fn close_gem(&mut self, dev: &Device, gem: u32) {
        self.stats.num_kernel_calls += 1;
        self.stats.num_kernel_frees += 1;
        let _ = dev.backend.gem_close(gem);
    }

    /// Gives an empty segment back to the kernel.
    fn release_segment(&mut self, dev: &Device, seg: u32) {
        let (gem, va, size, kind, ro, first, host) = {
            let s = &mut self.segs[seg as usize];
            s.alive = false;
            (
                s.gem,
                s.va,
                s.size,
                s.kind,
                s.read_only,
                s.first,
                s.host.take(),
            )
        };
        self.bins[bin_of(kind, ro)].remove(&mut self.blocks, first);
        self.kill_block(first);
        if let Some(m) = host {
            self.stats.num_kernel_calls += 1;
            let _ = dev.backend.gem_munmap(m);
        }
        if !dev.is_lost() {
            self.stats.num_kernel_calls += 1;
            let _ = dev.backend.vm_unbind(va, size);
        }
        if let Ok(mut v) = dev.va.lock() {
            v.free(va, size);
        }
        self.close_gem(dev, gem);
        self.index.remove(&va);
        self.free_segs.push(seg);
        let st = &mut self.stats;
        st.reserved_bytes.sub(kind, size);
        st.cached_bytes.sub(kind, size);
        st.segment_count.sub(kind, 1);
        st.cached_count.sub(kind, 1);
        st.num_segments_released += 1;
        self.event(
            EventKind::SegmentRelease,
            0,
            0,
            va,
            size,
            0,
            kind,
            None,
            None,
        );
        tracing::debug!(
            device = dev.id,
            gem,
            va = format_args!("{va:#x}"),
            size,
            pool = kind.name(),
            "pool: segment released"
        );
    }

    /// Releases empty segments, least recently emptied first, until at most `keep` bytes are
    /// cached. Returns the bytes released.
    fn release_empty(&mut self, dev: &Device, keep: u64) -> u64 {
        let mut released = 0;
        if self.stats.cached_bytes.all().current > keep {
            // Cached blocks back to the bins, budgets back to the gauges: `current` is true.
            self.flush_caches();
            self.revoke_all(true);
            self.flush_all_quick();
        }
        while self.stats.cached_bytes.all().current > keep {
            let Some((seg, epoch)) = self.empty.pop_front() else {
                break;
            };
            self.segs[seg as usize].listed = false;
            let s = &self.segs[seg as usize];
            let first = &self.blocks[s.first as usize];
            if !s.alive
                || s.epoch != epoch
                || s.busy != 0
                || first.state != State::Free
                || first.size != s.size
            {
                continue;
            }
            released += s.size;
            self.release_segment(dev, seg);
        }
        released
    }

    /// The block containing `va`, if it lies in a segment.
    fn lookup(&self, va: u64) -> Option<u32> {
        let (&start, &seg) = self.index.range(..=va).next_back()?;
        let s = &self.segs[seg as usize];
        if va >= start + s.size {
            return None;
        }
        let id = s.block_at(&self.blocks, va - start);
        (id != NIL).then_some(id)
    }

    /// The most recent freed buffer containing `va` (`at_start`: starting at it).
    fn ghost_at(&self, va: u64, at_start: bool) -> Option<&Ghost> {
        // Newest first: the ring's slots from the last written backwards.
        let n = self.ghosts.len();
        (1..=n)
            .map(|k| &self.ghosts[(self.ghost_at.wrapping_sub(k)) % n.max(1)])
            .find(|g| {
                if at_start {
                    g.va == va
                } else {
                    va >= g.va && va < g.va + g.size
                }
            })
    }

    /// Checks one access; `Some((block, start, end))` when it lies in a live buffer.
    fn check_access(&self, i: usize, a: &Access) -> UmdResult<Option<(u32, u64, u64)>> {
        let rw = if a.write { "writes" } else { "reads" };
        let what = format!(
            "command buffer #{i}: the packet at byte offset {} {rw} [{:#x}, {:#x})",
            a.offset,
            a.va,
            a.va.saturating_add(a.len)
        );
        let Some(id) = self.lookup(a.va) else {
            return match self.ghost_at(a.va, false) {
                Some(g) => Err(UmdError::new(
                    umdResult::UMD_ERR_MEM_USE_AFTER_FREE,
                    format!(
                        "{what}, memory of {}; the pool has since returned it to the kernel. Free a buffer only after the last submit that uses it (the pool already defers reuse until that job's fence signals).",
                        g.describe()
                    ),
                )
                .fault_va(a.va)),
                None => Ok(None),
            };
        };
        let (b, ghost) = self.view(id);
        let start = self.segs[b.seg as usize].va + b.offset;
        match b.state {
            State::Live => {
                let end = start + b.requested;
                if a.va.saturating_add(a.len) <= end {
                    return Ok(Some((id, start, end)));
                }
                Err(UmdError::new(
                    umdResult::UMD_ERR_MEM_OUT_OF_BOUNDS,
                    format!(
                        "{what}, which runs {} bytes past the end of buffer {} ({} bytes at VA {start:#x}, allocated on context {}). Pool buffers share kernel objects, so this would silently read or corrupt a neighbour instead of faulting.",
                        a.va.saturating_add(a.len) - end,
                        b.buffer,
                        b.requested,
                        b.ctx_id
                    ),
                )
                .fault_va(end))
            }
            _ => match ghost.as_ref().or_else(|| self.ghost_at(a.va, false)) {
                Some(g) => Err(UmdError::new(
                    umdResult::UMD_ERR_MEM_USE_AFTER_FREE,
                    format!(
                        "{what}, memory of {}. Free a buffer only after the last submit that uses it (the pool already defers reuse until that job's fence signals).",
                        g.describe()
                    ),
                )
                .fault_va(a.va)),
                None => Err(UmdError::new(
                    umdResult::UMD_ERR_MEM_OUT_OF_BOUNDS,
                    format!(
                        "{what}, which is pool memory not allocated to any live buffer (never allocated, or freed more than {GHOSTS} frees ago)."
                    ),
                )
                .fault_va(a.va)),
            },
        }
    }

    /// (largest free block, free bytes in blocks smaller than `want`).
    fn free_profile(&self, want: u64) -> (u64, u64) {
        let mut largest = 0;
        let mut frag = 0;
        for bins in &self.bins {
            for id in bins.iter(&self.blocks) {
                let s = self.blocks[id as usize].size;
                largest = largest.max(s);
                if s < want {
                    frag += s;
                }
            }
        }
        (largest, frag)
    }

    #[allow(clippy::too_many_arguments)]
    fn oom_error(
        &self,
        dev: &Device,
        req: &Request,
        class: u64,
        kind: PoolKind,
        released: u64,
        kmd: Option<KmdError>,
        what: &str,
    ) -> UmdError {
        let total = dev.info.mem_total;
        let used = dev.backend.query().map(|q| q.mem_used).unwrap_or(0);
        let st = &self.stats;
        let reserved = st.reserved_bytes.all().current;
        let allocated = st.allocated_bytes.all().current;
        let cached = st.cached_bytes.all().current;
        let pending = st.active_bytes.all().current.saturating_sub(allocated);
        let (largest, frag) = self.free_profile(class);
        let cause = match kmd {
            Some(e) => format!(
                "{what}: errno {}, reason {}",
                crate::backend::errno_name(e.errno),
                uapi::reason::name(e.reason)
            ),
            None => what.to_string(),
        };
        // Kept under the detail's 768 characters: every number a reader needs, PyTorch-style.
        let m = format!(
            "out of device memory: tried to allocate {} (requested {} bytes; {} class {}) on context {}. Device {}: device total {}, free {}. This process: {} allocated ({} buffers), {} reserved but unallocated ({} awaiting GPU fences); largest free block {}, fragmentation {}. Released {} of cache and retried once. {cause}. Try: free buffers or umdMemTrim; a smaller batch; UMD_POOL_RELEASE_THRESHOLD=256M if reserved-but-unallocated is large.",
            human(class),
            req.size,
            kind.name(),
            class,
            req.ctx_id,
            dev.index,
            human(total),
            human(total.saturating_sub(used)),
            human(allocated),
            st.allocation_count.all().current,
            human(cached),
            human(pending),
            human(largest),
            human(frag),
            human(released),
        );
        let _ = reserved;
        let mut e = UmdError::new(umdResult::UMD_ERR_MEM_OUT_OF_MEMORY, m).ctx(req.ctx_id);
        if let Some(k) = kmd {
            e = e.kmd(k.errno, k.reason);
        }
        e
    }
}
