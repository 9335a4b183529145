//! The simulated kernel driver's device half: one [`Gpu`] per simulated device, shared by every
//! open file. It drives the device model only through its registers (as `kmd/` does), runs it
//! on a device thread, and makes every decision with the rules aigpu.ko makes it with (the
//! `rules` crate: in-fences, queue and slot choice, ring space, waits, context state, recovery,
//! line formats), so the two drivers differ only in what is their own: here std threads, locks
//! and containers.
//!
//! Files: this one holds the state, files, contexts, submission and waiting; `recovery.rs` the
//! interrupt bottom half, the watchdog, engine reset and device loss, and the device thread;
//! `debugfs.rs` the debugfs texts.

use super::config::SimConfig;
use super::physmem::{PhysRegion, SharedMem};
use super::sleep::Woke;
use crate::backend::{KmdError, KmdResult};
use rules::fence::{self, Ban, CtxView, InFence, Producer};
use rules::ring::{FENCE_SLOTS, RING_ENTRIES};
use rules::Refusal;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use uapi::ioctl::RESET_NONE;
use uapi::reason as r;
use uapi::regs;
use uapi::ring::{Desc, DESC_SIZE};
use vgpu::model::{Clock, Device};

const PAGE: u64 = uapi::PAGE_SIZE;

/// Device time: ns since the simulated GPU was created.
pub struct SimClock(Instant);
impl Clock for SimClock {
    fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// A context (software queue) as the KMD tracks it.
pub struct Ctx {
    /// Owning file.
    pub file: u64,
    /// Hardware queue its jobs go to.
    pub queue: usize,
    /// `PRIORITY_*`.
    pub priority: u32,
    pub(super) fence_slot: u32,
    /// Last submitted sequence number.
    pub submitted: u64,
    /// Last completed sequence number.
    pub completed: u64,
    /// `RESET_*`.
    pub reset_status: u32,
    /// Why it is banned (never runs again), once it is.
    pub ban: Option<Ban>,
    /// CTX_DESTROY is waiting for its work: a WAIT on it fails at once (`rules::fence::wait_done`).
    pub closing: bool,
    /// Run times of its last completed jobs (the job-timeout record's `recent_ms`).
    pub recent: rules::recovery::RecentJobs,
}

impl Ctx {
    /// What an in-fence on this context sees.
    pub(super) fn producer(&self) -> Producer {
        Producer {
            submitted: self.submitted,
            completed: self.completed,
            ban: self.ban,
        }
    }
}

pub(super) struct Job {
    pub(super) id: u64,
    pub(super) ctx: u32,
    pub(super) file: u64,
    pub(super) seqno: u64,
    pub(super) descs: Vec<Desc>,
    /// For each `WAIT` descriptor, in order: the producer context and the fence value.
    pub(super) deps: Vec<(u32, u64)>,
    /// Ring index one past the job's last descriptor.
    pub(super) end: u32,
    /// When it was submitted (`mono_ns`), for its run time (`rules::recovery::RunTimes`).
    pub(super) submitted_ns: u64,
}

pub(super) struct Queue {
    pub(super) ring_pa: u64,
    pub(super) tail: u32,
    pub(super) inflight: VecDeque<Job>,
    pub(super) clock: rules::recovery::JobClock,
    pub(super) busy: rules::recovery::BusySamples,
    /// When each job started and ended (the contexts' recent run times).
    pub(super) runs: rules::recovery::RunTimes,
    /// Jobs completed on this queue.
    pub(super) done: u64,
}

/// Counters shown by tools and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Jobs submitted.
    pub jobs: u64,
    /// Page faults and other device faults.
    pub faults: u64,
    /// Job timeouts.
    pub hangs: u64,
    /// Engine resets.
    pub resets: u64,
}

