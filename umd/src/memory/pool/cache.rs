//! Context caches: the hit path without the device mutex.
//!
//! Each context (account slot < [`CACHES`]) has a small cache of blocks in front of the pool.
//! Threads on different contexts never share a lock or a written cache line on a hit, and a
//! context used by one thread does not even take its cache's lock (see [`Cache`]: the lock is
//! biased to that thread and revoked with `membarrier(2)` when another thread needs it).
//!
//! **Ownership.** When the pool frees a block that is reusable at once (no pin, every fence
//! signalled) and of a size class its context asked for twice lately (a size that comes back),
//! it *delegates* the block to the context's cache instead of its bins: the pool's record says
//! [`State::Cached`](super::block::State::Cached) (with the slot), and the [`Slot`] holds what
//! changes on a hit: live or free, buffer id, requested size, C handle, pins and fence stamps.
//! A hit takes a free slot of the request's class; a free of such a block puts it back if no
//! submit has it pinned and every fence stamped on it has signalled (read from the contexts'
//! timelines), else it goes back to the pool, which defers reuse as before. Validation (submit
//! checks, free by address, pins and stamps) takes the pool mutex, sees `Cached` and then locks
//! the cache, so every check sees a block either live or freed, never in between. A freed slot
//! keeps its buffer's identity as the "ghost" that double-free and use-after-free reports quote.
//!
//! **Exact statistics.** Hits and cache frees are counted on their slots and added when
//! statistics are read (cumulative counts add up). Peaks cannot be added up, so a hit or a free
//! in a cache must never raise one: each slot holds a *token*, which the pool's gauges count in
//! their `current` (`current = true value + tokens`, always <= `peak`). A free slot's token
//! stands for the bytes and the block its hit will add to the allocated side (and up to
//! `limit` requested bytes); a live slot's, for what its free will add to the cached side. A hit
//! or a free only turns one into the other, so `current` does not move and no peak is passed.
//! Tokens come from the pool's free that delegated the block: the room that free made on the
//! allocated side. When a slow-path operation would raise a gauge past its peak while tokens
//! are out, the pool first takes the operating context's free blocks back, then if need be
//! revokes tokens (those of the allocated side, or all when a cached gauge would pass), so the
//! peak it sets is the true value. The context's own gauges, kept in its cache, work the same.
//!
//! **Bounded.** A cache holds at most [`MAX_BLOCKS`] blocks and [`MAX_BYTES`] (live or free)
//! and serves exact size classes with the default alignment. A request it cannot serve takes
//! the pool mutex: the pool takes the context's own free blocks back (coalescing them) when its
//! quick lists miss, and those of every other cache before it creates a kernel object. Trim,
//! the release threshold, out-of-memory recovery, statistics reads (which report the coalesced
//! view) and context destroy flush the caches; the history (`UMD_POOL_HISTORY`), a release
//! threshold and `UMD_POOL=off` turn them off.

use super::block::NIL;
use super::size_class::{class_floor, pool_for, PoolKind, MIN_BLOCK};
use super::stats::CtxStats;
use super::{Grant, Request, Timeline};
use crate::caller::Callers;
use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// Contexts (account slots) that get a cache: the kernel's limit of contexts per open file.
pub(crate) const CACHES: usize = uapi::ioctl::MAX_CONTEXTS as usize;
/// Blocks (live or free) a cache holds at most.
pub(crate) const MAX_BLOCKS: usize = 64;
/// Bytes of blocks (live or free) a cache holds at most.
pub(crate) const MAX_BYTES: u64 = 64 << 20;
/// The pool hands a freed block to its context's cache only if the context asked for its size
/// class twice in its last `LATELY` requests (a size that comes back).
const LATELY: usize = 8;

/// Budget dimensions (per pool kind): what a hit raises (0-2) and what a free raises (3-4).
/// 0: allocated and active bytes; 1: requested bytes; 2: allocation and active count;
/// 3: cached bytes; 4: cached count.
pub(crate) const DIMS: usize = 5;

