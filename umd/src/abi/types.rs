//! C types of the ABI: handles, fences, versioned info structs and their constants.
//!
//! Constants are literals (cbindgen cannot evaluate expressions from other crates); the tests
//! at the end pin each one to the uapi value it mirrors.

/// The one rule for every versioned struct (`umdErrorDetail`, `umdDeviceInfo`,
/// `umdContextState`, `umdMemAllocInfo`, `umdMemStats`, `umdMemContextStats`, `umdLogStats`):
/// set `struct_size = sizeof(<struct>)` from the header you compile with. libumd accepts any
/// size from the struct's version 1 (the `UMD_*_SIZE_V1` constants, the sizes in this first ABI
/// version) up: it fills what both sides know and never writes past `struct_size`. A smaller
/// value is `UMD_ERR_INVALID_STRUCT_SIZE`, with the minimum in the detail.
pub const UMD_ERROR_DETAIL_SIZE_V1: u32 = 1032;
/// Version-1 size of `umdDeviceInfo` (see `UMD_ERROR_DETAIL_SIZE_V1` for the rule).
pub const UMD_DEVICE_INFO_SIZE_V1: u32 = 152;
/// Version-1 size of `umdContextState`.
pub const UMD_CONTEXT_STATE_SIZE_V1: u32 = 56;
/// Version-1 size of `umdMemAllocInfo`.
pub const UMD_MEM_ALLOC_INFO_SIZE_V1: u32 = 32;
/// Version-1 size of `umdMemStats`.
pub const UMD_MEM_STATS_SIZE_V1: u32 = 1032;
/// Version-1 size of `umdMemContextStats`.
pub const UMD_MEM_CONTEXT_STATS_SIZE_V1: u32 = 136;
/// Version-1 size of `umdLogStats`.
pub const UMD_LOG_STATS_SIZE_V1: u32 = 96;

// The version-1 sizes are literals for the header; they are the structs' sizes in this version.
const _: () = {
    use std::mem::size_of;
    assert!(size_of::<crate::error::detail::umdErrorDetail>() == UMD_ERROR_DETAIL_SIZE_V1 as usize);
    // Version 2 (libumd 1.2) appended `pci_address`.
    assert!(std::mem::offset_of!(umdDeviceInfo, pci_address) == UMD_DEVICE_INFO_SIZE_V1 as usize);
    assert!(size_of::<umdDeviceInfo>() == UMD_DEVICE_INFO_SIZE_V1 as usize + 16);
    // Version 2 (libumd 1.2) appended `ban`, `reserved2`, `dep_context_id`, `dep_seqno`.
    assert!(std::mem::offset_of!(umdContextState, ban) == UMD_CONTEXT_STATE_SIZE_V1 as usize);
    assert!(size_of::<umdContextState>() == UMD_CONTEXT_STATE_SIZE_V1 as usize + 24);
    assert!(size_of::<super::memory::umdMemAllocInfo>() == UMD_MEM_ALLOC_INFO_SIZE_V1 as usize);
    assert!(size_of::<super::memory::umdMemStats>() == UMD_MEM_STATS_SIZE_V1 as usize);
    assert!(
        size_of::<super::memory::umdMemContextStats>() == UMD_MEM_CONTEXT_STATS_SIZE_V1 as usize
    );
    assert!(size_of::<super::log::umdLogStats>() == UMD_LOG_STATS_SIZE_V1 as usize);
};

/// An open device. 0 is never a valid handle.
#[allow(non_camel_case_types)]
pub type umdDevice = u64;
/// A context (a queue of work with its own fence timeline).
#[allow(non_camel_case_types)]
pub type umdContext = u64;
/// A device buffer.
#[allow(non_camel_case_types)]
pub type umdBuffer = u64;
/// A command buffer.
#[allow(non_camel_case_types)]
pub type umdCmdBuf = u64;
/// A GPU virtual address (from `umdMemGetAddress`, plus an offset).
#[allow(non_camel_case_types)]
pub type umdDevicePtr = u64;
/// Context priority (`UMD_PRIORITY_*`).
#[allow(non_camel_case_types)]
pub type umdPriority = u32;

