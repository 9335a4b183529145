// SPDX-License-Identifier: GPL-2.0
//! The driver's execution half: rings and doorbells, contexts and their fences, the interrupt
//! top half and bottom half, hang detection, engine reset with innocent resubmission, device
//! loss. One [`Gpu`] per device, shared by every open file.
//!
//! This is the kernel port of the simulator's KMD half (`umd/src/backend/sim/gpu.rs`): the same
//! rings (1024 descriptors per hardware queue), queue choice by priority (queue 0 high, 1-2
//! normal, 3 low; the least loaded of the context's priority), in-fences as `WAIT` descriptors on
//! the other context's fence slot, one `EXEC` per command buffer with `FENCE | IRQ` on the last,
//! back-pressure on a full ring, retirement from `Q_HEAD` and the fence page, fault handling (ban
//! the guilty context with its fault, reset, resubmit the innocent jobs from their saved
//! descriptors and mark them innocent), the watchdog (`Q_CUR_JOB` unchanged for longer than the
//! job timeout is a hang), and device loss when the `ID` register no longer answers after a reset.
//! Every errno and reason is the simulator's.
//!
//! Locking: `sched` (a mutex) protects all bookkeeping and is taken before the device's own locks
//! (`Hw` registers, the bus registry); it is never taken from hard-IRQ context. The top half only
//! touches the interrupt register file (an IRQ-safe spinlock inside `Hw`), an atomic and the work
//! queue. Waiters sleep on `changed`, which is notified after every retirement, fault, reset and
//! loss.

use core::ffi::c_void;

use kernel::{
    bindings, device,
    dma::Coherent,
    impl_has_delayed_work, impl_has_work, new_condvar, new_mutex,
    prelude::*,
    rbtree::RBTree,
    str::CString,
    sync::{
        atomic::{Acquire, Atomic, Full, Relaxed},
        Arc, ArcBorrow, CondVar, CondVarTimeoutResult, Mutex, MutexGuard,
    },
    workqueue::{self, new_delayed_work, new_work, DelayedWork, Work, WorkItem},
};

use crate::{
    bus::Bus,
    driver::Stats,
    gem::MemAccount,
    dump::{self, Dumps},
    hw::{mono_ns, Hw},
    ioctl::{fail, Fail},
    pt::PtPage,
    text::{dev_log, Comm, Level, Text},
    tprint,
    uapi::{
        ioctl::{self as u, Cmdbuf, Fence},
        packet, pte, reason as r, regs,
        ring::{self, Desc, DESC_SIZE},
        version,
    },
};

/// Descriptors per hardware ring (64 KiB of ring memory per queue), as in the simulator.
pub(crate) const RING_ENTRIES: u32 = 1024;
/// Fence slots (one u64 per live context) in the fence page.
const FENCE_SLOTS: usize = 512;
/// The address-space slot of the driver's own address space (fault injection packets).
pub(crate) const KERNEL_SLOT: usize = regs::NUM_AS_SLOTS - 1;
/// Slots for user address spaces.
const USER_SLOTS: usize = regs::NUM_AS_SLOTS - 1;
/// Waiters the top half wakes directly (more wait in the bottom half's broadcast).
const FAST_WAITERS: usize = 8;
/// Watchdog period (busy sampling and hang detection), ms.
const WD_PERIOD_MS: u32 = 5;
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
    pub(crate) hang_debug: bool,
}

/// What the device reported about a fault (context state, logs, dumps).
#[derive(Clone, Copy, Default)]
pub(crate) struct FaultInfo {
    pub(crate) kind: u32,
    pub(crate) access: u32,
    pub(crate) va: u64,
    pub(crate) offset: u64,
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
    pub(crate) banned: bool,
    pub(crate) hung: bool,
    pub(crate) fault: Option<FaultInfo>,
    /// Destroyed by user space while jobs were still in a ring: invisible to ioctls, freed when
    /// its last job leaves the ring.
    pub(crate) zombie: bool,
    /// Jobs of this context in a ring.
    pub(crate) inflight: u32,
    /// CTX_DESTROY is waiting for this context's work: a WAIT on it returns at once (EINVAL,
    /// CTX_INVALID), so that a thread blocked in a wait is not left sleeping while another one
    /// tears the context down.
    pub(crate) closing: bool,
}

/// One job: the descriptors of one submit.
pub(crate) struct Job {
    pub(crate) id: u64,
    pub(crate) ctx: u32,
    pub(crate) client: u64,
    pub(crate) seqno: u64,
    pub(crate) descs: KVec<Desc>,
    /// For each `WAIT` descriptor, in order: the context waited on and its fence slot.
    pub(crate) deps: KVec<(u32, u32)>,
    /// Ring index of the first descriptor and one past the last.
    pub(crate) start: u32,
    pub(crate) end: u32,
    pub(crate) submitted_ns: u64,
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