/// 0 for the small pool, 1 for the large one.
#[inline]
pub(crate) fn k(kind: PoolKind) -> usize {
    (kind == PoolKind::Large) as usize
}

/// After this many lock acquisitions in a row by one thread, a cache is biased to it.
const BIAS_AFTER: u32 = 8;

/// This thread's token: the address of a thread-local (unique among live threads; a new
/// thread may reuse the token of one that exited, which can no longer use the cache).
#[inline(always)]
fn token() -> usize {
    thread_local!(static TOKEN: u8 = const { 0 });
    TOKEN.with(|t| t as *const u8 as usize)
}

/// `membarrier(2)` with `PRIVATE_EXPEDITED`: a full memory barrier on every running thread of
/// the process. Biasing is used only once the process registered for it.
mod barrier {
    use std::sync::atomic::{AtomicU8, Ordering};

    static STATE: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 registered, 2 unavailable

    fn call(cmd: libc::c_int) -> bool {
        // SAFETY: membarrier takes three integer arguments and touches no user memory.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
    }

    /// True when biased caches can be revoked (registering on first use).
    pub(super) fn ready() -> bool {
        match STATE.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => {
                let ok = call(libc::MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
                STATE.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
                ok
            }
        }
    }

    /// The barrier (only called once `ready()`). Should it fail after all (a forked child
    /// that lost the registration and cannot register again), caches are biased no more, and
    /// the caller waits 1 ms instead: far longer than the few instructions in which the owner
    /// can have read `owner` without having published `busy`.
    pub(super) fn all_threads() {
        let done = call(libc::MEMBARRIER_CMD_PRIVATE_EXPEDITED)
            || (call(libc::MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)
                && call(libc::MEMBARRIER_CMD_PRIVATE_EXPEDITED));
        if !done {
            STATE.store(2, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// One context's cache (its own cache lines: caches of different contexts never share one),
/// behind a spin lock that the thread using the context alone does not even take
/// ([`Cache::lock`] returns a guard either way).
///
/// The lock is a CAS to take and a store to release; waiters yield after a short spin. After
/// [`BIAS_AFTER`] acquisitions in a row by one thread the cache is *biased* to it: that
/// thread's hits and frees then run without the lock's atomic instruction (`busy` and `owner`
/// are plain stores and loads: an asymmetric Dekker handshake). Any other thread taking the
/// lock first revokes the bias: it clears `owner`, issues `membarrier(2)` (which orders every
/// running thread's accesses, so the owner either sees `owner` cleared or has published `busy`)
/// and waits for `busy` to drop. A context used by several threads in turn is not biased
/// again until one of them takes the lock [`BIAS_AFTER`] times in a row.
#[repr(C, align(128))]
pub(crate) struct Cache {
    locked: AtomicBool,
    /// The owner is inside a lock-free critical section.
    busy: AtomicBool,
    /// Token of the thread the cache is biased to (0: none).
    owner: AtomicUsize,
    /// Nonzero when it may hold free blocks (set after a cache free, cleared when the pool
    /// takes them back: lets the pool skip caches with nothing to take).
    pub(crate) parked: AtomicU32,
    data: UnsafeCell<CacheData>,
}

// SAFETY: `data` is reached only through a `CacheGuard`: the lock holder's, or the biased
// owner's (from `lock`, while `busy` is set), and the lock holder revokes the bias and waits
// for `busy` to drop before touching it (see the type's comment): one thread at a time, as
// through a mutex.
unsafe impl Sync for Cache {}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            locked: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            owner: AtomicUsize::new(0),
            parked: AtomicU32::new(0),
            data: UnsafeCell::new(CacheData::default()),
        }
    }
}

impl Cache {
    /// The cache, to this thread alone: without the lock when the cache is biased to it.
    #[inline(always)]
    pub(crate) fn lock(&self) -> CacheGuard<'_> {
        let me = token();
        if self.owner.load(Ordering::Relaxed) == me {
            self.busy.store(true, Ordering::Relaxed);
            // The revoker's membarrier is the other half of this fence.
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            if self.owner.load(Ordering::Relaxed) == me {
                return CacheGuard {
                    cache: self,
                    owned: true,
                };
            }
            self.busy.store(false, Ordering::Release);
        }
        self.take()
    }

