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
use rules::fence::{self, InFence, Producer};
use rules::job::{FenceWait, Job as SharedJob};
use rules::program::{self, Registers};
use rules::queue::HwQueue;
use rules::recovery::JobView;
use rules::ring::{FENCE_SLOTS, RING_ENTRIES};
use rules::{Ban, Context, FenceSlot, FenceSlots, Refusal};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
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

/// A context (software queue) as the KMD tracks it: the state and rules both drivers share
/// (`rules::Context`, the same aigpu.ko's `kmd/gpu/mod.rs` `Ctx` holds) and the file that
/// created it, which stays outside as the key of this driver's own table of files
/// (`State::clients`).
pub struct Ctx {
    /// Owning file.
    pub file: u64,
    /// Queue, fence slot, timeline, ban, destroyed-while-busy, ...
    pub state: Context,
}

/// One job in a ring (`rules::job::Job`, as aigpu.ko keeps it), in this driver's vectors.
/// (Named `SharedJob` here: cbindgen, which reads this crate for `include/umd.h`, resolves a
/// path by its last name and would take `rules::job::Job` for this alias itself.)
pub(super) type Job = SharedJob<Vec<Desc>, Vec<FenceWait>>;

/// One hardware queue: the state both drivers keep (`rules::queue::HwQueue`: tail, watchdog
/// clock, busy samples, run times, jobs retired), its ring's address and its jobs in ring order.
pub(super) struct Queue {
    pub(super) ring_pa: u64,
    pub(super) state: HwQueue,
    pub(super) inflight: VecDeque<Job>,
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
    /// Who owns and who reads each fence slot (`rules::FenceSlots`).
    pub(super) fence_slots: Vec<FenceSlot>,
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
    /// Why it was last lost (the `lost_cause` of the re-initialisation record).
    pub(super) lost_cause: rules::lost::LossCause,
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
    /// Whether `file` fails every call but a context destroy with `DEVICE_LOST`: the device is
    /// lost, or the file saw it lost before a power cycle (`rules::lost::power_cycles_at_open`).
    pub(super) fn lost_for(&self, file: u64) -> bool {
        self.lost || self.clients.get(&file).is_some_and(|c| c.lost)
    }

    /// What an in-fence on context `id` of `file` sees (`None`: not a context of the file).
    pub(super) fn producer(&self, file: u64, id: u32) -> Option<Producer> {
        self.contexts
            .get(&id)
            .filter(|c| c.file == file && c.state.live())
            .map(|c| c.state.producer())
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
    /// It saw the device lost (it stays lost after a power cycle, as in aigpu.ko).
    pub lost: bool,
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

/// The device model's registers, as `rules::program` writes them.
pub(super) struct Mmio<'a>(pub(super) &'a mut Device<SharedMem, SimClock>);

impl Registers for Mmio<'_> {
    fn write32(&mut self, offset: usize, value: u32) {
        self.0.mmio_write32(offset, value);
    }

    fn write64(&mut self, offset: usize, value: u64) {
        self.0.mmio_write64(offset, value);
    }
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

/// Removes context `id` now, or keeps it destroyed while jobs of it are in a ring
/// (`rules::Context::destroy`; `job_gone` in `recovery.rs` frees it with its last job).
pub(super) fn remove_ctx(st: &mut State, id: u32) {
    if st.contexts.get_mut(&id).is_some_and(|c| c.state.destroy()) {
        free_ctx(st, id);
    }
}

/// Frees context `id` and its fence slot.
pub(super) fn free_ctx(st: &mut State, id: u32) {
    if let Some(c) = st.contexts.remove(&id) {
        st.fence_slots.release(c.state.fence_slot);
    }
}

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
                state: HwQueue::default(),
                inflight: VecDeque::new(),
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
                fence_slots: vec![FenceSlot::default(); FENCE_SLOTS as usize],
                as_slots: [None; regs::NUM_AS_SLOTS - 1],
                queues,
                counters: Counters::default(),
                clients: HashMap::new(),
                injected: Injected::default(),
                lost_cause: Default::default(),
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

