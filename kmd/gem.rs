// SPDX-License-Identifier: GPL-2.0
//! GEM buffer objects: shmem-backed, accounted against the device's `mem_mib` budget.
//!
//! Handle lookup never trusts a handle this driver did not create. The DRM core lets other GEM
//! objects into a file's handle table: `DRM_IOCTL_MODE_CREATE_DUMB` on the primary node (the shmem
//! helpers install `dumb_create`) and PRIME import of a foreign dma-buf both create C-side
//! `drm_gem_shmem_object`s that are not `gem::shmem::Object<AigpuObject>`. The Rust
//! `lookup_handle` would reinterpret those as our type (a KASAN out-of-bounds read). Instead every
//! file keeps the set of *our* objects that have a handle in it, maintained by the GEM `open` /
//! `close` callbacks, which the DRM core only calls through our objects' `funcs` vtable; a looked
//! up object that is not in that set is rejected with `HANDLE_FOREIGN` before any downcast.

use core::ptr::NonNull;

use kernel::{
    bindings,
    drm::gem::{self, shmem, BaseObject, IntoGEMObject},
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

use crate::{
    driver::{AigpuDevice, AigpuDriver, DrmFile, RegDevice},
    ioctl::{check_pad, fail, refuse, Fail, IoctlResult},
    rules::flags::NoFlags,
    uapi::{ioctl as u, reason, version},
};

/// GEM memory budget of one device.
pub(crate) struct MemAccount {
    total: u64,
    used: Atomic<u64>,
}

impl MemAccount {
    pub(crate) fn new(total: u64) -> Self {
        Self {
            total,
            used: Atomic::new(0),
        }
    }

    /// Bytes the device may allocate in GEM objects.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Bytes currently allocated in GEM objects.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Relaxed)
    }

    /// Reserves `bytes` of the budget; the reservation is returned when the result is dropped.
    pub(crate) fn reserve(this: &Arc<Self>, bytes: u64) -> Result<MemReservation, Fail> {
        let mut cur = this.used.load(Relaxed);
        loop {
            let new = match cur.checked_add(bytes) {
                Some(new) if new <= this.total => new,
                _ => return Err(refuse(reason::OUT_OF_MEMORY)),
            };
            match this.used.cmpxchg(cur, new, Relaxed) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
        Ok(MemReservation {
            mem: this.clone(),
            bytes,
        })
    }
}

/// A part of the GEM budget, held by the object it was reserved for.
pub(crate) struct MemReservation {
    mem: Arc<MemAccount>,
    bytes: u64,
}

impl Drop for MemReservation {
    fn drop(&mut self) {
        self.mem.used.fetch_sub(self.bytes, Relaxed);
    }
}

/// Driver data of an aigpu GEM object.
#[pin_data]
pub(crate) struct AigpuObject {
    /// The object's share of the device's GEM budget (returned when the object is freed).
    _mem: MemReservation,
}

/// An aigpu GEM object.
pub(crate) type Gem = shmem::Object<AigpuObject>;

impl gem::DriverObject for AigpuObject {
    type Driver = AigpuDriver;
    type Args = MemReservation;

    fn new(_dev: &AigpuDevice, _size: usize, mem: MemReservation) -> impl PinInit<Self, Error> {
        try_pin_init!(AigpuObject { _mem: mem })
    }

    /// A handle to `obj` was created in `file` (GEM create, flink open, PRIME self-import).
    fn open(obj: &Gem, file: &DrmFile) -> Result {
        file.inner().note_handle_open(obj_key(obj.as_raw()), obj.size() as u64)
    }

    /// A handle to `obj` in `file` was closed (GEM close or file release).
    fn close(obj: &Gem, file: &DrmFile) {
        file.inner().note_handle_close(obj_key(obj.as_raw()), obj.size() as u64);
    }
}

/// The key under which a file tracks one of our objects: its `drm_gem_object` address.
pub(crate) fn obj_key(raw: *mut bindings::drm_gem_object) -> usize {
    raw as usize
}

/// Creates an object of `size` bytes (already page aligned, non-zero) charged to `mem`.
pub(crate) fn create(dev: &AigpuDevice, size: usize, mem: MemReservation) -> Result<ARef<Gem>, Fail> {
    Gem::new(dev, size, shmem::ObjectConfig::default(), mem)
        .map_err(|e| fail(e, reason::OUT_OF_MEMORY))
}

/// The raw `drm_file` behind a `drm::File`.
fn raw_file(file: &DrmFile) -> *mut bindings::drm_file {
    // `drm::File<T>` is `#[repr(transparent)]` over `Opaque<bindings::drm_file>`.
    core::ptr::from_ref(file).cast::<bindings::drm_file>().cast_mut()
}

/// Looks up `handle` in `file`, accepting only objects this driver created.
///
/// Errors: `ENOENT` + `HANDLE_INVALID` when the handle does not exist, `EINVAL` +
/// `HANDLE_FOREIGN` when it names an object of another type (dumb buffer, imported dma-buf).
pub(crate) fn lookup(file: &DrmFile, handle: u32) -> Result<ARef<Gem>, Fail> {
    // SAFETY: `raw_file(file)` is the valid, open `drm_file` of this ioctl.
    let raw = unsafe { bindings::drm_gem_object_lookup(raw_file(file), handle) };
    let Some(raw) = NonNull::new(raw) else {
        return Err(refuse(reason::HANDLE_INVALID));
    };
    if !file.inner().owns(obj_key(raw.as_ptr())) {
        // SAFETY: drops the reference `drm_gem_object_lookup` took; `raw` is not used after.
        unsafe { bindings::drm_gem_object_put(raw.as_ptr()) };
        return Err(refuse(reason::HANDLE_FOREIGN));
    }
    // SAFETY: the object is in this file's set of our objects, which only our `open` callback
    // adds to (the DRM core calls it only through our objects' vtable) and our `close` callback
    // removes from before the handle's reference is dropped; so `raw` is embedded in a live
    // `Gem`, kept alive by the lookup reference.
    let obj: &Gem = unsafe { Gem::from_raw(raw.as_ptr()) };
    // SAFETY: takes over the reference from `drm_gem_object_lookup`.
    Ok(unsafe { ARef::from_raw(NonNull::from(obj)) })
}

/// Creates the fake mmap offset of `obj`.
pub(crate) fn mmap_offset(obj: &Gem) -> Result<u64, Fail> {
    obj.create_mmap_offset()
        .map_err(|e| fail(e, reason::OUT_OF_MEMORY))
}

/// Creates a handle for `obj` in `file`.
pub(crate) fn create_handle(obj: &Gem, file: &DrmFile) -> Result<u32, Fail> {
    obj.create_handle(file).map_err(|e| {
        let r = if e == ENOSPC { reason::OBJECT_LIMIT } else { reason::OUT_OF_MEMORY };
        fail(e, r)
    })
}

// ---- the GEM ioctls ----

/// GEM create: a shmem object of `size` bytes rounded up to the page size.
pub(crate) fn create_ioctl(dev: &RegDevice, req: &mut u::GemCreate, file: &DrmFile) -> IoctlResult {
    NoFlags::try_from(req.flags)?;
    check_pad(req.pad)?;
    if req.size == 0 {
        return Err(refuse(reason::SIZE_ZERO));
    }
    let mem = &dev.mem;
    if req.size > mem.total() {
        return Err(refuse(reason::SIZE_TOO_LARGE));
    }
    // Cannot overflow: size <= total <= 16 GiB.
    let size = req.size.next_multiple_of(version::PAGE_SIZE);
    let size_usize = usize::try_from(size).map_err(|_| refuse(reason::SIZE_TOO_LARGE))?;
    let reservation = MemAccount::reserve(mem, size)?;
    let obj = create(dev, size_usize, reservation)?;
    req.handle = create_handle(&obj, file)?;
    // The handle holds the object now; `obj` (the creation reference) is dropped here.
    Ok(())
}

/// GEM mmap offset: the fake offset for `mmap()` on the DRM file.
pub(crate) fn mmap_offset_ioctl(_dev: &RegDevice, req: &mut u::GemMmapOffset, file: &DrmFile) -> IoctlResult {
    NoFlags::try_from(req.flags)?;
    check_pad(req.pad)?;
    let obj = lookup(file, req.handle)?;
    req.offset = mmap_offset(&obj)?;
    Ok(())
}
