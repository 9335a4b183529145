// SPDX-License-Identifier: GPL-2.0
//! The "silicon": the device model of `docs/hw-spec.md` (`vgpu/src/model`, the same `no_std`
//! executor the simulator runs) behind a register interface, running on its own kernel thread,
//! with an interrupt line delivered in hard-IRQ context.
//!
//! Driver code reaches the device only through [`Hw::read32`] / [`Hw::write32`] (and the 64-bit
//! forms), and gets interrupts through the handler it connects with an [`IrqConnection`]. Nothing
//! else of the model is visible outside this file except the test-only fault injection hooks of
//! hw-spec section 9.
//!
//! Execution: a kernel thread (`aigpu<N>-hw`) calls the model's `step()` (one packet or one
//! descriptor action) in a loop while there is work, and sleeps when the device is idle until a
//! doorbell (any `Q_DOORBELL` write) wakes it. The model mutex is held for one round of at most
//! 64 steps or about 100 us of them, and never taken under a spinlock; the kernel is preemptible
//! (PREEMPT_LAZY), so a long run of steps does not hog a CPU.
//!
//! Interrupts: the model only has a level (`irq_line()`). The device thread moves newly raised
//! causes from the model into a small interrupt register file (`IRQ_RAWSTAT`, `IRQ_MASK`,
//! `IRQ_STATUS`, `IRQ_ACK`) made of atomics, separate from the execution engine, so hard-IRQ code
//! can read and acknowledge it without sleeping and without a `spinlock_t` (which lockdep's
//! raw-lock-nesting check forbids in hard-IRQ context, and Rust 7.3 has no raw spinlock). When
//! the line goes from low to high it is delivered, and the connected handler (the driver's top
//! half) runs in hard-IRQ context: on a PCI function the device raises the function's MSI
//! through the emulated device's own interrupt-raise register ([`Hw::connect_msi`], `pci.rs`),
//! whose `kernel::irq` handler calls [`Hw::fire`]; on a faux device (no interrupt line), or once
//! the function is disconnected, the "interrupt controller" is an `irq_work` with
//! `IRQ_WORK_HARD_IRQ` (a self-interrupt on the CPU that raised it, whose callback runs in
//! hard-IRQ context).

mod thread;

pub(crate) use thread::DeviceThread;

use core::ffi::c_void;

use kernel::{
    bindings, container_of, new_condvar, new_mutex, new_spinlock,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
        Arc, ArcBorrow, CondVar, Mutex, SetOnce, SpinLock,
    },
    types::Opaque,
};

use crate::{
    bus::{Bus, BusMem},
    model::{Clock, Device},
    pci::MsiLine,
    uapi::regs,
};

/// Device time: `CLOCK_MONOTONIC` in ns (the `TIMESTAMP` register and packet).
pub(crate) struct KClock;

impl Clock for KClock {
    fn now_ns(&self) -> u64 {
        mono_ns()
    }
}

/// `CLOCK_MONOTONIC` now, in ns.
///
/// The device model and the shared rules (`vgpu`, `rules/`) keep device time as plain `u64`
/// nanoseconds, the simulator's clock being the same number in user space; 7.3's
/// `kernel::time::Instant` has no public accessor for its value (`as_nanos` is crate-private), so
/// this reads `ktime_get` directly.
pub(crate) fn mono_ns() -> u64 {
    // SAFETY: `ktime_get` has no preconditions.
    let t = unsafe { bindings::ktime_get() };
    t.max(0) as u64
}

type Model = Device<BusMem, KClock>;

