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
        lost::LossCause,
        recovery::{BusySamples, JobClock, RecentJobs, RunTimes},
        report::TimeoutSource,
        Ban,
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

/// A context (software queue) as the driver tracks it.
pub(crate) struct Ctx {
    pub(crate) client: u64,
    pub(crate) queue: usize,
    pub(crate) priority: u32,
    pub(crate) fence_slot: u32,
    pub(crate) submitted: u64,
    pub(crate) completed: u64,
    pub(crate) reset_status: u32,
    /// Why it is banned (it never runs again), once it is.
    pub(crate) ban: Option<Ban>,
    /// Destroyed by user space while jobs were still in a ring: invisible to ioctls, freed when
    /// its last job leaves the ring.
    pub(crate) zombie: bool,
    /// Jobs of this context in a ring.
    pub(crate) inflight: u32,
    /// CTX_DESTROY is waiting for this context's work: a WAIT on it returns at once (EINVAL,
    /// CTX_INVALID), so that a thread blocked in a wait is not left sleeping while another one
    /// tears the context down.
    pub(crate) closing: bool,
    /// Run times of its last completed jobs (the job-timeout report's `recent_ms`).
    pub(crate) recent: RecentJobs,
}

impl Ctx {
    /// What an in-fence on this context sees.
    pub(crate) fn producer(&self) -> crate::rules::Producer {
        crate::rules::Producer {
            submitted: self.submitted,
            completed: self.completed,
            ban: self.ban,
        }
    }

    /// Banned for a hang (job timeout).
    #[allow(dead_code)] // fdinfo's counters (kmd/fdinfo.rs)
    pub(crate) fn hung(&self) -> bool {
        self.ban == Some(Ban::Hang)
    }

    /// The fault that banned it.
    #[allow(dead_code)] // fdinfo's counters (kmd/fdinfo.rs)
    pub(crate) fn fault(&self) -> Option<FaultInfo> {
        match self.ban {
            Some(Ban::Fault(f)) => Some(f),
            _ => None,
        }
    }
}

/// One `WAIT` of a job: the producer context, its fence slot and the value waited for.
#[derive(Clone, Copy)]
pub(crate) struct Dep {
    pub(crate) ctx: u32,
    pub(crate) slot: u32,
    pub(crate) value: u64,
}

/// One job: the descriptors of one submit.
pub(crate) struct Job {
    pub(crate) id: u64,
    pub(crate) ctx: u32,
    pub(crate) client: u64,
    pub(crate) seqno: u64,
    pub(crate) descs: KVec<Desc>,
    /// For each `WAIT` descriptor, in order.
    pub(crate) deps: KVec<Dep>,
    /// Ring index of the first descriptor and one past the last.
    pub(crate) start: u32,
    pub(crate) end: u32,
    pub(crate) submitted_ns: u64,
}

impl Job {
    /// What the rules see of it.
    pub(crate) fn view(&self) -> crate::rules::recovery::JobView {
        crate::rules::recovery::JobView {
            id: self.id,
            ctx: self.ctx,
            seqno: self.seqno,
        }
    }
}

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

/// Driver state of one hardware queue.
pub(crate) struct Hq {
    pub(crate) tail: u32,
    pub(crate) jobs: JobQueue,
    /// Watchdog: the job seen executing, and since when.
    pub(crate) clock: JobClock,
    /// Busy samples (one bit per watchdog period).
    pub(crate) busy: BusySamples,
    /// Jobs retired on this queue.
    pub(crate) done: u64,
    /// When each job started and ended (busy time, the contexts' recent run times).
    pub(crate) runs: RunTimes,
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
    free_fence_slots: KVec<u32>,
    /// Per fence slot: `WAIT` descriptors in a ring that watch it (a slot is reused only when
    /// none does), and whether its context is gone.
    fence_waiters: KVec<u32>,
    fence_orphan: KVec<bool>,
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

    /// Programs interrupt mask, debug control, address-space slots and every ring (at start and
    /// after a reset, which keeps slots and ring registers but disables the queues).
    fn program(&self, st: &Sched) {
        let hw = &self.hw;
        hw.write32(regs::IRQ_MASK, regs::IRQ_ALL);
        let hang = self.cfg.hang_debug || st.inject_hang;
        hw.write32(regs::DEBUG_CTRL, if hang { regs::DEBUG_CTRL_HANG } else { 0 });
        hw.write64(regs::as_pt_base(KERNEL_SLOT), self.kas_root.dma_address());
        hw.write32(regs::as_config(KERNEL_SLOT), regs::AS_ENABLED);
        for (s, owner) in st.slots.iter().enumerate() {
            if let Some(c) = owner.and_then(|id| st.clients.get(&id)) {
                hw.write64(regs::as_pt_base(s), c.pt_root);
                hw.write32(regs::as_config(s), regs::AS_ENABLED);
            }
        }
        for (q, ring) in self.rings.iter().enumerate() {
            let b = regs::queue_base(q);
            hw.write64(b + regs::Q_RING_BASE, bus_addr(ring));
            hw.write32(b + regs::Q_RING_SIZE, RING_ENTRIES);
            hw.write32(
                b + regs::Q_CTRL,
                regs::Q_CTRL_ENABLE | (queue_priority(q) << regs::Q_CTRL_PRIO_SHIFT),
            );
        }
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
