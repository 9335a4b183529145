// SPDX-License-Identifier: GPL-2.0
//! The memory bus between the device model and system RAM: bus (DMA) address -> CPU page, for
//! exactly the pages this driver handed to the device.
//!
//! The device model reads and writes "physical" memory through [`BusMem`] (its `PhysMem`). A real
//! GPU would reach any address its page tables name; the model runs on the CPU, so an address
//! must be turned into a kernel pointer first, and a corrupted entry must never make it touch
//! arbitrary kernel memory. Hence a registry: every page the driver gives the device is entered
//! here with its bus address (page-table pages, rings and the fence page: DMA-coherent memory
//! with a kernel virtual address; the pages of a GEM object while a VM mapping pins them: their
//! direct-map address, or on a HIGHMEM kernel the `struct page`, mapped with `kmap_local_page`
//! for each access). Anything else is a bus error, which the device reports as an uncorrectable
//! memory error of the job that made the access.
//!
//! Lifetime: an entry is removed before its memory is freed or unpinned, and an access either
//! completes before the removal returns or fails: the driver's own accesses copy under the
//! registry lock; the device thread's hit its own cache without a lock, and a removal waits for
//! the device's round in progress ([`BusMem`], [`Bus::unregister_all`]). Entries are reference
//! counted (the same page may be mapped at several VAs, or in several files through PRIME).

use core::cell::Cell;

use kernel::{
    bindings, new_mutex, new_spinlock,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{
        atomic::{Acquire, Atomic, Release},
        Arc, Mutex, MutexGuard, SpinLock,
    },
};

use crate::model::{BusError, PhysMem};

/// Bytes in a bus page.
const PAGE: u64 = 4096;

/// How the CPU reaches a registered page.
#[derive(Clone, Copy)]
enum Target {
    /// A `struct page` (GEM object pages on a `CONFIG_HIGHMEM` kernel; mapped with
    /// `kmap_local_page` for each access).
    #[cfg(CONFIG_HIGHMEM)]
    Page(*mut bindings::page),
    /// A kernel virtual address of the page's first byte (DMA-coherent memory, and GEM object
    /// pages where every page is in the direct map: see `page_target`).
    Kva(*mut u8),
    /// A page-table page's kernel virtual address: reached like `Kva`, but never kept in the
    /// device thread's own lookup cache ([`BusMem`]), so that freeing a table (one by one, as
    /// the tables of an address space go) never waits for the device (see `Bus::unregister`).
    /// The device reads tables only on a miss of its translation cache.
    Table(*mut u8),
}

struct Entry {
    target: Target,
    refs: u32,
}

// SAFETY: the pointers name pages that stay allocated while the entry exists (registration
// contract of `Bus::register_*`); they are dereferenced under the registry lock, or by the device
// thread within a round that the entry's removal waits for (`BusMem`).
unsafe impl Send for Entry {}

/// Slots of the lookup cache (a power of two).
const CACHE_SLOTS: usize = 64;

/// The registered pages, and a direct-mapped cache of recent lookups in front of the tree: the
/// device makes a dozen accesses per command buffer (descriptor, page-table walks, packet, data)
/// to a handful of pages, and under emulation each tree walk costs microseconds. The cache lives
/// under the same lock as the tree and an unregistration clears its slot, so it can never name a
/// page the tree no longer holds. Written here because the kernel crate has no such cache.
struct Registry {
    tree: RBTree<u64, Entry>,
    /// `(page key, target)`; key `u64::MAX` is an empty slot (no bus page has that key).
    cache: [(u64, Target); CACHE_SLOTS],
}

// SAFETY: as for `Entry`: the cached targets are copies of live entries' targets, only
// dereferenced under the registry lock.
unsafe impl Send for Registry {}

impl Registry {
    fn new() -> Self {
        Self {
            tree: RBTree::new(),
            cache: [(u64::MAX, Target::Kva(core::ptr::null_mut())); CACHE_SLOTS],
        }
    }