    fn push_back(&mut self, job: Job) -> core::result::Result<(), Job> {
        if self.len >= self.cap() {
            return Err(job);
        }
        let i = (self.head + self.len) % self.cap();
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
        self.head = (self.head + 1) % self.cap();
        self.len -= 1;
        j
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Job> {
        (0..self.len).filter_map(move |k| {
            self.slots
                .get((self.head + k) % self.cap())
                .and_then(Option::as_ref)
        })
    }
}

/// Driver state of one hardware queue.
pub(crate) struct Hq {
    pub(crate) tail: u32,
    pub(crate) jobs: JobQueue,
    /// Watchdog: job id seen executing, and since when (ns).
    cur_job: u64,
    cur_since: u64,
    /// Busy samples (one bit per watchdog period, newest in bit 0).
    busy_samples: u128,
    last_sample: u64,
    /// Jobs retired on this queue.
    pub(crate) done: u64,
    /// When the last job left the queue (busy-time accounting).
    last_retire: u64,
}

impl Hq {
    /// Percentage of the last half second (100 samples of 5 ms) the queue had work, at `now`
    /// (periods since the last sample, when the watchdog was not running, count as idle).
    pub(crate) fn busy_pct(&self, now: u64) -> u32 {
        let periods = now.saturating_sub(self.last_sample) / (u64::from(WD_PERIOD_MS) * 1_000_000);
        if periods >= 100 {
            return 0;
        }
        ((self.busy_samples << periods) & ((1u128 << 100) - 1)).count_ones()
    }
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

/// Hardware queue priorities: queue 0 high, 1 and 2 normal, 3 low.
pub(crate) fn queue_priority(q: usize) -> u32 {
    match q {
        0 => u::PRIORITY_HIGH,
        3 => u::PRIORITY_LOW,
        _ => u::PRIORITY_NORMAL,
    }
}

/// Wrapping "a is at or after b" for free-running ring indices.
fn at_or_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

fn bus_addr(c: &Coherent<[u8]>) -> u64 {
    #[allow(clippy::useless_conversion)]
    u64::from(c.dma_address())
}

/// The interrupt handler (top half), in hard-IRQ context: read and acknowledge the status,
/// remember the causes, queue the bottom half.
///
/// # Safety
///
/// `data` is the `Gpu` connected by `Gpu::new`, alive (its `Arc` count above zero) until
/// `Gpu::shutdown` disconnects this handler.
unsafe fn top_half(data: *const c_void) {
    // SAFETY: see the function's safety contract.
    let gpu = unsafe { &*data.cast::<Gpu>() };
    let mut all = 0u32;
    for _ in 0..16 {
        let s = gpu.hw.read32(regs::IRQ_STATUS);
        if s == 0 || s == regs::LOST_READ_VALUE {
            break;
        }
        gpu.hw.write32(regs::IRQ_ACK, s);
        all |= s;
    }
    if all == 0 || gpu.stopping.load(Relaxed) {
        return;
    }
    gpu.irqs.fetch_add(1, Relaxed);
    let mut cur = gpu.irq_pending.load(Relaxed);
    while let Err(seen) = gpu.irq_pending.cmpxchg(cur, cur | all, Relaxed) {
        cur = seen;
    }
    // Wake the waiters now: they retire what they wait for themselves. A slot holds a task that
    // is inside WAIT (it clears the slot before leaving); inside this RCU read-side section the
    // task_struct cannot be freed even if the task leaves and exits meanwhile (the rcuwait
    // pattern), and a spurious wake-up of a task sleeping elsewhere is harmless.
    let (mut registered, mut woke) = (false, false);
    {
        let _rcu = kernel::sync::rcu::read_lock();
        for w in gpu.fast_waiters.iter() {
            let t = w.load(Acquire);
            if t != 0 {
                registered = true;
                // SAFETY: see above.
                woke |= unsafe { bindings::wake_up_process(t as *mut bindings::task_struct) } != 0;
            }
        }
    }
    gpu.last_irq_ns.store(mono_ns(), Relaxed);
    // Completions alone need no bottom half unless someone sleeps without being woken here
    // (retirement is lazy, as in production drivers: it frees bookkeeping, while a waiter
    // learns of its fence from the device). Scheduling the bottom half costs a kworker wake-up
    // and two context switches per job on the round-trip path.
    // - A waiter was asleep and is now woken: it retires everything the device completed (not
    //   only its own fence) and notifies `changed` before anything else (`Gpu::wait`).
    // - Nobody waits at all: whoever looks next retires (a WAIT, CTX_STATE, a submit that finds
    //   its ring full, a file being closed), and the watchdog does within `WD_PERIOD_MS` while
    //   work is queued. A sleeper that comes later retires before it sleeps (`register_waiter`,
    //   `sleep_on_changed`: a full barrier, then a look at the device; this side read the slots
    //   and the count after acknowledging the interrupt, a full barrier too).
    // A registered waiter that was running may not have gone to sleep yet (a wake-up this side
    // cannot deliver), other sleepers on `changed` are not known by name, and faults, memory
    // errors and resets need the bottom half: those still queue it.
    if all & !(regs::IRQ_JOB_DONE_ALL | regs::IRQ_FENCE) == 0 {
        if woke {
            gpu.irqs_direct.fetch_add(1, Relaxed);
            return;
        }
        if !registered && gpu.sleepers.load(Relaxed) == 0 {
            gpu.irqs_lazy.fetch_add(1, Relaxed);
            return;
        }
    }
    // SAFETY: `data` comes from `Arc::as_ptr` of the device's `Arc<Gpu>`, whose count stays above
    // zero while this handler is connected (function contract), so a borrow may be taken.
    let arc: Arc<Gpu> = unsafe { ArcBorrow::from_raw(data.cast::<Gpu>()) }.into();
    // Already queued: that run will see these causes too.
    let _ = workqueue::system_highpri().enqueue::<Arc<Gpu>, 0>(arc);
}

impl Gpu {
    /// Creates the device (rings, fence page, the driver's own address space, the device
    /// model), programs it and starts it.
    pub(crate) fn new(
        dev: &device::Device<device::Bound>,
        index: u32,
        mem: Arc<MemAccount>,
        cfg: Config,
    ) -> Result<Arc<Gpu>> {
        let bus = Bus::new()?;
        let name = CString::try_from_fmt(fmt!("aigpu{}", index))?;
        let ring_bytes = RING_ENTRIES as usize * DESC_SIZE;
        let mut rings = KVec::with_capacity(regs::NUM_QUEUES, GFP_KERNEL)?;
        for _ in 0..regs::NUM_QUEUES {
            let ring = Coherent::<u8>::zeroed_slice(dev, ring_bytes, GFP_KERNEL)?;
            let base = bus_addr(&ring);
            for p in 0..ring_bytes / 4096 {
                // SAFETY: page `p` of the ring's coherent allocation, which lives in `Gpu` (and
                // the device model, the only user of the bus, stops before it is freed).
                unsafe {
                    bus.register_kva(base + (p * 4096) as u64, ring.as_mut_ptr().cast::<u8>().add(p * 4096))?
                };
            }
            rings.push(ring, GFP_KERNEL)?;
        }
        let fence_page = Coherent::<u64>::zeroed_slice(dev, FENCE_SLOTS, GFP_KERNEL)?;
        #[allow(clippy::useless_conversion)]
        let fence_pa = u64::from(fence_page.dma_address());
        // SAFETY: as for the rings.
        unsafe { bus.register_kva(fence_pa, fence_page.as_mut_ptr().cast::<u8>())? };

        // The driver's own address space: one read-only code page with the injection packets.
        let kstats = Arc::new(
            Stats {
                pt_pages: Atomic::new(0),
                mappings: Atomic::new(0),
            },
            GFP_KERNEL,
        )?;
        let code = Coherent::<u32>::zeroed_slice(dev, 1024, GFP_KERNEL)?;
        // SAFETY: the code page is ours and not yet visible to the device.
        unsafe {
            let p = code.as_mut_ptr().cast::<u32>();
            p.add((KCODE_HANG / 4) as usize).write(packet::encode_hang()[0]);
            for (i, w) in packet::encode_copy(KVA_UNMAPPED, KVA_CODE + 2048, 64).iter().enumerate() {
                p.add((KCODE_FAULT / 4) as usize + i).write(*w);
            }
        }
        #[allow(clippy::useless_conversion)]
        let code_pa = u64::from(code.dma_address());
        // SAFETY: as for the rings.
        unsafe { bus.register_kva(code_pa, code.as_mut_ptr().cast::<u8>())? };
        let mut kas_root = PtPage::new(dev, pte::LEVELS - 1, &kstats, &bus)?;
        kas_root.map_page(dev, KVA_CODE, code_pa, pte::READ)?;

        let mut queues = KVec::with_capacity(regs::NUM_QUEUES, GFP_KERNEL)?;
        for _ in 0..regs::NUM_QUEUES {
            queues.push(
                Hq {
                    tail: 0,
                    jobs: JobQueue::new()?,
                    cur_job: 0,
                    cur_since: 0,
                    busy_samples: 0,
                    last_sample: 0,
                    done: 0,
                    last_retire: 0,
                },
                GFP_KERNEL,
            )?;
        }
        let mut free = KVec::with_capacity(FENCE_SLOTS, GFP_KERNEL)?;
        let mut waiters = KVec::with_capacity(FENCE_SLOTS, GFP_KERNEL)?;
        let mut orphan = KVec::with_capacity(FENCE_SLOTS, GFP_KERNEL)?;
        for s in (0..FENCE_SLOTS as u32).rev() {
            free.push(s, GFP_KERNEL)?;
            waiters.push(0, GFP_KERNEL)?;
            orphan.push(false, GFP_KERNEL)?;
        }
        let sched = Sched {
            lost: false,
            next_ctx: 1,
            next_job: 1,
            next_client: 1,
            contexts: RBTree::new(),
            free_fence_slots: free,
            fence_waiters: waiters,
            fence_orphan: orphan,
            slots: [None; USER_SLOTS],
            queues,
            counters: Counters::default(),
            clients: RBTree::new(),
            wd_armed: false,
            inject_hang: false,
            inject_fault: false,
        };
        let gpu = Arc::pin_init(
            try_pin_init!(Gpu {
                index,
                name,
                cfg,
                mem,
                hw <- Hw::new(bus),
                sched <- new_mutex!(sched, "aigpu_sched"),
                changed <- new_condvar!("aigpu_changed"),
                bh <- new_work!("aigpu_bottom_half"),
                wd <- new_delayed_work!("aigpu_watchdog"),
                irq_pending: Atomic::new(0),
                fast_waiters: core::array::from_fn(|_| Atomic::new(0)),
                irqs: Atomic::new(0),
                irqs_direct: Atomic::new(0),
                irqs_lazy: Atomic::new(0),
                last_irq_ns: Atomic::new(0),
                sleepers: Atomic::new(0),
                stopping: Atomic::new(false),
                rings,
                fence_page,
                kas_root,
                _kas_code: code,
                dumps <- new_mutex!(Dumps::new(), "aigpu_dumps"),
            }),
            GFP_KERNEL,
        )?;
        if gpu.hw.read32(regs::ID) != regs::ID_VALUE {
            return Err(ENODEV);
        }
        {
            let st = gpu.sched.lock();
            gpu.program(&st);
        }
        // SAFETY: the handler runs with `Arc::as_ptr(&gpu)` until `shutdown` disconnects it, and
        // the owner of `gpu` (the DRM device data) calls `shutdown` before dropping its `Arc`.
        unsafe { gpu.hw.request_irq(top_half, Arc::as_ptr(&gpu).cast()) };
        // SAFETY: `hw` is pinned inside `gpu`, which outlives the thread (`shutdown` stops it).
        if let Err(e) = unsafe { gpu.hw.start(index) } {
            gpu.hw.free_irq();
            return Err(e);
        }
        Ok(gpu)
    }