/// KMD state behind one lock.
pub struct State {
    /// The device is lost: everything fails with ENODEV.
    pub lost: bool,
    next_ctx: u32,
    next_job: u64,
    /// Live contexts by id.
    pub contexts: HashMap<u32, Ctx>,
    pub(super) free_fence_slots: Vec<u32>,
    /// Address-space slots for user files (the last one is the kernel driver's own), by owner.
    pub(super) as_slots: [Option<u64>; regs::NUM_AS_SLOTS - 1],
    pub(super) queues: Vec<Queue>,
    /// Event counters.
    pub counters: Counters,
    /// Open files (clients) by id.
    pub clients: HashMap<u64, Client>,
    /// The injections not yet seen in an event (as aigpu.ko's `Sched::injected`): the fault or
    /// loss record of that event says `injected=true`.
    pub(super) injected: Injected,
}

/// The test injections ([`Injection`]) armed and not yet seen in the event they make.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Injected {
    /// The next memory error.
    pub(super) mem_error: bool,
    /// The next failed reset.
    pub(super) reset_failure: bool,
    /// The fall off the bus.
    pub(super) off_bus: bool,
}

impl State {
    /// What an in-fence on context `id` of `file` sees (`None`: not a context of the file).
    pub(super) fn producer(&self, file: u64, id: u32) -> Option<Producer> {
        self.contexts
            .get(&id)
            .filter(|c| c.file == file)
            .map(Ctx::producer)
    }
}

/// Per-open-file statistics (the debugfs `clients` file) and its address-space slot.
#[derive(Clone, Debug, Default)]
pub struct Client {
    /// Process id.
    pub pid: u32,
    /// Command name.
    pub comm: String,
    /// Bytes of GEM objects alive (handles or mappings), shared with the file's objects.
    pub mem: Arc<std::sync::atomic::AtomicU64>,
    /// Live objects.
    pub objects: u64,
    /// Jobs submitted.
    pub jobs: u64,
    /// Jobs in a ring.
    pub inflight: u32,
    /// The address-space slot it holds while it has one (taken at submit, as in aigpu.ko).
    pub slot: Option<usize>,
    /// Its top-level page table.
    pub pt_root: u64,
}

/// Test-only fault injections (the KMD exposes the same through root-only debugfs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injection {
    /// The next device memory access fails with an uncorrectable error.
    MemError,
    /// The next engine reset fails: the device is lost.
    ResetFailure,
    /// The device falls off the bus now.
    FallOffBus,
}

/// One simulated GPU.
pub struct Gpu {
    /// Device index.
    pub index: u32,
    /// Settings.
    pub cfg: SimConfig,
    /// Its memory.
    pub mem: Arc<PhysRegion>,
    pub(super) dev: Mutex<Device<SharedMem, SimClock>>,
    state: Mutex<State>,
    /// Signalled on every completion, fault, reset and loss ([`Gpu::notify`]).
    pub(super) changed: Condvar,
    /// The threads asleep in WAIT, woken with `changed` (a signal interrupts their sleep).
    pub(super) sleepers: super::sleep::Sleepers,
    pub(super) kick: (Mutex<bool>, Condvar),
    pub(super) stop: AtomicBool,
    pub(super) fence_page: u64,
    pub(super) job_timeout: Duration,
    /// Device steps that made progress (debugfs `steps`).
    pub(super) steps: AtomicU64,
    /// Nanoseconds the device thread spent making them (debugfs `busy_us`).
    pub(super) busy_ns: AtomicU64,
    /// Its published views (`publish.rs`), unless publishing is off or refused.
    pub(super) publisher: Option<super::publish::Publisher>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock is caught at the C ABI and reported; the data is still
    // consistent enough to keep failing cleanly, so poisoning is not propagated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn err(r: Refusal) -> KmdError {
    r.into()
}

const LOST: Refusal = Refusal::new(r::DEVICE_LOST);