/// The driver side of the interrupt line: what an [`IrqConnection`] calls on every delivery.
pub(crate) trait IrqHandler: HasHw + Send + Sync + Sized {
    /// Handles a delivery, in hard-IRQ context (must not sleep). `this` is the connection's
    /// reference: a caller that defers work may take a reference of its own from it.
    fn handle(this: ArcBorrow<'_, Self>);
}

/// What owns the device's register interface (the driver's device state, which embeds its
/// [`Hw`]): the [`IrqConnection`] and the [`DeviceThread`] reach the `Hw` through it.
pub(crate) trait HasHw {
    fn hw(&self) -> &Hw;
}

/// Type-erased call of [`IrqHandler::handle`], as stored in the interrupt register file.
type Trampoline = unsafe fn(data: *const c_void);

/// `IrqFile::handler` while a connection is being made (never a function's address).
const CONNECTING: usize = 1;

/// Calls `T::handle` for `data`.
///
/// # Safety
///
/// `data` comes from `Arc::as_ptr` of an `Arc<T>` whose count stays above zero for the call.
unsafe fn trampoline<T: IrqHandler>(data: *const c_void) {
    // SAFETY: see the function's safety contract.
    T::handle(unsafe { ArcBorrow::from_raw(data.cast::<T>()) });
}

/// A connected interrupt handler: while it lives, every delivery of the device's line calls
/// `T::handle` in hard-IRQ context. Dropping it disconnects the handler and waits until a
/// delivery in progress has returned; the reference it holds keeps the handler's data (and the
/// `Hw` inside it) alive until then, so no caller has to promise it.
pub(crate) struct IrqConnection<T: IrqHandler> {
    owner: Arc<T>,
}

impl<T: IrqHandler> IrqConnection<T> {
    /// Connects `T::handle` for `owner` to `owner`'s device. `EBUSY` if a handler is connected
    /// already (one connection per device).
    pub(crate) fn new(owner: Arc<T>) -> Result<Self> {
        let irq = &owner.hw().irq;
        // Claim the line first, so that a second connection cannot overwrite the first one's
        // data; `fire` skips the claim marker until the handler is published.
        irq.handler.cmpxchg(0, CONNECTING, Full).map_err(|_| EBUSY)?;
        irq.data.store(Arc::as_ptr(&owner) as usize, Relaxed);
        irq.handler.store(trampoline::<T> as Trampoline as usize, Release);
        Ok(Self { owner })
    }
}

impl<T: IrqHandler> Drop for IrqConnection<T> {
    fn drop(&mut self) {
        self.owner.hw().disconnect_irq();
    }
}

/// The interrupt register file and the line: atomics only (read and written in hard-IRQ
/// context).
struct IrqFile {
    raw: Atomic<u32>,
    mask: Atomic<u32>,
    /// The line is asserted and has been delivered (the handler has not acknowledged it all yet).
    line: Atomic<bool>,
    /// The device fell off the bus: reads return all ones.
    lost: Atomic<bool>,
    /// The connected handler (a `Trampoline` as usize, 0 when none) and its data
    /// ([`IrqConnection`]).
    handler: Atomic<usize>,
    data: Atomic<usize>,
}

impl IrqFile {
    fn new() -> Self {
        Self {
            raw: Atomic::new(0),
            mask: Atomic::new(0),
            line: Atomic::new(false),
            lost: Atomic::new(false),
            handler: Atomic::new(0),
            data: Atomic::new(0),
        }
    }

    fn asserted(&self) -> bool {
        !self.lost.load(Relaxed) && self.raw.load(Relaxed) & self.mask.load(Relaxed) != 0
    }

    /// Applies `f` to `raw` atomically.
    fn update_raw(&self, f: impl Fn(u32) -> u32) {
        let mut cur = self.raw.load(Relaxed);
        while let Err(seen) = self.raw.cmpxchg(cur, f(cur), Full) {
            cur = seen;
        }
    }