    /// Stops everything that runs on its own: the device thread, interrupt delivery, the bottom
    /// half and the watchdog. Called once, before the last reference goes.
    pub(crate) fn shutdown(&self) {
        self.stopping.store(true, Relaxed);
        self.hw.stop();
        self.hw.free_irq();
        // SAFETY: `bh` was initialised by `new_work!`; flushing waits for a queued or running
        // bottom half, which returns at once now that `stopping` is set (and drops its `Arc`).
        unsafe { bindings::flush_work(Work::raw_get(&self.bh)) };
        // SAFETY: a `delayed_work` starts with its `work_struct`; flushing runs a pending
        // watchdog now, which sees `stopping` and does not re-arm.
        unsafe {
            bindings::flush_delayed_work(
                Work::raw_get(DelayedWork::raw_as_work(&self.wd)).cast::<bindings::delayed_work>(),
            )
        };
    }

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

    // ---- clients (open files) ----

    /// Registers an open file; returns its client id. A lost device that no file uses any more
    /// (no context left: every user destroyed its contexts or closed its file) is power-cycled
    /// first, as a remove and rescan of real hardware would, so a fresh open gets a working
    /// device. Files that saw the loss stay lost (`ClientStats::lost`); a file opened while the
    /// device is lost and still in use is lost from the start.
    pub(crate) fn attach(
        &self,
        stats: Arc<ClientStats>,
        vm: Arc<Mutex<crate::vm::Vm>>,
    ) -> Result<u64> {
        let mut st = self.sched.lock();
        if st.lost && st.contexts.values().all(|c| c.zombie) {
            self.hw.power_cycle();
            for q in st.queues.iter_mut() {
                q.tail = 0;
                q.cur_job = 0;
            }
            st.lost = false;
            st.slots = [None; USER_SLOTS];
            for (_, c) in st.clients.iter_mut() {
                c.slot = None;
            }
            self.program(&st);
            let mut t = Text::new();
            tprint!(&mut t, "device re-initialised (power cycle) after it was lost; no context was left on it");
            self.log(Level::Warn, &t);
        }
        if st.lost {
            stats.lost.store(true, Relaxed);
        }
        let id = st.next_client;
        st.next_client += 1;
        let client = Client {
            pid: crate::text::current_tgid(),
            comm: Comm::current(),
            stats,
            vm,
            jobs: 0,
            busy_ns: 0,
            inflight: 0,
            slot: None,
            pt_root: 0,
        };
        st.clients.try_create_and_insert(id, client, GFP_KERNEL)?;
        Ok(id)
    }

    /// Unregisters an open file: waits (bounded by the job timeout) for its jobs, cancels what is
    /// left with an engine reset, destroys its contexts and frees its address-space slot. Called
    /// before the file's address space is torn down.
    pub(crate) fn detach(&self, client: u64) {
        let deadline = mono_ns() + 2 * self.timeout_ns() + 1_000_000_000;
        loop {
            {
                let mut st = self.sched.lock();
                // Completions nobody waited for are retired lazily: look at the device.
                self.retire_and_notify(&mut st);
                let busy = st.clients.get(&client).map_or(0, |c| c.inflight);
                if busy == 0 || st.lost || mono_ns() >= deadline {
                    break;
                }
            }
            // Uninterruptible: a process being killed closes its files here and must not spin.
            // SAFETY: plain sleep.
            unsafe { bindings::msleep(5) };
        }
        let mut st = self.sched.lock();
        if st.clients.get(&client).is_some_and(|c| c.inflight > 0) && !st.lost {
            // Still running after the deadline: cancel the file's work (its page tables are about
            // to go away). Its contexts are banned quietly; everyone else's work is resubmitted.
            let ids = Self::ctx_ids(&st, |c| c.client == client);
            for id in ids.iter() {
                if let Some(c) = st.contexts.get_mut(id) {
                    c.banned = true;
                }
            }
            self.recover(&mut st);
        }
        let ids = Self::ctx_ids(&st, |c| c.client == client);
        for id in ids.iter() {
            Self::remove_ctx(&mut st, *id);
        }
        if let Some(c) = st.clients.remove(&client) {
            if let Some(s) = c.slot {
                if let Some(owner) = st.slots.get_mut(s) {
                    *owner = None;
                }
                self.hw.write32(regs::as_config(s), 0);
            }
        }
        drop(st);
        self.changed.notify_all();
    }

    fn timeout_ns(&self) -> u64 {
        u64::from(self.cfg.job_timeout_ms) * 1_000_000
    }

    /// Ids of the contexts matching `f` (a snapshot, so the tree can be changed after).
    fn ctx_ids(st: &Sched, f: impl Fn(&Ctx) -> bool) -> KVec<u32> {
        let mut v = KVec::new();
        for (id, c) in st.contexts.iter() {
            if f(c) && v.push(*id, GFP_KERNEL).is_err() {
                break;
            }
        }
        v
    }

    /// Removes a context now, or turns it into a zombie while jobs of it are in a ring.
    fn remove_ctx(st: &mut Sched, id: u32) {
        let (slot, inflight) = match st.contexts.get_mut(&id) {
            Some(c) => {
                c.zombie = true;
                (c.fence_slot, c.inflight)
            }
            None => return,
        };
        if inflight > 0 {
            return;
        }
        st.contexts.remove(&id);
        Self::release_fence_slot(st, slot);
    }

    /// The fence slot's context is gone: reuse the slot once no `WAIT` descriptor watches it.
    fn release_fence_slot(st: &mut Sched, slot: u32) {
        let s = slot as usize;
        if st.fence_waiters.get(s).copied().unwrap_or(0) > 0 {
            if let Some(o) = st.fence_orphan.get_mut(s) {
                *o = true;
            }
            return;
        }
        // Cannot fail: the vector has room for every slot.
        let _ = st.free_fence_slots.push(slot, GFP_ATOMIC);
    }