impl Gpu {
    /// Creates the device, programs its rings and starts its device thread.
    pub fn start(index: u32, cfg: SimConfig) -> Result<Arc<Gpu>, String> {
        let mem = Arc::new(PhysRegion::new(cfg.mem_bytes).ok_or_else(|| {
            format!(
                "cannot reserve {} MiB of address space",
                cfg.mem_bytes >> 20
            )
        })?);
        let fence_page = mem.alloc(PAGE).ok_or("no memory for the fence page")?;
        let mut queues = Vec::new();
        for _ in 0..regs::NUM_QUEUES {
            let ring_pa = mem
                .alloc(RING_ENTRIES as u64 * DESC_SIZE as u64)
                .ok_or("no memory for rings")?;
            queues.push(Queue {
                ring_pa,
                tail: 0,
                inflight: VecDeque::new(),
                clock: Default::default(),
                busy: Default::default(),
                runs: Default::default(),
                done: 0,
            });
        }
        let dev = Device::new(SharedMem(mem.clone()), SimClock(Instant::now()));
        let gpu = Arc::new(Gpu {
            index,
            job_timeout: Duration::from_millis(cfg.job_timeout_ms),
            cfg: cfg.clone(),
            mem,
            dev: Mutex::new(dev),
            state: Mutex::new(State {
                lost: false,
                next_ctx: 1,
                next_job: 1,
                contexts: HashMap::new(),
                free_fence_slots: (0..FENCE_SLOTS).rev().collect(),
                as_slots: [None; regs::NUM_AS_SLOTS - 1],
                queues,
                counters: Counters::default(),
                clients: HashMap::new(),
                injected: Injected::default(),
            }),
            changed: Condvar::new(),
            sleepers: Default::default(),
            kick: (Mutex::new(false), Condvar::new()),
            stop: AtomicBool::new(false),
            fence_page,
            steps: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            publisher: if cfg.publish {
                super::publish::Publisher::new(index, cfg.publish_dir.as_deref())
            } else {
                None
            },
        });
        {
            let st = lock(&gpu.state);
            let mut d = lock(&gpu.dev);
            if d.mmio_read32(regs::ID) != regs::ID_VALUE {
                return Err("device model does not answer with the aigpu ID".into());
            }
            gpu.program(&mut d, &st);
        }
        let weak = Arc::downgrade(&gpu);
        std::thread::Builder::new()
            .name(format!("umd-sim{index}"))
            .spawn(move || super::recovery::device_thread(weak))
            .map_err(|e| format!("cannot start the device thread: {e}"))?;
        tracing::info!(
            device = index,
            mem_mib = gpu.cfg.mem_bytes >> 20,
            timeout_ms = gpu.cfg.job_timeout_ms,
            hang_debug = gpu.cfg.hang_debug,
            "simulated aigpu started"
        );
        Ok(gpu)
    }

    /// Programs IRQ mask, debug control, the address-space slots and every ring (after start
    /// and after a reset).
    pub(super) fn program(&self, d: &mut Device<SharedMem, SimClock>, st: &State) {
        d.mmio_write32(regs::IRQ_MASK, regs::IRQ_ALL);
        d.mmio_write32(
            regs::DEBUG_CTRL,
            if self.cfg.hang_debug {
                regs::DEBUG_CTRL_HANG
            } else {
                0
            },
        );
        for (s, owner) in st.as_slots.iter().enumerate() {
            if let Some(c) = owner.and_then(|o| st.clients.get(&o)) {
                d.mmio_write64(regs::as_pt_base(s), c.pt_root);
                d.mmio_write32(regs::as_config(s), regs::AS_ENABLED);
            }
        }
        for (q, queue) in st.queues.iter().enumerate() {
            let b = regs::queue_base(q);
            d.mmio_write64(b + regs::Q_RING_BASE, queue.ring_pa);
            d.mmio_write32(b + regs::Q_RING_SIZE, RING_ENTRIES);
            d.mmio_write32(
                b + regs::Q_CTRL,
                regs::Q_CTRL_ENABLE | (rules::queue::queue_priority(q) << regs::Q_CTRL_PRIO_SHIFT),
            );
        }
    }

