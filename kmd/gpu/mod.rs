// SPDX-License-Identifier: GPL-2.0
//! The driver's execution half: rings and doorbells, contexts and their fences, the interrupt
//! top half and bottom half, hang detection, engine reset with innocent resubmission, device
//! loss. One [`Gpu`] per device, shared by every open file.
//!
//! Every decision here is made by the driver's rules (`rules/src/rules`, included by path as
//! `crate::rules`), the same code the simulator backend (`umd/src/backend/sim`) runs: the
//! in-fence rule, queue and slot choice, ring space, the wait rule, context state, who is
//! guilty of a fault, what an engine reset does to each queued job (including the jobs whose
//! inputs will never be written, which fail with `DEP_FAILED` instead of running), and the
//! dmesg and debugfs line formats. What stays here is the kernel's own: the locks, the work
//! items, sleeping and waking, DMA memory and the kernel's containers.
//!
//! Files, along the way a job goes:
//! - this one: the state ([`Sched`], [`Gpu`]) and programming the device;
//! - `init.rs`: creation and shutdown;
//! - `clients.rs`: open files and contexts (CTX_CREATE / CTX_DESTROY / CTX_STATE);
//! - `submit.rs`: SUBMIT (address-space slots, ring space, descriptors, the doorbell);
//! - `wait.rs`: WAIT and the waiters the top half wakes by name;
//! - `irq.rs`: the interrupt top half, the bottom half and retirement;
//! - `recovery.rs`: faults, the watchdog, engine reset, device loss, fault injection.
//!
//! Locking: `sched` (a mutex) protects all bookkeeping and is taken before the device's own locks
//! (`Hw` registers, the bus registry); it is never taken from hard-IRQ context. The top half only
//! touches the interrupt register file (an IRQ-safe spinlock inside `Hw`), an atomic and the work
//! queue. Waiters sleep on `changed`, which is notified after every retirement, fault, reset and
//! loss.

mod clients;
mod init;
mod irq;
mod recovery;
mod submit;
mod wait;

use kernel::{
    bindings,
    dma::Coherent,
    impl_has_delayed_work, impl_has_work,
    prelude::*,
    rbtree::RBTree,
    str::CString,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, CondVar, Mutex,
    },
    workqueue::{self, DelayedWork, Work, WorkItem},
};

use crate::{
    dump::Dumps,
    gem::MemAccount,
    hw::Hw,
    pt::PtPage,
    rules::{
        job::FenceWait,
        lost::LossCause,
        program::{self, Registers},
        queue::HwQueue,
        report::TimeoutSource,
        Context, FenceSlot,
    },
    text::{dev_log, Comm, Level, Text},
    uapi::{
        regs,
        ring::Desc,
        version,
    },
};

pub(crate) use init::Running;
pub(crate) use crate::rules::queue::queue_priority;
pub(crate) use crate::rules::FaultInfo;

/// Descriptors per hardware ring (64 KiB of ring memory per queue).
pub(crate) const RING_ENTRIES: u32 = crate::rules::ring::RING_ENTRIES;
/// Fence slots (one u64 per live context) in the fence page.
const FENCE_SLOTS: usize = crate::rules::ring::FENCE_SLOTS as usize;
/// The address-space slot of the driver's own address space (fault injection packets).
pub(crate) const KERNEL_SLOT: usize = regs::NUM_AS_SLOTS - 1;
/// Slots for user address spaces.
const USER_SLOTS: usize = regs::NUM_AS_SLOTS - 1;
/// Waiters the top half wakes directly (more wait in the bottom half's broadcast).
const FAST_WAITERS: usize = 8;
/// Watchdog period (busy sampling and hang detection), ms.
const WD_PERIOD_MS: u32 = crate::rules::recovery::WD_PERIOD_MS;
/// GPU VA of the driver's code page in its own address space.
const KVA_CODE: u64 = version::VA_START;
/// Offset of the injected HANG packet in the code page.
const KCODE_HANG: u64 = 0;
/// Offset of the injected faulting COPY in the code page.
const KCODE_FAULT: u64 = 64;
/// A VA the driver's address space never maps (the injected page fault reads it).
const KVA_UNMAPPED: u64 = 0xdead_0000;

/// Settings from the module parameters.
#[derive(Clone, Copy)]
pub(crate) struct Config {
    pub(crate) job_timeout_ms: u32,
    /// Where `job_timeout_ms` came from (the job-timeout report's `timeout_source`).
    pub(crate) job_timeout_source: TimeoutSource,
    pub(crate) hang_debug: bool,
}

