//! Ioctl numbers and argument structs (docs/uapi.md). The C twin is `include/aigpu_drm.h`;
//! `uapi/tests/layout.rs` checks both against each other.
//!
//! Rules every struct follows: `#[repr(C)]`, explicit padding (`pad*`, must be zero), a `flags`
//! field that must be zero unless bits are defined for it, and a `reason` out-field the KMD fills
//! on every failure (see [`super::reason`]). Structs only grow at the end (the DRM core
//! zero-extends a shorter struct from older user space).

/// `DRM_IOCTL_BASE`.
pub const DRM_IOCTL_BASE: u32 = b'd' as u32;
/// `DRM_COMMAND_BASE`: first driver-private ioctl number.
pub const DRM_COMMAND_BASE: u32 = 0x40;

/// `_IOWR('d', DRM_COMMAND_BASE + nr, size)`.
pub const fn iowr(nr: u32, size: usize) -> u32 {
    (3 << 30) | ((size as u32 & 0x3FFF) << 16) | (DRM_IOCTL_BASE << 8) | (DRM_COMMAND_BASE + nr)
}

/// Driver ioctl index: query.
pub const NR_QUERY: u32 = 0x00;
/// Driver ioctl index: GEM create.
pub const NR_GEM_CREATE: u32 = 0x01;
/// Driver ioctl index: GEM mmap offset.
pub const NR_GEM_MMAP_OFFSET: u32 = 0x02;
/// Driver ioctl index: VM bind.
pub const NR_VM_BIND: u32 = 0x03;
/// Driver ioctl index: VM unbind.
pub const NR_VM_UNBIND: u32 = 0x04;
/// Driver ioctl index: context create.
pub const NR_CTX_CREATE: u32 = 0x05;
/// Driver ioctl index: context destroy.
pub const NR_CTX_DESTROY: u32 = 0x06;
/// Driver ioctl index: submit.
pub const NR_SUBMIT: u32 = 0x07;
/// Driver ioctl index: wait.
pub const NR_WAIT: u32 = 0x08;
/// Driver ioctl index: context state.
pub const NR_CTX_STATE: u32 = 0x09;
/// Number of driver ioctls in v1.
pub const NUM_IOCTLS: u32 = 10;

/// Query: versions, capabilities and limits. All fields but `flags` are out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// In: must be zero.
    pub flags: u32,
    /// Out: reason on failure.
    pub reason: u32,
    /// UAPI major.
    pub uapi_major: u32,
    /// UAPI minor.
    pub uapi_minor: u32,
    /// Driver version major.
    pub driver_major: u32,
    /// Driver version minor.
    pub driver_minor: u32,
    /// Driver version patch.
    pub driver_patch: u32,
    /// Hardware queues.
    pub num_queues: u32,
    /// `CAP_*` bits.
    pub caps: u64,
    /// First usable GPU VA.
    pub va_start: u64,
    /// One past the last usable GPU VA.
    pub va_end: u64,
    /// GPU page size.
    pub page_size: u32,
    /// Most command buffers in one submit.
    pub max_cmdbufs: u32,
    /// Memory the device may use, in bytes.
    pub mem_total: u64,
    /// Memory currently allocated in GEM objects on this device, in bytes.
    pub mem_used: u64,
    /// Largest single GEM object, in bytes.
    pub max_bo_size: u64,
    /// Most in-fences in one submit.
    pub max_in_fences: u32,
    /// Most contexts per file.
    pub max_contexts: u32,
}

/// GEM create: a shmem-backed buffer object.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemCreate {
    /// In: bytes (rounded up to the page size).
    pub size: u64,
    /// In: must be zero.
    pub flags: u32,
    /// Out: handle.
    pub handle: u32,
    /// Out: reason on failure.
    pub reason: u32,
    /// Must be zero.
    pub pad: u32,
}

/// GEM mmap offset: the fake offset to pass to `mmap` on the DRM fd.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemMmapOffset {
    /// In: handle.
    pub handle: u32,
    /// In: must be zero.
    pub flags: u32,
    /// Out: mmap offset.
    pub offset: u64,
    /// Out: reason on failure.
    pub reason: u32,
    /// Must be zero.
    pub pad: u32,
}

/// VM access bit: the GPU may read the mapping.
pub const VM_ACCESS_READ: u32 = 1 << 0;
/// VM access bit: the GPU may write the mapping.
pub const VM_ACCESS_WRITE: u32 = 1 << 1;