    /// The KMD state (lock order: state before device).
    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Announces a change of the state (made under its lock): completions, faults, resets,
    /// loss, a context closing.
    pub(super) fn notify(&self) {
        self.changed.notify_all();
        self.sleepers.wake_all();
    }

    pub(super) fn kick_device(&self) {
        *lock(&self.kick.0) = true;
        self.kick.1.notify_one();
    }

    /// Registers a new file whose top-level page table is `pt_root`. Its address-space slot is
    /// taken when it first submits (as aigpu.ko does), so the number of open files is not
    /// limited by the slots.
    pub fn attach_file(
        &self,
        file: u64,
        pt_root: u64,
        mem: Arc<std::sync::atomic::AtomicU64>,
    ) -> KmdResult<()> {
        let mut st = self.state();
        if st.lost {
            return Err(err(LOST));
        }
        let comm = std::fs::read_to_string("/proc/self/comm")
            .unwrap_or_default()
            .trim()
            .to_string();
        st.clients.insert(
            file,
            Client {
                pid: std::process::id(),
                comm,
                mem,
                pt_root,
                ..Client::default()
            },
        );
        drop(st);
        if let Some(p) = &self.publisher {
            p.reopen();
        }
        Ok(())
    }

    /// True when the device is lost and no file uses it any more: the next open starts a fresh
    /// device (as reloading the module would).
    pub fn lost_and_unused(&self) -> bool {
        let st = self.state();
        st.lost && st.clients.is_empty()
    }

    /// Drops the device's cached translations of `file`'s address space (after its page tables
    /// lost entries: unbind, failed bind). A file without a slot has none cached: taking a slot
    /// rewrites `AS_PT_BASE`, which invalidates it.
    pub fn invalidate_tlb(&self, file: u64) {
        let slot = self.state().clients.get(&file).and_then(|c| c.slot);
        if let Some(s) = slot {
            lock(&self.dev).mmio_write32(regs::MMU_INVALIDATE, 1 << s);
        }
    }

    /// Releases a file's contexts and slot (file close).
    pub fn detach_file(&self, file: u64) {
        let ids: Vec<u32> = self
            .state()
            .contexts
            .iter()
            .filter(|(_, c)| c.file == file)
            .map(|(&i, _)| i)
            .collect();
        for id in ids {
            let _ = self.ctx_destroy(file, id);
        }
        let mut st = self.state();
        let slot = st.clients.remove(&file).and_then(|c| c.slot);
        if let Some(s) = slot {
            st.as_slots[s] = None;
            lock(&self.dev).mmio_write32(regs::as_config(s), 0);
        }
        let closed = st.clients.is_empty();
        drop(st);
        // The last file closed the device (the device thread may hold the GPU a little longer,
        // past the process's exit).
        if let (true, Some(p)) = (closed, &self.publisher) {
            p.close(self);
        }
    }

    /// Creates a context on the least-loaded queue of its priority.
    pub fn ctx_create(&self, file: u64, priority: u32) -> KmdResult<u32> {
        let mut st = self.state();
        if st.lost {
            return Err(err(LOST));
        }
        if st.contexts.values().filter(|c| c.file == file).count()
            >= uapi::ioctl::MAX_CONTEXTS as usize
        {
            return Err(err(Refusal::new(r::CTX_LIMIT)));
        }
        let Some(fence_slot) = st.free_fence_slots.pop() else {
            return Err(err(Refusal::new(r::DEVICE_CTX_LIMIT)));
        };
        self.mem
            .write_u64(self.fence_page + 8 * fence_slot as u64, 0);
        let mut load = [0usize; regs::NUM_QUEUES];
        for c in st.contexts.values() {
            load[c.queue] += 1;
        }
        let queue = rules::queue::choose(priority, &load);
        // A fresh id not in use (ids wrap, skipping live ones).
        let mut id = st.next_ctx;
        while st.contexts.contains_key(&id) {
            id = id.wrapping_add(1).max(1);
        }
        st.next_ctx = id.wrapping_add(1).max(1);
        st.contexts.insert(
            id,
            Ctx {
                file,
                queue,
                priority,
                fence_slot,
                submitted: 0,
                completed: 0,
                reset_status: RESET_NONE,
                ban: None,
                closing: false,
                recent: Default::default(),
            },
        );
        tracing::debug!(kmd_ctx = id, queue, priority, "context created");
        Ok(id)
    }

