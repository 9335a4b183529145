// SPDX-License-Identifier: GPL-2.0
//! The PCI attachment (docs/kmd.md, "Attachments"): aigpu as a `kernel::pci::Driver` in the
//! shape of drivers/gpu/nova-core, bound to QEMU's `edu` function (1234:11e8), one virtual GPU
//! (one DRM device) per function.
//!
//! The function gives the GPU a place on a real bus (lspci and libdrm enumerate it; sysfs
//! bind/unbind work) and a real interrupt line: the device model raises the function's
//! interrupt (its MSI, or its INTx line where MSI is unavailable, e.g. with `pci=nomsi`) through
//! edu's interrupt-raise register ([`MsiLine::raise`], called by `hw.rs` when the line goes
//! high), and the `kernel::irq` handler ([`Interrupt`]) acknowledges edu and runs the top half
//! ([`crate::hw::Hw::fire`]). edu's compute parts (factorial, DMA engine) are not used: the
//! execution engine stays the device model of `hw.rs` on its kernel thread.

use kernel::{
    device::Core,
    dma::{self, Device as _},
    io::Io,
    irq, pci,
    prelude::*,
    sizes::SZ_1M,
    sync::{
        atomic::{Acquire, Atomic, Release},
        rcu, Arc,
    },
};

use crate::{
    driver::{Attached, Number, DMA_MASK_BITS},
    gpu::Gpu,
};

/// QEMU's `edu` device: ids and the registers of BAR 0 this driver uses (QEMU's
/// docs/specs/edu.rst).
mod edu {
    /// PCI vendor id (QEMU's own devices; not a PCI-SIG assignment, so `pci::Vendor` has no
    /// constant for it).
    pub(super) const VENDOR: super::pci::Vendor = super::pci::Vendor::from_raw(0x1234);
    /// PCI device id of `edu`.
    pub(super) const DEVICE: u32 = 0x11e8;
    /// Size of BAR 0.
    pub(super) const BAR_SIZE: usize = super::SZ_1M;
    /// Identification: `0xRRrr00ed` (major and minor version, then the magic).
    pub(super) const ID: usize = 0x00;
    /// The magic in the low half of `ID`.
    pub(super) const ID_MAGIC: u32 = 0x00ed;
    /// Interrupt status: the OR of the values written to `INTR_RAISE` and not acknowledged.
    pub(super) const INTR_STATUS: usize = 0x24;
    /// Interrupt raise: ORs the value into `INTR_STATUS` and raises the interrupt: the MSI when
    /// the function's MSI is enabled (every time it is written), else asserts INTx, which stays
    /// asserted until `INTR_STATUS` is acknowledged to 0.
    pub(super) const INTR_RAISE: usize = 0x60;
    /// Interrupt acknowledge: clears the written bits of `INTR_STATUS`.
    pub(super) const INTR_ACK: usize = 0x64;
    /// The status bit this driver raises: "the GPU's interrupt line went high".
    pub(super) const LINE: u32 = 1;
}

kernel::pci_device_table!(
    PCI_TABLE,
    <AigpuPci as pci::Driver>::IdInfo,
    [(pci::DeviceId::from_id(edu::VENDOR, edu::DEVICE), ())]
);

/// The PCI driver: binds `edu` functions.
pub(crate) struct AigpuPci;

/// The name of the PCI driver (`/sys/bus/pci/drivers/aigpu`, lspci's "Kernel driver in use")
/// and of its interrupt (`/proc/interrupts`).
pub(crate) const NAME: &CStr = c"aigpu";

/// The function's interrupt as the device raises it, its MSI or, without MSI, its INTx line
/// (edu raises whichever is enabled): edu's BAR 0 and whether the GPU may still raise it.
pub(crate) struct MsiLine {
    bar: pci::DevresBar<{ edu::BAR_SIZE }>,
    /// Cleared by [`MsiLine::disconnect`] before the interrupt handler is freed.
    on: Atomic<bool>,
}

impl MsiLine {
    /// Raises the interrupt (any context, also hard-IRQ: an MMIO write under an RCU read lock).
    /// False when disconnected or the BAR is gone (unbound): the caller delivers otherwise.
    pub(crate) fn raise(&self) -> bool {
        let Some(bar) = self.bar.try_access() else {
            return false;
        };
        // Read under the guard's RCU read lock: `disconnect` waits for this section.
        if !self.on.load(Acquire) {
            return false;
        }
        bar.write32(edu::LINE, edu::INTR_RAISE);
        true
    }

    /// Acknowledges edu's interrupt status (in the handler); false if it showed no interrupt:
    /// none was raised since the last acknowledgement, the BAR is gone, or the function reads
    /// all ones (it fell off the bus).
    fn ack(&self) -> bool {
        let Some(bar) = self.bar.try_access() else {
            return false;
        };
        let s = bar.read32(edu::INTR_STATUS);
        if s & edu::LINE == 0 || s == u32::MAX {
            return false;
        }
        // Acknowledging the last bit deasserts INTx (a level): no second interrupt for this one.
        bar.write32(s, edu::INTR_ACK);
        true
    }

    /// Stops raising the interrupt: once this returns no [`MsiLine::raise`] is under way or
    /// will write the register.
    fn disconnect(&self) {
        self.on.store(false, Release);
        rcu::synchronize_rcu();
    }
}

/// The interrupt handler (MSI or INTx): the top half of the GPU attached to the function.
struct Interrupt {
    gpu: Arc<Gpu>,
    line: Arc<MsiLine>,
}