/// VM bind: map `[bo_offset, bo_offset + size)` of an object at `va` in the file's GPU VM.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmBind {
    /// In: object handle.
    pub handle: u32,
    /// In: must be zero.
    pub flags: u32,
    /// In: GPU VA (page aligned).
    pub va: u64,
    /// In: offset into the object (page aligned).
    pub bo_offset: u64,
    /// In: bytes (page aligned, non-zero).
    pub size: u64,
    /// In: `VM_ACCESS_*` (non-empty).
    pub access: u32,
    /// Out: reason on failure.
    pub reason: u32,
}

/// VM unbind: remove exactly one mapping.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmUnbind {
    /// In: must be zero.
    pub flags: u32,
    /// Out: reason on failure.
    pub reason: u32,
    /// In: VA the mapping starts at.
    pub va: u64,
    /// In: its size.
    pub size: u64,
}

/// Context priority: low.
pub const PRIORITY_LOW: u32 = 0;
/// Context priority: normal.
pub const PRIORITY_NORMAL: u32 = 1;
/// Context priority: high.
pub const PRIORITY_HIGH: u32 = 2;

/// Context (queue) create.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtxCreate {
    /// In: must be zero.
    pub flags: u32,
    /// In: `PRIORITY_*`.
    pub priority: u32,
    /// Out: context id (non-zero).
    pub ctx_id: u32,
    /// Out: reason on failure.
    pub reason: u32,
}

/// Context destroy. Pending work is waited for (bounded by the job timeout) before teardown.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtxDestroy {
    /// In: context id.
    pub ctx_id: u32,
    /// In: must be zero.
    pub flags: u32,
    /// Out: reason on failure.
    pub reason: u32,
    /// Must be zero.
    pub pad: u32,
}

/// One command buffer of a submit (array element behind [`Submit::cmdbufs`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cmdbuf {
    /// GPU VA of the packets (4-byte aligned).
    pub va: u64,
    /// Bytes (multiple of 4, 1 ..= 1 MiB).
    pub size: u32,
    /// Must be zero.
    pub flags: u32,
}

/// A fence: a sequence number on a context of the same file.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fence {
    /// Context id.
    pub ctx_id: u32,
    /// Must be zero.
    pub flags: u32,
    /// Sequence number on that context.
    pub seqno: u64,
}

/// Submit flag: fail with `EAGAIN` instead of blocking on a full ring (`reason` = `RING_FULL`)
/// or, on aigpu.ko, on every address-space slot being held by other files' work
/// (`AS_SLOTS_BUSY`, UAPI 1.1; 1.0 said `RING_FULL`).
pub const SUBMIT_FLAG_NO_BLOCK: u32 = 1 << 0;
/// Most command buffers in one submit.
pub const MAX_CMDBUFS: u32 = 256;
/// Most in-fences in one submit.
pub const MAX_IN_FENCES: u32 = 16;
/// Most contexts per file.
pub const MAX_CONTEXTS: u32 = 64;

/// Submit: many command buffers as one job on a context, after the in-fences signal.
/// The job's completion is the out-fence (`ctx_id`, `out_seqno`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Submit {
    /// In: context id.
    pub ctx_id: u32,
    /// In: `SUBMIT_FLAG_*`.
    pub flags: u32,
    /// In: user pointer to `num_cmdbufs` [`Cmdbuf`].
    pub cmdbufs: u64,
    /// In: user pointer to `num_in_fences` [`Fence`].
    pub in_fences: u64,
    /// In: 1 ..= `MAX_CMDBUFS`.
    pub num_cmdbufs: u32,
    /// In: 0 ..= `MAX_IN_FENCES`.
    pub num_in_fences: u32,
    /// Out: the job's sequence number on the context.
    pub out_seqno: u64,
    /// Out: reason on failure.
    pub reason: u32,
    /// Out: index of the offending command buffer or fence (on failure).
    pub bad_index: u32,
    /// Out: byte offset of the offending packet in that command buffer (on failure).
    pub bad_offset: u64,
}

/// Wait: sleep until the fence signals or `timeout_ns` (absolute, `CLOCK_MONOTONIC`) passes.
///
/// Outcomes: 0 signalled; `-ETIMEDOUT` (reason `TIMEOUT`) the work is still running;
/// `-EINTR` (reason `INTERRUPTED`) a signal arrived: call again with the same absolute timeout;
/// `-ECANCELED` (reason `CTX_LOST`) the context was reset or faulted and the fence will never
/// signal; `-ENODEV` (reason `DEVICE_LOST`) the device is lost.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wait {
    /// In: context id.
    pub ctx_id: u32,
    /// In: must be zero.
    pub flags: u32,
    /// In: sequence number to wait for.
    pub seqno: u64,
    /// In: absolute `CLOCK_MONOTONIC` deadline in ns (0: poll).
    pub timeout_ns: u64,
    /// Out: the context's last completed sequence number.
    pub completed_seqno: u64,
    /// Out: reason on failure.
    pub reason: u32,
    /// Must be zero.
    pub pad: u32,
}