    /// Destroys a context after its pending work finished (bounded by the job timeout).
    pub fn ctx_destroy(&self, file: u64, id: u32) -> KmdResult<()> {
        let deadline = Instant::now() + 2 * self.job_timeout + Duration::from_secs(1);
        let mut st = self.state();
        match st.contexts.get_mut(&id) {
            Some(c) if c.file == file => c.closing = true,
            _ => return Err(err(Refusal::new(r::CTX_INVALID))),
        }
        // Its waiters wake now and see it closing (see `wait`), as in aigpu.ko.
        self.notify();
        loop {
            let Some(c) = st.contexts.get(&id) else {
                return Err(err(Refusal::new(r::CTX_INVALID)));
            };
            let now = Instant::now();
            if c.completed >= c.submitted || c.ban.is_some() || st.lost || now >= deadline {
                break;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if let Some(c) = st.contexts.remove(&id) {
            st.free_fence_slots.push(c.fence_slot);
        }
        Ok(())
    }

    /// Looks up a context of `file`.
    fn ctx_of(st: &State, file: u64, id: u32) -> KmdResult<&Ctx> {
        match st.contexts.get(&id) {
            Some(c) if c.file == file => Ok(c),
            _ => Err(err(Refusal::new(r::CTX_INVALID))),
        }
    }

    /// Gives `file` an address-space slot (`rules::queue::pick_slot`), programming the device
    /// when it changes hands. `None` when every slot is held by other files' queued work.
    fn ensure_slot(&self, st: &mut State, file: u64) -> Option<usize> {
        if let Some(s) = st.clients.get(&file).and_then(|c| c.slot) {
            return Some(s);
        }
        let clients = &st.clients;
        let s = rules::queue::pick_slot(&st.as_slots, |o| {
            clients.get(&o).is_none_or(|c| c.inflight == 0)
        })?;
        if let Some(victim) = st.as_slots[s] {
            if let Some(v) = st.clients.get_mut(&victim) {
                v.slot = None;
            }
        }
        st.as_slots[s] = Some(file);
        let pt_root = st.clients.get_mut(&file).map_or(0, |c| {
            c.slot = Some(s);
            c.pt_root
        });
        let mut d = lock(&self.dev);
        d.mmio_write64(regs::as_pt_base(s), pt_root);
        d.mmio_write32(regs::as_config(s), regs::AS_ENABLED);
        Some(s)
    }

    /// Queues a validated job: WAIT descriptors for unsignalled in-fences, then one EXEC per
    /// command buffer, the last one writing the context's fence and raising JOB_DONE. Waits for
    /// ring space and an address-space slot (or fails at once with `SUBMIT_FLAG_NO_BLOCK`).
    pub fn queue_job(
        &self,
        file: u64,
        ctx_id: u32,
        cmdbufs: &[uapi::ioctl::Cmdbuf],
        in_fences: &[uapi::ioctl::Fence],
        flags: rules::flags::SubmitFlags,
    ) -> KmdResult<u64> {
        let mut st = self.state();
        let mut descs = Vec::with_capacity(in_fences.len() + cmdbufs.len());
        let mut deps = Vec::with_capacity(in_fences.len());
        let (slot, queue) = loop {
            if st.lost {
                return Err(err(LOST));
            }
            let ctx = Self::ctx_of(&st, file, ctx_id)?;
            if let Some(b) = ctx.ban {
                return Err(err(b.on_submit()));
            }
            let queue = ctx.queue;
            // In-fences (re-checked after every sleep: a producer may have completed or been
            // banned meanwhile).
            descs.clear();
            deps.clear();
            for (i, f) in in_fences.iter().enumerate() {
                let producer = st.producer(file, f.ctx_id);
                match fence::in_fence(i as u32, f.flags, f.seqno, producer).map_err(err)? {
                    InFence::Signalled => {}
                    InFence::Wait => {
                        let slot = st.contexts.get(&f.ctx_id).map_or(0, |c| c.fence_slot);
                        descs.push(Desc {
                            kind: uapi::ring::DESC_WAIT,
                            fence_pa: self.fence_page + 8 * slot as u64,
                            value: f.seqno,
                            ..Desc::default()
                        });
                        deps.push((f.ctx_id, f.seqno));
                    }
                }
            }
            let q = &st.queues[queue];
            let head = q
                .inflight
                .front()
                .map(|j| j.end.wrapping_sub(j.descs.len() as u32))
                .unwrap_or(q.tail);
            let ring_ok = rules::ring::fits(head, q.tail, descs.len() + cmdbufs.len());
            let slot = if ring_ok {
                self.ensure_slot(&mut st, file)
            } else {
                None
            };
            if let Some(slot) = slot {
                break (slot, queue);
            }
            if flags.no_block() {
                // Say which of the two waits this would have been (as aigpu.ko does).
                let why = if ring_ok {
                    r::AS_SLOTS_BUSY
                } else {
                    r::RING_FULL
                };
                return Err(err(Refusal::new(why)));
            }
            st = self
                .changed
                .wait_timeout(st, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        let job_id = st.next_job;
        st.next_job += 1;
        let (fence_slot, seqno) = st
            .contexts
            .get(&ctx_id)
            .map_or((0, 1), |c| (c.fence_slot, c.submitted + 1));
        let fence_pa = self.fence_page + 8 * fence_slot as u64;
        for (i, cb) in cmdbufs.iter().enumerate() {
            let last = i + 1 == cmdbufs.len();
            descs.push(Desc {
                kind: uapi::ring::DESC_EXEC,
                flags: if last {
                    uapi::ring::DESC_FLAG_FENCE | uapi::ring::DESC_FLAG_IRQ
                } else {
                    0
                },
                as_slot: slot as u32,
                cmd_size: cb.size,
                cmd_va: cb.va,
                fence_pa: if last { fence_pa } else { 0 },
                value: if last { seqno } else { 0 },
                job_id,
                reserved: [0; 2],
            });
        }
        if let Some(c) = st.contexts.get_mut(&ctx_id) {
            c.submitted = seqno;
        }
        st.counters.jobs += 1;
        if let Some(c) = st.clients.get_mut(&file) {
            c.jobs += 1;
            c.inflight += 1;
        }
        let end = self.write_ring(&mut st, queue, &descs);
        st.queues[queue].inflight.push_back(Job {
            id: job_id,
            ctx: ctx_id,
            file,
            seqno,
            descs,
            deps,
            end,
            submitted_ns: crate::error::detail::mono_ns(),
        });
        self.ring_doorbell(queue, end);
        drop(st);
        self.kick_device();
        tracing::trace!(
            kmd_ctx = ctx_id,
            seqno,
            job = job_id,
            queue,
            cmdbufs = cmdbufs.len(),
            "job queued"
        );
        Ok(seqno)
    }

    /// Writes descriptors at the queue's tail; returns the new tail.
    pub(super) fn write_ring(&self, st: &mut State, queue: usize, descs: &[Desc]) -> u32 {
        let q = &mut st.queues[queue];
        for d in descs {
            let pa = q.ring_pa + (q.tail % RING_ENTRIES) as u64 * DESC_SIZE as u64;
            let _ = vgpu::model::PhysMem::write(&*self.mem, pa, &d.to_bytes());
            q.tail = q.tail.wrapping_add(1);
        }
        q.tail
    }

    fn ring_doorbell(&self, queue: usize, tail: u32) {
        let mut d = lock(&self.dev);
        let b = regs::queue_base(queue);
        d.mmio_write32(b + regs::Q_TAIL, tail);
        d.mmio_write32(b + regs::Q_DOORBELL, 1);
    }

    /// Sleeps until `seqno` on the context completes, the deadline passes, the context is lost
    /// or the device is lost (`rules::fence::wait_done`). Returns the completed sequence number.
    pub fn wait(
        &self,
        file: u64,
        ctx_id: u32,
        seqno: u64,
        deadline: Option<Instant>,
    ) -> KmdResult<u64> {
        let mut st = self.state();
        loop {
            if st.lost {
                return Err(err(LOST));
            }
            let c = Self::ctx_of(&st, file, ctx_id)?;
            if fence::wait_done(seqno, c.submitted, c.completed, c.closing, c.ban).map_err(err)? {
                return Ok(c.completed);
            }
            let now = Instant::now();
            let Some(deadline) = deadline.filter(|&d| d > now) else {
                return Err(err(Refusal::new(r::TIMEOUT)));
            };
            let (guard, woke) = self.sleepers.sleep(st, &self.state, deadline - now);
            st = guard;
            if woke == Woke::Interrupted {
                // As aigpu.ko's WAIT: restartable with the same absolute deadline.
                return Err(err(Refusal::new(r::INTERRUPTED)));
            }
        }
    }

    /// Context state for the context-state ioctl.
    pub fn ctx_state(&self, file: u64, ctx_id: u32) -> KmdResult<uapi::ioctl::CtxState> {
        let st = self.state();
        if st.lost {
            return Err(err(LOST));
        }
        let c = Self::ctx_of(&st, file, ctx_id)?;
        Ok(fence::ctx_state(
            ctx_id,
            CtxView {
                reset_status: c.reset_status,
                ban: c.ban,
                submitted: c.submitted,
                completed: c.completed,
            },
        ))
    }

    /// Applies a test injection. Falling off the bus is noticed at once, as aigpu.ko notices it
    /// (the reset it tries cannot bring the device back: the device is lost).
    pub fn inject(&self, what: Injection) {
        // Armed before the device sees it, so the event's record says `injected=true`.
        {
            let mut st = self.state();
            match what {
                Injection::MemError => st.injected.mem_error = true,
                Injection::ResetFailure => st.injected.reset_failure = true,
                Injection::FallOffBus => st.injected.off_bus = true,
            }
        }
        let mut d = lock(&self.dev);
        match what {
            Injection::MemError => d.inject_bus_error(),
            Injection::ResetFailure => d.inject_reset_failure(),
            Injection::FallOffBus => d.fall_off_bus(),
        }
        drop(d);
        if what == Injection::FallOffBus {
            let mut st = self.state();
            if !st.lost {
                let mut d = lock(&self.dev);
                self.recover(&mut st, &mut d);
            }
            drop(st);
            self.notify();
        }
        self.kick_device();
    }

    /// Counters snapshot.
    pub fn counters(&self) -> Counters {
        self.state().counters
    }

    /// Counts a GEM handle created (`true`) or closed by `file`.
    pub fn account_handle(&self, file: u64, created: bool) {
        if let Some(c) = self.state().clients.get_mut(&file) {
            c.objects = if created {
                c.objects + 1
            } else {
                c.objects.saturating_sub(1)
            };
        }
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(p) = &self.publisher {
            p.close(self);
        }
    }
}