    /// One waiter of fence slot `slot` is gone; a slot whose context was freed while it still
    /// had waiters (orphaned) returns to the free list with its last waiter.
    fn unwatch_fence_slot(st: &mut Sched, slot: u32) {
        let s = slot as usize;
        let now_free = match (st.fence_waiters.get_mut(s), st.fence_orphan.get(s)) {
            (Some(w), Some(&orphan)) => {
                *w = w.saturating_sub(1);
                *w == 0 && orphan
            }
            _ => false,
        };
        if now_free {
            if let Some(o) = st.fence_orphan.get_mut(s) {
                *o = false;
            }
            let _ = st.free_fence_slots.push(slot, GFP_ATOMIC);
        }
    }

    /// A job left its ring (retired or dropped): context and client bookkeeping, fence-slot
    /// references of its `WAIT` descriptors, zombie contexts freed.
    fn job_gone(st: &mut Sched, job: &Job) {
        let mut free_ctx = None;
        if let Some(c) = st.contexts.get_mut(&job.ctx) {
            c.inflight = c.inflight.saturating_sub(1);
            if c.zombie && c.inflight == 0 {
                free_ctx = Some(job.ctx);
            }
        }
        if let Some(c) = st.clients.get_mut(&job.client) {
            c.inflight = c.inflight.saturating_sub(1);
        }
        for &(_, slot) in job.deps.iter() {
            Self::unwatch_fence_slot(st, slot);
        }
        if let Some(id) = free_ctx {
            if let Some(c) = st.contexts.remove(&id) {
                Self::release_fence_slot(st, c.fence_slot);
            }
        }
    }

    // ---- contexts ----

    /// CTX_CREATE: a context on the least-loaded hardware queue of its priority.
    pub(crate) fn ctx_create(&self, client: u64, priority: u32) -> Result<u32, Fail> {
        let mut st = self.sched.lock();
        if st.lost {
            return Err(fail(ENODEV, r::DEVICE_LOST));
        }
        let mine = st
            .contexts
            .values()
            .filter(|c| c.client == client && !c.zombie)
            .count();
        if mine >= u::MAX_CONTEXTS as usize {
            return Err(fail(EBUSY, r::CTX_LIMIT));
        }
        if st.free_fence_slots.is_empty() {
            // Destroyed contexts keep their slot until their last job is retired (lazily).
            self.retire_and_notify(&mut st);
        }
        let Some(fence_slot) = st.free_fence_slots.pop() else {
            return Err(fail(EBUSY, r::DEVICE_CTX_LIMIT));
        };
        let mut load = [0usize; regs::NUM_QUEUES];
        for c in st.contexts.values() {
            if let Some(l) = load.get_mut(c.queue) {
                *l += 1;
            }
        }
        let queue = (0..regs::NUM_QUEUES)
            .filter(|&q| queue_priority(q) == priority)
            .min_by_key(|&q| load[q])
            .unwrap_or(1);
        // A fresh id not in use (ids wrap, skipping live ones).
        let mut id = st.next_ctx;
        while st.contexts.get(&id).is_some() {
            id = id.wrapping_add(1).max(1);
        }
        st.next_ctx = id.wrapping_add(1).max(1);
        let ctx = Ctx {
            client,
            queue,
            priority,
            fence_slot,
            submitted: 0,
            completed: 0,
            reset_status: u::RESET_NONE,
            banned: false,
            hung: false,
            fault: None,
            zombie: false,
            inflight: 0,
            closing: false,
        };
        if let Err(e) = st.contexts.try_create_and_insert(id, ctx, GFP_KERNEL) {
            let _ = st.free_fence_slots.push(fence_slot, GFP_KERNEL);
            return Err(fail(e, r::OUT_OF_MEMORY));
        }
        self.write_fence(fence_slot, 0);
        Ok(id)
    }

    /// A live (not destroyed) context of `client`.
    fn ctx_of(st: &Sched, client: u64, id: u32) -> Result<&Ctx, Fail> {
        match st.contexts.get(&id) {
            Some(c) if c.client == client && !c.zombie => Ok(c),
            _ => Err(fail(EINVAL, r::CTX_INVALID)),
        }
    }

    /// CTX_DESTROY: wakes the context's waiters (they return CTX_INVALID), waits for its
    /// pending work (bounded by the job timeout; a signal stops the wait), then destroys it. Work still in a ring keeps its fence slot until it
    /// leaves.
    pub(crate) fn ctx_destroy(&self, client: u64, id: u32) -> Result<(), Fail> {
        let deadline = mono_ns() + 2 * self.timeout_ns() + 1_000_000_000;
        let mut st = self.sched.lock();
        Self::ctx_of(&st, client, id)?;
        // Waiters on this context wake now and see it closing (see `wait`).
        if let Some(c) = st.contexts.get_mut(&id) {
            c.closing = true;
        }
        self.changed.notify_all();
        loop {
            let Ok(c) = Self::ctx_of(&st, client, id) else {
                return Err(fail(EINVAL, r::CTX_INVALID));
            };
            let now = mono_ns();
            if c.inflight == 0 || c.banned || st.lost || now >= deadline {
                break;
            }
            let j = ns_to_jiffies(deadline - now);
            if let CondVarTimeoutResult::Signal { .. } = self.sleep_on_changed(&mut st, j) {
                break;
            }
        }
        Self::remove_ctx(&mut st, id);
        Ok(())
    }

    /// CTX_STATE.
    pub(crate) fn ctx_state(&self, client: u64, id: u32) -> Result<u::CtxState, Fail> {
        let mut st = self.sched.lock();
        if st.lost {
            return Err(fail(ENODEV, r::DEVICE_LOST));
        }
        // Report what the device has completed so far, not what the last interrupt said.
        self.retire_and_notify(&mut st);
        let c = Self::ctx_of(&st, client, id)?;
        let f = c.fault.unwrap_or_default();
        Ok(u::CtxState {
            ctx_id: id,
            flags: 0,
            reset_status: c.reset_status,
            fault_type: f.kind,
            fault_va: f.va,
            fault_access: f.access,
            hung: u32::from(c.hung),
            fault_offset: f.offset,
            completed_seqno: c.completed,
            submitted_seqno: c.submitted,
            reason: 0,
            pad: 0,
        })
    }

    // ---- submission ----

    /// Gives `client` an address-space slot pointing at `pt_root` (free, or taken from a file
    /// with nothing in flight). `None` when every slot is busy.
    fn ensure_slot(&self, st: &mut Sched, client: u64, pt_root: u64) -> Option<usize> {
        if let Some(c) = st.clients.get_mut(&client) {
            c.pt_root = pt_root;
            if let Some(s) = c.slot {
                return Some(s);
            }
        }
        let mut pick = st.slots.iter().position(Option::is_none);
        if pick.is_none() {
            // Steal from a file with no job in a ring.
            for (s, owner) in st.slots.iter().enumerate() {
                let idle = owner
                    .and_then(|o| st.clients.get(&o))
                    .is_none_or(|c| c.inflight == 0);
                if idle {
                    pick = Some(s);
                    break;
                }
            }
            let s = pick?;
            if let Some(victim) = st.slots.get(s).copied().flatten() {
                if let Some(v) = st.clients.get_mut(&victim) {
                    v.slot = None;
                }
            }
        }
        let s = pick?;
        if let Some(o) = st.slots.get_mut(s) {
            *o = Some(client);
        }
        if let Some(c) = st.clients.get_mut(&client) {
            c.slot = Some(s);
        }
        self.hw.write64(regs::as_pt_base(s), pt_root);
        self.hw.write32(regs::as_config(s), regs::AS_ENABLED);
        Some(s)
    }