/// A context (software queue) as the driver tracks it: the state and rules both drivers share
/// (`rules::context::Context`: queue, fence slot, timeline, ban, destroyed-while-busy, ...) and
/// the file that created it. The file stays outside: it is the key of this driver's own table of
/// open files (`Sched::clients`), as the simulator's context names its own file.
pub(crate) struct Ctx {
    pub(crate) client: u64,
    pub(crate) state: Context,
}

/// One job in a ring (`rules::job::Job`, as the simulator keeps it), in the kernel's vectors.
pub(crate) type Job = crate::rules::job::Job<KVec<Desc>, KVec<FenceWait>>;

/// A fixed-capacity queue of jobs in ring order (a job takes at least one descriptor, so a ring
/// never holds more than `RING_ENTRIES` jobs).
pub(crate) struct JobQueue {
    slots: KVec<Option<Job>>,
    head: usize,
    len: usize,
}

impl JobQueue {
    fn new() -> Result<Self> {
        let mut slots = KVec::with_capacity(RING_ENTRIES as usize, GFP_KERNEL)?;
        for _ in 0..RING_ENTRIES {
            slots.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            slots,
            head: 0,
            len: 0,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn cap(&self) -> usize {
        self.slots.len()
    }

    /// Slot `head + k` (`k < cap`) of the circular buffer. No `%`: a remainder by a run-time
    /// value keeps a division-by-zero panic path objtool does not know as `noreturn`.
    fn slot(&self, k: usize) -> usize {
        let i = self.head + k;
        if i >= self.cap() {
            i - self.cap()
        } else {
            i
        }
    }

    fn push_back(&mut self, job: Job) -> core::result::Result<(), Job> {
        if self.len >= self.cap() {
            return Err(job);
        }
        let i = self.slot(self.len);
        match self.slots.get_mut(i) {
            Some(s) => *s = Some(job),
            None => return Err(job),
        }
        self.len += 1;
        Ok(())
    }

    pub(crate) fn front(&self) -> Option<&Job> {
        if self.len == 0 {
            return None;
        }
        self.slots.get(self.head).and_then(Option::as_ref)
    }

    fn pop_front(&mut self) -> Option<Job> {
        if self.len == 0 {
            return None;
        }
        let j = self.slots.get_mut(self.head).and_then(Option::take);
        self.head = self.slot(1);
        self.len -= 1;
        j
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Job> {
        (0..self.len).filter_map(move |k| {
            self.slots.get(self.slot(k)).and_then(Option::as_ref)
        })
    }
}

/// Driver state of one hardware queue: what both drivers keep (`rules::queue::HwQueue`: tail,
/// watchdog clock, busy samples, run times, jobs retired) and its jobs in ring order (its ring
/// memory is `Gpu::rings`).
pub(crate) struct Hq {
    pub(crate) state: HwQueue,
    pub(crate) jobs: JobQueue,
}

/// Per-open-file numbers shared with the file (which updates the memory ones).
pub(crate) struct ClientStats {
    pub(crate) mem: Atomic<u64>,
    pub(crate) objects: Atomic<u64>,
    pub(crate) mappings: Atomic<u64>,
    /// The file saw the device lost: every ioctl on it fails fast with `ENODEV` from now on
    /// (even once the device is power-cycled for new files).
    pub(crate) lost: Atomic<bool>,
}

/// An open file (a "client" of the device).
pub(crate) struct Client {
    pub(crate) pid: i32,
    pub(crate) comm: Comm,
    pub(crate) stats: Arc<ClientStats>,
    /// The file's address space (for the `vm` debugfs file).
    pub(crate) vm: Arc<Mutex<crate::vm::Vm>>,
    pub(crate) jobs: u64,
    pub(crate) busy_ns: u64,
    /// Jobs in a ring.
    pub(crate) inflight: u32,
    /// Address-space slot while it has one; the top-level table it points to.
    pub(crate) slot: Option<usize>,
    pub(crate) pt_root: u64,
}

/// How a task in WAIT or another sleep on `changed` is known to the top half.
#[derive(Clone, Copy)]
enum Waiter {
    /// By name, in this slot of `fast_waiters`: the top half wakes it directly.
    Slot(usize),
    /// Only counted in `sleepers`: the top half then leaves the interrupt to the bottom half.
    Counted,
}

/// Event counters.
#[derive(Clone, Copy, Default)]
pub(crate) struct Counters {
    pub(crate) jobs: u64,
    pub(crate) faults: u64,
    pub(crate) hangs: u64,
    pub(crate) resets: u64,
}

/// Everything the scheduling code keeps, behind one lock.
pub(crate) struct Sched {
    /// The device is lost: every ioctl fails with `ENODEV` until every file is closed.
    pub(crate) lost: bool,
    next_ctx: u32,
    next_job: u64,
    next_client: u64,
    pub(crate) contexts: RBTree<u32, Ctx>,
    /// Per fence slot: its owner and the `WAIT` descriptors in a ring that read it (a slot is
    /// handed out again only without either, `rules::FenceSlots`).
    fence_slots: KVec<FenceSlot>,
    slots: [Option<u64>; USER_SLOTS],
    pub(crate) queues: KVec<Hq>,
    pub(crate) counters: Counters,
    pub(crate) clients: RBTree<u64, Client>,
    /// The watchdog work is queued or running.
    wd_armed: bool,
    /// Fault injection armed for the next job.
    inject_hang: bool,
    inject_fault: bool,
    /// The injections not yet seen in an event, so its line says `injected=1`.
    pub(crate) injected: Injected,
    /// Why the device was lost (meaningful while `lost`, and for the re-initialisation line).
    pub(crate) lost_cause: LossCause,
}

/// The fault injections (the root-only debugfs files `inject_*`) armed and not yet seen in the
/// event they make: the fault or loss line of that event says `injected=1` (`rules::report`,
/// `rules::lost`), so nobody takes a test's fault for a hardware one.
#[derive(Clone, Copy, Default)]
pub(crate) struct Injected {
    /// `inject_mem_error`: the next memory error is this one.
    pub(crate) mem_error: bool,
    /// `inject_reset_failure`: the next failed reset.
    pub(crate) reset_failure: bool,
    /// `inject_fall_off_bus`.
    pub(crate) off_bus: bool,
    /// The job `inject_page_fault` put its faulting packet in front of.
    pub(crate) fault_job: Option<u64>,
    /// The job `inject_hang` put its HANG packet in front of.
    pub(crate) hang_job: Option<u64>,
}

/// One virtual GPU's execution state.
#[pin_data]
pub(crate) struct Gpu {
    pub(crate) index: u32,
    /// `aigpu<index>`.
    pub(crate) name: CString,
    pub(crate) cfg: Config,
    /// The device's GEM memory account (for `status`).
    pub(crate) mem: Arc<MemAccount>,
    #[pin]
    pub(crate) hw: Hw,
    #[pin]
    pub(crate) sched: Mutex<Sched>,
    /// Notified on every retirement, fault, reset and loss.
    #[pin]
    changed: CondVar,
    /// The bottom half.
    #[pin]
    bh: Work<Gpu, 0>,
    /// The watchdog.
    #[pin]
    wd: DelayedWork<Gpu, 1>,
    /// Interrupt causes the top half acknowledged and the bottom half has not handled yet.
    irq_pending: Atomic<u32>,
    /// Interrupts the top half handled (debugfs `irqs`).
    pub(crate) irqs: Atomic<u64>,
    /// Of those, the ones left to the waiter they woke, without the bottom half (debugfs
    /// `irqs_direct`).
    pub(crate) irqs_direct: Atomic<u64>,
    /// And the completions nobody was waiting for, left to whoever looks next (debugfs
    /// `irqs_lazy`).
    pub(crate) irqs_lazy: Atomic<u64>,
    /// When the top half last ran (`CLOCK_MONOTONIC` ns): the completion time busy-time
    /// accounting uses when retirement comes later.
    last_irq_ns: Atomic<u64>,
    /// Tasks asleep on `changed` that the top half does not know by name (not in
    /// `fast_waiters`): while there are any, every interrupt goes to the bottom half.
    sleepers: Atomic<u32>,
    /// Tasks sleeping in WAIT (`task_struct` pointers, 0 = free slot): the top half wakes them
    /// directly, so a waiter does not wait for the bottom half's work item to be scheduled too.
    fast_waiters: [Atomic<usize>; FAST_WAITERS],
    /// Set once at teardown: nothing is queued or re-armed any more.
    stopping: Atomic<bool>,
    /// The UAPI version QUERY reports instead of the real one (`major << 32 | minor`; 0: the
    /// real one), set through debugfs `inject_uapi_version` to test libumd's version refusal.
    pub(crate) uapi_override: Atomic<u64>,
    /// Ring memory, one per hardware queue.
    pub(crate) rings: KVec<Coherent<[u8]>>,
    /// One u64 per context, written by the device (`DESC_FLAG_FENCE`).
    fence_page: Coherent<[u64]>,
    /// The driver's own address space (slot `KERNEL_SLOT`) and its code page.
    kas_root: PtPage,
    _kas_code: Coherent<[u32]>,
    /// Crash dumps (debugfs `crashdumps/`).
    #[pin]
    pub(crate) dumps: Mutex<Dumps>,
}

impl_has_work! {
    impl HasWork<Self, 0> for Gpu { self.bh }
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self, 1> for Gpu { self.wd }
}

impl WorkItem<0> for Gpu {
    type Pointer = Arc<Gpu>;

    fn run(this: Arc<Gpu>) {
        this.bottom_half();
    }
}

impl WorkItem<1> for Gpu {
    type Pointer = Arc<Gpu>;

    fn run(this: Arc<Gpu>) {
        if this.watchdog() {
            let delay = kernel::time::msecs_to_jiffies(WD_PERIOD_MS);
            let _ = dfl_wq().enqueue_delayed::<Arc<Gpu>, 1>(this, delay);
        }
    }
}

/// The default (unbound) system work queue, `system_dfl_wq` (7.3 marks `system_wq` deprecated and
/// says so in the log; the Rust crate has no accessor for its replacements yet).
fn dfl_wq() -> &'static workqueue::Queue {
    // SAFETY: `system_dfl_wq` is a C global set up at boot, valid for the kernel's lifetime.
    unsafe { workqueue::Queue::from_raw(bindings::system_dfl_wq) }
}

/// The register writes of `rules::program`, through [`Hw`] (which serialises them itself).
impl Registers for &Hw {
    fn write32(&mut self, offset: usize, value: u32) {
        Hw::write32(self, offset, value);
    }

    fn write64(&mut self, offset: usize, value: u64) {
        Hw::write64(self, offset, value);
    }
}

fn bus_addr(c: &Coherent<[u8]>) -> u64 {
    #[allow(clippy::useless_conversion)]
    u64::from(c.dma_address())
}

impl Gpu {
    fn stopping(&self) -> bool {
        self.stopping.load(Relaxed)
    }

    /// Bus address of the fence slot `s`.
    fn fence_pa(&self, s: u32) -> u64 {
        #[allow(clippy::useless_conversion)]
        let base = u64::from(self.fence_page.dma_address());
        base + 8 * u64::from(s)
    }

    fn read_fence(&self, s: u32) -> Option<u64> {
        self.hw.bus().read_u64(self.fence_pa(s))
    }

    fn write_fence(&self, s: u32, v: u64) {
        let _ = crate::model::PhysMem::write(&**self.hw.bus(), self.fence_pa(s), &v.to_le_bytes());
    }

    /// Programs the device (`rules::program`: interrupt mask, debug control, address-space
    /// slots, every ring) at start, after a reset and after a power cycle. The driver's own
    /// address space (`KERNEL_SLOT`, the packets of debugfs `inject_hang` / `inject_page_fault`)
    /// comes first, then the files'; an injected HANG runs whether or not hang debugging is on.
    /// The simulator has neither (`umd/src/backend/sim/gpu.rs`, `program`).
    fn program(&self, st: &Sched) {
        let own = core::iter::once((KERNEL_SLOT, self.kas_root.dma_address()));
        let files = st.slots.iter().enumerate().filter_map(|(s, owner)| {
            let c = owner.and_then(|id| st.clients.get(&id))?;
            Some((s, c.pt_root))
        });
        let hang = self.cfg.hang_debug || st.inject_hang;
        // `Iterator::chain`, not pin-init's `Init::chain` (in the prelude, implemented for all `T`).
        let spaces = Iterator::chain(own, files);
        program::program(&mut &self.hw, hang, spaces, self.rings.iter().map(bus_addr));
    }

    /// Logs a device line (`aigpu aigpu0: ...`).
    pub(crate) fn log(&self, level: Level, t: &Text) {
        dev_log(level, &self.name, t.as_bytes());
    }
}

/// Jiffies covering `ns` (rounded up, at least 1).
fn ns_to_jiffies(ns: u64) -> kernel::time::Jiffies {
    // SAFETY: pure conversion.
    let j = unsafe { bindings::nsecs_to_jiffies(ns) };
    j.saturating_add(1)
}