    /// Takes the lock (revoking another thread's bias).
    #[inline]
    fn take(&self) -> CacheGuard<'_> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.wait(&self.locked, true);
        }
        let o = self.owner.load(Ordering::Relaxed);
        if o != 0 && o != token() {
            self.owner.store(0, Ordering::Relaxed);
            barrier::all_threads();
            self.wait(&self.busy, false);
        }
        CacheGuard {
            cache: self,
            owned: false,
        }
    }

    /// Spins (then yields) until `flag` can be taken (`take`) or has dropped.
    #[cold]
    fn wait(&self, flag: &AtomicBool, take: bool) {
        let mut spins = 0u32;
        loop {
            while flag.load(Ordering::Acquire) {
                if spins < 100 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if !take
                || flag
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
        }
    }
}

/// Exclusive access to a [`Cache`]: its lock, or (`owned`) its bias.
pub(crate) struct CacheGuard<'a> {
    cache: &'a Cache,
    owned: bool,
}

impl Deref for CacheGuard<'_> {
    type Target = CacheData;
    #[inline(always)]
    fn deref(&self) -> &CacheData {
        // SAFETY: this guard holds the lock (having revoked any bias), or the bias with `busy`
        // published: no other reference exists (see `Cache`).
        unsafe { &*self.cache.data.get() }
    }
}

impl DerefMut for CacheGuard<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut CacheData {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.cache.data.get() }
    }
}

impl Drop for CacheGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.owned {
            self.cache.busy.store(false, Ordering::Release);
        } else {
            self.unlock();
        }
    }
}

impl CacheGuard<'_> {
    /// Releases the lock, biasing the cache to this thread after a streak of acquisitions.
    #[inline]
    fn unlock(&mut self) {
        let me = token();
        let c = self.cache;
        let d = &mut **self;
        d.streak = if d.streak.0 == me {
            (me, d.streak.1.saturating_add(1))
        } else {
            (me, 1)
        };
        if d.streak.1 >= BIAS_AFTER && c.owner.load(Ordering::Relaxed) == 0 && barrier::ready() {
            c.owner.store(me, Ordering::Relaxed);
        }
        c.locked.store(false, Ordering::Release);
    }
}