    /// Queues a validated job: `WAIT` descriptors for unsignalled in-fences, then one `EXEC`
    /// per command buffer, the last one writing the context's fence and raising `JOB_DONE`.
    /// Blocks while the ring is full or every address-space slot is held by other files' work
    /// (or fails with `EAGAIN` + `RING_FULL` / `AS_SLOTS_BUSY` under `SUBMIT_FLAG_NO_BLOCK`).
    /// Returns the job's seqno. `bad_index` names the offending in-fence.
    pub(crate) fn queue_job(
        self: &Arc<Self>,
        client: u64,
        pt_root: u64,
        ctx_id: u32,
        cmdbufs: &[Cmdbuf],
        in_fences: &[Fence],
        flags: u32,
        bad_index: &mut u32,
    ) -> Result<u64, Fail> {
        let oom = |_| fail(ENOMEM, r::OUT_OF_MEMORY);
        // Everything that allocates happens before the lock.
        let mut descs = KVec::with_capacity(in_fences.len() + cmdbufs.len() + 1, GFP_KERNEL).map_err(oom)?;
        let mut deps = KVec::with_capacity(in_fences.len(), GFP_KERNEL).map_err(oom)?;
        let mut st = self.sched.lock();
        if st.lost {
            return Err(fail(ENODEV, r::DEVICE_LOST));
        }
        let ctx = Self::ctx_of(&st, client, ctx_id)?;
        if ctx.banned {
            return Err(fail(ECANCELED, r::CTX_BANNED));
        }
        let queue = ctx.queue;
        let (slot, job_id, seqno, injected) = loop {
            if st.lost {
                return Err(fail(ENODEV, r::DEVICE_LOST));
            }
            match Self::ctx_of(&st, client, ctx_id) {
                Ok(c) if !c.banned => {}
                _ => return Err(fail(ECANCELED, r::CTX_BANNED)),
            }
            // In-fences (re-checked after every sleep: a dependency may have completed or been
            // banned meanwhile).
            descs.clear();
            deps.clear();
            for (i, f) in in_fences.iter().enumerate() {
                if f.flags != 0 {
                    // Must be zero (UAPI): refused now so that a meaning can be given later.
                    *bad_index = i as u32;
                    return Err(fail(EINVAL, r::FLAGS_UNKNOWN));
                }
                let dep = match st.contexts.get(&f.ctx_id) {
                    Some(c) if c.client == client && !c.zombie => c,
                    _ => {
                        *bad_index = i as u32;
                        return Err(fail(EINVAL, r::FENCE_CTX_INVALID));
                    }
                };
                if f.seqno > dep.submitted {
                    *bad_index = i as u32;
                    return Err(fail(EINVAL, r::FENCE_NOT_SUBMITTED));
                }
                if f.seqno > dep.completed && !dep.banned {
                    // Capacity reserved above: these pushes do not allocate.
                    let _ = descs.push(
                        Desc {
                            kind: ring::DESC_WAIT,
                            fence_pa: self.fence_pa(dep.fence_slot),
                            value: f.seqno,
                            ..Desc::default()
                        },
                        GFP_ATOMIC,
                    );
                    let _ = deps.push((f.ctx_id, dep.fence_slot), GFP_ATOMIC);
                }
            }
            let injected = usize::from(st.inject_hang || st.inject_fault);
            let need = descs.len() + injected + cmdbufs.len();
            let q = match st.queues.get(queue) {
                Some(q) => q,
                None => return Err(fail(EINVAL, r::CTX_INVALID)),
            };
            let head = q.jobs.front().map_or(q.tail, |j| j.start);
            let used = q.tail.wrapping_sub(head) as usize;
            let ring_ok = used + need <= RING_ENTRIES as usize && q.jobs.len() < q.jobs.cap();
            let slot = if ring_ok { self.ensure_slot(&mut st, client, pt_root) } else { None };
            if let Some(slot) = slot {
                let job_id = st.next_job;
                st.next_job += 1;
                let seqno = st.contexts.get(&ctx_id).map_or(1, |c| c.submitted + 1);
                break (slot, job_id, seqno, injected != 0);
            }
            if flags & u::SUBMIT_FLAG_NO_BLOCK != 0 {
                // Work the device finished but nobody retired yet (retirement is lazy) still
                // holds ring space and slots: retire it and look again before refusing.
                if self.retire_and_notify(&mut st) {
                    continue;
                }
                // Say which of the two waits this would have been: for ring space, or (the ring
                // has room) for an address-space slot other files' work holds.
                let why = if ring_ok { r::AS_SLOTS_BUSY } else { r::RING_FULL };
                return Err(fail(EAGAIN, why));
            }
            let j = kernel::time::msecs_to_jiffies(50);
            if let CondVarTimeoutResult::Signal { .. } = self.sleep_on_changed(&mut st, j) {
                // Nothing was queued: the call can be restarted as is.
                return Err(fail(ERESTARTSYS, r::INTERRUPTED));
            }
        };
        let Some(fence_slot) = st.contexts.get(&ctx_id).map(|c| c.fence_slot) else {
            return Err(fail(ECANCELED, r::CTX_BANNED));
        };
        if injected {
            let code = if st.inject_hang { KCODE_HANG } else { KCODE_FAULT };
            let size = if st.inject_hang { 4 } else { (packet::COPY_WORDS * 4) as u32 };
            let _ = descs.push(
                Desc {
                    kind: ring::DESC_EXEC,
                    as_slot: KERNEL_SLOT as u32,
                    cmd_size: size,
                    cmd_va: KVA_CODE + code,
                    job_id,
                    ..Desc::default()
                },
                GFP_ATOMIC,
            );
            st.inject_hang = false;
            st.inject_fault = false;
        }
        // Capacity for all of them was reserved before the lock: `push_within_capacity` cannot
        // fail, and unlike `push` (an out-of-line call that may allocate) it compiles to stores.
        for (i, cb) in cmdbufs.iter().enumerate() {
            let last = i + 1 == cmdbufs.len();
            let _ = descs.push_within_capacity(Desc {
                kind: ring::DESC_EXEC,
                flags: if last { ring::DESC_FLAG_FENCE | ring::DESC_FLAG_IRQ } else { 0 },
                as_slot: slot as u32,
                cmd_size: cb.size,
                cmd_va: cb.va,
                fence_pa: if last { self.fence_pa(fence_slot) } else { 0 },
                value: if last { seqno } else { 0 },
                job_id,
                reserved: [0; 2],
            });
        }
        for &(_, s) in deps.iter() {
            if let Some(w) = st.fence_waiters.get_mut(s as usize) {
                *w += 1;
            }
        }
        if let Some(c) = st.contexts.get_mut(&ctx_id) {
            c.submitted = seqno;
            c.inflight += 1;
        }
        st.counters.jobs += 1;
        if let Some(c) = st.clients.get_mut(&client) {
            c.jobs += 1;
            c.inflight += 1;
        }
        let now = mono_ns();
        let (start, end) = self.write_ring(&mut st, queue, &descs);
        let job = Job {
            id: job_id,
            ctx: ctx_id,
            client,
            seqno,
            descs,
            deps,
            start,
            end,
            submitted_ns: now,
        };
        if let Some(q) = st.queues.get_mut(queue) {
            if q.jobs.len() == 0 {
                q.last_retire = now;
            }
            // Cannot fail: checked for room above, under the same lock hold.
            if let Err(job) = q.jobs.push_back(job) {
                Self::job_gone(&mut st, &job);
            }
        }
        self.ring_doorbell(queue, end);
        let arm = !st.wd_armed;
        st.wd_armed = true;
        drop(st);
        if arm {
            self.arm_watchdog();
        }
        Ok(seqno)
    }

    fn arm_watchdog(self: &Arc<Self>) {
        if self.stopping() {
            return;
        }
        let delay = kernel::time::msecs_to_jiffies(WD_PERIOD_MS);
        let _ = dfl_wq().enqueue_delayed::<Arc<Gpu>, 1>(self.clone(), delay);
    }

