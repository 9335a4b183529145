//! The line formats the tools read: the driver's log lines for faults, hangs, failed
//! dependencies, resets and device loss (dmesg for aigpu.ko, the log records' message for the
//! simulator), and the `contexts` and `queues` lines of debugfs (docs/debugfs.md). Every line is
//! `key=value` fields after a fixed lead, so `tools/` parses fields, never sentences.
//!
//! Each format is a struct whose `Display` writes the line (without a newline), so the kernel
//! prints it into its text buffer and the simulator into a `String` with the same code. A driver
//! line is `<lead>: <fields>[; <clause>]` (`super::lead`: the leads, and how the tools split a
//! line). The device-level lines (loss, re-initialisation, the wedged event) are in
//! `super::lost`.

use core::fmt::{self, Display, Formatter};

use super::lead::{self, injected_value};
use super::names::{prio_name, reset_name};
use super::Ban;
use crate::uapi::regs;

/// The process that owns a context.
#[derive(Clone, Copy, Debug)]
pub struct Owner<C> {
    /// Process id (0 if unknown).
    pub pid: i64,
    /// Command name.
    pub comm: C,
}

/// `<class>: fault=<kind> access=<access> va=... offset=... queue=... ctx=... pid=... comm=...
/// job=... injected=<0|1>; context banned` (`<class>`: [`fault_class`]), or `...; descriptor
/// fetch, nobody banned` for a fault while the device fetched a descriptor of that job
/// (`super::recovery::Blame::Fetching`), or `... queue=... job=... injected=...; no job of a live
/// context owns it`. `fault` and `access` are named as in the debugfs `contexts` line
/// ([`ContextLine`]) and the simulator's record.
pub struct FaultLine<C> {
    pub fault: super::FaultInfo,
    pub queue: usize,
    pub job: u64,
    /// The job's context and its owner, and whether it is guilty (banned).
    pub ctx: Option<(u32, Owner<C>, bool)>,
    /// A fault injection made it (`inject_page_fault`, `inject_mem_error`).
    pub injected: bool,
}

/// What kind of event a fault is, its line's lead: `page fault` (the context's own addressing),
/// `uncorrectable memory error` (hardware), `GPU fault` (anything else).
pub const fn fault_class(kind: u32) -> &'static str {
    match kind {
        regs::FAULT_UNMAPPED | regs::FAULT_PERMISSION | regs::FAULT_BAD_PTE => lead::PAGE_FAULT,
        regs::FAULT_BUS_ERROR => lead::MEM_ERROR,
        _ => lead::GPU_FAULT,
    }
}

impl<C: Display> Display for FaultLine<C> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let i = &self.fault;
        write!(
            f,
            "{}: fault={} access={} va={:#x} offset={} queue={}",
            fault_class(i.kind),
            regs::fault_kind_name(i.kind),
            regs::access_name(i.access),
            i.va,
            i.offset,
            self.queue
        )?;
        if let Some((ctx, o, _)) = &self.ctx {
            write!(f, " ctx={} pid={} comm={}", ctx, o.pid, o.comm)?;
        }
        write!(
            f,
            " job={} injected={}; ",
            self.job,
            injected_value(self.injected)
        )?;
        f.write_str(match &self.ctx {
            Some((_, _, true)) => "context banned",
            Some((_, _, false)) => "descriptor fetch, nobody banned",
            None => "no job of a live context owns it",
        })
    }
}

/// Where a job-timeout's timeout came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutSource {
    /// The driver's default.
    Default,
    /// aigpu.ko's module parameter `job_timeout_ms` (a value other than its default).
    ModuleParam,
    /// The simulator's `UMD_SIM_JOB_TIMEOUT_MS` in the process's environment.
    Environment,
}

impl TimeoutSource {
    /// The `timeout_source` value.
    pub const fn name(self) -> &'static str {
        match self {
            TimeoutSource::Default => "default",
            TimeoutSource::ModuleParam => "module_param",
            TimeoutSource::Environment => "environment",
        }
    }
}

