//! The simulated kernel driver's device half: one [`Gpu`] per simulated device, shared by every
//! open file. It drives the device model only through its registers (as `kmd/` does), runs it
//! on a device thread, handles interrupts (top half on the device thread, bottom half right
//! after, outside the device lock), tracks jobs and fences, detects hangs with a job timeout and
//! recovers by engine reset, resubmitting innocent work.

use super::config::SimConfig;
use super::physmem::{PhysRegion, SharedMem};
use crate::backend::{KmdError, KmdResult};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use uapi::ioctl::{RESET_GUILTY, RESET_INNOCENT, RESET_NONE};
use uapi::reason as r;
use uapi::regs;
use uapi::ring::{Desc, DESC_SIZE};
use vgpu::model::{Clock, Device, Step};

/// Descriptors per hardware ring (64 KiB of ring memory per queue).
pub const RING_ENTRIES: u32 = 1024;
/// Fence slots (one u64 per live context) in the fence page.
const FENCE_SLOTS: u32 = 512;
const PAGE: u64 = uapi::PAGE_SIZE;

/// Device time: ns since the simulated GPU was created.
pub struct SimClock(Instant);
impl Clock for SimClock {
    fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// What the device reported about a fault, kept for the context-state ioctl and the log.
#[derive(Clone, Copy, Debug, Default)]
pub struct FaultInfo {
    /// `regs::FAULT_*`.
    pub kind: u32,
    /// `regs::ACCESS_*`.
    pub access: u32,
    /// VA.
    pub va: u64,
    /// Packet offset in its command buffer.
    pub offset: u64,
}

/// A context (software queue) as the KMD tracks it.
pub struct Ctx {
    /// Owning file.
    pub file: u64,
    /// Hardware queue its jobs go to.
    pub queue: usize,
    /// `PRIORITY_*`.
    pub priority: u32,
    fence_slot: u32,
    /// Last submitted sequence number.
    pub submitted: u64,
    /// Last completed sequence number.
    pub completed: u64,
    /// `RESET_*`.
    pub reset_status: u32,
    /// Banned after a fault or hang.
    pub banned: bool,
    /// Banned for a hang (job timeout).
    pub hung: bool,
    /// The fault that banned it.
    pub fault: Option<FaultInfo>,
    /// CTX_DESTROY is waiting for its work: a WAIT on it fails at once (`EINVAL`,
    /// `CTX_INVALID`), as in aigpu.ko (`kmd/gpu.rs`, `ctx_destroy` and `wait`).
    pub closing: bool,
}

struct Job {
    id: u64,
    ctx: u32,
    seqno: u64,
    descs: Vec<Desc>,
    /// Ring index one past the job's last descriptor.
    end: u32,
}

struct Queue {
    ring_pa: u64,
    tail: u32,
    inflight: VecDeque<Job>,
    /// Watchdog: job id seen executing, and since when.
    cur_job: u64,
    cur_since: Instant,
    /// Busy samples of the last second (one bit per watchdog tick), for `busy_pct`.
    busy_samples: u128,
    /// Jobs completed on this queue.
    done: u64,
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
    free_fence_slots: Vec<u32>,
    as_slots: [Option<u64>; regs::NUM_AS_SLOTS],
    queues: Vec<Queue>,
    /// Event counters.
    pub counters: Counters,
    /// Open files (clients) by id.
    pub clients: HashMap<u64, Client>,
}

/// Per-open-file statistics (the debugfs `clients` file).
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
    dev: Mutex<Device<SharedMem, SimClock>>,
    state: Mutex<State>,
    /// Signalled on every completion, fault, reset and loss.
    changed: Condvar,
    kick: (Mutex<bool>, Condvar),
    stop: AtomicBool,
    fence_page: u64,
    job_timeout: Duration,
    /// Device steps that made progress (debugfs `steps`).
    steps: AtomicU64,
    /// Nanoseconds the device thread spent making them (debugfs `busy_us`).
    busy_ns: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock is caught at the C ABI and reported; the data is still
    // consistent enough to keep failing cleanly, so poisoning is not propagated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Hardware queue priorities: queue 0 high, 1 and 2 normal, 3 low. A context runs on the
/// least-loaded queue of its priority.
fn queue_priority(q: usize) -> u32 {
    match q {
        0 => uapi::ioctl::PRIORITY_HIGH,
        3 => uapi::ioctl::PRIORITY_LOW,
        _ => uapi::ioctl::PRIORITY_NORMAL,
    }
}

/// Wrapping "a is at or after b" for free-running ring indices.
fn at_or_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
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
                tail: 0,
                inflight: VecDeque::new(),
                cur_job: 0,
                cur_since: Instant::now(),
                busy_samples: 0,
                done: 0,
            });
        }
        let dev = Device::new(SharedMem(mem.clone()), SimClock(Instant::now()));
        let gpu = Arc::new(Gpu {
            index,
            job_timeout: Duration::from_millis(cfg.job_timeout_ms),
            cfg,
            mem,
            dev: Mutex::new(dev),
            state: Mutex::new(State {
                lost: false,
                next_ctx: 1,
                next_job: 1,
                contexts: HashMap::new(),
                free_fence_slots: (0..FENCE_SLOTS).rev().collect(),
                as_slots: [None; regs::NUM_AS_SLOTS],
                queues,
                counters: Counters::default(),
                clients: HashMap::new(),
            }),
            changed: Condvar::new(),
            kick: (Mutex::new(false), Condvar::new()),
            stop: AtomicBool::new(false),
            fence_page,
            steps: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
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
            .spawn(move || device_thread(weak))
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

    /// Programs IRQ mask, debug control and every ring (after start and after a reset).
    fn program(&self, d: &mut Device<SharedMem, SimClock>, st: &State) {
        d.mmio_write32(regs::IRQ_MASK, regs::IRQ_ALL);
        d.mmio_write32(
            regs::DEBUG_CTRL,
            if self.cfg.hang_debug {
                regs::DEBUG_CTRL_HANG
            } else {
                0
            },
        );
        for (q, queue) in st.queues.iter().enumerate() {
            let b = regs::queue_base(q);
            d.mmio_write64(b + regs::Q_RING_BASE, queue.ring_pa);
            d.mmio_write32(b + regs::Q_RING_SIZE, RING_ENTRIES);
            d.mmio_write32(
                b + regs::Q_CTRL,
                regs::Q_CTRL_ENABLE | (queue_priority(q) << regs::Q_CTRL_PRIO_SHIFT),
            );
        }
    }

    /// The KMD state (lock order: state before device).
    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn kick_device(&self) {
        *lock(&self.kick.0) = true;
        self.kick.1.notify_one();
    }

    /// Claims an address-space slot for a new file and points it at `pt_root`.
    pub fn attach_file(
        &self,
        file: u64,
        pt_root: u64,
        mem: Arc<std::sync::atomic::AtomicU64>,
    ) -> KmdResult<usize> {
        let mut st = self.state();
        if st.lost {
            return Err(KmdError::new(libc::ENODEV, r::DEVICE_LOST));
        }
        let slot = st
            .as_slots
            .iter()
            .position(|s| s.is_none())
            .ok_or(KmdError::new(libc::EBUSY, r::OBJECT_LIMIT))?;
        st.as_slots[slot] = Some(file);
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
                ..Client::default()
            },
        );
        let mut d = lock(&self.dev);
        d.mmio_write64(regs::as_pt_base(slot), pt_root);
        d.mmio_write32(regs::as_config(slot), regs::AS_ENABLED);
        Ok(slot)
    }

    /// True when the device is lost and no file uses it any more: the next open starts a fresh
    /// device (as reloading the module would).
    pub fn lost_and_unused(&self) -> bool {
        let st = self.state();
        st.lost && st.as_slots.iter().all(|s| s.is_none())
    }

    /// Drops the device's cached translations of address-space slot `slot` (after the file's
    /// page tables lost entries: unbind, failed bind).
    pub fn invalidate_tlb(&self, slot: usize) {
        lock(&self.dev).mmio_write32(regs::MMU_INVALIDATE, 1 << slot);
    }

    /// Releases a file's slot and contexts (file close).
    pub fn detach_file(&self, file: u64, slot: usize) {
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
        st.as_slots[slot] = None;
        st.clients.remove(&file);
        let mut d = lock(&self.dev);
        d.mmio_write32(regs::as_config(slot), 0);
    }

    /// Creates a context on the least-loaded queue.
    pub fn ctx_create(&self, file: u64, priority: u32) -> KmdResult<u32> {
        let mut st = self.state();
        if st.lost {
            return Err(KmdError::new(libc::ENODEV, r::DEVICE_LOST));
        }
        if st.contexts.values().filter(|c| c.file == file).count()
            >= uapi::ioctl::MAX_CONTEXTS as usize
        {
            return Err(KmdError::new(libc::EBUSY, r::CTX_LIMIT));
        }
        let Some(fence_slot) = st.free_fence_slots.pop() else {
            return Err(KmdError::new(libc::EBUSY, r::DEVICE_CTX_LIMIT));
        };
        self.mem
            .write_u64(self.fence_page + 8 * fence_slot as u64, 0);
        let mut load = [0usize; regs::NUM_QUEUES];
        for c in st.contexts.values() {
            load[c.queue] += 1;
        }
        let queue = (0..regs::NUM_QUEUES)
            .filter(|&q| queue_priority(q) == priority)
            .min_by_key(|&q| load[q])
            .unwrap_or(1);
        let id = st.next_ctx;
        st.next_ctx = st.next_ctx.wrapping_add(1).max(1);
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
                banned: false,
                hung: false,
                fault: None,
                closing: false,
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
            _ => return Err(KmdError::new(libc::EINVAL, r::CTX_INVALID)),
        }
        // Its waiters wake now and see it closing (see `wait`), as in aigpu.ko.
        self.changed.notify_all();
        loop {
            let Some(c) = st.contexts.get(&id) else {
                return Err(KmdError::new(libc::EINVAL, r::CTX_INVALID));
            };
            let now = Instant::now();
            if c.completed >= c.submitted || c.banned || st.lost || now >= deadline {
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
            _ => Err(KmdError::new(libc::EINVAL, r::CTX_INVALID)),
        }
    }

    /// Queues a validated job: WAIT descriptors for unsignalled in-fences, then one EXEC per
    /// command buffer, the last one writing the context's fence and raising JOB_DONE.
    pub fn queue_job(
        &self,
        file: u64,
        slot: usize,
        ctx_id: u32,
        cmdbufs: &[uapi::ioctl::Cmdbuf],
        in_fences: &[uapi::ioctl::Fence],
        flags: u32,
    ) -> KmdResult<u64> {
        let mut st = self.state();
        if st.lost {
            return Err(KmdError::new(libc::ENODEV, r::DEVICE_LOST));
        }
        let ctx = Self::ctx_of(&st, file, ctx_id)?;
        if ctx.banned {
            return Err(KmdError::new(libc::ECANCELED, r::CTX_BANNED));
        }
        let queue = ctx.queue;
        let mut descs = Vec::with_capacity(in_fences.len() + cmdbufs.len());
        for (i, f) in in_fences.iter().enumerate() {
            let bad = |reason| KmdError {
                errno: libc::EINVAL,
                reason,
                bad_index: i as u32,
                bad_offset: 0,
            };
            if f.flags != 0 {
                return Err(bad(r::FLAGS_UNKNOWN));
            }
            let dep = match st.contexts.get(&f.ctx_id) {
                Some(c) if c.file == file => c,
                _ => return Err(bad(r::FENCE_CTX_INVALID)),
            };
            if f.seqno > dep.submitted {
                return Err(bad(r::FENCE_NOT_SUBMITTED));
            }
            if f.seqno > dep.completed && !dep.banned {
                descs.push(Desc {
                    kind: uapi::ring::DESC_WAIT,
                    fence_pa: self.fence_page + 8 * dep.fence_slot as u64,
                    value: f.seqno,
                    ..Desc::default()
                });
            }
        }
        let job_id = st.next_job;
        st.next_job += 1;
        let fence_pa = self.fence_page
            + 8 * st.contexts.get(&ctx_id).map(|c| c.fence_slot).unwrap_or(0) as u64;
        let seqno = st
            .contexts
            .get(&ctx_id)
            .map(|c| c.submitted + 1)
            .unwrap_or(1);
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
        // Back-pressure: wait for ring space (or fail at once with NO_BLOCK); never overwrite.
        loop {
            if st.lost {
                return Err(KmdError::new(libc::ENODEV, r::DEVICE_LOST));
            }
            if st.contexts.get(&ctx_id).is_none_or(|c| c.banned) {
                return Err(KmdError::new(libc::ECANCELED, r::CTX_BANNED));
            }
            let q = &st.queues[queue];
            let head = q
                .inflight
                .front()
                .map(|j| j.end.wrapping_sub(j.descs.len() as u32))
                .unwrap_or(q.tail);
            let used = q.tail.wrapping_sub(head);
            if used as usize + descs.len() <= RING_ENTRIES as usize {
                break;
            }
            if flags & uapi::ioctl::SUBMIT_FLAG_NO_BLOCK != 0 {
                return Err(KmdError::new(libc::EAGAIN, r::RING_FULL));
            }
            st = self
                .changed
                .wait_timeout(st, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if let Some(c) = st.contexts.get_mut(&ctx_id) {
            c.submitted = seqno;
        }
        st.counters.jobs += 1;
        if let Some(c) = st.clients.get_mut(&file) {
            c.jobs += 1;
        }
        let end = self.write_ring(&mut st, queue, &descs);
        st.queues[queue].inflight.push_back(Job {
            id: job_id,
            ctx: ctx_id,
            seqno,
            descs,
            end,
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
    fn write_ring(&self, st: &mut State, queue: usize, descs: &[Desc]) -> u32 {
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
    /// or the device is lost. Returns the completed sequence number.
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
                return Err(KmdError::new(libc::ENODEV, r::DEVICE_LOST));
            }
            let c = Self::ctx_of(&st, file, ctx_id)?;
            if seqno > c.submitted {
                return Err(KmdError::new(libc::EINVAL, r::FENCE_NOT_SUBMITTED));
            }
            if c.completed >= seqno {
                return Ok(c.completed);
            }
            if c.closing {
                // What aigpu.ko's WAIT returns once the context is gone (kmd/gpu.rs, `ctx_of`).
                return Err(KmdError::new(libc::EINVAL, r::CTX_INVALID));
            }
            if c.banned {
                return Err(KmdError::new(libc::ECANCELED, r::CTX_LOST));
            }
            let now = Instant::now();
            let Some(deadline) = deadline.filter(|&d| d > now) else {
                return Err(KmdError::new(libc::ETIMEDOUT, r::TIMEOUT));
            };
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Context state for the context-state ioctl.
    pub fn ctx_state(&self, file: u64, ctx_id: u32) -> KmdResult<uapi::ioctl::CtxState> {
        let st = self.state();
        if st.lost {
            return Err(KmdError::new(libc::ENODEV, r::DEVICE_LOST));
        }
        let c = Self::ctx_of(&st, file, ctx_id)?;
        let f = c.fault.unwrap_or_default();
        Ok(uapi::ioctl::CtxState {
            ctx_id,
            reset_status: c.reset_status,
            fault_type: f.kind,
            fault_va: f.va,
            fault_access: f.access,
            hung: c.hung as u32,
            fault_offset: f.offset,
            completed_seqno: c.completed,
            submitted_seqno: c.submitted,
            ..Default::default()
        })
    }

    /// Applies a test injection.
    pub fn inject(&self, what: Injection) {
        let mut d = lock(&self.dev);
        match what {
            Injection::MemError => d.inject_bus_error(),
            Injection::ResetFailure => d.inject_reset_failure(),
            Injection::FallOffBus => d.fall_off_bus(),
        }
        drop(d);
        self.kick_device();
    }

    /// Counters snapshot.
    pub fn counters(&self) -> Counters {
        self.state().counters
    }

    // ---- bottom half, watchdog, recovery (device thread) ----

    /// Retires completed jobs: reads each context's fence from memory and each ring's head.
    fn retire(&self, st: &mut State, d: &mut Device<SharedMem, SimClock>) {
        for (qi, q) in st.queues.iter_mut().enumerate() {
            let head = d.mmio_read32(regs::queue_base(qi) + regs::Q_HEAD);
            while q.inflight.front().is_some_and(|j| at_or_after(head, j.end)) {
                q.inflight.pop_front();
                q.done += 1;
            }
        }
        let fence_page = self.fence_page;
        for c in st.contexts.values_mut() {
            if c.banned {
                continue; // a banned context's fence no longer means completion
            }
            if let Some(v) = self.mem.read_u64(fence_page + 8 * c.fence_slot as u64) {
                if v > c.completed && v <= c.submitted {
                    c.completed = v;
                }
            }
        }
    }

    fn bottom_half(&self, status: u32) {
        let mut st = self.state();
        let mut d = lock(&self.dev);
        self.retire(&mut st, &mut d);
        if status & (regs::IRQ_FAULT | regs::IRQ_MEM_ERROR) != 0 {
            let fs = d.mmio_read32(regs::FAULT_STATUS);
            let info = FaultInfo {
                kind: regs::fault_kind(fs),
                access: regs::fault_access(fs),
                va: d.mmio_read64(regs::FAULT_ADDR),
                offset: d.mmio_read32(regs::FAULT_OFFSET) as u64,
            };
            let job = d.mmio_read64(regs::FAULT_JOB);
            let queue = regs::fault_queue(fs) as usize;
            let guilty = st
                .queues
                .get(queue)
                .and_then(|q| q.inflight.iter().find(|j| j.id == job))
                .map(|j| (j.ctx, j.seqno));
            st.counters.faults += 1;
            if let Some((ctx, seqno)) = guilty {
                if let Some(c) = st.contexts.get_mut(&ctx) {
                    c.banned = true;
                    c.reset_status = RESET_GUILTY;
                    c.fault = Some(info);
                }
                // `kmd_ctx`: the simulated kernel's context id, as in dmesg; the `ctx` field of a
                // record is always the libumd context id the caller knows (docs/logging.md).
                tracing::error!(
                    device = self.index,
                    kmd_ctx = ctx,
                    seqno,
                    job,
                    queue,
                    fault = regs::fault_kind_name(info.kind),
                    access = regs::access_name(info.access),
                    va = format_args!("{:#x}", info.va),
                    offset = info.offset,
                    "GPU fault: kmd context {ctx} banned"
                );
            } else {
                tracing::error!(
                    device = self.index,
                    job,
                    queue,
                    fault = regs::fault_kind_name(info.kind),
                    va = format_args!("{:#x}", info.va),
                    "GPU fault on an unknown job"
                );
            }
            self.recover(&mut st, &mut d);
        }
        drop(d);
        drop(st);
        self.changed.notify_all();
    }

    /// Hang detection: a job that has been executing longer than the job timeout.
    fn watchdog(&self) {
        let mut st = self.state();
        if st.lost {
            return;
        }
        let mut d = lock(&self.dev);
        let now = Instant::now();
        let mut hung = None;
        for (qi, q) in st.queues.iter_mut().enumerate() {
            // One sample per watchdog tick (5 ms); busy_pct counts the busy ones among the last
            // 100 samples, i.e. the percentage of the last half second.

            q.busy_samples = (q.busy_samples << 1) | (!q.inflight.is_empty()) as u128;
            if q.inflight.is_empty() {
                q.cur_job = 0;
                continue;
            }
            let cur = d.mmio_read64(regs::queue_base(qi) + regs::Q_CUR_JOB);
            if cur != q.cur_job {
                q.cur_job = cur;
                q.cur_since = now;
            } else if cur != 0 && now.duration_since(q.cur_since) > self.job_timeout {
                let ctx = q
                    .inflight
                    .iter()
                    .find(|j| j.id == cur)
                    .map(|j| (j.ctx, j.seqno));
                hung = Some((qi, cur, ctx));
                break;
            }
        }
        let Some((queue, job, ctx)) = hung else {
            return;
        };
        // Collect what did complete before declaring the rest lost.
        self.retire(&mut st, &mut d);
        st.counters.hangs += 1;
        if let Some((ctx, seqno)) = ctx {
            if let Some(c) = st.contexts.get_mut(&ctx) {
                c.banned = true;
                c.hung = true;
                c.reset_status = RESET_GUILTY;
            }
            tracing::error!(
                device = self.index,
                kmd_ctx = ctx,
                seqno,
                job,
                queue,
                timeout_ms = self.job_timeout.as_millis() as u64,
                "job timeout: kmd context {ctx} hung the GPU; resetting the engine"
            );
        }
        self.recover(&mut st, &mut d);
        drop(d);
        drop(st);
        self.changed.notify_all();
    }

    /// Engine reset: drops banned contexts' work, resubmits innocent work, or declares the
    /// device lost when the reset does not bring it back.
    fn recover(&self, st: &mut State, d: &mut Device<SharedMem, SimClock>) {
        st.counters.resets += 1;
        d.mmio_write32(regs::RESET, regs::RESET_ENGINE);
        if d.mmio_read32(regs::ID) != regs::ID_VALUE {
            st.lost = true;
            tracing::error!(
                device = self.index,
                "engine reset failed: device lost; every call will fail with UMD_ERR_DEVICE_LOST"
            );
            return;
        }
        d.mmio_write32(regs::IRQ_ACK, regs::IRQ_ALL);
        for (s, owner) in st.as_slots.iter().enumerate() {
            if owner.is_some() {
                d.mmio_write32(regs::as_config(s), regs::AS_ENABLED);
            }
        }
        self.program(d, st);
        let mut resubmitted = 0;
        for qi in 0..st.queues.len() {
            let jobs: Vec<Job> = st.queues[qi].inflight.drain(..).collect();
            st.queues[qi].tail = 0;
            st.queues[qi].cur_job = 0;
            for mut job in jobs {
                let Some(c) = st.contexts.get_mut(&job.ctx) else {
                    continue;
                };
                if c.banned {
                    continue;
                }
                if c.reset_status == RESET_NONE {
                    c.reset_status = RESET_INNOCENT;
                }
                job.end = self.write_ring(st, qi, &job.descs);
                st.queues[qi].inflight.push_back(job);
                resubmitted += 1;
            }
            let tail = st.queues[qi].tail;
            let b = regs::queue_base(qi);
            d.mmio_write32(b + regs::Q_TAIL, tail);
            d.mmio_write32(b + regs::Q_DOORBELL, 1);
        }
        tracing::warn!(
            device = self.index,
            resubmitted,
            "engine reset done; innocent jobs resubmitted"
        );
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The device thread: steps the model, takes interrupts, runs the watchdog. Holds only a weak
/// reference so the GPU goes away with its last file.
fn device_thread(gpu: std::sync::Weak<Gpu>) {
    let mut last_watchdog = Instant::now();
    loop {
        let Some(g) = gpu.upgrade() else { return };
        if g.stop.load(Ordering::Acquire) {
            return;
        }
        // Top half: step, then read and acknowledge the interrupt status under the device lock.
        let (step, status) = {
            let mut d = lock(&g.dev);
            let start = Instant::now();
            // A few packets per lock hold keeps register access responsive for submitters.
            let round = d.run_round(16, |_, _| false);
            let step = round.last;
            if round.steps > 0 {
                g.steps.fetch_add(round.steps, Ordering::Relaxed);
                let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                g.busy_ns.fetch_add(ns, Ordering::Relaxed);
            }
            let status = if d.irq_line() {
                let s = d.mmio_read32(regs::IRQ_STATUS);
                d.mmio_write32(regs::IRQ_ACK, s);
                s
            } else {
                0
            };
            (step, status)
        };
        if status != 0 {
            g.bottom_half(status);
        }
        if last_watchdog.elapsed() >= Duration::from_millis(5) {
            g.watchdog();
            last_watchdog = Instant::now();
        }
        let idle_wait = match step {
            Step::Progress => None,
            Step::Stalled => Some(Duration::from_micros(200)),
            Step::Idle => Some(Duration::from_millis(20)),
        };
        if let Some(t) = idle_wait {
            let (m, cv) = (&g.kick.0, &g.kick.1);
            let mut kicked = lock(m);
            if !*kicked {
                kicked = cv
                    .wait_timeout(kicked, t)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            *kicked = false;
        }
    }
}

/// The debugfs texts of docs/debugfs.md, rendered from the simulator's state (so `umd-smi` reads
/// the simulator and the kernel driver with one parser).
impl Gpu {
    /// Contents of `status`.
    pub fn debugfs_status(&self) -> String {
        let st = self.state();
        let c = st.counters;
        format!(
            "device=sim{} state={} uapi={}.{} driver={}.{}.{} hw=1.0 mem_total={} mem_used={} clients={} contexts={} jobs={} faults={} hangs={} resets={} job_timeout_ms={} hang_debug={} steps={} busy_us={}\n",
            self.index,
            if st.lost { "lost" } else { "ok" },
            uapi::UAPI_MAJOR,
            uapi::UAPI_MINOR,
            uapi::DRIVER_VERSION.0,
            uapi::DRIVER_VERSION.1,
            uapi::DRIVER_VERSION.2,
            self.mem.size(),
            st.clients.values().map(|c| c.mem.load(Ordering::Relaxed)).sum::<u64>(),
            st.clients.len(),
            st.contexts.len(),
            c.jobs,
            c.faults,
            c.hangs,
            c.resets,
            self.cfg.job_timeout_ms,
            self.cfg.hang_debug as u32,
            self.steps.load(Ordering::Relaxed),
            self.busy_ns.load(Ordering::Relaxed) / 1000
        )
    }

    /// Contents of `queues`.
    pub fn debugfs_queues(&self) -> String {
        let st = self.state();
        let mut d = lock(&self.dev);
        let mut out = String::new();
        for (qi, q) in st.queues.iter().enumerate() {
            let b = regs::queue_base(qi);
            let state = d.mmio_read32(b + regs::Q_STATE);
            let head = d.mmio_read32(b + regs::Q_HEAD);
            let busy = q.busy_samples & ((1u128 << 100) - 1);
            out += &format!(
                "queue={qi} prio={} state={} head={head} tail={} inflight={} jobs={} busy_pct={} cur_job={}\n",
                prio_name(queue_priority(qi)),
                regs::qstate_name(state),
                q.tail,
                q.inflight.len(),
                q.done,
                busy.count_ones(),
                q.cur_job
            );
        }
        out
    }

    /// Contents of `clients`.
    pub fn debugfs_clients(&self) -> String {
        let st = self.state();
        let mut ids: Vec<&u64> = st.clients.keys().collect();
        ids.sort();
        let mut out = String::new();
        for id in ids {
            let c = &st.clients[id];
            let contexts = st.contexts.values().filter(|x| x.file == *id).count();
            out += &format!(
                "client={id} pid={} comm={} mem={} objects={} contexts={contexts} jobs={}\n",
                c.pid,
                c.comm,
                c.mem.load(Ordering::Relaxed),
                c.objects,
                c.jobs
            );
        }
        out
    }

    /// Contents of `contexts`.
    pub fn debugfs_contexts(&self) -> String {
        let st = self.state();
        let mut ids: Vec<&u32> = st.contexts.keys().collect();
        ids.sort();
        let mut out = String::new();
        for id in ids {
            let c = &st.contexts[id];
            let (pid, comm) = st
                .clients
                .get(&c.file)
                .map(|k| (k.pid, k.comm.as_str()))
                .unwrap_or((0, "?"));
            out += &format!(
                "ctx={id} client={} pid={pid} comm={comm} queue={} prio={} submitted={} completed={} reset={} hung={}",
                c.file,
                c.queue,
                prio_name(c.priority),
                c.submitted,
                c.completed,
                reset_name(c.reset_status),
                c.hung as u32
            );
            if let Some(f) = c.fault {
                out += &format!(
                    " fault={} access={} va={:#x} offset={}",
                    regs::fault_kind_name(f.kind),
                    regs::access_name(f.access),
                    f.va,
                    f.offset
                );
            }
            out.push('\n');
        }
        out
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

fn prio_name(p: u32) -> &'static str {
    match p {
        uapi::ioctl::PRIORITY_LOW => "low",
        uapi::ioctl::PRIORITY_HIGH => "high",
        _ => "normal",
    }
}

fn reset_name(r: u32) -> &'static str {
    match r {
        RESET_GUILTY => "guilty",
        RESET_INNOCENT => "innocent",
        _ => "none",
    }
}
