// SPDX-License-Identifier: GPL-2.0
//! The GPU address space of one DRM file: its page tables and its mappings.
//!
//! Mappings are kept in one array sorted by start VA; they never overlap. The objects mapped are kept
//! in a second tree: one reference and one pin of the object's pages (`drm_gem_shmem_pin`) per
//! object, counted by its mappings, taken by the object's first bind in this address space and
//! given back when its last mapping is unbound or the file is closed. Pinning takes the object's
//! reservation lock; once per object instead of once per mapping, a file with thousands of
//! mappings of a few objects binds and closes without thousands of lock round trips (docs/kmd.md,
//! "Page-table budget"). The page tables (`pt.rs`) are created on the first bind and written only
//! here.
//!
//! Why an array and not a tree: a tree node is an allocation per mapping, and on the debug kernel
//! (KASAN and kmemleak record a stack trace for every allocation and every free) freeing 16384 of
//! them took 2.5-4 s of a file's close in the guest, against one free of the array. Lookups are a
//! binary search; a bind or unbind in the middle moves the entries after it (40 bytes each, at
//! most `rules::vm::MAX_MAPPINGS` of them), a `memmove` that costs less than the allocation it
//! replaces.

use kernel::{
    bindings, device,
    drm::gem::{BaseObject, IntoGEMObject},
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    sync::{aref::ARef, atomic::Relaxed, Arc},
};

use crate::{
    bus::Bus,
    driver::Stats,
    gem::Gem,
    gpu::Gpu,
    hw::Hw,
    driver::{DrmFile, RegDevice},
    ioctl::{fail, refuse, Fail, IoctlResult},
    model::mmu::Tlb,
    pt::PtPage,
    rules::flags::NoFlags,
    uapi::{ioctl as uioctl, pte, reason, version},
};

/// Pages unmapped per device TLB invalidation (a kilobyte of stack for their addresses).
const UNMAP_BATCH: usize = 128;

/// Pages taken off the bus per TLB invalidation when a whole address space goes (file close):
/// 8 KiB of addresses, allocated for the teardown (`UNMAP_BATCH` on the stack if that fails).
const TEARDOWN_BATCH: usize = 1024;


/// Keeps a GEM object's pages pinned; unpins on drop.
struct PagesPin {
    obj: ARef<Gem>,
}

/// The `drm_gem_shmem_object` an aigpu GEM object is built on.
fn raw_shmem(obj: &Gem) -> *mut bindings::drm_gem_shmem_object {
    // SAFETY: every `Gem` embeds its `drm_gem_object` as the `base` field of a
    // `drm_gem_shmem_object` (`shmem::Object::as_raw` returns `&raw mut (*shmem).base`).
    unsafe { kernel::container_of!(obj.as_raw(), bindings::drm_gem_shmem_object, base) }
}

impl PagesPin {
    fn new(obj: ARef<Gem>) -> Result<Self, Fail> {
        // SAFETY: `raw_shmem(&obj)` is a valid shmem object (we hold a reference); the
        // unlocked variant takes the reservation lock itself (the `_object_pin` vtable helper
        // expects it held).
        let ret = unsafe { bindings::drm_gem_shmem_pin(raw_shmem(&obj)) };
        if ret != 0 {
            let err = Error::from_errno(ret);
            let r = if err == ENOMEM { reason::OUT_OF_MEMORY } else { reason::INTERRUPTED };
            return Err(fail(err, r));
        }
        Ok(Self { obj })
    }
}

impl Drop for PagesPin {
    fn drop(&mut self) {
        // SAFETY: pairs with the successful `drm_gem_shmem_pin` in `PagesPin::new`; takes the
        // reservation lock itself.
        unsafe { bindings::drm_gem_shmem_unpin(raw_shmem(&self.obj)) };
    }
}

/// An object mapped in this address space: its reference and pin, shared by its mappings.
struct ObjectPin {
    _pin: PagesPin,
    /// Mappings of the object here (at most `rules::vm::MAX_MAPPINGS`); the entry goes with the
    /// last.
    mappings: u32,
}