/// What a queue was doing when the watchdog stopped its job, from `Q_STATE`, `Q_WAIT_ADDR` and
/// `Q_WAIT_VALUE` (docs/hw-spec.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueActivity {
    /// Running packets (`Q_STATE` running): `state=executing`.
    Executing,
    /// Stopped in the debug HANG packet (`Q_STATE` hung): `state=hung`.
    Hung,
    /// A WAIT_MEM packet waiting for the u64 at `va` (the job's own address space) to reach
    /// `value`: `state=waiting wait=mem wait_va=... wait_value=...`.
    WaitMem { va: u64, value: u64 },
    /// An in-fence (a WAIT descriptor) waiting for the fence at `pa` (the driver's fence page)
    /// to reach `value`: `state=waiting wait=fence wait_pa=... wait_value=...`.
    WaitFence { pa: u64, value: u64 },
    /// Any other `Q_STATE` (idle, faulted, a value the driver does not know): its name.
    Other(u32),
}

impl QueueActivity {
    /// From the queue's registers; `at_wait_desc`: the descriptor at the ring head is a WAIT
    /// descriptor (the driver knows its descriptors; the device says only "waiting").
    pub const fn from_regs(
        state: u32,
        wait_addr: u64,
        wait_value: u64,
        at_wait_desc: bool,
    ) -> Self {
        match state {
            regs::QSTATE_RUNNING => QueueActivity::Executing,
            regs::QSTATE_HUNG => QueueActivity::Hung,
            regs::QSTATE_WAITING if at_wait_desc => QueueActivity::WaitFence {
                pa: wait_addr,
                value: wait_value,
            },
            regs::QSTATE_WAITING => QueueActivity::WaitMem {
                va: wait_addr,
                value: wait_value,
            },
            s => QueueActivity::Other(s),
        }
    }

    /// The `state` value.
    pub const fn state_name(&self) -> &'static str {
        match self {
            QueueActivity::Executing => "executing",
            QueueActivity::Hung => "hung",
            QueueActivity::WaitMem { .. } | QueueActivity::WaitFence { .. } => "waiting",
            QueueActivity::Other(s) => regs::qstate_name(*s),
        }
    }
}

/// The facts of a job timeout that tell a genuine hang from a timeout set too short, in the
/// dmesg line ([`HangLine`]), the crash dump's `hang` line and the simulator's log record:
/// `ran_ms=... state=...[ wait=... wait_va|wait_pa=... wait_value=...] offset=... timeout_ms=...
/// timeout_source=... recent_ms=<a,b,...|none>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HangFacts {
    /// How long the job had run when it was stopped, from its start on the queue (the
    /// watchdog's `super::recovery::JobClock`), ms.
    pub ran_ms: u64,
    /// What the queue was doing.
    pub activity: QueueActivity,
    /// `Q_CUR_OFFSET`: the current packet's byte offset in its command buffer.
    pub offset: u32,
    /// The timeout in force and where it came from.
    pub timeout_ms: u64,
    pub timeout_source: TimeoutSource,
    /// The run times of the context's last completed jobs, oldest first.
    pub recent: super::recovery::RecentJobs,
}

impl HangFacts {
    /// `recent_ms`'s value: the run times joined with `,`, or `none`.
    pub fn write_recent(&self, f: &mut impl fmt::Write) -> fmt::Result {
        if self.recent.is_empty() {
            return f.write_str("none");
        }
        for (i, ms) in self.recent.iter().enumerate() {
            if i > 0 {
                f.write_char(',')?;
            }
            write!(f, "{}", ms)?;
        }
        Ok(())
    }
}

