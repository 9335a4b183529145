//! A context: one KMD context (software queue) on a device, with its own fence timeline.

use crate::device::Device;
use crate::errmap::Op;
use crate::error::UmdResult;
use crate::memory::pool::{Pool, Timeline};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

static NEXT_CONTEXT_ID: AtomicU64 = AtomicU64::new(1);

/// `umdPriority` values accepted by `umdContextCreate` (the UAPI's).
pub const PRIORITIES: [u32; 3] = [
    uapi::ioctl::PRIORITY_LOW,
    uapi::ioctl::PRIORITY_NORMAL,
    uapi::ioctl::PRIORITY_HIGH,
];

/// Which call tore a context down (its [`Context::close`]): what a wait that was blocked on it
/// reports (docs/libumd.md, "Closing under a blocked wait").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosedBy {
    /// `umdContextDestroy`.
    ContextDestroy = 1,
    /// `umdDeviceClose`.
    DeviceClose = 2,
}

impl ClosedBy {
    /// The sentence a wait blocked on the context reports (`UMD_ERR_INVALID_HANDLE`).
    pub const fn sentence(self) -> &'static str {
        match self {
            ClosedBy::ContextDestroy => "the context was destroyed by another thread (umdContextDestroy) while this wait was blocked",
            ClosedBy::DeviceClose => "the device was closed by another thread (umdDeviceClose) while this wait was blocked",
        }
    }
}

/// Submitted jobs' sequence numbers with the buffers each reads.
type Inflight = std::collections::VecDeque<(u64, Vec<crate::memory::BufferRef>)>;

/// One context.
pub struct Context {
    /// Process-unique id: every log line of a call on this context carries it.
    pub id: u64,
    /// Its device.
    pub device: Arc<Device>,
    /// The KMD's id for it.
    pub kmd_id: u32,
    /// Priority.
    pub priority: u32,
    /// Last sequence number submitted by this process on it.
    pub last_seqno: AtomicU64,
    /// Buffers that submitted jobs read (command buffers), kept alive until their job's
    /// sequence number completes.
    inflight: std::sync::Mutex<Inflight>,
    /// The device's memory pool (accounting, reuse gating, submit validation).
    pub pool: Arc<Pool>,
    /// This context's account slot in the pool.
    pub acct: u32,
    /// Completion of this context's jobs as the pool sees it.
    pub timeline: Arc<Timeline>,
    /// Set (a [`ClosedBy`]) by [`Context::close`] before the KMD context is destroyed; 0 while
    /// it lives.
    closing: AtomicU8,
    /// Threads inside the backend's WAIT on this context ([`Context::enter_wait`]).
    waiters: AtomicU32,
    /// Set once the `context lost` record has been logged ([`Context::loss_story`]).
    loss_logged: std::sync::atomic::AtomicBool,
}