    /// Whether the line just went high (and must be delivered). Called after every change that
    /// can assert or de-assert it; exactly one caller wins an edge.
    fn edge(&self) -> bool {
        if self.asserted() {
            return self.line.cmpxchg(false, true, Full).is_ok();
        }
        self.line.store(false, Relaxed);
        // A cause raised between the check and the store must not be stranded.
        self.asserted() && self.line.cmpxchg(false, true, Full).is_ok()
    }
}

/// The hot queue registers, served without the model lock (real MMIO registers do not wait for
/// the execution engine either): `Q_TAIL` and `Q_DOORBELL` are latched here and handed to the
/// engine by the device thread at the start of its next round; `Q_HEAD`, `Q_STATE` and
/// `Q_CUR_JOB` are mirrors the device thread refreshes after every round and after every register
/// write that goes to the engine.
struct QueueFront {
    tail: Atomic<u32>,
    doorbell: Atomic<bool>,
    head: Atomic<u32>,
    state: Atomic<u32>,
    cur_job: Atomic<u64>,
}

impl QueueFront {
    fn new() -> Self {
        Self {
            tail: Atomic::new(0),
            doorbell: Atomic::new(false),
            head: Atomic::new(0),
            state: Atomic::new(0),
            cur_job: Atomic::new(0),
        }
    }
}

/// The queue and register-in-queue of `off`, for the queue register window.
fn queue_reg(off: usize) -> Option<(usize, usize)> {
    let first = regs::queue_base(0);
    let stride = regs::queue_base(1) - regs::queue_base(0);
    if !(first..regs::queue_base(regs::NUM_QUEUES)).contains(&off) {
        return None;
    }
    Some(((off - first) / stride, (off - first) % stride))
}

/// The device: model, interrupt register file and controller, device thread.
#[pin_data]
pub(crate) struct Hw {
    /// The execution engine and every register but the interrupt ones.
    #[pin]
    model: Mutex<Model>,
    /// Interrupt register file (atomics: the top half reads and acknowledges it).
    irq: IrqFile,
    /// The hot queue registers.
    queues: [QueueFront; regs::NUM_QUEUES],
    /// The interrupt controller: an `irq_work` (a self-interrupt: `IRQ_WORK_HARD_IRQ`, so the
    /// handler runs in hard-IRQ context) that delivers the line to the handler.
    #[pin]
    controller: Controller,
    /// The PCI function's MSI, when the device is attached to one: delivery raises it instead of
    /// the self-interrupt while it is connected.
    msi: SetOnce<Arc<MsiLine>>,
    /// Set by doorbells (and whatever else needs the device thread to look), cleared by it.
    #[pin]
    kick: SpinLock<bool>,
    #[pin]
    kick_cv: CondVar,
    /// Steps executed (for debugfs).
    pub(crate) steps: Atomic<u64>,
    /// Nanoseconds the device thread spent in rounds that made progress (debugfs `busy_us`: what
    /// a command buffer costs the stand-in for silicon, measured where it runs).
    pub(crate) busy_ns: Atomic<u64>,
    /// The memory the device sees.
    bus: Arc<Bus>,
}

/// The interrupt controller's delivery, in hard-IRQ context: call the connected handler.
///
/// # Safety
///
/// `work` is the `controller` of a live `Hw` (queued only by [`Hw::deliver`] while the device
/// thread runs; [`IrqConnection`]'s drop, after the [`DeviceThread`] has stopped, waits for a
/// queued or running delivery before the `Hw` can go).
unsafe extern "C" fn controller_fired(work: *mut bindings::irq_work) {
    let field = Opaque::cast_from(work).cast::<Controller>().cast_mut();
    // SAFETY: `work` is the `controller` field of a `Hw` (function contract).
    let this = unsafe { &*container_of!(field, Hw, controller) };
    this.fire();
}

/// The interrupt controller: a hard-IRQ `irq_work` calling [`controller_fired`].
#[repr(transparent)]
struct Controller(Opaque<bindings::irq_work>);

// SAFETY: the `irq_work` is only used through `irq_work_queue` / `irq_work_sync`, which may be
// called from any thread (the kernel's own locking-free claim on the work's flags), and its
// callback only reads atomics of the `Hw`.
unsafe impl Send for Controller {}
// SAFETY: as above.
unsafe impl Sync for Controller {}

impl Controller {
    /// `IRQ_WORK_INIT_HARD(controller_fired)` (a macro without a binding).
    fn new() -> Self {
        let mut w = bindings::irq_work::default();
        w.node.__bindgen_anon_1.u_flags = bindings::IRQ_WORK_HARD_IRQ;
        w.func = Some(controller_fired);
        Self(Opaque::new(w))
    }