impl Display for HangFacts {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ran_ms={} state={}",
            self.ran_ms,
            self.activity.state_name()
        )?;
        match self.activity {
            QueueActivity::WaitMem { va, value } => {
                write!(f, " wait=mem wait_va={:#x} wait_value={}", va, value)?
            }
            QueueActivity::WaitFence { pa, value } => {
                write!(f, " wait=fence wait_pa={:#x} wait_value={}", pa, value)?
            }
            _ => {}
        }
        write!(
            f,
            " offset={} timeout_ms={} timeout_source={} recent_ms=",
            self.offset,
            self.timeout_ms,
            self.timeout_source.name()
        )?;
        self.write_recent(f)
    }
}

/// `job timeout: ctx=... pid=... comm=... queue=... job=... seqno=... <HangFacts>
/// injected=<0|1>; context banned, resetting engine` (or `job timeout: queue=... job=...
/// <HangFacts> injected=...; no job of a live context owns it, resetting engine`). The clause
/// after the last `; ` is for people; the tools read the fields before it.
pub struct HangLine<C> {
    pub queue: usize,
    pub job: u64,
    /// The guilty context, its job's seqno and its owner.
    pub guilty: Option<(u32, u64, Owner<C>)>,
    pub facts: HangFacts,
    /// A fault injection made it (`inject_hang`).
    pub injected: bool,
}

impl<C: Display> Display for HangLine<C> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.guilty {
            Some((ctx, seqno, o)) => write!(
                f,
                "{}: ctx={} pid={} comm={} queue={} job={} seqno={} {} injected={}; context banned, resetting engine",
                lead::HANG, ctx, o.pid, o.comm, self.queue, self.job, seqno, self.facts, injected_value(self.injected)
            ),
            None => write!(
                f,
                "{}: queue={} job={} {} injected={}; no job of a live context owns it, resetting engine",
                lead::HANG, self.queue, self.job, self.facts, injected_value(self.injected)
            ),
        }
    }
}

/// `dependency failed: ctx=... pid=... comm=... seqno=... waits for ctx=... seqno=...
/// cause=<fault|hang|dependency|dropped>; job not run, context banned`: a queued job whose
/// in-fence will never signal (`super::recovery`).
pub struct DependencyLine<C> {
    /// The consumer context, the seqno of its job that will not run, and its owner.
    pub ctx: u32,
    pub seqno: u64,
    pub owner: Owner<C>,
    /// The producer it waited for and the fence value.
    pub producer: u32,
    pub producer_seqno: u64,
    /// Why the producer was banned.
    pub cause: Ban,
}

impl<C: Display> Display for DependencyLine<C> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: ctx={} pid={} comm={} seqno={} waits for ctx={} seqno={} cause={}; job not run, context banned",
            lead::DEPENDENCY,
            self.ctx,
            self.owner.pid,
            self.owner.comm,
            self.seqno,
            self.producer,
            self.producer_seqno,
            self.cause.name()
        )
    }
}

/// `engine reset done: resubmitted=<n> dropped=<n>`: jobs written back, jobs dropped.
pub struct ResetLine {
    pub resubmitted: u32,
    pub dropped: u32,
}

impl Display for ResetLine {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: resubmitted={} dropped={}",
            lead::RESET_DONE,
            self.resubmitted,
            self.dropped
        )
    }
}

/// A debugfs `contexts` line: `ctx=... client=... pid=... comm=... queue=... prio=...
/// submitted=... completed=... reset=... hung=...[ fault=... access=... va=... offset=...][
/// dep_ctx=... dep_seqno=...][ ban=...][ destroyed=1]`.
pub struct ContextLine<C> {
    pub id: u32,
    pub client: u64,
    pub owner: Owner<C>,
    pub queue: usize,
    pub priority: u32,
    pub submitted: u64,
    pub completed: u64,
    pub reset_status: u32,
    pub ban: Option<Ban>,
    /// Destroyed by user space while its jobs are still in a ring.
    pub destroyed: bool,
}