/// Reset status: the context was never reset.
pub const RESET_NONE: u32 = 0;
/// Reset status: the context caused a fault or hang and is banned.
pub const RESET_GUILTY: u32 = 1;
/// Reset status: the context lost no work but was caught in someone else's reset.
pub const RESET_INNOCENT: u32 = 2;

/// Context state: reset status, fault and progress of a context.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtxState {
    /// In: context id.
    pub ctx_id: u32,
    /// In: must be zero.
    pub flags: u32,
    /// Out: `RESET_*`.
    pub reset_status: u32,
    /// Out: fault type (`regs::FAULT_*`, 0 if none; a hang is reported with `hung` = 1).
    pub fault_type: u32,
    /// Out: faulting VA.
    pub fault_va: u64,
    /// Out: access type (`regs::ACCESS_*`).
    pub fault_access: u32,
    /// Out: 1 if the context was banned for a hang (job timeout).
    pub hung: u32,
    /// Out: byte offset of the faulting packet in its command buffer.
    pub fault_offset: u64,
    /// Out: last completed sequence number.
    pub completed_seqno: u64,
    /// Out: last submitted sequence number.
    pub submitted_seqno: u64,
    /// Out: reason on failure.
    pub reason: u32,
    /// Must be zero.
    pub pad: u32,
    /// Out (1.2): why the context is banned, `BAN_*` (`BAN_NONE` while it is not).
    pub ban: u32,
    /// Out (1.2): with `BAN_DEPENDENCY`, the producer context whose fence will never signal.
    pub dep_ctx_id: u32,
    /// Out (1.2): with `BAN_DEPENDENCY`, the fence value of `dep_ctx_id` that was waited for.
    pub dep_seqno: u64,
}

/// `CtxState::ban`: not banned.
pub const BAN_NONE: u32 = 0;
/// `CtxState::ban`: one of its jobs faulted (`fault_*` say how).
pub const BAN_FAULT: u32 = 1;
/// `CtxState::ban`: one of its jobs ran past the job timeout (`hung` = 1).
pub const BAN_HANG: u32 = 2;
/// `CtxState::ban`: one of its jobs waited on a fence that will never signal (`dep_*` name it);
/// that job did not run.
pub const BAN_DEPENDENCY: u32 = 3;
/// `CtxState::ban`: its queued work could not be kept across an engine reset.
pub const BAN_DROPPED: u32 = 4;

/// `DRM_IOCTL_AIGPU_QUERY`.
pub const IOCTL_QUERY: u32 = iowr(NR_QUERY, core::mem::size_of::<Query>());
/// `DRM_IOCTL_AIGPU_GEM_CREATE`.
pub const IOCTL_GEM_CREATE: u32 = iowr(NR_GEM_CREATE, core::mem::size_of::<GemCreate>());
/// `DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET`.
pub const IOCTL_GEM_MMAP_OFFSET: u32 =
    iowr(NR_GEM_MMAP_OFFSET, core::mem::size_of::<GemMmapOffset>());
/// `DRM_IOCTL_AIGPU_VM_BIND`.
pub const IOCTL_VM_BIND: u32 = iowr(NR_VM_BIND, core::mem::size_of::<VmBind>());
/// `DRM_IOCTL_AIGPU_VM_UNBIND`.
pub const IOCTL_VM_UNBIND: u32 = iowr(NR_VM_UNBIND, core::mem::size_of::<VmUnbind>());
/// `DRM_IOCTL_AIGPU_CTX_CREATE`.
pub const IOCTL_CTX_CREATE: u32 = iowr(NR_CTX_CREATE, core::mem::size_of::<CtxCreate>());
/// `DRM_IOCTL_AIGPU_CTX_DESTROY`.
pub const IOCTL_CTX_DESTROY: u32 = iowr(NR_CTX_DESTROY, core::mem::size_of::<CtxDestroy>());
/// `DRM_IOCTL_AIGPU_SUBMIT`.
pub const IOCTL_SUBMIT: u32 = iowr(NR_SUBMIT, core::mem::size_of::<Submit>());
/// `DRM_IOCTL_AIGPU_WAIT`.
pub const IOCTL_WAIT: u32 = iowr(NR_WAIT, core::mem::size_of::<Wait>());
/// `DRM_IOCTL_AIGPU_CTX_STATE`.
pub const IOCTL_CTX_STATE: u32 = iowr(NR_CTX_STATE, core::mem::size_of::<CtxState>());