/// The key of an object in [`Vm::objects`]: the address of its `drm_gem_object`, unique while
/// the entry's reference keeps the object alive.
fn object_key(obj: &Gem) -> usize {
    obj.as_raw() as usize
}

/// One mapping `[va, va + size)` -> `[bo_offset, bo_offset + size)` of an object.
struct Mapping {
    va: u64,
    size: u64,
    bo_offset: u64,
    access: u32,
    /// The object's entry in [`Vm::objects`] (which holds the reference and the pin).
    object: usize,
}

/// A validated bind request.
pub(crate) struct BindArgs {
    pub(crate) va: u64,
    pub(crate) bo_offset: u64,
    pub(crate) size: u64,
    pub(crate) access: u32,
}

/// The GPU address space of one file.
pub(crate) struct Vm {
    /// Top-level (L3) table; created on the first bind.
    root: Option<KBox<PtPage>>,
    /// The mappings, sorted by start VA (see the module documentation).
    mappings: KVVec<Mapping>,
    /// The objects the mappings map, by [`object_key`].
    objects: RBTree<usize, ObjectPin>,
    /// Number of entries in `mappings`.
    count: usize,
    /// Page-table pages held, the top-level table included: what the page-table budget
    /// (`rules::vm::MAX_PT_TABLES`, docs/kmd.md "Page-table budget") is checked against.
    tables: usize,
    stats: Arc<Stats>,
    /// The device's memory registry: every mapped page is registered while mapped.
    bus: Arc<Bus>,
    /// The GPU, whose translation cache must forget removed pages (`MMU_INVALIDATE`) before
    /// they leave the bus. (The GPU holds this address space too while the file is attached;
    /// `Gpu::detach` drops that reference, which breaks the cycle.)
    gpu: Arc<Gpu>,
}

/// The `struct page` of page `index` of a pinned shmem object (null if out of range).
fn object_page(obj: &Gem, index: usize) -> *mut bindings::page {
    if index >= obj.size() / version::PAGE_SIZE as usize {
        return core::ptr::null_mut();
    }
    // SAFETY: `obj` is a live shmem object whose pages are pinned by a `PagesPin` (the caller
    // holds one), so `pages` points to an array of `size / PAGE_SIZE` page pointers.
    unsafe {
        let pages = (*raw_shmem(obj)).pages;
        if pages.is_null() {
            return core::ptr::null_mut();
        }
        *pages.add(index)
    }
}

impl Vm {
    pub(crate) fn new(stats: Arc<Stats>, gpu: Arc<Gpu>) -> Self {
        Self {
            root: None,
            mappings: KVVec::new(),
            objects: RBTree::new(),
            count: 0,
            tables: 0,
            stats,
            bus: gpu.hw.bus().clone(),
            gpu,
        }
    }

    /// Bus address of the top-level table (what `AS_PT_BASE` takes), once the first bind made it.
    pub(crate) fn root_pa(&self) -> Option<u64> {
        self.root.as_deref().map(PtPage::dma_address)
    }

    /// Unmaps `[va, end)` page by page: clears the leaves, makes the device forget its cached
    /// translations (`MMU_INVALIDATE`, hw-spec §5), then unregisters the pages from the bus, in
    /// batches of `UNMAP_BATCH` pages. The order matters: once the invalidation returns (the
    /// register write is ordered with the device's steps by the model lock) a job racing with the
    /// unmap faults on the cleared entry (`UNMAPPED`), and can never reach a page that has left
    /// the bus, let alone one unpinned afterwards and given to someone else.
    fn unmap_range(root: &mut PtPage, bus: &Bus, hw: &Hw, va: u64, end: u64, tables: &mut usize) {
        let mut cur = va;
        while cur < end {
            let mut pages = [0u64; UNMAP_BATCH];
            let mut n = 0;
            while cur < end && n < UNMAP_BATCH {
                let leaf = root.lookup(cur);
                root.unmap_page(cur, tables);
                if leaf & pte::VALID != 0 {
                    if let Some(p) = pages.get_mut(n) {
                        *p = pte::addr(leaf);
                        n += 1;
                    }
                }
                cur += version::PAGE_SIZE;
            }
            hw.invalidate_tlb();
            bus.unregister_all(pages.get(..n).unwrap_or_default());
        }
    }