impl<C: Display> Display for ContextLine<C> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ctx={} client={} pid={} comm={} queue={} prio={} submitted={} completed={} reset={} hung={}",
            self.id,
            self.client,
            self.owner.pid,
            self.owner.comm,
            self.queue,
            prio_name(self.priority),
            self.submitted,
            self.completed,
            reset_name(self.reset_status),
            u32::from(self.ban == Some(Ban::Hang))
        )?;
        match self.ban {
            Some(Ban::Fault(i)) => write!(
                f,
                " fault={} access={} va={:#x} offset={}",
                regs::fault_kind_name(i.kind),
                regs::access_name(i.access),
                i.va,
                i.offset
            )?,
            Some(Ban::Dependency { ctx, seqno }) => {
                write!(f, " dep_ctx={} dep_seqno={}", ctx, seqno)?
            }
            _ => {}
        }
        if let Some(b) = self.ban {
            write!(f, " ban={}", b.name())?;
        }
        if self.destroyed {
            write!(f, " destroyed=1")?;
        }
        Ok(())
    }
}

/// A debugfs `queues` line: `queue=... prio=... state=... head=... tail=... inflight=...
/// jobs=... busy_pct=... cur_job=...`.
pub struct QueueLine {
    pub queue: usize,
    /// `Q_STATE`, `Q_HEAD` and `Q_CUR_JOB` as read from the device.
    pub state: u32,
    pub head: u32,
    pub cur_job: u64,
    pub tail: u32,
    pub inflight: usize,
    pub done: u64,
    pub busy_pct: u32,
}