    fn slot(key: u64) -> usize {
        // Higher bits folded in: pages a power-of-two stride apart (a command buffer 512 KiB
        // into the buffer whose first page the job writes) must not share a slot, or the two
        // evict each other on every command buffer.
        ((key ^ (key >> 6) ^ (key >> 12) ^ (key >> 18)) as usize) & (CACHE_SLOTS - 1)
    }

    fn lookup(&mut self, key: u64) -> Option<Target> {
        let slot = Self::slot(key);
        if let Some((k, t)) = self.cache.get(slot) {
            if *k == key {
                return Some(*t);
            }
        }
        let target = self.tree.get(&key)?.target;
        if let Some(c) = self.cache.get_mut(slot) {
            *c = (key, target);
        }
        Some(target)
    }

    fn forget(&mut self, key: u64) {
        if let Some(c) = self.cache.get_mut(Self::slot(key)) {
            if c.0 == key {
                c.0 = u64::MAX;
            }
        }
    }
}

/// The registry (one per device).
#[pin_data]
pub(crate) struct Bus {
    #[pin]
    map: SpinLock<Registry>,
    /// Bumped (under `map`) whenever an entry the device thread may hold in its own lookup
    /// cache (`Kva`) is removed: [`BusMem`] empties its cache when it sees a new value.
    removals: Atomic<u64>,
    /// Held by the device thread for each round of steps (`Bus::device_round`), the only time
    /// it touches memory; an unregistration that may concern its cache waits for it (see
    /// `Bus::unregister`).
    #[pin]
    device: Mutex<()>,
}

/// How the device reaches `page`. Without `CONFIG_HIGHMEM` (x86-64, arm64) every page lives in
/// the kernel's direct map for as long as it is allocated, `kmap_local_page` is `page_address`
/// and `kunmap_local` does nothing (include/linux/highmem-internal.h): the address is taken once
/// here, which saves two out-of-line helper calls on every device access (a dozen per command
/// buffer).
///
/// # Safety
///
/// `page` is a valid `struct page`.
#[cfg(not(CONFIG_HIGHMEM))]
unsafe fn page_target(page: *mut bindings::page) -> Target {
    // SAFETY: `page` is valid (function contract). Without HIGHMEM this returns the page's
    // direct-map address, valid until the page is freed (after its `Bus::unregister`, by the
    // registration contract), and the `kunmap_local` that pairs with it is a no-op.
    let kva = unsafe { bindings::kmap_local_page(page) };
    // SAFETY: pairs with the `kmap_local_page` above.
    unsafe { bindings::kunmap_local(kva) };
    Target::Kva(kva.cast())
}

/// How the device reaches `page`: with `CONFIG_HIGHMEM` it may have no permanent kernel
/// address, so every access maps it (`kmap_local_page`).
///
/// # Safety
///
/// `page` is a valid `struct page`.
#[cfg(CONFIG_HIGHMEM)]
unsafe fn page_target(page: *mut bindings::page) -> Target {
    Target::Page(page)
}