    /// A [`FetchCache`] for reads through this address space while it stays borrowed (one per
    /// submit: the command buffers of a batch that share a page cost one walk and one registry
    /// lookup).
    pub(crate) fn fetch_cache(&self) -> FetchCache<'_> {
        FetchCache {
            vm: self,
            tlb: Tlb::new(),
            page: None,
        }
    }

    /// One `vm` debugfs line per mapping, then the page-table page count.
    pub(crate) fn describe(&self, client: u64, out: &mut crate::text::Text) {
        for m in self.mappings.iter() {
            let access = match (m.access & uioctl::VM_ACCESS_READ != 0, m.access & uioctl::VM_ACCESS_WRITE != 0) {
                (true, true) => "rw",
                (true, false) => "r",
                _ => "w",
            };
            crate::tprint!(
                out,
                "client={} va={:#x} size={} access={} bo_offset={}\n",
                client,
                m.va,
                m.size,
                access,
                m.bo_offset
            );
        }
        crate::tprint!(
            out,
            "client={} pt_pages={}\n",
            client,
            self.tables
        );
    }

    /// Number of mappings.
    #[allow(dead_code)]
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Index of the first mapping that starts at or after `va`.
    fn first_at_or_after(&self, va: u64) -> usize {
        self.mappings.partition_point(|m| m.va < va)
    }

    /// Whether `[va, end)` intersects an existing mapping.
    fn overlaps(&self, va: u64, end: u64) -> bool {
        let i = self.first_at_or_after(va);
        if self.mappings.get(i).is_some_and(|m| m.va < end) {
            return true;
        }
        i > 0 && self.mappings.get(i - 1).is_some_and(|m| m.va + m.size > va)
    }

    /// Maps `args` of `obj` (already validated against the UAPI rules and the object size).
    ///
    /// `dev` is the GPU's parent device (page-table pages and the object's DMA mapping live on
    /// it). Fails with `EINVAL` + `VA_OVERLAP`, `ENOSPC` + `OBJECT_LIMIT`, `ENOSPC` + `PT_LIMIT`
    /// (the page tables the bind needs are counted before anything is allocated:
    /// `rules::vm::pt_check`), or `ENOMEM` + `OUT_OF_MEMORY`; on failure nothing is left mapped.
    pub(crate) fn bind(
        &mut self,
        dev: &device::Device<device::Bound>,
        obj: ARef<Gem>,
        args: &BindArgs,
    ) -> Result<(), Fail> {
        let end = args.va + args.size;
        if self.overlaps(args.va, end) {
            return Err(refuse(reason::VA_OVERLAP));
        }
        crate::rules::vm::mapping_limit(self.count)?;
        // The page-table budget, before anything is allocated (the same rule as the simulator's).
        let top = self.root.as_deref();
        crate::rules::vm::pt_check(args.va, end, self.tables, top.is_some(), |level, va| {
            top.is_some_and(|t| t.has_table(level, va))
        })?;
        let oom = |e: Error| fail(e, reason::OUT_OF_MEMORY);

        // Allocate everything that can fail before touching the tables.
        let sgt = obj.sg_table(dev).map_err(oom)?;
        let key = object_key(&obj);
        // The object's first mapping here pins it (inserted below on success; dropped, which
        // unpins, on failure); later ones share that pin.
        let first_pin = match self.objects.get(&key) {
            Some(_) => None,
            None => Some(
                RBTreeNode::new(
                    key,
                    ObjectPin {
                        _pin: PagesPin::new(obj.clone())?,
                        mappings: 0,
                    },
                    GFP_KERNEL,
                )
                .map_err(|_| refuse(reason::OUT_OF_MEMORY))?,
            ),
        };
        // Room for the new entry (doubling: amortised), so that inserting it cannot fail.
        self.mappings
            .reserve(1, GFP_KERNEL_ACCOUNT)
            .map_err(|_| refuse(reason::OUT_OF_MEMORY))?;
        if self.root.is_none() {
            let root = PtPage::new(dev, pte::LEVELS - 1, &self.stats, &self.bus).map_err(oom)?;
            self.root = Some(KBox::new(root, GFP_KERNEL_ACCOUNT).map_err(|_| oom(ENOMEM))?);
            self.tables += 1;
        }
        let Some(root) = self.root.as_deref_mut() else {
            return Err(oom(ENOMEM));
        };

        let mut leaf = 0;
        if args.access & uioctl::VM_ACCESS_READ != 0 {
            leaf |= pte::READ;
        }
        if args.access & uioctl::VM_ACCESS_WRITE != 0 {
            leaf |= pte::WRITE;
        }

        // Walk the object's DMA segments, skipping to `bo_offset`, mapping page by page.
        let page = version::PAGE_SIZE;
        let mut skip = args.bo_offset;
        let mut va = args.va;
        let mut result = Ok(());
        'segments: for seg in sgt.iter() {
            #[allow(clippy::useless_conversion)]
            let (mut pa, mut len) = (u64::from(seg.dma_address()), u64::from(seg.dma_len()));
            if skip >= len {
                skip -= len;
                continue;
            }
            pa += skip;
            len -= skip;
            skip = 0;
            while len >= page && va < end {
                let index = ((args.bo_offset + (va - args.va)) / page) as usize;
                let pg = object_page(&obj, index);
                if pg.is_null() {
                    result = Err(EINVAL);
                    break 'segments;
                }
                // SAFETY: `pg` is a page of `obj`, pinned by the object's `ObjectPin` (in
                // `objects`, or `first_pin`) while it has a mapping here; removing a mapping
                // unregisters its pages first (`unmap_range`).
                if let Err(e) = unsafe { self.bus.register_page(pa, pg) } {
                    result = Err(e);
                    break 'segments;
                }
                if let Err(e) = root.map_page(dev, va, pa, leaf, &mut self.tables) {
                    self.bus.unregister(pa);
                    result = Err(e);
                    break 'segments;
                }
                va += page;
                pa += page;
                len -= page;
            }
            if va >= end {
                break;
            }
        }
        if result.is_ok() && va < end {
            // The object has fewer pages than its size says: cannot happen for shmem objects.
            result = Err(EINVAL);
        }
        if let Err(e) = result {
            // Roll back what was mapped (a job using the range meanwhile may have cached it).
            Self::unmap_range(root, &self.bus, &self.gpu.hw, args.va, va, &mut self.tables);
            self.check_empty_tables();
            let r = if e == ENOMEM { reason::OUT_OF_MEMORY } else { reason::BO_RANGE };
            return Err(fail(e, r));
        }
        if let Some(pin) = first_pin {
            self.objects.insert(pin);
        }
        if let Some(o) = self.objects.get_mut(&key) {
            o.mappings += 1;
        }
        let at = self.first_at_or_after(args.va);
        let mapping = Mapping {
            va: args.va,
            size: args.size,
            bo_offset: args.bo_offset,
            access: args.access,
            object: key,
        };
        if self.mappings.insert_within_capacity(at, mapping).is_err() {
            // Cannot happen (room was reserved and `at <= len`); undo the bind rather than lose
            // track of it.
            if let Some(root) = self.root.as_deref_mut() {
                Self::unmap_range(root, &self.bus, &self.gpu.hw, args.va, end, &mut self.tables);
            }
            self.drop_object_mapping(key);
            self.check_empty_tables();
            return Err(refuse(reason::OUT_OF_MEMORY));
        }
        self.count += 1;
        self.stats.mappings.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Removes exactly the mapping `[va, va + size)`; `EINVAL` + `VA_NOT_MAPPED` otherwise.
    pub(crate) fn unbind(&mut self, va: u64, size: u64) -> Result<(), Fail> {
        let i = self.first_at_or_after(va);
        match self.mappings.get(i) {
            Some(m) if m.va == va && m.size == size => {}
            _ => return Err(refuse(reason::VA_NOT_MAPPED)),
        }
        if let Some(root) = self.root.as_deref_mut() {
            Self::unmap_range(root, &self.bus, &self.gpu.hw, va, va + size, &mut self.tables);
        }
        // The object's last mapping here unpins its pages and drops the reference, after the
        // entries pointing at them are gone.
        if let Ok(m) = self.mappings.remove(i) {
            self.drop_object_mapping(m.object);
        }
        self.count -= 1;
        self.stats.mappings.fetch_sub(1, Relaxed);
        self.check_empty_tables();
        Ok(())
    }

    /// One mapping of object `key` went: its entry (reference and pin) goes with the last.
    fn drop_object_mapping(&mut self, key: usize) {
        let last = self.objects.get_mut(&key).is_some_and(|o| {
            o.mappings -= 1;
            o.mappings == 0
        });
        if last {
            drop(self.objects.remove(&key));
        }
    }

    /// Self-check: with no mapping left, only the (empty) top-level table may remain; every
    /// other table must have been freed when it became empty. A violation is reported as
    /// `LEAK:` (the guest test verdict fails on it).
    fn check_empty_tables(&self) {
        if self.count != 0 {
            return;
        }
        if let Some(root) = self.root.as_deref() {
            let tables = root.table_count();
            if tables != 1 || !root.is_empty() || self.tables != 1 {
                pr_err!(
                    "LEAK: address space has no mapping but {} page-table pages, {} counted (top empty: {})\n",
                    tables,
                    self.tables,
                    root.is_empty()
                );
            }
        }
    }

    /// Leaf entry for `va` (0 if unmapped).
    #[allow(dead_code)]
    pub(crate) fn lookup(&self, va: u64) -> u64 {
        self.root.as_deref().map_or(0, |r| r.lookup(va))
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // File close: take every page off the bus, free the page tables, then drop the mappings
        // and the objects (unpin, unreference: once per object). One walk over the whole tree, not one unmap per mapping: clear up
        // to a batch of leaves (freeing each table as it empties), make the device forget its
        // translations once, take the batch off the bus in one pass, repeat (the order of
        // `unmap_range`, in batches of `TEARDOWN_BATCH` pages instead of one mapping's).
        if let Some(root) = self.root.as_deref_mut() {
            let mut heap = KVec::from_elem(0u64, TEARDOWN_BATCH, GFP_KERNEL).ok();
            let mut stack = [0u64; UNMAP_BATCH];
            let buf: &mut [u64] = match heap.as_deref_mut() {
                Some(h) => h,
                None => &mut stack,
            };
            let mut from = 0u64;
            loop {
                let mut n = 0;
                let more = root.drain_leaves(0, &mut from, buf, &mut n, &mut self.tables);
                self.gpu.hw.invalidate_tlb();
                self.bus.unregister_all(buf.get(..n).unwrap_or_default());
                if !more {
                    break;
                }
            }
        }
        self.root = None;
        self.tables = 0;
        self.mappings = KVVec::new();
        self.objects = RBTree::new();
        self.stats.mappings.fetch_sub(self.count as u64, Relaxed);
        self.count = 0;
    }
}