    /// Writes descriptors at the queue's tail; returns the job's first index and the new tail.
    fn write_ring(&self, st: &mut Sched, queue: usize, descs: &[Desc]) -> (u32, u32) {
        let (Some(q), Some(ring)) = (st.queues.get_mut(queue), self.rings.get(queue)) else {
            return (0, 0);
        };
        let start = q.tail;
        // The driver writes its own ring through its kernel mapping (as a driver writes a ring
        // in system memory), not through the bus registry the device uses: no lock, no lookup,
        // per descriptor.
        let base = ring.as_mut_ptr().cast::<u8>();
        for d in descs {
            let off = (q.tail % RING_ENTRIES) as usize * DESC_SIZE;
            // SAFETY: the ring is RING_ENTRIES * DESC_SIZE bytes (allocated in `new`, alive with
            // `self`), so `off + DESC_SIZE` is in bounds, and a byte array has no alignment. The
            // device reads only descriptors between its head and the tail it saw at the last
            // doorbell; this writes at or after the driver's tail, which the device reads only
            // after the doorbell below publishes it (release on the doorbell latch, acquire in
            // the device thread), so nothing else accesses the slot while this reference lives.
            let slot = unsafe { &mut *base.add(off).cast::<[u8; DESC_SIZE]>() };
            // In place: no descriptor-sized temporary to clear and copy.
            d.write_to(slot);
            q.tail = q.tail.wrapping_add(1);
        }
        (start, q.tail)
    }

    fn ring_doorbell(&self, queue: usize, tail: u32) {
        let b = regs::queue_base(queue);
        self.hw.write32(b + regs::Q_TAIL, tail);
        self.hw.write32(b + regs::Q_DOORBELL, 1);
    }

    // ---- waiting ----

    /// WAIT: sleeps until `seqno` on the context completes, `deadline_ns` (absolute
    /// `CLOCK_MONOTONIC`) passes, a signal arrives, the context is lost or the device is lost.
    pub(crate) fn wait(&self, client: u64, ctx_id: u32, seqno: u64, deadline_ns: u64) -> Result<u64, Fail> {
        let mut st = self.sched.lock();
        loop {
            if st.lost {
                return Err(fail(ENODEV, r::DEVICE_LOST));
            }
            let c = Self::ctx_of(&st, client, ctx_id)?;
            if seqno > c.submitted {
                return Err(fail(EINVAL, r::FENCE_NOT_SUBMITTED));
            }
            if c.completed >= seqno {
                return Ok(c.completed);
            }
            if c.closing {
                return Err(fail(EINVAL, r::CTX_INVALID));
            }
            if c.banned {
                return Err(fail(ECANCELED, r::CTX_LOST));
            }
            // The fence may already be written while its interrupt is on its way, or was left
            // to whoever looks next: look at the device's progress. The top half knows this
            // task from before that look on (by name in a slot, or counted), so a completion is
            // either seen by the look or its top half sees this task (a full barrier on each
            // side), never neither.
            let before = c.completed;
            let me = self.register_waiter();
            self.retire_and_notify(&mut st);
            let progressed = Self::ctx_of(&st, client, ctx_id).is_ok_and(|c| c.completed != before);
            let now = mono_ns();
            let res = if progressed || deadline_ns <= now {
                None
            } else {
                Some(self.changed.wait_interruptible_timeout(&mut st, ns_to_jiffies(deadline_ns - now)))
            };
            self.unregister_waiter(me);
            let Some(res) = res else {
                if progressed {
                    continue;
                }
                return Err(fail(ETIMEDOUT, r::TIMEOUT));
            };
            // Whatever woke this task, retire first: the top half skips the bottom half when it
            // woke a sleeping waiter, which makes this task the one that retires those
            // completions for everybody (and notifies the other sleepers).
            self.retire_and_notify(&mut st);
            if let CondVarTimeoutResult::Signal { .. } = res {
                // Restartable: the deadline is absolute, so the same arguments are right again.
                return Err(fail(ERESTARTSYS, r::INTERRUPTED));
            }
        }
    }

    /// Makes the current task known to the top half before it looks at the device and sleeps:
    /// by name in a free slot of the direct wake-up list, or else counted in `sleepers`. A full
    /// barrier (see the top half).
    fn register_waiter(&self) -> Waiter {
        // SAFETY: `get_current` returns the running task, valid while it runs.
        let me = unsafe { bindings::get_current() } as usize;
        match self.fast_waiters.iter().position(|w| w.cmpxchg(0, me, Full).is_ok()) {
            Some(i) => Waiter::Slot(i),
            None => self.register_anonymous(),
        }
    }

    /// Forgets the current task again. A full barrier: the retirement that follows must see
    /// every completion whose top half still found this task in the slot (and so may have
    /// skipped the bottom half): the top half reads the slot after acknowledging the interrupt,
    /// this reads the device's progress after clearing it.
    fn unregister_waiter(&self, me: Waiter) {
        match me {
            Waiter::Slot(i) => {
                if let Some(w) = self.fast_waiters.get(i) {
                    w.xchg(0, Full);
                }
            }
            Waiter::Counted => {
                self.sleepers.fetch_sub(1, Relaxed);
            }
        }
    }

    /// Sleeps on `changed` for up to `j` jiffies as a sleeper the top half does not wake by
    /// name (CTX_DESTROY, a submit waiting for ring space): counted in `sleepers`, so every
    /// interrupt goes to the bottom half, which notifies. Completions from before it was
    /// counted are retired first; it then returns as if woken, for the caller to look again.
    fn sleep_on_changed(&self, st: &mut MutexGuard<'_, Sched>, j: kernel::time::Jiffies) -> CondVarTimeoutResult {
        let me = self.register_anonymous();
        let res = if self.retire(st) {
            self.changed.notify_all();
            CondVarTimeoutResult::Woken { jiffies: j }
        } else {
            self.changed.wait_interruptible_timeout(st, j)
        };
        self.unregister_waiter(me);
        res
    }

    /// Counts the current task in `sleepers` (a full barrier, as `register_waiter`).
    fn register_anonymous(&self) -> Waiter {
        self.sleepers.fetch_add(1, Full);
        Waiter::Counted
    }

    // ---- bottom half, retirement, faults, hangs, recovery ----

    /// Retires what the device completed: jobs from each ring's head, fences from the page.
    /// Returns whether anything was retired: the caller notifies `changed` then (the bottom
    /// half always does, the watchdog when anything changed, the others through
    /// [`Gpu::retire_and_notify`]).
    fn retire(&self, st: &mut Sched) -> bool {
        if st.lost {
            return false;
        }
        let now = mono_ns();
        // A job's end for busy time: the interrupt that reported it, when retirement comes
        // later (it can lag by a watchdog period); its retirement time if that interrupt has
        // not been handled yet (a WAIT that looked at the device first).
        let irq = self.last_irq_ns.load(Relaxed);
        let mut any = false;
        for qi in 0..st.queues.len() {
            // An idle queue has nothing to retire: no register read (a WAIT does this per
            // wake-up, and most queues are idle).
            if st.queues.get(qi).is_none_or(|q| q.jobs.len() == 0) {
                continue;
            }
            let head = self.hw.read32(regs::queue_base(qi) + regs::Q_HEAD);
            if head == regs::LOST_READ_VALUE && self.hw.read32(regs::ID) != regs::ID_VALUE {
                return any;
            }
            loop {
                let Some(q) = st.queues.get_mut(qi) else { break };
                if !q.jobs.front().is_some_and(|j| at_or_after(head, j.end)) {
                    break;
                }
                let Some(job) = q.jobs.pop_front() else { break };
                any = true;
                q.done += 1;
                let end = if irq >= job.submitted_ns { irq.min(now) } else { now };
                let busy = end.saturating_sub(q.last_retire.max(job.submitted_ns));
                q.last_retire = q.last_retire.max(end);
                if let Some(c) = st.clients.get_mut(&job.client) {
                    c.busy_ns += busy;
                }
                Self::job_gone(st, &job);
            }
        }
        for (_, c) in st.contexts.iter_mut() {
            if c.banned || c.completed >= c.submitted {
                continue; // a banned context's fence no longer means completion
            }
            if let Some(v) = self.read_fence(c.fence_slot) {
                if v > c.completed && v <= c.submitted {
                    c.completed = v;
                    any = true;
                }
            }
        }
        any
    }

