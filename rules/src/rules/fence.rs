//! Fences, bans and what an in-fence means.
//!
//! A context's fence is its timeline: seqno `n` completes when its job's last command buffer
//! wrote `n`. A banned context never runs again, and its fences past `completed` never signal.
//! A job that waits on such a fence must not run on whatever its producer left in memory: the
//! rule, the way dma_fence errors propagate in the DRM drivers, is that the consumer fails with
//! the producer named ([`Ban::Dependency`]), and so, transitively, does everything that waits on
//! the consumer (`super::recovery`).

use super::flags::NoFlags;
use super::Refusal;
use crate::uapi::ioctl::{CtxState, BAN_DEPENDENCY, BAN_DROPPED, BAN_FAULT, BAN_HANG, BAN_NONE};
use crate::uapi::reason as r;

/// What the device reported about a fault.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultInfo {
    /// `regs::FAULT_*`.
    pub kind: u32,
    /// `regs::ACCESS_*`.
    pub access: u32,
    /// Faulting VA.
    pub va: u64,
    /// Byte offset of the faulting packet in its command buffer.
    pub offset: u64,
}

/// Why a context was banned: it never runs again, and its unsignalled fences never signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ban {
    /// One of its jobs faulted.
    Fault(FaultInfo),
    /// One of its jobs ran past the job timeout.
    Hang,
    /// One of its jobs waited on fence `seqno` of context `ctx`, which was banned before
    /// signalling it: that job did not run.
    Dependency {
        /// The producer context.
        ctx: u32,
        /// The fence value waited for.
        seqno: u64,
    },
    /// Its queued work could not be kept across an engine reset (no memory to hold it).
    Dropped,
}

impl Ban {
    /// The refusal a submit on the banned context gets.
    pub const fn on_submit(self) -> Refusal {
        match self {
            Ban::Dependency { .. } => Refusal::new(r::DEP_FAILED),
            _ => Refusal::new(r::CTX_BANNED),
        }
    }

    /// The refusal a wait for one of its unsignalled fences gets.
    pub const fn on_wait(self) -> Refusal {
        match self {
            Ban::Dependency { .. } => Refusal::new(r::DEP_FAILED),
            _ => Refusal::new(r::CTX_LOST),
        }
    }

    /// The UAPI code (`CtxState::ban`).
    pub const fn code(self) -> u32 {
        match self {
            Ban::Fault(_) => BAN_FAULT,
            Ban::Hang => BAN_HANG,
            Ban::Dependency { .. } => BAN_DEPENDENCY,
            Ban::Dropped => BAN_DROPPED,
        }
    }

    /// `fault`, `hang`, `dependency` or `dropped` (debugfs `ban=`, dmesg).
    pub const fn name(self) -> &'static str {
        match self {
            Ban::Fault(_) => "fault",
            Ban::Hang => "hang",
            Ban::Dependency { .. } => "dependency",
            Ban::Dropped => "dropped",
        }
    }
}

/// What an in-fence's producer context looks like to the submit that names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Producer {
    /// Its last submitted seqno.
    pub submitted: u64,
    /// Its last completed seqno.
    pub completed: u64,
    /// Set once it is banned.
    pub ban: Option<Ban>,
}

/// What a submit does with one in-fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InFence {
    /// Already signalled: nothing to wait for.
    Signalled,
    /// The job waits for it on the device (a `WAIT` descriptor).
    Wait,
}

/// The rule for in-fence `index` of a submit (`flags`, `seqno`) whose context is `producer`
/// (`None`: not a live context of the submitting file). Checked in this order: flags, context,
/// never submitted, signalled, producer banned (`ECANCELED` + `DEP_FAILED`: the job would run on
/// what the failed producer left behind, so it is refused and nothing is queued).
pub fn in_fence(
    index: u32,
    flags: u32,
    seqno: u64,
    producer: Option<Producer>,
) -> Result<InFence, Refusal> {
    NoFlags::try_from(flags).map_err(|e| e.at(index))?;
    let Some(p) = producer else {
        return Err(Refusal::new(r::FENCE_CTX_INVALID).at(index));
    };
    if seqno > p.submitted {
        return Err(Refusal::new(r::FENCE_NOT_SUBMITTED).at(index));
    }
    if seqno <= p.completed {
        return Ok(InFence::Signalled);
    }
    if p.ban.is_some() {
        return Err(Refusal::new(r::DEP_FAILED).at(index));
    }
    Ok(InFence::Wait)
}