    fn get(&self) -> *mut bindings::irq_work {
        self.0.get()
    }
}

impl Hw {
    /// A powered-on device reading and writing memory through `bus`. Nothing runs until a
    /// [`DeviceThread`] is started for it.
    pub(crate) fn new(bus: Arc<Bus>) -> impl PinInit<Self> {
        let model = Self::power_on(&bus);
        pin_init!(Self {
            model <- new_mutex!(model, "aigpu_hw_model"),
            irq: IrqFile::new(),
            queues: core::array::from_fn(|_| QueueFront::new()),
            controller: Controller::new(),
            msi: SetOnce::new(),
            kick <- new_spinlock!(false, "aigpu_hw_kick"),
            kick_cv <- new_condvar!("aigpu_hw_kick_cv"),
            steps: Atomic::new(0),
            busy_ns: Atomic::new(0),
            bus,
        })
    }

    /// A fresh model, wired to the interrupt register file: every cause the model raises reaches
    /// `IRQ_RAWSTAT` (the driver-visible mask is the register file's; the model's own mask, which
    /// a reset keeps, is all ones).
    fn power_on(bus: &Arc<Bus>) -> Model {
        let mut d = Device::new(BusMem::new(bus.clone()), KClock);
        d.mmio_write32(regs::IRQ_MASK, regs::IRQ_ALL);
        d
    }

    /// The memory the device sees.
    pub(crate) fn bus(&self) -> &Arc<Bus> {
        &self.bus
    }

    /// Power cycle: a fresh device (as after a remove and rescan of real hardware). Interrupt
    /// registers are cleared (mask 0). Only for a lost device that nobody uses any more.
    pub(crate) fn power_cycle(&self) {
        let mut d = self.model.lock();
        *d = Self::power_on(&self.bus);
        self.irq.raw.store(0, Relaxed);
        self.irq.mask.store(0, Relaxed);
        self.irq.line.store(false, Relaxed);
        self.irq.lost.store(false, Relaxed);
        for q in self.queues.iter() {
            q.tail.store(0, Relaxed);
            q.doorbell.store(false, Relaxed);
        }
        self.refresh(&mut d);
    }

    /// Refreshes the mirrored queue registers from the engine.
    fn refresh(&self, d: &mut Model) {
        for (qi, q) in self.queues.iter().enumerate() {
            let (head, state, cur_job) = d.queue_status(qi);
            q.head.store(head, Relaxed);
            q.state.store(state, Relaxed);
            q.cur_job.store(cur_job, Relaxed);
        }
    }

    /// Hands latched doorbells to the engine (with the tail written before each).
    fn apply_doorbells(&self, d: &mut Model) {
        for (qi, q) in self.queues.iter().enumerate() {
            if q.doorbell.xchg(false, Acquire) {
                let b = regs::queue_base(qi);
                d.mmio_write32(b + regs::Q_TAIL, q.tail.load(Relaxed));
                d.mmio_write32(b + regs::Q_DOORBELL, 1);
            }
        }
    }

    /// Runs the connected handler, in hard-IRQ context: the interrupt was delivered (the
    /// self-interrupt's callback, or the PCI function's MSI handler in `pci.rs`).
    pub(crate) fn fire(&self) {
        let f = self.irq.handler.load(Acquire);
        let data = self.irq.data.load(Relaxed);
        if f != 0 && f != CONNECTING {
            // SAFETY: any other non-zero `handler` was stored from a `Trampoline` by
            // `IrqConnection::new`.
            let f: Trampoline = unsafe { core::mem::transmute::<usize, Trampoline>(f) };
            // SAFETY: `data` is the `Arc::as_ptr` of the reference the connection holds until
            // its drop has disconnected the handler and waited for a self-interrupt delivery
            // (`disconnect_irq`); the MSI handler is freed before the device data that owns the
            // connection can go (`pci.rs`, drop order of `PciGpu`).
            unsafe { f(data as *const c_void) };
        }
    }

    /// Delivers through the PCI function's MSI from now on (while `line` is connected). Returns
    /// false if an MSI was connected before (one per device lifetime).
    pub(crate) fn connect_msi(&self, line: Arc<MsiLine>) -> bool {
        self.msi.populate(line)
    }