    /// [`Gpu::retire`] outside the bottom half and the watchdog: whoever retires tells the
    /// other sleepers on `changed` (the bottom half may not run for these completions: see the
    /// top half).
    fn retire_and_notify(&self, st: &mut Sched) -> bool {
        let any = self.retire(st);
        if any {
            self.changed.notify_all();
        }
        any
    }

    /// The scheduler state with everything the device completed retired: what a reader that
    /// reports it (debugfs) must see, as retirement is otherwise lazy (see the top half).
    pub(crate) fn sched_retired(&self) -> MutexGuard<'_, Sched> {
        let mut st = self.sched.lock();
        self.retire_and_notify(&mut st);
        st
    }

    fn bottom_half(&self) {
        if self.stopping() {
            return;
        }
        let status = self.irq_pending.xchg(0, Relaxed);
        let mut dump = None;
        {
            let mut st = self.sched.lock();
            if st.lost {
                return;
            }
            self.retire(&mut st);
            if status & (regs::IRQ_FAULT | regs::IRQ_MEM_ERROR) != 0 {
                dump = self.handle_fault(&mut st, status);
            }
            // Published before anyone can see the ban (the scheduler lock is still held).
            if let Some(d) = dump.take() {
                dump::publish(self, d);
            }
        }
        self.changed.notify_all();
    }

    /// A queue stopped on a fault: ban the guilty context with the fault, log it, keep a crash
    /// dump, reset the engine (everyone else's work is resubmitted).
    fn handle_fault(&self, st: &mut Sched, status: u32) -> Option<dump::Dump> {
        let fs = self.hw.read32(regs::FAULT_STATUS);
        if fs == regs::LOST_READ_VALUE {
            self.recover(st);
            return None;
        }
        if fs & regs::FAULT_VALID == 0 {
            // Nothing latched: already handled by a reset, unless a queue still sits faulted (its
            // fault was not latched); then reset to get it going again.
            let stuck = (0..regs::NUM_QUEUES)
                .any(|q| self.hw.read32(regs::queue_base(q) + regs::Q_STATE) == regs::QSTATE_FAULTED);
            if stuck {
                self.recover(st);
            }
            return None;
        }
        let info = FaultInfo {
            kind: regs::fault_kind(fs),
            access: regs::fault_access(fs),
            va: self.hw.read64(regs::FAULT_ADDR),
            offset: u64::from(self.hw.read32(regs::FAULT_OFFSET)),
        };
        let job = self.hw.read64(regs::FAULT_JOB);
        let queue = regs::fault_queue(fs) as usize;
        let guilty = st
            .queues
            .get(queue)
            .and_then(|q| q.jobs.iter().find(|j| j.id == job && job != 0))
            .map(|j| (j.ctx, j.seqno));
        st.counters.faults += 1;
        let mem_error = info.kind == regs::FAULT_BUS_ERROR || status & regs::IRQ_MEM_ERROR != 0;
        let kind = if mem_error { "mem_error" } else { "page_fault" };
        let d = dump::build(self, st, kind, queue, job, Some(info));
        let mut t = Text::new();
        let what = match info.kind {
            regs::FAULT_UNMAPPED | regs::FAULT_PERMISSION | regs::FAULT_BAD_PTE => "page fault",
            regs::FAULT_BUS_ERROR => "uncorrectable memory error",
            _ => "GPU fault",
        };
        tprint!(
            &mut t,
            "{}: {} {} at va={:#x} offset={} queue={}",
            what,
            regs::fault_kind_name(info.kind),
            regs::access_name(info.access),
            info.va,
            info.offset,
            queue
        );
        match guilty {
            Some((ctx, _seqno)) => {
                let (pid, comm) = Self::owner(st, ctx);
                tprint!(&mut t, " ctx={} pid={} comm={} job={}; context banned", ctx, pid, comm, job);
                if let Some(c) = st.contexts.get_mut(&ctx) {
                    c.banned = true;
                    c.reset_status = u::RESET_GUILTY;
                    c.fault = Some(info);
                }
            }
            None => tprint!(&mut t, " job={}; no job of a live context owns it", job),
        }
        self.log(Level::Err, &t);
        self.recover(st);
        d
    }

    /// pid and command of the process that owns context `ctx`.
    pub(crate) fn owner(st: &Sched, ctx: u32) -> (i32, Comm) {
        st.contexts
            .get(&ctx)
            .and_then(|c| st.clients.get(&c.client))
            .map_or((0, Comm::default()), |k| (k.pid, k.comm))
    }

    /// The watchdog: busy sampling, device presence, hang detection. Returns whether to run
    /// again.
    fn watchdog(&self) -> bool {
        if self.stopping() {
            return false;
        }
        let mut dump = None;
        let again;
        let changed;
        {
            let mut st = self.sched.lock();
            if st.lost {
                st.wd_armed = false;
                return false;
            }
            let events = |st: &Sched| (st.counters.faults, st.counters.hangs, st.counters.resets, st.lost);
            let before = events(&st);
            let mut retired = false;
            if self.hw.read32(regs::ID) != regs::ID_VALUE {
                // Off the bus: the reset cannot bring it back, and `recover` says so.
                self.recover(&mut st);
            } else {
                retired = self.retire(&mut st);
                // A stopped queue whose interrupt was not handled yet (normally the bottom half
                // is first): handle the fault here rather than let it pass for a hang.
                let faulted = (0..regs::NUM_QUEUES).any(|q| {
                    st.queues.get(q).is_some_and(|h| h.jobs.len() > 0)
                        && self.hw.read32(regs::queue_base(q) + regs::Q_STATE) == regs::QSTATE_FAULTED
                });
                dump = if faulted {
                    let raw = self.hw.read32(regs::IRQ_RAWSTAT);
                    self.handle_fault(&mut st, raw & (regs::IRQ_FAULT | regs::IRQ_MEM_ERROR))
                } else {
                    self.check_hang(&mut st)
                };
            }
            again = !st.lost && st.queues.iter().any(|q| q.jobs.len() > 0);
            st.wd_armed = again;
            changed = retired || dump.is_some() || events(&st) != before;
            if let Some(d) = dump.take() {
                dump::publish(self, d);
            }
        }
        // Only when something changed: sleepers are woken by the change that concerns them
        // (retirement, fault, hang, reset, loss), not every watchdog period (which would also
        // hide a missing notification elsewhere).
        if changed {
            self.changed.notify_all();
        }
        again
    }