/// The rule of WAIT on `seqno` of a context that has submitted up to `submitted` and completed
/// `completed`: `Ok(true)` when it is done, `Ok(false)` when it must sleep, or the refusal.
/// `closing`: CTX_DESTROY is waiting for the context (a wait returns `EINVAL` + `CTX_INVALID` at
/// once, so that a thread blocked in a wait is not left sleeping while another tears the
/// context down).
pub fn wait_done(
    seqno: u64,
    submitted: u64,
    completed: u64,
    closing: bool,
    ban: Option<Ban>,
) -> Result<bool, Refusal> {
    if seqno > submitted {
        return Err(Refusal::new(r::FENCE_NOT_SUBMITTED));
    }
    if completed >= seqno {
        return Ok(true);
    }
    if closing {
        return Err(Refusal::new(r::CTX_INVALID));
    }
    if let Some(b) = ban {
        return Err(b.on_wait());
    }
    Ok(false)
}

/// A context as CTX_STATE reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtxView {
    pub reset_status: u32,
    pub ban: Option<Ban>,
    pub submitted: u64,
    pub completed: u64,
}

/// The CTX_STATE reply for context `id`.
pub fn ctx_state(id: u32, c: CtxView) -> CtxState {
    let fault = match c.ban {
        Some(Ban::Fault(f)) => f,
        _ => FaultInfo::default(),
    };
    let (dep_ctx_id, dep_seqno) = match c.ban {
        Some(Ban::Dependency { ctx, seqno }) => (ctx, seqno),
        _ => (0, 0),
    };
    CtxState {
        ctx_id: id,
        flags: 0,
        reset_status: c.reset_status,
        fault_type: fault.kind,
        fault_va: fault.va,
        fault_access: fault.access,
        hung: u32::from(c.ban == Some(Ban::Hang)),
        fault_offset: fault.offset,
        completed_seqno: c.completed,
        submitted_seqno: c.submitted,
        reason: 0,
        pad: 0,
        ban: c.ban.map_or(BAN_NONE, Ban::code),
        dep_ctx_id,
        dep_seqno,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE: Producer = Producer {
        submitted: 5,
        completed: 3,
        ban: None,
    };

    #[test]
    fn in_fence_checks_in_documented_order() {
        assert_eq!(
            in_fence(2, 1, 9, None),
            Err(Refusal::new(r::FLAGS_UNKNOWN).at(2))
        );
        assert_eq!(
            in_fence(2, 0, 9, None),
            Err(Refusal::new(r::FENCE_CTX_INVALID).at(2))
        );
        assert_eq!(
            in_fence(1, 0, 6, Some(LIVE)),
            Err(Refusal::new(r::FENCE_NOT_SUBMITTED).at(1))
        );
        assert_eq!(in_fence(0, 0, 3, Some(LIVE)), Ok(InFence::Signalled));
        assert_eq!(in_fence(0, 0, 4, Some(LIVE)), Ok(InFence::Wait));
    }

    #[test]
    fn a_fence_of_a_banned_producer_is_refused_unless_it_signalled_before_the_ban() {
        let banned = Producer {
            ban: Some(Ban::Hang),
            ..LIVE
        };
        assert_eq!(in_fence(0, 0, 3, Some(banned)), Ok(InFence::Signalled));
        let e = in_fence(4, 0, 4, Some(banned)).unwrap_err();
        assert_eq!(
            (e.errno, e.reason, e.index),
            (super::super::refusal::errno::ECANCELED, r::DEP_FAILED, 4)
        );
    }

    #[test]
    fn waits_fail_with_the_ban_they_meet() {
        let dep = Ban::Dependency { ctx: 7, seqno: 2 };
        assert_eq!(
            wait_done(6, 5, 3, false, None),
            Err(Refusal::new(r::FENCE_NOT_SUBMITTED))
        );
        assert_eq!(wait_done(3, 5, 3, true, Some(Ban::Hang)), Ok(true));
        assert_eq!(
            wait_done(4, 5, 3, true, None),
            Err(Refusal::new(r::CTX_INVALID))
        );
        assert_eq!(
            wait_done(4, 5, 3, false, Some(Ban::Hang)),
            Err(Refusal::new(r::CTX_LOST))
        );
        assert_eq!(
            wait_done(4, 5, 3, false, Some(dep)),
            Err(Refusal::new(r::DEP_FAILED))
        );
        assert_eq!(wait_done(4, 5, 3, false, None), Ok(false));
    }
}