impl irq::Handler for Interrupt {
    fn handle(&self) -> irq::IrqReturn {
        // edu's status says whether the interrupt is ours: an INTx line may be shared with other
        // devices, whose interrupts must be left to their handlers. (An MSI whose cause the
        // previous invocation already took finds 0 too; its top half ran then.)
        if !self.line.ack() {
            return irq::IrqReturn::None;
        }
        self.gpu.hw.fire();
        irq::IrqReturn::Handled
    }
}

/// Delivers the GPU's line once through its self-interrupt when dropped: after the interrupt
/// handler is freed, an interrupt raised but not yet taken must not be lost.
struct SelfInterrupt(Arc<Gpu>);

impl Drop for SelfInterrupt {
    fn drop(&mut self) {
        self.0.hw.self_interrupt();
    }
}

/// A GPU on a PCI function: the driver data of a bound function.
#[pin_data(PinnedDrop)]
pub(crate) struct PciGpu<'bound> {
    // Field order is drop order; `PinnedDrop` first disconnects the interrupt (the device raises
    // the self-interrupt from then on). Then: the handler (`free_irq` waits for a running one),
    // the vectors, the self-interrupt for an interrupt raised but not taken, the GPU (DRM device
    // unplugged; the execution half stops when the last file is closed), and last the enable
    // state (memory decoding and bus mastering: an MSI write is a bus-master write).
    #[pin]
    irq: irq::Registration<'bound, Interrupt>,
    vectors: pci::IrqVectorRegistration<'bound>,
    _self_irq: SelfInterrupt,
    gpu: Attached<'bound>,
    line: Arc<MsiLine>,
    _enabled: pci::EnableGuard<'bound>,
}

#[pinned_drop]
impl PinnedDrop for PciGpu<'_> {
    fn drop(self: Pin<&mut Self>) {
        self.line.disconnect();
    }
}

impl pci::Driver for AigpuPci {
    type IdInfo = ();
    type Data<'bound> = PciGpu<'bound>;
    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        pin_init::pin_init_scope(move || {
            let (mem_total, cfg) = crate::gpu_params();
            let enabled = pdev.enable_device_mem_guard()?;
            pdev.set_master();
            // SAFETY: nothing allocates or maps DMA memory for this function yet.
            unsafe { pdev.dma_set_mask_and_coherent(dma::DmaMask::new::<{ DMA_MASK_BITS }>())? };
            let bar = pdev.iomap_region_sized::<{ edu::BAR_SIZE }>(0, c"aigpu/bar0")?;
            let id = bar.read32(edu::ID);
            if id & 0xffff != edu::ID_MAGIC {
                dev_err!(pdev, "not an edu function: ID register {:#010x}\n", id);
                return Err(ENODEV);
            }
            let line = Arc::new(
                MsiLine {
                    bar: bar.into_devres()?,
                    on: Atomic::new(true),
                },
                GFP_KERNEL,
            )?;
            let gpu = Attached::new(pdev.as_ref(), Number::take()?, mem_total, cfg)?;
            // MSI where the platform offers it, else INTx (`pci=nomsi`; a real board without MSI).
            let types = pci::IrqTypes::default()
                .with(pci::IrqType::Msi)
                .with(pci::IrqType::Intx);
            Ok(try_pin_init!(PciGpu {
                _enabled: enabled,
                line,
                _self_irq: SelfInterrupt(gpu.gpu().clone()),
                gpu,
                vectors: pdev.alloc_irq_vectors(1, 1, types)?,
                irq <- {
                    // SAFETY: `vectors` is initialised before this expression is evaluated
                    // (`try_pin_init!` initialises fields in the order written), lives at a
                    // pinned address and is dropped after `irq` (field order), so it outlives
                    // the registration that borrows it.
                    let vector = unsafe { &*core::ptr::from_ref(vectors) }.index(0)?;
                    // An INTx line may be shared with other functions' (the handler tells its
                    // own interrupts apart by edu's status); an MSI is the function's alone.
                    let flags = match vector.irq_type() {
                        pci::IrqType::Intx => irq::Flags::SHARED,
                        pci::IrqType::Msi | pci::IrqType::MsiX => irq::Flags::TRIGGER_NONE,
                    };
                    // SAFETY: the registration is a field of `PciGpu` and never forgotten.
                    unsafe {
                        irq::Registration::new(
                            vector.into(),
                            flags,
                            NAME,
                            Ok::<_, Error>(Interrupt {
                                gpu: gpu.gpu().clone(),
                                line: line.clone(),
                            }),
                        )
                    }
                },
                _: {
                    let g = gpu.gpu();
                    if !g.hw.connect_msi(line.clone()) {
                        return Err(EBUSY);
                    }
                    let kind = match vectors.irq_type() {
                        pci::IrqType::Intx => "INTx",
                        pci::IrqType::Msi => "MSI",
                        pci::IrqType::MsiX => "MSI-X",
                    };
                    let irq_no = vectors.index(0).map(|v| irq::IrqRequest::from(v).irq());
                    dev_info!(
                        pdev,
                        "aigpu{}: PCI function {:04x}:{:04x}, {} irq {}\n",
                        g.index,
                        edu::VENDOR.as_raw(),
                        edu::DEVICE,
                        kind,
                        irq_no.unwrap_or(0)
                    );
                },
            }))
        })
    }
}