    /// Delivers the line through the self-interrupt once, whatever its state: after the MSI is
    /// disconnected and its handler freed, so that an MSI raised but not yet taken is not lost
    /// (a delivery with nothing pending finds `IRQ_STATUS` 0 and does nothing).
    pub(crate) fn self_interrupt(&self) {
        // SAFETY: as in `deliver`.
        unsafe { bindings::irq_work_queue(self.controller.get()) };
    }

    /// Disconnects the handler and waits for a running delivery to finish ([`IrqConnection`]'s
    /// drop).
    fn disconnect_irq(&self) {
        self.irq.handler.store(0, Release);
        // SAFETY: `controller` was initialised in `new`; this waits until a queued or running
        // delivery has finished.
        unsafe { bindings::irq_work_sync(self.controller.get()) };
    }

    /// Delivers the line: raises the PCI function's MSI when connected, else queues the
    /// controller's self-interrupt (already queued means the handler has yet to run and will
    /// see this cause too). Called in the device thread and in hard-IRQ context.
    fn deliver(&self) {
        if self.msi.as_ref().is_some_and(|m| m.raise()) {
            return;
        }
        // SAFETY: `controller` is initialised and pinned inside the device structure, which
        // outlives it: `IrqConnection`'s drop (before the device is freed) waits for it.
        unsafe { bindings::irq_work_queue(self.controller.get()) };
    }

    /// Moves the causes the model raised into the interrupt register file; delivers an edge.
    fn latch(&self, d: &mut Model) {
        let lost = d.mmio_read32(regs::ID) == regs::LOST_READ_VALUE;
        let mut s = 0;
        if !lost && d.irq_line() {
            s = d.mmio_read32(regs::IRQ_STATUS);
            d.mmio_write32(regs::IRQ_ACK, s);
        }
        if s != 0 {
            self.irq.update_raw(|r| r | s);
        }
        self.irq.lost.store(lost, Relaxed);
        if self.irq.edge() {
            self.deliver();
        }
    }

    // ---- the register interface ----

    /// Reads the 32-bit register at `off`. The interrupt registers never sleep and take no lock
    /// (usable in hard-IRQ context); every other register may sleep.
    pub(crate) fn read32(&self, off: usize) -> u32 {
        match off {
            regs::IRQ_RAWSTAT | regs::IRQ_MASK | regs::IRQ_STATUS | regs::IRQ_ACK => {
                let irq = &self.irq;
                if irq.lost.load(Relaxed) {
                    return regs::LOST_READ_VALUE;
                }
                match off {
                    regs::IRQ_RAWSTAT => irq.raw.load(Relaxed),
                    regs::IRQ_MASK => irq.mask.load(Relaxed),
                    regs::IRQ_STATUS => irq.raw.load(Relaxed) & irq.mask.load(Relaxed),
                    _ => 0,
                }
            }
            regs::ID if self.irq.lost.load(Relaxed) => regs::LOST_READ_VALUE,
            regs::ID => regs::ID_VALUE,
            _ => {
                if let Some((qi, r)) = queue_reg(off) {
                    if let Some(q) = self.queues.get(qi) {
                        let lost = self.irq.lost.load(Relaxed);
                        let v = match r {
                            regs::Q_HEAD => Some(q.head.load(Relaxed)),
                            regs::Q_TAIL => Some(q.tail.load(Relaxed)),
                            regs::Q_STATE => Some(q.state.load(Relaxed)),
                            regs::Q_CUR_JOB => Some(q.cur_job.load(Relaxed) as u32),
                            x if x == regs::Q_CUR_JOB + 4 => Some((q.cur_job.load(Relaxed) >> 32) as u32),
                            _ => None,
                        };
                        if let Some(v) = v {
                            return if lost { regs::LOST_READ_VALUE } else { v };
                        }
                    }
                }
                self.model.lock().mmio_read32(off)
            }
        }
    }