/// Low priority.
pub const UMD_PRIORITY_LOW: umdPriority = 0;
/// Normal priority.
pub const UMD_PRIORITY_NORMAL: umdPriority = 1;
/// High priority.
pub const UMD_PRIORITY_HIGH: umdPriority = 2;

/// `umdMemAlloc` flag: the GPU may only read the buffer.
pub const UMD_MEM_READ_ONLY: u32 = 1;

/// Element-wise op: dst = a + b (int32, wrapping).
pub const UMD_ELTWISE_ADD: u32 = 0;
/// Element-wise op: dst = a * b (int32, wrapping).
pub const UMD_ELTWISE_MUL: u32 = 1;
/// Element-wise op: dst = max(a, 0) (b must be 0).
pub const UMD_ELTWISE_RELU: u32 = 2;

/// `umdGemmI8Args.flags`: add to C instead of overwriting it.
pub const UMD_GEMM_ACCUMULATE: u32 = 1;

/// Reset status: never reset.
pub const UMD_RESET_NONE: u32 = 0;
/// Reset status: this context caused a fault or hang (lost, banned).
pub const UMD_RESET_GUILTY: u32 = 1;
/// Reset status: caught in another context's reset; its work was resubmitted.
pub const UMD_RESET_INNOCENT: u32 = 2;

/// `umdContextState.ban`: the context is not banned.
pub const UMD_BAN_NONE: u32 = 0;
/// `umdContextState.ban`: one of its jobs faulted (`fault_*` say how).
pub const UMD_BAN_FAULT: u32 = 1;
/// `umdContextState.ban`: one of its jobs ran past the job timeout (`hung` is 1).
pub const UMD_BAN_HANG: u32 = 2;
/// `umdContextState.ban`: one of its jobs waited on a fence of a context that failed first
/// (`dep_context_id`, `dep_seqno`); that job did not run.
pub const UMD_BAN_DEPENDENCY: u32 = 3;
/// `umdContextState.ban`: its queued work could not be kept across an engine reset.
pub const UMD_BAN_DROPPED: u32 = 4;

/// Debug fault injection: the next device memory access fails (uncorrectable error).
pub const UMD_DEBUG_FAULT_MEM_ERROR: u32 = 1;
/// Debug fault injection: the next engine reset fails (the device is then lost).
pub const UMD_DEBUG_FAULT_RESET_FAILURE: u32 = 2;
/// Debug fault injection: the device falls off the bus now.
pub const UMD_DEBUG_FAULT_FALL_OFF_BUS: u32 = 3;

/// Wait forever.
pub const UMD_TIMEOUT_INFINITE: u64 = u64::MAX;

/// A fence: completion of a submitted job, as (context, sequence number). Seqno 0 is always
/// signalled.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umdFence {
    /// The context the job ran on.
    pub context: umdContext,
    /// The job's sequence number on it.
    pub seqno: u64,
}

/// Device information. Versioned: set `struct_size = sizeof(umdDeviceInfo)` first (at least
/// `UMD_DEVICE_INFO_SIZE_V1`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct umdDeviceInfo {
    /// In: sizeof(umdDeviceInfo).
    pub struct_size: u32,
    /// Device index.
    pub index: u32,
    /// "kmd" or "sim" (NUL-terminated).
    pub backend: [std::ffi::c_char; 8],
    /// "/dev/dri/renderD128" or "sim:0" (NUL-terminated).
    pub location: [std::ffi::c_char; 64],
    /// Kernel (or simulator) UAPI major.
    pub uapi_major: u32,
    /// Kernel (or simulator) UAPI minor.
    pub uapi_minor: u32,
    /// Kernel driver version.
    pub driver_major: u32,
    /// Kernel driver version.
    pub driver_minor: u32,
    /// Kernel driver version.
    pub driver_patch: u32,
    /// Hardware queues.
    pub num_queues: u32,
    /// Capability bits (AIGPU_CAP_* in aigpu_drm.h).
    pub caps: u64,
    /// Device memory, bytes.
    pub mem_total: u64,
    /// Largest single allocation, bytes.
    pub max_alloc: u64,
    /// First usable GPU VA.
    pub va_start: u64,
    /// One past the last usable GPU VA.
    pub va_end: u64,
    /// GPU page size.
    pub page_size: u32,
    /// Most command buffers in one kernel submit (libumd splits larger batches).
    pub max_cmdbufs_per_submit: u32,
    /// Version 2: the PCI address of the function the device is attached to (`0000:00:04.0`,
    /// NUL-terminated); empty when it is not on PCI (a faux device, the simulator).
    pub pci_address: [std::ffi::c_char; 16],
}