impl Context {
    /// Creates a context.
    pub fn create(device: &Arc<Device>, priority: u32) -> UmdResult<Context> {
        device.check()?;
        if !PRIORITIES.contains(&priority) {
            crate::bail!(
                UMD_ERR_INVALID_ARGUMENT,
                "priority {priority} is not UMD_PRIORITY_LOW (0), NORMAL (1) or HIGH (2)."
            );
        }
        let pool = Pool::for_device(device)?;
        let kmd_id = device
            .backend
            .ctx_create(priority)
            .map_err(|e| device.fail(Op::Context, e, "context create"))?;
        let id = NEXT_CONTEXT_ID.fetch_add(1, Ordering::Relaxed);
        let timeline = Arc::new(Timeline::default());
        let acct = pool.register(id, kmd_id, timeline.clone());
        device.name_context(kmd_id, Some(id));
        tracing::info!(
            ctx = id,
            device = device.id,
            kmd_ctx = kmd_id,
            priority,
            "context created"
        );
        Ok(Context {
            id,
            device: device.clone(),
            kmd_id,
            priority,
            last_seqno: AtomicU64::new(0),
            inflight: std::sync::Mutex::new(std::collections::VecDeque::new()),
            pool,
            acct,
            timeline,
            closing: AtomicU8::new(0),
            waiters: AtomicU32::new(0),
            loss_logged: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Reset status, fault and progress as the KMD reports them.
    pub fn state(&self) -> UmdResult<uapi::ioctl::CtxState> {
        self.device.check().map_err(|e| e.ctx(self.id))?;
        self.device.backend.ctx_state(self.kmd_id).map_err(|e| {
            self.device
                .fail(Op::Context, e, "context state query")
                .ctx(self.id)
        })
    }

    /// What happened to a lost context, for error details: "page fault (write) at VA 0x..,
    /// packet offset 24" or "hung: job timeout".
    pub fn loss_story(&self) -> (String, u64) {
        let state = self.state();
        if let Ok(s) = &state {
            self.log_loss(s);
        }
        match state {
            Ok(s) if s.ban == uapi::ioctl::BAN_DEPENDENCY => (
                format!(
                    "a job of it did not run: it waits for {}",
                    dependency_story(&self.device, s.dep_ctx_id, s.dep_seqno)
                ),
                0,
            ),
            Ok(s) if s.hung != 0 => ("it hung the GPU (job timeout) and was reset".into(), 0),
            Ok(s) if s.fault_type != 0 => (
                format!(
                    "GPU fault '{}' ({} access) at VA 0x{:x}, packet offset {} of its command buffer",
                    uapi::regs::fault_kind_name(s.fault_type),
                    uapi::regs::access_name(s.fault_access),
                    s.fault_va,
                    s.fault_offset
                ),
                s.fault_va,
            ),
            Ok(_) => ("it was reset".into(), 0),
            Err(e) => (format!("its state could not be read ({})", e.message), 0),
        }
    }

    /// The `context lost` record, once per context: what the driver says happened, as fields
    /// (docs/tools.md, "Fact records").
    fn log_loss(&self, s: &uapi::ioctl::CtxState) {
        if self.loss_logged.swap(true, Ordering::AcqRel) {
            return;
        }
        let cause = match (s.ban, s.hung != 0, s.fault_type != 0) {
            (uapi::ioctl::BAN_DEPENDENCY, _, _) => "dependency",
            (_, true, _) => "hang",
            (_, false, true) => "fault",
            _ => "reset",
        };
        tracing::error!(
            ctx = self.id,
            event = "ctx_lost",
            kmd_ctx = self.kmd_id,
            cause,
            reset = reset_name(s.reset_status),
            fault = if s.fault_type != 0 {
                uapi::regs::fault_kind_name(s.fault_type)
            } else {
                "-"
            },
            access = if s.fault_type != 0 {
                uapi::regs::access_name(s.fault_access)
            } else {
                "-"
            },
            va = format_args!("{:#x}", s.fault_va),
            offset = s.fault_offset,
            submitted = s.submitted_seqno,
            completed = s.completed_seqno,
            dep_kmd_ctx = s.dep_ctx_id,
            dep_seqno = s.dep_seqno,
            "context lost"
        );
    }

    /// Tears the context down for `by`: marks it closing and destroys the KMD context. The
    /// driver's CTX_DESTROY (aigpu.ko and the simulator alike) wakes the threads blocked in a
    /// WAIT on it at once (`EINVAL` + `CTX_INVALID`), which then fail with
    /// `UMD_ERR_INVALID_HANDLE` and [`ClosedBy::sentence`]; the destroy itself waits for the
    /// context's submitted work, bounded by the job timeout (docs/libumd.md, "Closing under a
    /// blocked wait").
    pub fn close(&self, by: ClosedBy) -> UmdResult<()> {
        // SeqCst pairs with `enter_wait`: either this sees the waiter, or the waiter sees the
        // flag before it reaches the backend.
        self.closing.store(by as u8, Ordering::SeqCst);
        let waiters = self.waiters.load(Ordering::SeqCst);
        if waiters > 0 {
            tracing::warn!(
                ctx = self.id,
                waiters,
                "context torn down by {} while {waiters} thread(s) wait on it",
                match by {
                    ClosedBy::ContextDestroy => "umdContextDestroy",
                    ClosedBy::DeviceClose => "umdDeviceClose",
                }
            );
        }
        let r = self.destroy();
        // The jobs are finished or cancelled; their buffers hold this context (each buffer
        // reaches its device and pool through it), so keeping them would keep it alive.
        let jobs = std::mem::take(&mut *self.lock_inflight());
        drop(jobs);
        r
    }

    /// Keeps `buffers` until job `seqno` completes ([`Context::retire`]); returns how many jobs
    /// are kept. On a context being closed they are let go at once: its jobs no longer run
    /// after the destroy, and the pool gates the memory's reuse on their fences anyway.
    pub fn keep_inflight(&self, seqno: u64, buffers: Vec<crate::memory::BufferRef>) -> usize {
        let mut q = self.lock_inflight();
        if self.closed_by().is_some() {
            drop(q);
            drop(buffers);
            return 0;
        }
        q.push_back((seqno, buffers));
        q.len()
    }

    fn lock_inflight(&self) -> std::sync::MutexGuard<'_, Inflight> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Set once [`Context::close`] started.
    pub fn closed_by(&self) -> Option<ClosedBy> {
        match self.closing.load(Ordering::SeqCst) {
            1 => Some(ClosedBy::ContextDestroy),
            2 => Some(ClosedBy::DeviceClose),
            _ => None,
        }
    }

    /// Counts the calling thread as a waiter until the guard drops; `None` (not counted) when
    /// the context is already being closed.
    pub fn enter_wait(&self) -> Option<WaitGuard<'_>> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let g = WaitGuard(self);
        if self.closed_by().is_some() {
            return None;
        }
        Some(g)
    }

    /// Destroys the KMD context (after its pending work, bounded by the job timeout).
    pub fn destroy(&self) -> UmdResult<()> {
        // What happened to this context's work, for the innocent ones of a reset (the guilty
        // one has its `context lost` record); not asked on a lost device.
        let st = match self.device.is_lost() {
            false => self.device.backend.ctx_state(self.kmd_id).ok(),
            true => None,
        };
        // Also on a lost device (both backends accept CTX_DESTROY then): the file's teardown
        // cannot be relied on, CPU mappings of the pool keep a kernel file open.
        self.device.name_context(self.kmd_id, None);
        self.device.backend.ctx_destroy(self.kmd_id).map_err(|e| {
            self.device
                .fail(Op::Context, e, "context destroy")
                .ctx(self.id)
        })?;
        tracing::info!(
            ctx = self.id,
            event = "ctx_destroyed",
            reset = st.map(|s| reset_name(s.reset_status)).unwrap_or("-"),
            submitted = st.map(|s| s.submitted_seqno).unwrap_or(0),
            completed = st.map(|s| s.completed_seqno).unwrap_or(0),
            "context destroyed"
        );
        Ok(())
    }
}

impl Context {
    /// Drops the references of every job up to `completed` (and tells the pool: blocks those
    /// jobs used become reusable).
    pub fn retire(&self, completed: u64) {
        self.timeline.complete(completed);
        let mut q = self.lock_inflight();
        while q.front().is_some_and(|(s, _)| *s <= completed) {
            q.pop_front();
        }
    }
}

/// A thread counted in a context's waiters ([`Context::enter_wait`]).
pub struct WaitGuard<'a>(&'a Context);

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // Its jobs are finished or cancelled (destroy waits for them; a lost context runs
        // nothing more), so the fences it stamped no longer gate reuse.
        self.pool.unregister(&self.device, self.acct);
    }
}