/// A block delegated to a cache.
pub(crate) struct Slot {
    /// What a hit returns (block NIL: slot unused). A copy of it, not a new value, so that the
    /// caller's wide loads forward from wide stores.
    pub g: Grant,
    /// Next free slot of the same size (free list).
    next: u32,
    /// Held by a buffer (else freed and cached).
    pub live: bool,
    /// Its list in `CacheData::lists` (a hint: checked before use).
    list: u32,
    /// The buffer holding it, or the last one (freed: the ghost quoted by reports).
    pub buffer: u64,
    pub requested: u64,
    /// Its token (see the module comment), 0 without: free, a hit on it of up to `limit`
    /// requested bytes cannot pass a peak of the allocated side; live, its free cannot pass a
    /// peak of the cached side. Set to the bytes its last buffer asked for when the pool
    /// delegates it.
    limit: u64,
    /// Cache frees of it: (count, requested bytes). Its hits follow (see `counts`).
    frees: [u64; 2],
    /// C handle (free by address).
    pub handle: u64,
    /// When it was freed (0: unknown).
    pub at_ns: u64,
    /// The application's calls that allocated and freed its last buffer.
    pub callers: Callers,
    /// Submits checking it.
    pub pins: u32,
    /// (account, seqno, timeline) of the last job of each context that used it.
    pub uses: Vec<(u32, u64, Arc<Timeline>)>,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            g: Grant {
                block: NIL,
                seg: 0,
                offset: 0,
                va: 0,
                size: 0,
                kind: PoolKind::Small,
                hit: true,
                acct: 0,
                slot: NIL,
            },
            next: NIL,
            live: false,
            list: NIL,
            buffer: 0,
            requested: 0,
            limit: 0,
            frees: [0; 2],
            handle: 0,
            at_ns: 0,
            callers: Callers::default(),
            pins: 0,
            uses: Vec::new(),
        }
    }

    /// Every job that used it has completed (or can never run: `lost()`, the device is lost).
    #[inline]
    fn idle(&self, lost: impl FnOnce() -> bool) -> bool {
        self.pins == 0
            && (self.uses.is_empty()
                || lost()
                || self.uses.iter().all(|(_, q, t)| {
                    t.lost.load(Ordering::Acquire) || t.completed.load(Ordering::Acquire) >= *q
                }))
    }

    /// Its budget per dimension (see [`DIMS`]), for its pool kind. With the token, requested
    /// bytes may rise by `limit` less what its buffer holds (a hit needs no more than that).
    fn tokens(&self) -> [u64; DIMS] {
        let size = self.g.size;
        match (self.limit, self.live) {
            (0, _) => [0; DIMS],
            (l, false) => [size, l, 1, 0, 0],
            (l, true) => [0, l - self.requested, 0, size, 1],
        }
    }

    /// Hits and cache frees: (bytes, requested bytes, blocks) of each. (It came in free; every
    /// cache free follows a hit and frees what that hit asked for.)
    fn counts(&self) -> [u64; 6] {
        let [f, fr] = self.frees;
        let live = self.live as u64;
        let (h, hr) = (f + live, fr + live * self.requested);
        let size = self.g.size;
        [h * size, hr, h, f * size, fr, f]
    }

    /// A hit took it since the pool delegated it.
    pub(crate) fn hit_since_delegated(&self) -> bool {
        self.live || self.frees[0] > 0
    }
}

/// Budgets per pool kind and dimension.
pub(crate) type Budget = [[u64; DIMS]; 2];

/// What hits and cache frees did, per pool kind: bytes, requested bytes, blocks of hits, then
/// the same of cache frees.
pub(crate) type Counts = [[u64; 6]; 2];

/// The state behind a cache's lock.
#[repr(C)] // what a hit and a free touch first: in the cache lines of the lock
pub(crate) struct CacheData {
    /// Serving hits and taking frees (a registered context, caching allowed).
    pub active: bool,
    /// The context this account slot belongs to (kept after it is destroyed, until reused).
    pub ctx_id: u64,
    /// Blocks held and their bytes.
    held: (usize, u64),
    /// Free lists, one per size class and access mode.
    lists: Vec<List>,
    pub slots: Vec<Slot>,
    recent_at: usize,
    spare: Vec<u32>,
    /// Counts of slots no longer here.
    retired: Counts,
    /// `retired` when this context was registered.
    base: Counts,
    /// The context's statistics: cumulative fields without hits and cache frees, `current`
    /// including the budgets (see [`CacheData::ctx_stats`]).
    pub stats: CtxStats,
    /// Size classes of this context's last 64 requests.
    pub recent: [u64; 64],
    /// (token, count) of the thread that took the lock last, and how many times in a row.
    streak: (usize, u32),
}

impl Default for CacheData {
    fn default() -> Self {
        CacheData {
            active: false,
            ctx_id: 0,
            slots: Vec::new(),
            spare: Vec::new(),
            lists: Vec::new(),
            held: (0, 0),
            retired: [[0; 6]; 2],
            base: [[0; 6]; 2],
            stats: CtxStats::default(),
            recent: [0; 64],
            recent_at: 0,
            streak: (0, 0),
        }
    }
}