/// Context state. Versioned: set `struct_size = sizeof(umdContextState)` first (at least
/// `UMD_CONTEXT_STATE_SIZE_V1`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umdContextState {
    /// In: sizeof(umdContextState).
    pub struct_size: u32,
    /// UMD_RESET_NONE / GUILTY / INNOCENT.
    pub reset_status: u32,
    /// 1 if the context was reset because it hung (job timeout).
    pub hung: u32,
    /// Fault type (AIGPU_FAULT_* in aigpu_drm.h; 0 none).
    pub fault_type: u32,
    /// Faulting GPU VA.
    pub fault_va: u64,
    /// Access type of the fault (0 read, 1 write, 2 fetch).
    pub fault_access: u32,
    /// Must be ignored.
    pub reserved: u32,
    /// Byte offset of the faulting packet in its command buffer.
    pub fault_offset: u64,
    /// Last completed sequence number.
    pub completed_seqno: u64,
    /// Last submitted sequence number.
    pub submitted_seqno: u64,
    /// Why the context is banned, `UMD_BAN_*` (after the version-1 fields: a caller with the
    /// version-1 size does not get it).
    pub ban: u32,
    /// Must be ignored.
    pub reserved2: u32,
    /// With `UMD_BAN_DEPENDENCY`: the id of the context whose fence will never signal (the id
    /// error details and log records use; 0 if it is no longer live).
    pub dep_context_id: u64,
    /// With `UMD_BAN_DEPENDENCY`: the sequence number of that fence.
    pub dep_seqno: u64,
}

/// Arguments of `umdCmdGemmI8`: C[m x n] (+)= A[m x k] * B[k x n]; A, B int8, C int32,
/// row-major, leading dimensions in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umdGemmI8Args {
    /// A (int8).
    pub a: umdDevicePtr,
    /// B (int8).
    pub b: umdDevicePtr,
    /// C (int32).
    pub c: umdDevicePtr,
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Columns of A, rows of B.
    pub k: u32,
    /// Row stride of A (>= k).
    pub lda: u32,
    /// Row stride of B (>= n).
    pub ldb: u32,
    /// Row stride of C (>= n).
    pub ldc: u32,
    /// UMD_GEMM_ACCUMULATE or 0.
    pub flags: u32,
    /// Must be 0.
    pub reserved: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn abi_constants_mirror_the_uapi() {
        assert_eq!(UMD_MEM_READ_ONLY, crate::memory::MEM_FLAG_READ_ONLY);
        assert_eq!(UMD_ELTWISE_ADD, uapi::packet::ELT_ADD);
        assert_eq!(UMD_ELTWISE_MUL, uapi::packet::ELT_MUL);
        assert_eq!(UMD_ELTWISE_RELU, uapi::packet::ELT_RELU);
        assert_eq!(UMD_RESET_NONE, uapi::ioctl::RESET_NONE);
        assert_eq!(UMD_RESET_GUILTY, uapi::ioctl::RESET_GUILTY);
        assert_eq!(UMD_RESET_INNOCENT, uapi::ioctl::RESET_INNOCENT);
        assert_eq!(UMD_BAN_NONE, uapi::ioctl::BAN_NONE);
        assert_eq!(UMD_BAN_FAULT, uapi::ioctl::BAN_FAULT);
        assert_eq!(UMD_BAN_HANG, uapi::ioctl::BAN_HANG);
        assert_eq!(UMD_BAN_DEPENDENCY, uapi::ioctl::BAN_DEPENDENCY);
        assert_eq!(UMD_BAN_DROPPED, uapi::ioctl::BAN_DROPPED);
        assert_eq!(UMD_PRIORITY_LOW, uapi::ioctl::PRIORITY_LOW);
        assert_eq!(UMD_PRIORITY_NORMAL, uapi::ioctl::PRIORITY_NORMAL);
        assert_eq!(UMD_PRIORITY_HIGH, uapi::ioctl::PRIORITY_HIGH);
    }
}