// ---- the VM ioctls ----

/// VM bind: map part of an object into the file's GPU address space.
///
/// Checks, in order (the simulator backend's order): flags, handle, access, size zero,
/// alignment (va, bo_offset, size), VA range and overflow, object range, then (in `Vm::bind`)
/// overlap and the mapping limit.
pub(crate) fn bind_ioctl(dev: &RegDevice, req: &mut uioctl::VmBind, file: &DrmFile) -> IoctlResult {
    NoFlags::try_from(req.flags)?;
    let obj = crate::gem::lookup(file, req.handle)?;
    crate::rules::vm::bind(req.va, req.bo_offset, req.size, req.access, obj.size() as u64)?;
    let args = BindArgs {
        va: req.va,
        bo_offset: req.bo_offset,
        size: req.size,
        access: req.access,
    };
    let parent: &crate::driver::Parent<device::Bound> = dev.as_ref();
    let f = file.inner();
    f.vm.lock().bind(parent, obj, &args)?;
    f.stats.mappings.fetch_add(1, kernel::sync::atomic::Relaxed);
    Ok(())
}

/// VM unbind: remove exactly one existing mapping.
pub(crate) fn unbind_ioctl(_dev: &RegDevice, req: &mut uioctl::VmUnbind, file: &DrmFile) -> IoctlResult {
    NoFlags::try_from(req.flags)?;
    crate::rules::vm::unbind(req.va, req.size)?;
    let f = file.inner();
    f.vm.lock().unbind(req.va, req.size)?;
    f.stats.mappings.fetch_sub(1, kernel::sync::atomic::Relaxed);
    Ok(())
}