/// The free blocks of one size class: they serve the requests of `(lo, hi]` bytes with the
/// default alignment (so a hit needs no class computation) and access mode `ro`. (The classes
/// of the two pools do not overlap for such requests.)
struct List {
    lo: u64,
    hi: u64,
    ro: bool,
    head: u32,
    /// Blocks of this size held (live or free); 0: the entry is unused (`hi` 0).
    blocks: u32,
}

/// Adds slot `s`'s hits and frees to `c`.
fn count(c: &mut Counts, s: &Slot) {
    for (x, y) in c[k(s.g.kind)].iter_mut().zip(s.counts()) {
        *x += y;
    }
}

impl CacheData {
    /// Starts serving a new context in this account slot (the slot is empty: its last context
    /// was flushed when it was destroyed). Device-wide counts are kept.
    pub(crate) fn reset(&mut self, ctx_id: u64, active: bool) {
        self.active = active;
        self.ctx_id = ctx_id;
        self.base = self.retired;
        self.stats = CtxStats {
            ctx_id,
            ..Default::default()
        };
        self.recent = [0; 64];
        self.recent_at = 0;
    }

    /// Hits and cache frees since the cache was created (device-wide statistics).
    pub(crate) fn counts(&self) -> Counts {
        let mut c = self.retired;
        for s in self.slots.iter().filter(|s| s.g.block != NIL) {
            count(&mut c, s);
        }
        c
    }

    /// Budgets held now.
    pub(crate) fn budget(&self) -> Budget {
        let mut b = [[0; DIMS]; 2];
        for s in self.slots.iter().filter(|s| s.g.block != NIL) {
            for (x, y) in b[k(s.g.kind)].iter_mut().zip(s.tokens()) {
                *x += y;
            }
        }
        b
    }

    /// Gives the tokens of the allocated side back (and with `cached`, all of them); returns
    /// what they stood for (the pool takes it out of its gauges). Without `cached`, live blocks
    /// keep the token of their free, which then stays in the cache.
    pub(crate) fn revoke(&mut self, cached: bool) -> Budget {
        let before = self.budget();
        for s in &mut self.slots {
            s.limit = match (s.live, cached) {
                (true, false) => s.limit.min(s.requested),
                _ => 0,
            };
        }
        let mut b = self.budget();
        for (b, before) in b.iter_mut().zip(before) {
            for (x, y) in b.iter_mut().zip(before) {
                *x = y - *x;
            }
        }
        self.unbudget_ctx(&b);
        b
    }

    /// Takes budget `b` out of the context's `current`.
    fn unbudget_ctx(&mut self, b: &Budget) {
        let st = &mut self.stats;
        for b in b {
            st.allocated_bytes.down(b[0]);
            st.requested_bytes.down(b[1]);
            st.allocation_count.down(b[2]);
        }
    }

    /// The context's statistics, hits and cache frees included, budgets taken out.
    pub(crate) fn ctx_stats(&self) -> CtxStats {
        let mut s = self.stats.clone();
        let c = self.counts();
        for (c, b) in c.iter().zip(&self.base) {
            let d = |i: usize| c[i] - b[i];
            s.allocated_bytes.allocated += d(0);
            s.requested_bytes.allocated += d(1);
            s.allocation_count.allocated += d(2);
            s.allocated_bytes.freed += d(3);
            s.requested_bytes.freed += d(4);
            s.allocation_count.freed += d(5);
            s.num_allocs += d(2);
            s.num_cache_hits += d(2);
            s.num_frees += d(5);
        }
        for b in self.budget() {
            s.allocated_bytes.current -= b[0];
            s.requested_bytes.current -= b[1];
            s.allocation_count.current -= b[2];
        }
        s
    }