impl Bus {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                map <- new_spinlock!(Registry::new(), "aigpu_bus"),
                removals: Atomic::new(0),
                device <- new_mutex!((), "aigpu_bus_device"),
            }),
            GFP_KERNEL,
        )
    }

    fn register(&self, bus: u64, target: Target) -> Result {
        if bus % PAGE != 0 {
            return Err(EINVAL);
        }
        let key = bus / PAGE;
        // Allocate outside the spinlock; unused if the page is already registered.
        let res = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let mut map = self.map.lock();
        if let Some(e) = map.tree.get_mut(&key) {
            e.refs = e.refs.checked_add(1).ok_or(EOVERFLOW)?;
            return Ok(());
        }
        map.tree.insert(res.into_node(key, Entry { target, refs: 1 }));
        Ok(())
    }

    /// Registers the 4 KiB page at bus address `bus` (page aligned), reachable by the CPU at
    /// `kva`.
    ///
    /// # Safety
    ///
    /// `kva` points to 4096 bytes of kernel memory that stay allocated until the matching
    /// [`Bus::unregister`] returns.
    pub(crate) unsafe fn register_kva(&self, bus: u64, kva: *mut u8) -> Result {
        self.register(bus, Target::Kva(kva))
    }

    /// Registers the page-table page at bus address `bus` (page aligned), reachable by the CPU at
    /// `kva` (see `Target::Table`).
    ///
    /// # Safety
    ///
    /// As for [`Bus::register_kva`].
    pub(crate) unsafe fn register_table(&self, bus: u64, kva: *mut u8) -> Result {
        self.register(bus, Target::Table(kva))
    }

    /// Registers `page` at bus address `bus` (page aligned).
    ///
    /// # Safety
    ///
    /// `page` is a valid `struct page` that stays allocated (pinned) until the matching
    /// [`Bus::unregister`] returns.
    pub(crate) unsafe fn register_page(&self, bus: u64, page: *mut bindings::page) -> Result {
        // SAFETY: the caller's contract.
        self.register(bus, unsafe { page_target(page) })
    }

    /// Drops one registration of the page at `bus`; the device can no longer reach it once the
    /// last one is gone and this returns.
    pub(crate) fn unregister(&self, bus: u64) {
        self.unregister_all(&[bus]);
    }

    /// [`Bus::unregister`] of each page in `pages`, with at most one wait for the device.
    ///
    /// Removing an entry the device thread may have in its own lookup cache (a `Kva` page: GEM
    /// pages, rings) bumps `removals`, then waits for the device's current round to end (its
    /// `device` lock): the device uses a cached address only within a round, and checks
    /// `removals` when a round begins, so once this returns it can no longer reach the page.
    /// The wait is the length of a round at most (`hw::ROUND_NS` plus one step), and nothing
    /// when the device is idle; tables (`Target::Table`) never need it.
    pub(crate) fn unregister_all(&self, pages: &[u64]) {
        let mut wait = false;
        {
            let mut map = self.map.lock();
            for bus in pages {
                let key = bus / PAGE;
                let remove = match map.tree.get_mut(&key) {
                    Some(e) => {
                        e.refs -= 1;
                        e.refs == 0
                    }
                    None => false,
                };
                if remove {
                    map.forget(key);
                    if let Some(node) = map.tree.remove_node(&key) {
                        wait |= matches!(node.to_key_value().1.target, Target::Kva(_));
                    }
                }
            }
            if wait {
                self.removals.store(self.removals.load(Acquire).wrapping_add(1), Release);
            }
        }
        if wait {
            drop(self.device.lock());
        }
    }

    /// The device thread holds this for each round of steps (see [`BusMem`]).
    pub(crate) fn device_round(&self) -> MutexGuard<'_, ()> {
        self.device.lock()
    }

    /// A miss of the device thread's cache, under one hold of the lock: a `Kva` page's address
    /// is returned for that cache (the caller copies, outside the lock); any other registered
    /// page (a table, a HIGHMEM page) is accessed here, under the lock (`Ok(None)`); an
    /// unregistered address is a bus error. `off + len <= 4096` is the caller's to check.
    fn device_miss(
        &self,
        key: u64,
        off: usize,
        f: &mut impl FnMut(*mut u8),
    ) -> Result<Option<*mut u8>, BusError> {
        let mut map = self.map.lock();
        let target = map.lookup(key).ok_or(BusError)?;
        if let Target::Kva(base) = target {
            return Ok(Some(base));
        }
        // SAFETY: `target` is registered and stays so while the lock is held; the caller
        // checked `off + len <= 4096` for the `len` that `f` touches.
        unsafe { access_target(target, off, f) };
        Ok(None)
    }

    /// Runs `f` on a kernel pointer to `[pa, pa + len)`, which must lie in one registered page.
    fn access(&self, pa: u64, len: usize, f: impl FnOnce(*mut u8)) -> Result<(), BusError> {
        let off = (pa % PAGE) as usize;
        if off + len > PAGE as usize {
            return Err(BusError);
        }
        let mut map = self.map.lock();
        let target = map.lookup(pa / PAGE).ok_or(BusError)?;
        // SAFETY: `target` is registered and stays so while the lock is held; `off + len <=
        // 4096` was checked above.
        unsafe { access_target(target, off, f) };
        Ok(())
    }

    /// The kernel address of the registered page that holds bus address `pa`, for a reader that
    /// keeps that page registered by other means for as long as it uses the address (see
    /// `vm::FetchCache`). `None` if it is not registered, and always on a HIGHMEM kernel, whose
    /// pages are mapped per access.
    pub(crate) fn page_kva(&self, pa: u64) -> Option<*mut u8> {
        let mut map = self.map.lock();
        match map.lookup(pa / PAGE)? {
            Target::Kva(base) => Some(base),
            _ => None,
        }
    }

    /// Reads a little-endian u64 at `pa` (for the driver's own use: fences, page walks).
    pub(crate) fn read_u64(&self, pa: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(pa, &mut b).ok()?;
        Some(u64::from_le_bytes(b))
    }
}

