// SPDX-License-Identifier: GPL-2.0
//! The DRM driver: `drm::Driver` implementation, per-device data, the device numbers
//! (`aigpu<N>`), and the attachment of one virtual GPU to a bus device: [`Attached`] (the
//! execution half + DRM registration with a render node) on a PCI function (`pci.rs`) or on a
//! faux device ([`VirtualGpu`]) where there is no PCI function for it (docs/kmd.md,
//! "Attachments").

use core::ptr::NonNull;

use kernel::{
    bindings, device, drm, faux,
    prelude::*,
    str::CString,
    sync::{
        atomic::{Atomic, Full, Relaxed},
        Arc,
    },
};

use crate::{
    file::AigpuFile,
    gem::{Gem, MemAccount},
    gpu::{self, Gpu, Running},
    ioctl, uapi,
};

/// The aigpu DRM driver type.
pub(crate) struct AigpuDriver;

/// A DRM device of this driver.
pub(crate) type AigpuDevice<Ctx = drm::Normal> = drm::Device<AigpuDriver, Ctx>;
/// A DRM device of this driver that is registered (what ioctls get).
pub(crate) type RegDevice = drm::Device<AigpuDriver, drm::Registered>;
/// An open DRM file of this driver.
pub(crate) type DrmFile = drm::File<AigpuFile>;

/// Counters shared by a device and everything allocated on its behalf.
pub(crate) struct Stats {
    /// Page-table pages currently allocated by all address spaces of the device.
    pub(crate) pt_pages: Atomic<u64>,
    /// Live VM mappings of all address spaces of the device.
    pub(crate) mappings: Atomic<u64>,
}

/// Per-device data, owned by the `drm::Device`.
pub(crate) struct DeviceData {
    /// GEM memory accounting (the `mem_mib` budget); GEM objects hold a reference.
    pub(crate) mem: Arc<MemAccount>,
    /// Page-table and mapping counters; page-table pages hold a reference.
    pub(crate) stats: Arc<Stats>,
    /// The execution half: device model, rings, contexts, interrupts, recovery.
    pub(crate) gpu: Arc<Gpu>,
    // Field order is drop order. The data goes when the last reference to the DRM device goes,
    // i.e. after every file and object is gone: first what runs on its own stops (device thread,
    // interrupts, bottom half, watchdog: `gpu::Running`), then anything still accounted is a
    // leak (`LeakCheck`), and last the device number `index` is free again, once nothing of the
    // device is left.
    _running: Running,
    _leak_check: LeakCheck,
    _number: Number,
}

/// Reports what is still accounted to a device when it is released (a leak), when dropped.
struct LeakCheck {
    index: u32,
    mem: Arc<MemAccount>,
    stats: Arc<Stats>,
}

impl Drop for LeakCheck {
    fn drop(&mut self) {
        let used = self.mem.used();
        let pt = self.stats.pt_pages.load(Relaxed);
        let maps = self.stats.mappings.load(Relaxed);
        if used != 0 || pt != 0 || maps != 0 {
            pr_err!(
                "LEAK: aigpu{}: {} bytes of GEM memory, {} page-table pages, {} mappings still accounted at device release\n",
                self.index,
                used,
                pt,
                maps
            );
        }
    }
}

const DRIVER_NAME: &CStr = c"aigpu";
// The DRM name user space matches on is part of the contract: it must be uapi's.
const _: () = {
    let a = DRIVER_NAME.to_bytes();
    let b = uapi::version::DRIVER_NAME.as_bytes();
    assert!(a.len() == b.len());
    let mut i = 0;
    while i < a.len() {
        assert!(a[i] == b[i]);
        i += 1;
    }
};

#[vtable]
impl drm::Driver for AigpuDriver {
    type Data = DeviceData;
    type RegistrationData<'a> = ();
    type Object = Gem;
    type File = AigpuFile;
    type ParentDevice<Ctx: device::DeviceContext> = Parent<Ctx>;

    const INFO: drm::DriverInfo = drm::DriverInfo {
        major: uapi::version::DRIVER_VERSION.0 as i32,
        minor: uapi::version::DRIVER_VERSION.1 as i32,
        patchlevel: uapi::version::DRIVER_VERSION.2 as i32,
        name: DRIVER_NAME,
        desc: c"aigpu virtual AI GPU",
    };
    const FEAT_RENDER: bool = true;
    const IOCTLS: &'static [drm::ioctl::DrmIoctlDescriptor] = ioctl::IOCTLS;

    fn show_fdinfo(dev: &drm::Device<Self, drm::Registered>, file: &DrmFile, p: &mut drm::print::Printer<'_>) {
        crate::fdinfo::show(dev, file, p);
    }
}