    /// `class` was asked for twice (the block's own request and another) in the context's last
    /// [`LATELY`] requests.
    pub(crate) fn asked_lately(&self, class: u64) -> bool {
        (1..=LATELY)
            .filter(|k| self.recent[self.recent_at.wrapping_sub(*k) % 64] == class)
            .nth(1)
            .is_some()
    }

    /// Remembers a request's class.
    #[inline]
    pub(crate) fn note(&mut self, class: u64) {
        self.recent[self.recent_at % 64] = class;
        self.recent_at = self.recent_at.wrapping_add(1);
    }

    /// The hit path: a cached free block of the request's size class, holding the budget.
    #[inline(always)]
    pub(crate) fn alloc(&mut self, req: &Request) -> Option<&Grant> {
        let (r, ro) = (req.size, req.read_only);
        if self.ctx_id != req.ctx_id || req.align > MIN_BLOCK {
            return None;
        }
        let list = self
            .lists
            .iter_mut()
            .find(|l| r <= l.hi && r > l.lo && l.ro == ro)?;
        let id = list.head;
        let s = self.slots.get_mut(id as usize)?;
        if r > s.limit {
            return None;
        }
        let class = s.g.size;
        list.head = s.next;
        s.live = true;
        s.buffer = req.buffer_id;
        s.requested = r;
        self.recent[self.recent_at % 64] = class;
        self.recent_at = self.recent_at.wrapping_add(1);
        Some(&self.slots[id as usize].g)
    }

    /// The free path: keeps the block of `g` if it is live here with its token, idle (no pin,
    /// every fence signalled, or the device lost) and within the cache's bounds.
    #[inline(always)]
    pub(crate) fn free(
        &mut self,
        g: &Grant,
        at_ns: u64,
        callers: Callers,
        lost: impl FnOnce() -> bool,
    ) -> bool {
        let Some(s) = self.slots.get_mut(g.slot as usize) else {
            return false;
        };
        let r = s.requested;
        if !s.live || s.limit == 0 || s.g.block != g.block || !s.idle(lost) {
            return false;
        }
        // Its list (made when it was delegated; lists outlive their slots).
        let Some(l) = self.lists.get_mut(s.list as usize) else {
            return false;
        };
        s.next = l.head;
        l.head = g.slot;
        s.live = false;
        s.at_ns = at_ns;
        s.callers = callers;
        s.frees[0] += 1;
        s.frees[1] += r;
        if !s.uses.is_empty() {
            s.uses.clear();
        }
        true
    }

