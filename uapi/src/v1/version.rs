//! UAPI version and capability bits returned by the query ioctl.
//!
//! Adding a field or an ioctl bumps the minor; changing the meaning of anything bumps the major.
//! A user-space driver built for `MAJOR.m` can drive any kernel with the same major and a minor
//! of at least [`MIN_KERNEL_MINOR`].

/// UAPI major version: changes only when a meaning changes.
pub const UAPI_MAJOR: u32 = 1;
/// UAPI minor version: grows when fields, ioctls or reason codes are added.
/// 1.1: reasons `AS_SLOTS_BUSY` and `DEVICE_CTX_LIMIT` (causes 1.0 reported as `RING_FULL` and
/// `CTX_LIMIT`).
/// 1.2: reason `DEP_FAILED`; `CtxState` grows `ban`, `dep_ctx_id` and `dep_seqno`.
/// 1.3: reason `PT_LIMIT` (VM_BIND past the file's page-table budget; 1.2 kernels allocated
/// page tables without a bound).
pub const UAPI_MINOR: u32 = 3;
/// The oldest kernel minor this user space can drive (same major).
pub const MIN_KERNEL_MINOR: u32 = 0;

/// Driver version reported by the kernel module (major.minor.patch).
pub const DRIVER_VERSION: (u32, u32, u32) = (0, 1, 0);
/// The DRM driver name user space matches on (`DRM_IOCTL_VERSION`).
pub const DRIVER_NAME: &str = "aigpu";

/// Capability: the GEMM_I8 packet.
pub const CAP_GEMM_I8: u64 = 1 << 0;
/// Capability: the ELTWISE packet (add, mul, relu, requant).
pub const CAP_ELTWISE: u64 = 1 << 1;
/// Capability: WAIT_MEM packets and cross-queue in-fences on submit.
pub const CAP_WAIT_MEM: u64 = 1 << 2;
/// Capability: the TIMESTAMP packet.
pub const CAP_TIMESTAMP: u64 = 1 << 3;
/// Capability: the debug HANG packet is enabled (module parameter / simulator option).
pub const CAP_HANG_DEBUG: u64 = 1 << 4;
/// Capability: context priorities are honoured.
pub const CAP_PRIORITY: u64 = 1 << 5;
/// Every capability bit this UAPI version defines.
pub const CAPS_ALL: u64 =
    CAP_GEMM_I8 | CAP_ELTWISE | CAP_WAIT_MEM | CAP_TIMESTAMP | CAP_HANG_DEBUG | CAP_PRIORITY;

/// Page size of the GPU MMU (bytes).
pub const PAGE_SIZE: u64 = 4096;
/// Lowest usable GPU VA: the first MiB stays unmapped so a NULL-ish VA always faults.
pub const VA_START: u64 = 0x10_0000;
/// One past the highest usable GPU VA (47 bits: the top half of the 48-bit space is reserved).
pub const VA_END: u64 = 1 << 47;

/// Why a user-space driver cannot drive a kernel with the given version, if it cannot.
// `MIN_KERNEL_MINOR` is 0 today, which makes the minor check trivially true; keep it for when it
// grows.
#[allow(clippy::absurd_extreme_comparisons)]
pub const fn compatible(kernel_major: u32, kernel_minor: u32) -> bool {
    kernel_major == UAPI_MAJOR && kernel_minor >= MIN_KERNEL_MINOR
}