/// Reads through one address space for SUBMIT's validation, remembering between the command
/// buffers of one submit the last page translated and the CPU address of the last page read (a
/// registry lookup under the bus lock otherwise, the lock the device thread takes for its misses:
/// a validating submit and a busy device contended on it). Holds the `Vm` borrowed, and the VM
/// lock keeps every page of its mappings registered, so a remembered address cannot outlive its
/// page.
pub(crate) struct FetchCache<'a> {
    vm: &'a Vm,
    tlb: Tlb,
    /// (bus address of the page, its kernel address).
    page: Option<(u64, *mut u8)>,
}

impl FetchCache<'_> {
    /// Reads `out.len()` u32 words at `va` through the address space, as the device would for a
    /// command fetch (`READ` permission needed). `Err` if any page is not mapped readable.
    pub(crate) fn read_words(&mut self, va: u64, out: &mut [u32]) -> Result<(), ()> {
        let vm = self.vm;
        let Some(root) = vm.root_pa() else {
            return Err(());
        };
        // The words are read as bytes straight into `out` (no staging buffer to clear and copy:
        // under emulation both cost a command buffer's validation more than the decode), then
        // put in CPU order.
        let total = out.len() * 4;
        // SAFETY: `out` is `total` bytes of initialised memory, any byte pattern is a valid `u32`,
        // and the byte view is the only access to `out` while it lives.
        let bytes = unsafe { core::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), total) };
        let mut done = 0usize;
        while done < total {
            let cur = va.checked_add(done as u64).ok_or(())?;
            let pa = self.tlb.translate(&*vm.bus, root, cur, crate::uapi::regs::ACCESS_FETCH).map_err(|_| ())?;
            let off = (cur % version::PAGE_SIZE) as usize;
            let n = (version::PAGE_SIZE as usize - off).min(total - done);
            let chunk = bytes.get_mut(done..done + n).ok_or(())?;
            let page_pa = pa & !(version::PAGE_SIZE - 1);
            let kva = match self.page {
                Some((p, kva)) if p == page_pa => Some(kva),
                _ => {
                    let kva = vm.bus.page_kva(page_pa);
                    self.page = kva.map(|k| (page_pa, k));
                    kva
                }
            };
            match kva {
                // SAFETY: `kva` is the kernel address of the registered page at `page_pa`, a leaf
                // of `vm`'s tables, so one of its mappings registered it; no mapping can go (nor
                // its pages be unregistered and unpinned) while `vm` is borrowed, as it is for as
                // long as `self` lives. `off + n <= 4096`; `chunk` is a distinct kernel buffer.
                // User space may write the page meanwhile, as it may while the device fetches it:
                // plain data.
                Some(kva) => unsafe { crate::bus::copy_bytes(kva.add(off), chunk.as_mut_ptr(), n) },
                None => crate::model::PhysMem::read(&*vm.bus, pa, chunk).map_err(|_| ())?,
            }
            done += n;
        }
        for w in out.iter_mut() {
            *w = u32::from_le(*w);
        }
        Ok(())
    }
}