    /// Programs the device (`rules::program`: IRQ mask, debug control, the files' address-space
    /// slots, every ring) after start and after a reset. Unlike aigpu.ko the simulator has no
    /// address space of its own (aigpu.ko's serves its debugfs `inject_hang` /
    /// `inject_page_fault` packets, which libumd does not reach: `Backend::debug_inject`), and
    /// so no injected HANG that would need `DEBUG_CTRL.HANG` without hang debugging.
    pub(super) fn program(&self, d: &mut Device<SharedMem, SimClock>, st: &State) {
        let spaces = st.as_slots.iter().enumerate().filter_map(|(s, owner)| {
            let c = owner.and_then(|o| st.clients.get(&o))?;
            Some((s, c.pt_root))
        });
        let rings = st.queues.iter().map(|q| q.ring_pa);
        program::program(&mut Mmio(d), self.cfg.hang_debug, spaces, rings);
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
        if rules::lost::power_cycles_at_open(st.lost, st.contexts.values().map(|c| &c.state)) {
            self.power_cycle(&mut st);
        }
        let lost = st.lost;
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
                lost,
                ..Client::default()
            },
        );
        drop(st);
        if let Some(p) = &self.publisher {
            p.reopen();
        }
        Ok(())
    }

    /// A fresh device model in place of a lost one that no live context uses (aigpu.ko's
    /// `Gpu::attach` does the same with `Hw::power_cycle`): rings emptied, address-space slots
    /// let go, injections forgotten, the device programmed again, and the re-initialisation said
    /// with the fields of aigpu.ko's line (`rules::lost::ReinitLine`).
    fn power_cycle(&self, st: &mut State) {
        let mut d = lock(&self.dev);
        *d = Device::new(SharedMem(self.mem.clone()), SimClock(Instant::now()));
        let now = crate::error::detail::mono_ns();
        for q in st.queues.iter_mut() {
            q.state.reset(now);
            q.inflight.clear();
        }
        st.lost = false;
        st.injected = Injected::default();
        st.as_slots = [None; regs::NUM_AS_SLOTS - 1];
        for c in st.clients.values_mut() {
            c.slot = None;
        }
        self.program(&mut d, st);
        tracing::warn!(
            device = self.index,
            method = "power_cycle",
            lost_cause = st.lost_cause.name(),
            layer = "hardware",
            "device re-initialised: no context was left on it"
        );
    }

    /// Whether `file` fails every call but a context destroy with `DEVICE_LOST`.
    pub fn file_lost(&self, file: u64) -> bool {
        self.state().lost_for(file)
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
            .filter(|(_, c)| c.file == file && c.state.live())
            .map(|(&i, _)| i)
            .collect();
        for id in ids {
            let _ = self.ctx_destroy(file, id);
        }
        let mut st = self.state();
        if st.clients.get(&file).is_some_and(|c| c.inflight > 0) && !st.lost {
            // Still running after the waits: cancel the file's work (its page tables are about
            // to go away), as aigpu.ko does at file close. Its contexts are banned quietly;
            // everyone else's work is resubmitted, and the reset frees the destroyed ones.
            for c in st.contexts.values_mut().filter(|c| c.file == file) {
                c.state.ban.get_or_insert(Ban::Dropped);
            }
            let mut d = lock(&self.dev);
            self.recover(&mut st, &mut d);
        }
        let slot = st.clients.remove(&file).and_then(|c| c.slot);
        if let Some(s) = slot {
            st.as_slots[s] = None;
            program::unbind_space(&mut Mmio(&mut lock(&self.dev)), s);
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
        if st
            .contexts
            .values()
            .filter(|c| c.file == file && c.state.live())
            .count()
            >= uapi::ioctl::MAX_CONTEXTS as usize
        {
            return Err(err(Refusal::new(r::CTX_LIMIT)));
        }
        let Some(fence_slot) = st.fence_slots.take_free() else {
            return Err(err(Refusal::new(r::DEVICE_CTX_LIMIT)));
        };
        self.mem
            .write_u64(self.fence_page + 8 * fence_slot as u64, 0);
        let mut load = [0usize; regs::NUM_QUEUES];
        for c in st.contexts.values() {
            load[c.state.queue] += 1;
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
                state: Context::new(queue, priority, fence_slot),
            },
        );
        tracing::debug!(kmd_ctx = id, queue, priority, "context created");
        Ok(id)
    }

    /// Destroys a context after its pending work left the rings (bounded by the job timeout).
    /// Work still in a ring then keeps it, destroyed and invisible, with its fence slot, until
    /// that work leaves (`rules::context`), as in aigpu.ko.
    pub fn ctx_destroy(&self, file: u64, id: u32) -> KmdResult<()> {
        let deadline = Instant::now() + 2 * self.job_timeout + Duration::from_secs(1);
        let mut st = self.state();
        Self::ctx_of(&st, file, id)?;
        if let Some(c) = st.contexts.get_mut(&id) {
            c.state.closing = true;
        }
        // Its waiters wake now and see it closing (see `wait`), as in aigpu.ko.
        self.notify();
        loop {
            let c = Self::ctx_of(&st, file, id)?;
            let now = Instant::now();
            if c.state.settled() || st.lost || now >= deadline {
                break;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        remove_ctx(&mut st, id);
        Ok(())
    }

    /// Looks up a live (not destroyed) context of `file`.
    fn ctx_of(st: &State, file: u64, id: u32) -> KmdResult<&Ctx> {
        match st.contexts.get(&id) {
            Some(c) if c.file == file && c.state.live() => Ok(c),
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
        program::bind_space(&mut Mmio(&mut lock(&self.dev)), s, pt_root);
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
            if let Some(b) = ctx.state.ban {
                return Err(err(b.on_submit()));
            }
            let queue = ctx.state.queue;
            // In-fences (re-checked after every sleep: a producer may have completed or been
            // banned meanwhile).
            descs.clear();
            deps.clear();
            for (i, f) in in_fences.iter().enumerate() {
                let producer = st.producer(file, f.ctx_id);
                match fence::in_fence(i as u32, f.flags, f.seqno, producer).map_err(err)? {
                    InFence::Signalled => {}
                    InFence::Wait => {
                        let slot = st.contexts.get(&f.ctx_id).map_or(0, |c| c.state.fence_slot);
                        descs.push(Desc {
                            kind: uapi::ring::DESC_WAIT,
                            fence_pa: self.fence_page + 8 * slot as u64,
                            value: f.seqno,
                            ..Desc::default()
                        });
                        deps.push(FenceWait {
                            ctx: f.ctx_id,
                            slot,
                            value: f.seqno,
                        });
                    }
                }
            }
            let q = &st.queues[queue];
            let head = q.inflight.front().map(|j| j.start).unwrap_or(q.state.tail);
            let ring_ok = rules::ring::fits(head, q.state.tail, descs.len() + cmdbufs.len());
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
            .map_or((0, 1), |c| (c.state.fence_slot, c.state.next_seqno()));
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
            c.state.queued(seqno);
        }
        for w in &deps {
            st.fence_slots.watch(w.slot);
        }
        st.counters.jobs += 1;
        if let Some(c) = st.clients.get_mut(&file) {
            c.jobs += 1;
            c.inflight += 1;
        }
        let (start, end) = self.write_ring(&mut st, queue, &descs);
        st.queues[queue].inflight.push_back(Job {
            view: JobView {
                id: job_id,
                ctx: ctx_id,
                seqno,
            },
            file,
            descs,
            deps,
            start,
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

    /// Writes descriptors at the queue's tail; returns the first one's index and the new tail.
    pub(super) fn write_ring(&self, st: &mut State, queue: usize, descs: &[Desc]) -> (u32, u32) {
        let q = &mut st.queues[queue];
        let start = q.state.tail;
        for d in descs {
            let pa = q.ring_pa + (q.state.tail % RING_ENTRIES) as u64 * DESC_SIZE as u64;
            let _ = vgpu::model::PhysMem::write(&*self.mem, pa, &d.to_bytes());
            q.state.tail = q.state.tail.wrapping_add(1);
        }
        (start, q.state.tail)
    }

    fn ring_doorbell(&self, queue: usize, tail: u32) {
        program::doorbell(&mut Mmio(&mut lock(&self.dev)), queue, tail);
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
            // A file that saw the device lost stays lost after a power cycle (checked here,
            // under the lock the wait takes anyway, rather than by a second lock at entry).
            if st.lost_for(file) {
                return Err(err(LOST));
            }
            let c = Self::ctx_of(&st, file, ctx_id)?;
            if c.state.wait_done(seqno).map_err(err)? {
                return Ok(c.state.completed);
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
        if st.lost_for(file) {
            return Err(err(LOST));
        }
        Ok(Self::ctx_of(&st, file, ctx_id)?.state.ctx_state(ctx_id))
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