    fn check_hang(&self, st: &mut Sched) -> Option<dump::Dump> {
        let now = mono_ns();
        let timeout = self.timeout_ns();
        let mut hung = None;
        for qi in 0..st.queues.len() {
            let busy = st.queues.get(qi).is_some_and(|q| q.jobs.len() > 0);
            let cur = if busy { self.hw.read64(regs::queue_base(qi) + regs::Q_CUR_JOB) } else { 0 };
            let Some(q) = st.queues.get_mut(qi) else { continue };
            // One sample per 5 ms elapsed (the idle time since the last sample counts as idle).
            let periods = (now.saturating_sub(q.last_sample) / (u64::from(WD_PERIOD_MS) * 1_000_000)).min(128);
            if periods > 0 {
                q.busy_samples = if periods >= 128 { 0 } else { q.busy_samples << periods };
                q.busy_samples |= u128::from(busy);
                q.last_sample = now;
            }
            if !busy {
                q.cur_job = 0;
                continue;
            }
            if cur != q.cur_job {
                q.cur_job = cur;
                q.cur_since = now;
            } else if cur != 0 && hung.is_none() && now.saturating_sub(q.cur_since) > timeout {
                hung = Some((qi, cur));
            }
        }
        let (queue, job) = hung?;
        st.counters.hangs += 1;
        let guilty = st
            .queues
            .get(queue)
            .and_then(|q| q.jobs.iter().find(|j| j.id == job))
            .map(|j| (j.ctx, j.seqno));
        let d = dump::build(self, st, "hang", queue, job, None);
        let mut t = Text::new();
        match guilty {
            Some((ctx, seqno)) => {
                let (pid, comm) = Self::owner(st, ctx);
                tprint!(
                    &mut t,
                    "job timeout: ctx={} pid={} comm={} queue={} job={} seqno={} after {} ms; context banned, resetting engine",
                    ctx,
                    pid,
                    comm,
                    queue,
                    job,
                    seqno,
                    self.cfg.job_timeout_ms
                );
                if let Some(c) = st.contexts.get_mut(&ctx) {
                    c.banned = true;
                    c.hung = true;
                    c.reset_status = u::RESET_GUILTY;
                }
            }
            None => tprint!(
                &mut t,
                "job timeout: queue={} job={} after {} ms; no job of a live context owns it, resetting engine",
                queue,
                job,
                self.cfg.job_timeout_ms
            ),
        }
        self.log(Level::Err, &t);
        self.recover(st);
        d
    }

    /// Engine reset: drops banned contexts' work, resubmits innocent work from its saved
    /// descriptors (marking those contexts innocent), or declares the device lost when the reset
    /// does not bring it back.
    fn recover(&self, st: &mut Sched) {
        st.counters.resets += 1;
        self.hw.write32(regs::RESET, regs::RESET_ENGINE);
        if self.hw.read32(regs::ID) != regs::ID_VALUE {
            self.declare_lost(st);
            return;
        }
        self.hw.write32(regs::IRQ_ACK, regs::IRQ_ALL);
        self.program(st);
        let mut resubmitted = 0u32;
        for qi in 0..st.queues.len() {
            // Take the queue's jobs out, then put the innocent ones back from index 0.
            let n = st.queues.get(qi).map_or(0, |q| q.jobs.len());
            let mut jobs = KVec::with_capacity(n, GFP_KERNEL).unwrap_or_default();
            if let Some(q) = st.queues.get_mut(qi) {
                q.tail = 0;
                q.cur_job = 0;
            }
            while let Some(j) = st.queues.get_mut(qi).and_then(|q| q.jobs.pop_front()) {
                if let Err(e) = jobs.push_within_capacity(j) {
                    // No memory to hold it for resubmission: it is lost with its context (whose
                    // waits then report CTX_LOST).
                    let lost_job = e.0;
                    if let Some(c) = st.contexts.get_mut(&lost_job.ctx) {
                        c.banned = true;
                    }
                    Self::job_gone(st, &lost_job);
                }
            }
            for mut job in jobs.into_iter() {
                let keep = st.contexts.get(&job.ctx).is_some_and(|c| !c.banned);
                if !keep {
                    Self::job_gone(st, &job);
                    continue;
                }
                if let Some(c) = st.contexts.get_mut(&job.ctx) {
                    if c.reset_status == u::RESET_NONE {
                        c.reset_status = u::RESET_INNOCENT;
                    }
                }
                // Dependencies on a banned context will never be met: drop those waits (as a
                // submit after the ban would not have made them).
                let mut k = 0;
                let mut keep_descs = KVec::new();
                let mut keep_deps = KVec::new();
                let mut ok = true;
                for d in job.descs.iter() {
                    if d.kind == ring::DESC_WAIT {
                        let dep = job.deps.get(k).copied().unwrap_or((0, 0));
                        k += 1;
                        if st.contexts.get(&dep.0).is_none_or(|c| c.banned) {
                            // The context may be gone already (freed earlier in this recovery):
                            // its slot is then orphaned and this was its last waiter.
                            Self::unwatch_fence_slot(st, dep.1);
                            continue;
                        }
                        ok &= keep_deps.push(dep, GFP_KERNEL).is_ok();
                    }
                    ok &= keep_descs.push(*d, GFP_KERNEL).is_ok();
                }
                if ok {
                    job.descs = keep_descs;
                    job.deps = keep_deps;
                }
                let (start, end) = self.write_ring(st, qi, &job.descs);
                job.start = start;
                job.end = end;
                if let Some(q) = st.queues.get_mut(qi) {
                    if let Err(j) = q.jobs.push_back(job) {
                        Self::job_gone(st, &j);
                        continue;
                    }
                }
                resubmitted += 1;
            }
            let tail = st.queues.get(qi).map_or(0, |q| q.tail);
            self.ring_doorbell(qi, tail);
        }
        let mut t = Text::new();
        tprint!(&mut t, "engine reset done; {} innocent jobs resubmitted", resubmitted);
        self.log(Level::Warn, &t);
    }

    /// The device did not come back: every waiter wakes with `ENODEV`, every ioctl fails fast,
    /// said once in the log. Jobs are dropped.
    fn declare_lost(&self, st: &mut Sched) {
        if !st.lost {
            let mut t = Text::new();
            tprint!(&mut t, "engine reset failed: device lost; every ioctl now fails with ENODEV");
            self.log(Level::Err, &t);
        }
        st.lost = true;
        for (_, c) in st.clients.iter() {
            c.stats.lost.store(true, Relaxed);
        }
        for qi in 0..st.queues.len() {
            while let Some(j) = st.queues.get_mut(qi).and_then(|q| q.jobs.pop_front()) {
                Self::job_gone(st, &j);
            }
        }
    }


    // ---- fault injection (root-only debugfs files) ----

    /// `inject_mem_error`.
    pub(crate) fn inject_mem_error(&self) {
        self.hw.inject_bus_error();
    }

    /// `inject_reset_failure`.
    pub(crate) fn inject_reset_failure(&self) {
        self.hw.inject_reset_failure();
    }

    /// `inject_fall_off_bus`: the device goes away now; noticed at once.
    pub(crate) fn inject_fall_off_bus(&self) {
        self.hw.fall_off_bus();
        {
            let mut st = self.sched.lock();
            if !st.lost {
                self.recover(&mut st);
            }
        }
        self.changed.notify_all();
    }

    /// `inject_hang` / `inject_page_fault`: the next job runs a HANG (whatever `hang_debug`
    /// says) or reads an unmapped address first.
    pub(crate) fn inject_job(&self, hang: bool) {
        let mut st = self.sched.lock();
        if hang {
            st.inject_hang = true;
            self.hw.write32(regs::DEBUG_CTRL, regs::DEBUG_CTRL_HANG);
        } else {
            st.inject_fault = true;
        }
    }
}

/// Jiffies covering `ns` (rounded up, at least 1).
fn ns_to_jiffies(ns: u64) -> kernel::time::Jiffies {
    // SAFETY: pure conversion.
    let j = unsafe { bindings::nsecs_to_jiffies(ns) };
    j.saturating_add(1)
}