impl Display for QueueLine {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "queue={} prio={} state={} head={} tail={} inflight={} jobs={} busy_pct={} cur_job={}",
            self.queue,
            prio_name(super::queue::queue_priority(self.queue)),
            regs::qstate_name(self.state),
            self.head,
            self.tail,
            self.inflight,
            self.done,
            self.busy_pct,
            self.cur_job
        )
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::recovery::RecentJobs;
    use super::*;
    use core::fmt::Write as _;

    struct Buf {
        b: [u8; 512],
        n: usize,
    }

    impl fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.n + s.len();
            self.b
                .get_mut(self.n..end)
                .ok_or(fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.n = end;
            Ok(())
        }
    }

    fn text(d: impl Display) -> Buf {
        let mut b = Buf { b: [0; 512], n: 0 };
        write!(b, "{}", d).expect("fits");
        b
    }

    fn facts(activity: QueueActivity, recent: &[u32]) -> HangFacts {
        let mut r = RecentJobs::default();
        for &ms in recent {
            r.push(ms);
        }
        HangFacts {
            ran_ms: 2004,
            activity,
            offset: 24,
            timeout_ms: 2000,
            timeout_source: TimeoutSource::Default,
            recent: r,
        }
    }

    pub(in super::super) fn assert_text(d: impl Display, want: &str) {
        let b = text(d);
        assert_eq!(core::str::from_utf8(&b.b[..b.n]), Ok(want));
    }

    #[test]
    fn the_hang_line_has_every_fact_as_a_field() {
        let owner = Owner {
            pid: 4411,
            comm: "python",
        };
        assert_text(
            HangLine {
                queue: 1,
                job: 4711,
                guilty: Some((12, 57, owner)),
                facts: facts(QueueActivity::Executing, &[31, 30, 33]),
                injected: false,
            },
            "job timeout: ctx=12 pid=4411 comm=python queue=1 job=4711 seqno=57 ran_ms=2004 state=executing offset=24 timeout_ms=2000 timeout_source=default recent_ms=31,30,33 injected=0; context banned, resetting engine",
        );
        let mut f = facts(
            QueueActivity::WaitMem {
                va: 0x4000_1000,
                value: 7,
            },
            &[],
        );
        f.timeout_source = TimeoutSource::ModuleParam;
        assert_text(
            HangLine {
                queue: 3,
                job: 9,
                guilty: Some((2, 1, owner)),
                facts: f,
                injected: true,
            },
            "job timeout: ctx=2 pid=4411 comm=python queue=3 job=9 seqno=1 ran_ms=2004 state=waiting wait=mem wait_va=0x40001000 wait_value=7 offset=24 timeout_ms=2000 timeout_source=module_param recent_ms=none injected=1; context banned, resetting engine",
        );
        f.activity = QueueActivity::WaitFence {
            pa: 0x10_0008,
            value: 3,
        };
        f.timeout_source = TimeoutSource::Environment;
        assert_text(
            HangLine::<&str> {
                queue: 0,
                job: 5,
                guilty: None,
                facts: f,
                injected: false,
            },
            "job timeout: queue=0 job=5 ran_ms=2004 state=waiting wait=fence wait_pa=0x100008 wait_value=3 offset=24 timeout_ms=2000 timeout_source=environment recent_ms=none injected=0; no job of a live context owns it, resetting engine",
        );
        assert_text(
            facts(QueueActivity::Hung, &[1]),
            "ran_ms=2004 state=hung offset=24 timeout_ms=2000 timeout_source=default recent_ms=1",
        );
    }

    #[test]
    fn the_fault_line_has_kind_access_and_injection_as_fields() {
        let owner = Owner {
            pid: 4411,
            comm: "python",
        };
        let unmapped = super::super::FaultInfo {
            kind: regs::FAULT_UNMAPPED,
            access: regs::ACCESS_READ,
            va: 0x7_f001_0000,
            offset: 24,
        };
        assert_text(
            FaultLine {
                fault: unmapped,
                queue: 0,
                job: 4711,
                ctx: Some((12, owner, true)),
                injected: false,
            },
            "page fault: fault=unmapped access=read va=0x7f0010000 offset=24 queue=0 ctx=12 pid=4411 comm=python job=4711 injected=0; context banned",
        );
        assert_text(
            FaultLine {
                fault: unmapped,
                queue: 2,
                job: 8,
                ctx: Some((3, owner, false)),
                injected: true,
            },
            "page fault: fault=unmapped access=read va=0x7f0010000 offset=24 queue=2 ctx=3 pid=4411 comm=python job=8 injected=1; descriptor fetch, nobody banned",
        );
        let bus = super::super::FaultInfo {
            kind: regs::FAULT_BUS_ERROR,
            access: regs::ACCESS_FETCH,
            va: 0x4e1_0000,
            offset: 0,
        };
        assert_text(
            FaultLine::<&str> {
                fault: bus,
                queue: 0,
                job: 0,
                ctx: None,
                injected: true,
            },
            "uncorrectable memory error: fault=bus-error access=fetch va=0x4e10000 offset=0 queue=0 job=0 injected=1; no job of a live context owns it",
        );
        assert_eq!(fault_class(99), lead::GPU_FAULT);
        assert_text(
            ResetLine {
                resubmitted: 2,
                dropped: 3,
            },
            "engine reset done: resubmitted=2 dropped=3",
        );
    }

    #[test]
    fn the_queue_activity_comes_from_the_registers() {
        assert_eq!(
            QueueActivity::from_regs(regs::QSTATE_RUNNING, 0, 0, false),
            QueueActivity::Executing
        );
        assert_eq!(
            QueueActivity::from_regs(regs::QSTATE_HUNG, 0, 0, false),
            QueueActivity::Hung
        );
        assert_eq!(
            QueueActivity::from_regs(regs::QSTATE_WAITING, 0x40, 2, false),
            QueueActivity::WaitMem { va: 0x40, value: 2 }
        );
        assert_eq!(
            QueueActivity::from_regs(regs::QSTATE_WAITING, 0x40, 2, true),
            QueueActivity::WaitFence { pa: 0x40, value: 2 }
        );
        let idle = QueueActivity::from_regs(regs::QSTATE_IDLE, 0, 0, false);
        assert_eq!(idle, QueueActivity::Other(regs::QSTATE_IDLE));
        assert_eq!(idle.state_name(), "idle");
        assert_eq!(QueueActivity::Other(99).state_name(), "unknown");
    }
}
