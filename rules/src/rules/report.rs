//! The line formats the tools read: the driver's log lines for faults, hangs, failed
//! dependencies, resets and device loss (dmesg for aigpu.ko, the log records' message for the
//! simulator), and the `contexts` and `queues` lines of debugfs (docs/debugfs.md). Every line is
//! `key=value` fields after a fixed lead, so `tools/` parses fields, never sentences.
//!
//! Each format is a struct whose `Display` writes the line (without a newline), so the kernel
//! prints it into its text buffer and the simulator into a `String` with the same code.

use core::fmt::{self, Display, Formatter};

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

/// `page fault: <kind> <access> at va=... offset=... queue=... ctx=... pid=... comm=...
/// job=...; context banned`, or `...; descriptor fetch, nobody banned` for a fault while the
/// device fetched a descriptor of that job (`super::recovery::Blame::Fetching`), or `job=...; no
/// job of a live context owns it`.
pub struct FaultLine<C> {
    pub fault: super::FaultInfo,
    pub queue: usize,
    pub job: u64,
    /// The job's context and its owner, and whether it is guilty (banned).
    pub ctx: Option<(u32, Owner<C>, bool)>,
}

/// What kind of event a fault is: `page fault` (the context's own addressing), `uncorrectable
/// memory error` (hardware), `GPU fault` (anything else).
pub const fn fault_class(kind: u32) -> &'static str {
    match kind {
        regs::FAULT_UNMAPPED | regs::FAULT_PERMISSION | regs::FAULT_BAD_PTE => "page fault",
        regs::FAULT_BUS_ERROR => "uncorrectable memory error",
        _ => "GPU fault",
    }
}

impl<C: Display> Display for FaultLine<C> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let i = &self.fault;
        write!(
            f,
            "{}: {} {} at va={:#x} offset={} queue={}",
            fault_class(i.kind),
            regs::fault_kind_name(i.kind),
            regs::access_name(i.access),
            i.va,
            i.offset,
            self.queue
        )?;
        match &self.ctx {
            Some((ctx, o, guilty)) => write!(
                f,
                " ctx={} pid={} comm={} job={}; {}",
                ctx,
                o.pid,
                o.comm,
                self.job,
                if *guilty {
                    "context banned"
                } else {
                    "descriptor fetch, nobody banned"
                }
            ),
            None => write!(f, " job={}; no job of a live context owns it", self.job),
        }
    }
}

/// `job timeout: ctx=... pid=... comm=... queue=... job=... seqno=... after <ms> ms; context
/// banned, resetting engine` (or `job timeout: queue=... job=... after ...; no job of a live
/// context owns it, resetting engine`).
pub struct HangLine<C> {
    pub queue: usize,
    pub job: u64,
    pub timeout_ms: u64,
    /// The guilty context, its job's seqno and its owner.
    pub guilty: Option<(u32, u64, Owner<C>)>,
}

impl<C: Display> Display for HangLine<C> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match &self.guilty {
            Some((ctx, seqno, o)) => write!(
                f,
                "job timeout: ctx={} pid={} comm={} queue={} job={} seqno={} after {} ms; context banned, resetting engine",
                ctx, o.pid, o.comm, self.queue, self.job, seqno, self.timeout_ms
            ),
            None => write!(
                f,
                "job timeout: queue={} job={} after {} ms; no job of a live context owns it, resetting engine",
                self.queue, self.job, self.timeout_ms
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
            "dependency failed: ctx={} pid={} comm={} seqno={} waits for ctx={} seqno={} cause={}; job not run, context banned",
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

/// `engine reset done; resubmitted=<n> dropped=<n>`: jobs written back, jobs dropped.
pub struct ResetLine {
    pub resubmitted: u32,
    pub dropped: u32,
}

impl Display for ResetLine {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "engine reset done; resubmitted={} dropped={}",
            self.resubmitted, self.dropped
        )
    }
}

/// The one line said when the device is lost.
pub const LOST_LINE: &str = "engine reset failed: device lost; every ioctl now fails with ENODEV";

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