/// A context's reset status as logged: `none`, `guilty`, `innocent`.
fn reset_name(status: u32) -> &'static str {
    match status {
        uapi::ioctl::RESET_GUILTY => "guilty",
        uapi::ioctl::RESET_INNOCENT => "innocent",
        _ => "none",
    }
}

/// "fence 3 of context 7 (kernel context 2), which faulted: GPU fault 'unmapped' (read access)
/// at VA 0x...": the producer a dependency failed on, followed down the chain of failed
/// producers to the one that failed by itself (at most a few links: a longer chain is cut).
pub(crate) fn dependency_story(device: &crate::device::Device, kmd_ctx: u32, seqno: u64) -> String {
    let mut out = String::new();
    let (mut ctx, mut seqno) = (kmd_ctx, seqno);
    for _ in 0..8 {
        let name = match device.context_named(ctx) {
            Some(id) => format!("context {id} (kernel context {ctx})"),
            None => format!("kernel context {ctx}"),
        };
        out += &format!("fence {seqno} of {name}, which ");
        match device.backend.ctx_state(ctx) {
            Ok(s) if s.ban == uapi::ioctl::BAN_DEPENDENCY => {
                out += "did not run either: it waits for ";
                (ctx, seqno) = (s.dep_ctx_id, s.dep_seqno);
            }
            Ok(s) if s.hung != 0 => return out + "hung the GPU (job timeout)",
            Ok(s) if s.fault_type != 0 => {
                return out
                    + &format!(
                        "faulted: GPU fault '{}' ({} access) at VA 0x{:x}, packet offset {}",
                        uapi::regs::fault_kind_name(s.fault_type),
                        uapi::regs::access_name(s.fault_access),
                        s.fault_va,
                        s.fault_offset
                    )
            }
            Ok(_) => return out + "was lost",
            Err(_) => return out + "was lost and is destroyed since",
        }
    }
    out + "..."
}
