//! The caching buffer pool (docs/memory.md).
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

mod addr;
pub use addr::describe_freed;
mod alloc;
pub mod block;
mod cache;
pub mod config;
mod free;
mod ghost;
pub mod history;
mod reclaim;
mod reuse;
pub mod size_class;
pub mod slab;
pub mod stats;
mod validate;

use crate::backend::KmdError;
use crate::caller::Callers;
use crate::device::Device;
use crate::errmap::Op;
use crate::error::{umdResult, UmdError, UmdResult};
use block::{Bins, Block, State, NIL};
use cache::{Cache, CACHES, DIMS};
use config::Config;
pub(crate) use ghost::GHOSTS;
pub use ghost::{coarse_now_ns, AddrInfo, Ghost};
use history::{Event, EventKind, History, Note, Site};
use reclaim::{bits, unbudget};
use size_class::{pool_for, round, PoolKind, SLAB_SIZE};
use slab::Segment;
use stats::{human, CtxStats, Stats};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

const PAGE: u64 = uapi::PAGE_SIZE;
/// Most blocks kept on quick lists (uncoalesced) per bin set.
const QUICK_MAX: usize = 4096;
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
    /// The application's allocating and freeing calls.
    pub callers: Callers,
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
    /// Grows whenever pins are released or the accounts change (register, stamp, unpin): one
    /// term of the pending scan's progress mark.
    pin_epoch: u64,
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
    /// Settings.
    pub config: Config,
    release_threshold: AtomicU64,
    caches: Arc<[Cache]>,
    inner: Mutex<Inner>,
}

static POOLS: Mutex<Vec<Arc<Pool>>> = Mutex::new(Vec::new());

/// The pools of the open devices (a device's leaves with it: [`Pool::device_closed`]).
fn pools() -> MutexGuard<'static, Vec<Arc<Pool>>> {
    POOLS.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many freed buffers the pool remembers for reports.
pub fn ghost_capacity() -> usize {
    GHOSTS
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

    /// `dev` is going away (its drop: no context or buffer of it is left, so no block is in
    /// use): its pool leaves the list and gives every segment back, CPU mappings first. A
    /// mapping holds the kernel file, and with it the device's memory, open after the file's
    /// descriptor is closed (tests/teardown.rs checks that none is left).
    pub fn device_closed(dev: &Device) {
        let gone: Vec<Arc<Pool>> = {
            let mut v = pools();
            let (gone, kept) = std::mem::take(&mut *v)
                .into_iter()
                .partition(|p| p.device_id == dev.id);
            *v = kept;
            gone
        };
        for p in gone {
            p.lock().release_all(dev);
        }
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
                pin_epoch: 0,
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
        g.pin_epoch += 1; // accounts changed
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
}

impl Inner {
    /// Counts the event and, with the history on, records it.
    fn event(&mut self, n: Note<'_>) {
        self.seq += 1;
        if let Some(h) = self.history.as_mut() {
            h.push(Event {
                seq: self.seq,
                t_ns: crate::error::detail::mono_ns(),
                kind: n.kind,
                ctx: n.ctx,
                buffer: n.buffer,
                va: n.va,
                size: n.size,
                requested: n.requested,
                pool: n.pool.name(),
                tag: n.tag.cloned(),
                site: n.site.cloned(),
            });
        }
    }

    fn state(&self, id: u32) -> Option<State> {
        self.blocks.get(id as usize).map(|b| b.state)
    }
}