/// Runs `f` on a kernel pointer `off` bytes into the page `target` names.
///
/// # Safety
///
/// `target` is a registered entry's target that stays registered until this returns (the
/// registry lock is held), and `f` touches at most `4096 - off` bytes from its pointer.
unsafe fn access_target(target: Target, off: usize, f: impl FnOnce(*mut u8)) {
    match target {
        Target::Kva(base) | Target::Table(base) => {
            // SAFETY: `base` points to a registered, live 4 KiB page (registration contract),
            // and `f` stays within it (function contract).
            f(unsafe { base.add(off) })
        }
        #[cfg(CONFIG_HIGHMEM)]
        Target::Page(page) => {
            // SAFETY: `page` is a registered, pinned page; `kmap_local_page` may be called in
            // atomic context and is undone below, before the caller drops the lock.
            let base = unsafe { bindings::kmap_local_page(page) }.cast::<u8>();
            // SAFETY: `base` maps the whole page, and `f` stays within it.
            f(unsafe { base.add(off) });
            // SAFETY: pairs with the `kmap_local_page` above (the only local mapping made here,
            // so unmapping is in reverse order).
            unsafe { bindings::kunmap_local(base.cast()) };
        }
    }
}

/// Copies `len` bytes from `src` to `dst`: 8 bytes at a time for the device's small accesses
/// (a 64-byte descriptor, a packet, a 4-byte fill, an 8-byte fence), `memcpy` for the rest. Written
/// by hand because the kernel's `memcpy` is `rep movsb` on CPUs with fast short string moves,
/// which an emulator runs one byte per instruction: most of a small access's cost in the guest.
///
/// # Safety
///
/// `src` is valid for reads and `dst` for writes of `len` bytes; the ranges do not overlap.
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    if len > 64 {
        // SAFETY: the caller's contract.
        unsafe { core::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut i = 0;
    while i + 8 <= len {
        // SAFETY: `i + 8 <= len`; unaligned accesses are allowed by `read/write_unaligned`.
        unsafe { dst.add(i).cast::<u64>().write_unaligned(src.add(i).cast::<u64>().read_unaligned()) };
        // Keeps the compiler from recognising the loop as a copy and calling `memcpy` for it,
        // which it did (the kernel's memcpy, 1.4 % of a batched run under emulation). No code.
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::Acquire);
        i += 8;
    }
    if i + 4 <= len {
        // SAFETY: as above, `i + 4 <= len`.
        unsafe { dst.add(i).cast::<u32>().write_unaligned(src.add(i).cast::<u32>().read_unaligned()) };
        i += 4;
    }
    while i < len {
        // SAFETY: `i < len`.
        unsafe { *dst.add(i) = *src.add(i) };
        i += 1;
    }
}

impl PhysMem for Bus {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), BusError> {
        self.access(pa, buf.len(), |p| {
            // SAFETY: `p` is valid for `buf.len()` bytes (checked by `access`); `buf` is a
            // distinct kernel buffer. User space may write the same page concurrently through a
            // CPU mapping, as it may while real hardware reads it; the bytes are plain data.
            unsafe { copy_bytes(p, buf.as_mut_ptr(), buf.len()) }
        })
    }

    fn write(&self, pa: u64, data: &[u8]) -> Result<(), BusError> {
        self.access(pa, data.len(), |p| {
            // SAFETY: as in `read`, in the other direction.
            unsafe { copy_bytes(data.as_ptr(), p, data.len()) }
        })
    }
}

