//! A job as both drivers keep it while it is in a ring.

use super::recovery::JobView;

/// One `WAIT` descriptor of a job: the producer context, its fence slot (read by the device while
/// the `WAIT` is in a ring, so watched: `super::FenceSlots`) and the fence value waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceWait {
    pub ctx: u32,
    pub slot: u32,
    pub value: u64,
}

/// One job (the descriptors of one submit) from its submit until it leaves its ring, in each
/// driver's own containers: `D` holds its descriptors as written (kept to write them again
/// after an engine reset), `W` its waits, one [`FenceWait`] per `WAIT` descriptor, in order.
#[derive(Debug)]
pub struct Job<D, W> {
    /// What the rules see of it: its id, context and seqno.
    pub view: JobView,
    /// The open file (client) that submitted it.
    pub file: u64,
    pub descs: D,
    pub deps: W,
    /// Ring index of its first descriptor and one past its last.
    pub start: u32,
    pub end: u32,
    /// When it was submitted (`CLOCK_MONOTONIC` ns), for its run time
    /// (`super::recovery::RunTimes`).
    pub submitted_ns: u64,
}