/// The DRM parent of a virtual GPU: the bus device it is attached to, a PCI function
/// (`pci.rs`) or a faux device ([`VirtualGpu`]), as the plain `device::Device`.
///
/// `drm::Driver::ParentDevice` is one type per driver, and this driver serves two buses with one
/// DRM driver (one ioctl table, one GEM type, one file type). Nothing here needs the bus type of
/// the parent, only its `struct device` (DMA, the DRM device's parent link, names), and the
/// kernel's base device is a valid parent of any bus (`device::AsBusDevice` for `Device`, the
/// kernel patch series).
pub(crate) type Parent<Ctx = device::Normal> = device::Device<Ctx>;

/// Device numbers in use, one bit each (`aigpu<N>`, N < `MAX_DEVICES`), shared by both
/// attachments: PCI functions take the lowest free number when they are probed, faux devices
/// the lowest free ones after them.
static NUMBERS: Atomic<u32> = Atomic::new(0);
const _: () = assert!(crate::MAX_DEVICES <= u32::BITS);

/// A device number taken from [`NUMBERS`], given back on drop.
pub(crate) struct Number(u32);

impl Number {
    /// The lowest free device number; `ENOSPC` when all `MAX_DEVICES` are in use.
    pub(crate) fn take() -> Result<Self> {
        let mut cur = NUMBERS.load(Relaxed);
        loop {
            let n = (!cur).trailing_zeros();
            if n >= crate::MAX_DEVICES {
                return Err(ENOSPC);
            }
            match NUMBERS.cmpxchg(cur, cur | (1 << n), Full) {
                Ok(_) => return Ok(Self(n)),
                Err(seen) => cur = seen,
            }
        }
    }

    /// How many device numbers are in use.
    pub(crate) fn in_use() -> u32 {
        NUMBERS.load(Relaxed).count_ones()
    }

    fn get(&self) -> u32 {
        self.0
    }
}

impl Drop for Number {
    fn drop(&mut self) {
        let mut cur = NUMBERS.load(Relaxed);
        while let Err(seen) = NUMBERS.cmpxchg(cur, cur & !(1 << self.0), Full) {
            cur = seen;
        }
    }
}

/// DMA mask of the device: page-table entries hold 52-bit physical addresses (bits 51:12).
pub(crate) const DMA_MASK_BITS: u32 = 52;

/// A virtual GPU attached to a bound bus device: its execution half and its DRM registration.
pub(crate) struct Attached<'a> {
    // Field order is drop order: unregister (unplug) the DRM device first (which removes its
    // debugfs tree and, with the last reference, releases the device data, shutting the
    // execution half down), then free this reference to the execution half.
    _drm: drm::Registration<'a, AigpuDriver>,
    gpu: Arc<Gpu>,
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        // The debugfs tree goes away with the registration: crash dumps must not be added to it
        // from now on.
        crate::dump::detach_debugfs(&self.gpu);
    }
}

impl<'a> Attached<'a> {
    /// Creates virtual GPU number `number` on `dev` (whose DMA mask is set) with a GEM budget of
    /// `mem_total` bytes, registers its DRM device and prints the probe line.
    pub(crate) fn new(
        dev: &'a device::Device<device::Bound>,
        number: Number,
        mem_total: u64,
        cfg: gpu::Config,
    ) -> Result<Self> {
        let index = number.get();
        let mem = Arc::new(MemAccount::new(mem_total), GFP_KERNEL)?;
        let stats = Arc::new(
            Stats {
                pt_pages: Atomic::new(0),
                mappings: Atomic::new(0),
            },
            GFP_KERNEL,
        )?;
        // From here on the execution half runs; the device data shuts it down when it goes (also
        // when creating the DRM device fails, which drops the data).
        let running = Gpu::start(dev, index, mem.clone(), cfg)?;
        let gpu = running.gpu().clone();
        let data = DeviceData {
            _leak_check: LeakCheck {
                index,
                mem: mem.clone(),
                stats: stats.clone(),
            },
            mem,
            stats,
            gpu: gpu.clone(),
            _running: running,
            _number: number,
        };
        let unreg = drm::UnregisteredDevice::<AigpuDriver>::new(dev, Ok(data))?;
        // SAFETY: the registration is stored in `Attached` and never forgotten.
        let drm = unsafe { drm::Registration::new(dev, unreg, (), 0)? };
        // The device's debugfs files, in the DRM device's debugfs directory.
        // `drm::Device` is `#[repr(C)]` with its `struct drm_device` first.
        let raw = core::ptr::from_ref(drm.device()).cast::<bindings::drm_device>();
        // SAFETY: `raw` is the registered DRM device; its debugfs directory lives until the
        // registration is dropped, before `gpu` is shut down (field order of `Attached`).
        unsafe { crate::debugfs::create((*raw).debugfs_root, &gpu) };

        // The one probe line: device, UAPI version, driver version, memory size.
        let name = CString::try_from_fmt(fmt!("aigpu{}", index))?;
        // SAFETY: `_printk` is variadic; every conversion in the format matches its argument:
        // `%s` a NUL-terminated string that outlives the call, `%u` a C unsigned int (u32), `%llu`
        // a C unsigned long long (u64).
        unsafe {
            bindings::_printk(
                c"\x016aigpu %s: virtual AI GPU, UAPI %u.%u, driver %u.%u.%u, %llu MiB\n".as_char_ptr(),
                name.as_char_ptr(),
                uapi::version::UAPI_MAJOR,
                uapi::version::UAPI_MINOR,
                uapi::version::DRIVER_VERSION.0,
                uapi::version::DRIVER_VERSION.1,
                uapi::version::DRIVER_VERSION.2,
                mem_total >> 20,
            )
        };
        Ok(Self { _drm: drm, gpu })
    }