    /// Writes the 32-bit register at `off`. `IRQ_MASK` and `IRQ_ACK` never sleep nor lock.
    pub(crate) fn write32(&self, off: usize, v: u32) {
        match off {
            regs::IRQ_MASK | regs::IRQ_ACK | regs::IRQ_RAWSTAT | regs::IRQ_STATUS => {
                let irq = &self.irq;
                if irq.lost.load(Relaxed) {
                    return;
                }
                match off {
                    regs::IRQ_MASK => irq.mask.store(v & regs::IRQ_ALL, Relaxed),
                    regs::IRQ_ACK => irq.update_raw(|r| r & !v),
                    _ => return,
                }
                if irq.edge() {
                    self.deliver();
                }
            }
            _ => {
                if let Some((qi, r)) = queue_reg(off) {
                    if let Some(q) = self.queues.get(qi) {
                        match r {
                            regs::Q_TAIL if !self.irq.lost.load(Relaxed) => {
                                q.tail.store(v, Relaxed);
                                return;
                            }
                            regs::Q_DOORBELL if !self.irq.lost.load(Relaxed) => {
                                q.doorbell.store(true, Release);
                                self.kick();
                                return;
                            }
                            _ => {}
                        }
                    }
                }
                let mut d = self.model.lock();
                if off == regs::RESET {
                    // Doorbells latched before the reset must not reach the reset engine.
                    for q in self.queues.iter() {
                        q.doorbell.store(false, Relaxed);
                        q.tail.store(0, Relaxed);
                    }
                }
                d.mmio_write32(off, v);
                self.refresh(&mut d);
                if off == regs::RESET {
                    // The model's own mask stays all ones: what the driver masks is masked in
                    // the interrupt register file. A reset raises RESET_DONE at once.
                    self.latch(&mut d);
                }
            }
        }
    }

    /// `MMU_INVALIDATE` of every slot: the device drops its cached translations. Once this
    /// returns no step can use them (register writes and steps are serialised by the model lock).
    pub(crate) fn invalidate_tlb(&self) {
        self.write32(regs::MMU_INVALIDATE, regs::MMU_INVALIDATE_ALL);
    }

    /// Reads a 64-bit register (low word, then high word).
    pub(crate) fn read64(&self, off: usize) -> u64 {
        if let Some((qi, regs::Q_CUR_JOB)) = queue_reg(off) {
            // One load of the mirror: two 32-bit reads could pair halves of two different jobs.
            if let Some(q) = self.queues.get(qi) {
                if self.irq.lost.load(Relaxed) {
                    return u64::from(regs::LOST_READ_VALUE) | (u64::from(regs::LOST_READ_VALUE) << 32);
                }
                return q.cur_job.load(Relaxed);
            }
        }
        let mut d = self.model.lock();
        d.mmio_read64(off)
    }

    /// Writes a 64-bit register (low word, then high word, which latches it).
    pub(crate) fn write64(&self, off: usize, v: u64) {
        let mut d = self.model.lock();
        d.mmio_write64(off, v);
        self.refresh(&mut d);
    }

    /// Reads several registers in one go, consistently (for crash dumps and debugfs).
    #[allow(dead_code)]
    pub(crate) fn snapshot<const N: usize>(&self, offs: &[usize; N]) -> [u32; N] {
        let mut out = [0u32; N];
        let mut d = self.model.lock();
        for (o, &off) in out.iter_mut().zip(offs.iter()) {
            *o = d.mmio_read32(off);
        }
        out
    }

    // ---- fault injection (hw-spec section 9: outside the register block) ----

    /// The next device memory access fails with an uncorrectable error.
    pub(crate) fn inject_bus_error(&self) {
        self.model.lock().inject_bus_error();
        self.kick();
    }

    /// The next engine reset fails: the device is lost.
    pub(crate) fn inject_reset_failure(&self) {
        self.model.lock().inject_reset_failure();
    }

    /// The device falls off the bus now.
    pub(crate) fn fall_off_bus(&self) {
        let mut d = self.model.lock();
        d.fall_off_bus();
        self.refresh(&mut d);
        self.latch(&mut d);
    }
}
