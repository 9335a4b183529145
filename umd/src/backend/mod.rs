//! Backends: where the UAPI is implemented. The trait is the ioctl set of `uapi::ioctl`, one
//! method per ioctl (plus mmap), so the kernel backend is a thin ioctl wrapper and the simulator
//! implements the same semantics, errno and reason codes in-process.

pub mod kmd;
pub mod select;
pub mod sim;

use uapi::ioctl::{Cmdbuf, CtxState, Fence, Query};

/// A failed ioctl: what the kernel driver (or the simulator) said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmdError {
    /// Positive errno (`libc::EINVAL`, ...).
    pub errno: i32,
    /// `uapi::reason` code.
    pub reason: u32,
    /// Submit: index of the offending command buffer or fence.
    pub bad_index: u32,
    /// Submit: byte offset of the offending packet.
    pub bad_offset: u64,
}

impl KmdError {
    /// An error with an errno and a reason.
    pub const fn new(errno: i32, reason: u32) -> Self {
        KmdError {
            errno,
            reason,
            bad_index: 0,
            bad_offset: 0,
        }
    }
    /// A refusal for `reason` with the errno the driver's rules pair it with
    /// (`rules::refusal::default_errno`, aigpu.ko's table too): no errno spelled per site.
    pub fn refused(reason: u32) -> Self {
        rules::Refusal::new(reason).into()
    }
    /// "errno EINVAL (22), reason VA_OVERLAP (10): VA range overlaps an existing mapping".
    pub fn describe(&self) -> String {
        format!(
            "errno {} ({}), reason {} ({}): {}",
            errno_name(self.errno),
            self.errno,
            uapi::reason::name(self.reason),
            self.reason,
            uapi::reason::text(self.reason)
        )
    }
}

impl From<rules::Refusal> for KmdError {
    fn from(r: rules::Refusal) -> Self {
        // The simulator has no restartable calls: a wait a signal interrupts fails with EINTR,
        // as the kernel's does once it is not restarted.
        let errno = if r.errno == rules::refusal::errno::ERESTARTSYS {
            libc::EINTR
        } else {
            r.errno
        };
        KmdError {
            errno,
            reason: r.reason,
            bad_index: r.index,
            bad_offset: r.offset,
        }
    }
}

/// Symbolic name of the errnos the UAPI uses.
pub fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EINVAL => "EINVAL",
        libc::ENOENT => "ENOENT",
        libc::ENOMEM => "ENOMEM",
        libc::E2BIG => "E2BIG",
        libc::EFAULT => "EFAULT",
        libc::EAGAIN => "EAGAIN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EINTR => "EINTR",
        libc::ECANCELED => "ECANCELED",
        libc::ENODEV => "ENODEV",
        libc::EBUSY => "EBUSY",
        libc::ENOSPC => "ENOSPC",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EIO => "EIO",
        _ => "E?",
    }
}

/// Result of a backend call.
pub type KmdResult<T> = Result<T, KmdError>;

/// A CPU mapping of a GEM object.
#[derive(Clone, Copy, Debug)]
pub struct HostMap {
    /// First byte.
    pub ptr: *mut u8,
    /// Bytes mapped.
    pub len: u64,
}
// SAFETY: a HostMap is an address range in this process; who may touch it is governed by the
// buffer object that owns it, not by the thread that created it.
unsafe impl Send for HostMap {}
// SAFETY: as above.
unsafe impl Sync for HostMap {}

/// One open "DRM file" of one device. Methods map one to one onto the aigpu ioctls.
pub trait Backend: Send + Sync {
    /// `"sim"` or `"kmd"`.
    fn kind(&self) -> &'static str;
    /// Where the device is (`/dev/dri/renderD128`, `sim:0`).
    fn location(&self) -> String;
    /// `DRM_IOCTL_AIGPU_QUERY`.
    fn query(&self) -> KmdResult<Query>;
    /// `DRM_IOCTL_AIGPU_GEM_CREATE`: returns the handle.
    fn gem_create(&self, size: u64) -> KmdResult<u32>;
    /// `DRM_IOCTL_GEM_CLOSE`.
    fn gem_close(&self, handle: u32) -> KmdResult<()>;
    /// `DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET` + `mmap`.
    fn gem_mmap(&self, handle: u32, size: u64) -> KmdResult<HostMap>;
    /// `munmap` of a mapping returned by `gem_mmap`.
    fn gem_munmap(&self, map: HostMap) -> KmdResult<()>;
    /// `DRM_IOCTL_AIGPU_VM_BIND`.
    fn vm_bind(
        &self,
        handle: u32,
        va: u64,
        bo_offset: u64,
        size: u64,
        access: u32,
    ) -> KmdResult<()>;
    /// `DRM_IOCTL_AIGPU_VM_UNBIND`.
    fn vm_unbind(&self, va: u64, size: u64) -> KmdResult<()>;
    /// `DRM_IOCTL_AIGPU_CTX_CREATE`: returns the context id.
    fn ctx_create(&self, priority: u32) -> KmdResult<u32>;
    /// `DRM_IOCTL_AIGPU_CTX_DESTROY`.
    fn ctx_destroy(&self, ctx_id: u32) -> KmdResult<()>;
    /// `DRM_IOCTL_AIGPU_SUBMIT`: returns the job's sequence number.
    fn submit(
        &self,
        ctx_id: u32,
        cmdbufs: &[Cmdbuf],
        in_fences: &[Fence],
        flags: u32,
    ) -> KmdResult<u64>;
    /// `DRM_IOCTL_AIGPU_WAIT` with an absolute CLOCK_MONOTONIC deadline; returns the context's
    /// completed sequence number.
    fn wait(&self, ctx_id: u32, seqno: u64, deadline_ns: u64) -> KmdResult<u64>;
    /// `DRM_IOCTL_AIGPU_CTX_STATE`.
    fn ctx_state(&self, ctx_id: u32) -> KmdResult<CtxState>;
    /// Test-only fault injection (`UMD_DEBUG_FAULT_*`): the simulator's test hooks, or the
    /// kernel driver's root-only debugfs files. Not an ioctl.
    fn debug_inject(&self, what: u32) -> KmdResult<()>;
}