    /// The execution half.
    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

/// Owns a faux device registration that was leaked to `'static`, so that the DRM registration
/// (which borrows its parent device for `'a`) can live in the module object.
struct FauxOwner(NonNull<faux::Registration>);

// SAFETY: `faux::Registration` is `Send + Sync`; `FauxOwner` only hands out shared references.
unsafe impl Send for FauxOwner {}
// SAFETY: see above.
unsafe impl Sync for FauxOwner {}

impl Drop for FauxOwner {
    fn drop(&mut self) {
        // SAFETY: the pointer comes from `KBox::into_raw` in `VirtualGpu::new`, and the DRM registration
        // that borrowed it has been dropped before (field order in `VirtualGpu`).
        drop(unsafe { KBox::from_raw(self.0.as_ptr()) });
    }
}

/// One virtual GPU on a faux device (no PCI function): the device and the GPU attached to it.
pub(crate) struct VirtualGpu {
    // Field order is drop order: the GPU (DRM registration first), then the faux device it
    // borrows.
    _gpu: Attached<'static>,
    _faux: FauxOwner,
}

/// Gives the faux device a DMA mask so the DMA API (page-table pages, GEM sg tables) works.
///
/// A faux device is created without `dma_mask`; the DMA API warns and fails on such a device.
/// Platform devices point `dma_mask` at their own `coherent_dma_mask`; do the same.
fn set_dma_mask(dev: &device::Device<device::Bound>) -> Result {
    // `device::Device` is `#[repr(transparent)]` over `Opaque<bindings::device>`.
    let raw = core::ptr::from_ref(dev).cast::<bindings::device>().cast_mut();
    // SAFETY: `raw` points to the live `struct device` of the faux device this driver just
    // created (interior mutability through `Opaque`). Nobody maps or allocates DMA memory for it
    // yet (the DRM device does not exist), so changing the masks cannot race with the DMA API.
    unsafe {
        (*raw).dma_mask = &raw mut (*raw).coherent_dma_mask;
        kernel::error::to_result(bindings::dma_set_mask_and_coherent(raw, (1u64 << DMA_MASK_BITS) - 1))
    }
}

impl VirtualGpu {
    /// Creates a faux device `aigpu<N>` (N the lowest free device number) with a virtual GPU
    /// whose GEM budget is `mem_total` bytes.
    pub(crate) fn new(mem_total: u64, cfg: gpu::Config) -> Result<Self> {
        let number = Number::take()?;
        let name = CString::try_from_fmt(fmt!("aigpu{}", number.get()))?;
        let reg = KBox::new(faux::Registration::new(&name, None)?, GFP_KERNEL)?;
        let faux_raw = KBox::into_raw(reg);
        // `into_raw` never returns null; wrap it at once so every error path frees it.
        let faux = FauxOwner(NonNull::new(faux_raw).ok_or(ENOMEM)?);
        // SAFETY: the registration lives until `faux` is dropped, which happens after the DRM
        // registration borrowing it (field order in `VirtualGpu`, and in the error paths below the DRM
        // objects are dropped before `faux` goes out of scope).
        let fdev: &'static faux::Device<device::Bound> = unsafe { (*faux_raw).as_ref() };
        set_dma_mask(fdev.as_ref())?;
        let gpu = Attached::new(fdev.as_ref(), number, mem_total, cfg)?;
        Ok(Self { _gpu: gpu, _faux: faux })
    }
}