    /// Takes free block `g` (just freed by the pool: `buffer` asked for `requested` bytes) with
    /// its token; returns its slot, or `None` when the cache is full or the block is not of a
    /// size class that requests with the default alignment map to (the odd-sized rest of a best
    /// fit, a large block of a small size).
    pub(crate) fn insert(
        &mut self,
        mut g: Grant,
        read_only: bool,
        buffer: u64,
        requested: u64,
        at_ns: u64,
        callers: Callers,
    ) -> Option<u32> {
        let size = g.size;
        if self.held.0 >= MAX_BLOCKS || self.held.1 + size > MAX_BYTES {
            return None;
        }
        let list = match self
            .lists
            .iter()
            .position(|l| l.hi == size && l.ro == read_only)
        {
            Some(i) => i,
            None => {
                let lo =
                    class_floor(size, g.kind).filter(|lo| pool_for(lo + 1, MIN_BLOCK) == g.kind)?;
                let l = List {
                    lo,
                    hi: size,
                    ro: read_only,
                    head: NIL,
                    blocks: 0,
                };
                match self.lists.iter().position(|l| l.blocks == 0) {
                    Some(i) => {
                        self.lists[i] = l;
                        i
                    }
                    None => {
                        self.lists.push(l);
                        self.lists.len() - 1
                    }
                }
            }
        };
        let i = match self.spare.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot::empty());
                (self.slots.len() - 1) as u32
            }
        };
        g.slot = i;
        let l = &mut self.lists[list];
        l.blocks += 1;
        self.slots[i as usize] = Slot {
            g,
            next: l.head,
            list: list as u32,
            buffer,
            requested,
            limit: requested,
            at_ns,
            callers,
            ..Slot::empty()
        };
        l.head = i;
        self.held = (self.held.0 + 1, self.held.1 + size);
        Some(i)
    }

    /// The slot holding pool block `block`.
    #[inline]
    pub(crate) fn slot_mut(&mut self, slot: u32, block: u32) -> Option<&mut Slot> {
        self.slots
            .get_mut(slot as usize)
            .filter(|s| s.g.block == block)
    }

    /// Takes slot `i` out of the books: its counts retire, its budget goes into `b`, and the
    /// slot becomes unused (the caller copies what it needs first).
    fn retire(&mut self, i: usize, b: &mut Budget) {
        let s = &self.slots[i];
        let (kx, size, list, tokens) = (k(s.g.kind), s.g.size, s.list, s.tokens());
        count(&mut self.retired, s);
        self.held = (self.held.0 - 1, self.held.1 - size);
        if let Some(l) = self.lists.get_mut(list as usize) {
            l.blocks -= 1;
            if l.blocks == 0 {
                (l.lo, l.hi) = (0, 0); // unused: matches no request
            }
        }
        let mut one = [[0; DIMS]; 2];
        one[kx] = tokens;
        self.unbudget_ctx(&one);
        for (x, y) in b[kx].iter_mut().zip(tokens) {
            *x += y;
        }
        self.slots[i].g.block = NIL;
        self.spare.push(i as u32);
    }

    /// Takes live block `block` out of the cache (it goes back to the pool; its budget, added
    /// to `b`, goes back to the pool's gauges).
    pub(crate) fn take_live(&mut self, slot: u32, block: u32, b: &mut Budget) -> Option<Slot> {
        if !self.slot_mut(slot, block)?.live {
            return None;
        }
        self.retire(slot as usize, b);
        let mut s = std::mem::replace(&mut self.slots[slot as usize], Slot::empty());
        s.g.block = block;
        Some(s)
    }

    /// Moves every free block into `out` (its budget into `b`) and, with `live`, every live
    /// one into `live` (the context is going away).
    pub(crate) fn drain(
        &mut self,
        out: &mut Vec<Parked>,
        live: Option<&mut Vec<Slot>>,
        b: &mut Budget,
    ) {
        // The free ones are on the lists.
        for l in 0..self.lists.len() {
            let mut i = std::mem::replace(&mut self.lists[l].head, NIL);
            while let Some(s) = self.slots.get(i as usize).filter(|s| s.g.block != NIL) {
                out.push(Parked {
                    block: s.g.block,
                    va: s.g.va,
                    size: s.g.size,
                    requested: s.requested,
                    buffer: s.buffer,
                    at_ns: s.at_ns,
                    callers: s.callers,
                    hit: s.hit_since_delegated(),
                });
                let next = s.next;
                self.retire(i as usize, b);
                i = next;
            }
        }
        if let Some(live) = live {
            for i in 0..self.slots.len() {
                let block = self.slots[i].g.block;
                if block != NIL {
                    self.retire(i, b);
                    let mut s = std::mem::replace(&mut self.slots[i], Slot::empty());
                    s.g.block = block;
                    live.push(s);
                }
            }
            self.slots.clear();
            self.spare.clear();
            self.lists.clear();
        }
    }
}

/// A free block a cache gives back: what the pool needs of it.
pub(crate) struct Parked {
    pub block: u32,
    pub va: u64,
    pub size: u64,
    pub requested: u64,
    pub buffer: u64,
    pub at_ns: u64,
    pub callers: Callers,
    /// A hit took it since the pool delegated it (else the pool's free left its ghost).
    pub hit: bool,
}