/// The device model's memory interface: the registry, and the device thread's own cache of the
/// pages it reached last, so that most of its accesses take no lock (three per command buffer
/// otherwise, each a lock, an unlock and a lockdep hook: out-of-line calls, which an emulator
/// pays for as translation-block exits, and a spinlock the submitting CPU contends for).
///
/// Why a cached address cannot outlive its page: the model (and so this) is used only by the
/// device thread's rounds, each under `Bus::device_round`, which starts with
/// [`BusMem::begin_round`]: it compares `Bus::removals` with the value the cache was filled under
/// and empties the cache if it moved; an unregistration bumps it, then waits for the round in
/// progress to end before it returns and its caller frees or unpins the page. A page removed
/// during a round may still be reached in that round: before the removal completes, as with the
/// lock. (Once per round, not per access: a kernel atomic load is an out-of-line helper call.)
pub(crate) struct BusMem {
    bus: Arc<Bus>,
    /// `(page key, kernel address)`; key `u64::MAX` is an empty slot.
    cache: [Cell<(u64, usize)>; DEVICE_CACHE_SLOTS],
    /// `Bus::removals` when the cache was last emptied.
    seen: Cell<u64>,
}

/// Slots of the device thread's cache (a power of two).
const DEVICE_CACHE_SLOTS: usize = 64;

impl BusMem {
    pub(crate) fn new(bus: Arc<Bus>) -> Self {
        let seen = bus.removals.load(Acquire);
        Self {
            bus,
            cache: [const { Cell::new((u64::MAX, 0)) }; DEVICE_CACHE_SLOTS],
            seen: Cell::new(seen),
        }
    }

    /// Called by the device thread at the start of each round, under `Bus::device_round`:
    /// forgets every cached page if a page was removed since the cache was filled.
    pub(crate) fn begin_round(&self) {
        let removals = self.bus.removals.load(Acquire);
        if removals != self.seen.get() {
            for c in self.cache.iter() {
                c.set((u64::MAX, 0));
            }
            self.seen.set(removals);
        }
    }

    /// Runs `f` on a kernel pointer to `[pa, pa + len)` (within one page): from the cache when
    /// it holds the page, else through the registry (which fills the cache for `Kva` pages).
    fn access(&self, pa: u64, len: usize, mut f: impl FnMut(*mut u8)) -> Result<(), BusError> {
        let off = (pa % PAGE) as usize;
        if off + len > PAGE as usize {
            return Err(BusError);
        }
        let key = pa / PAGE;
        let Some(slot) = self.cache.get(Registry::slot(key)) else {
            return self.bus.access(pa, len, f);
        };
        let (cached, addr) = slot.get();
        let base = if cached == key {
            addr as *mut u8
        } else {
            // One lock hold: a `Kva` page comes back for the cache; tables, HIGHMEM pages (done
            // under the lock) and unregistered addresses (a bus error) do not.
            match self.bus.device_miss(key, off, &mut f)? {
                Some(base) => {
                    slot.set((key, base as usize));
                    base
                }
                None => return Ok(()),
            }
        };
        // SAFETY: `base` is the address of a registered `Kva` page, live until its
        // unregistration returns, which cannot happen before this round ends (see the type's
        // comment); `off + len <= 4096`.
        f(unsafe { base.add(off) });
        Ok(())
    }
}

impl PhysMem for BusMem {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), BusError> {
        self.access(pa, buf.len(), |p| {
            // SAFETY: as in `Bus::read`.
            unsafe { copy_bytes(p, buf.as_mut_ptr(), buf.len()) }
        })
    }
    fn write(&self, pa: u64, data: &[u8]) -> Result<(), BusError> {
        self.access(pa, data.len(), |p| {
            // SAFETY: as in `Bus::write`.
            unsafe { copy_bytes(data.as_ptr(), p, data.len()) }
        })
    }
}
