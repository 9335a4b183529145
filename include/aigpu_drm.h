/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * aigpu DRM UAPI, v1: the C twin of the Rust `uapi` crate (uapi/src/v1/ioctl.rs, reason.rs,
 * version.rs). Every struct has the same fields, order and types as its Rust counterpart, and
 * every constant the same value; uapi/tests/c_layout.rs compiles this header and checks both.
 *
 * Rules every struct follows: explicit padding (`pad*`, must be zero), a `flags` field that must
 * be zero unless bits are defined for it, and a `reason` out-field the kernel fills on every
 * failure (AIGPU_REASON_*). Structs only grow at the end.
 *
 * Self-contained: needs neither <linux/types.h> nor <drm/drm.h>. The ioctl numbers use the
 * generic Linux _IOC encoding (direction in bits 31:30, size in 29:16), as x86, arm and riscv do.
 */
#ifndef AIGPU_DRM_H
#define AIGPU_DRM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions and capabilities (version.rs) ------------------------------------------------ */

/* UAPI major: changes only when a meaning changes. */
#define AIGPU_UAPI_MAJOR 1u
/* UAPI minor: grows when fields, ioctls or reason codes are added (1.1: AS_SLOTS_BUSY,
 * DEVICE_CTX_LIMIT; 1.2: DEP_FAILED; 1.3: PT_LIMIT). */
#define AIGPU_UAPI_MINOR 3u
/* The oldest kernel minor a user space of this version can drive (same major). */
#define AIGPU_MIN_KERNEL_MINOR 0u

/* Driver version reported by the kernel module (major.minor.patch). */
#define AIGPU_DRIVER_MAJOR 0u
#define AIGPU_DRIVER_MINOR 1u
#define AIGPU_DRIVER_PATCH 0u
/* The DRM driver name (DRM_IOCTL_VERSION). */
#define AIGPU_DRIVER_NAME "aigpu"

/* drm_aigpu_query.caps bits. */
#define AIGPU_CAP_GEMM_I8 (1ull << 0)
#define AIGPU_CAP_ELTWISE (1ull << 1)
#define AIGPU_CAP_WAIT_MEM (1ull << 2)
#define AIGPU_CAP_TIMESTAMP (1ull << 3)
#define AIGPU_CAP_HANG_DEBUG (1ull << 4)
#define AIGPU_CAP_PRIORITY (1ull << 5)
#define AIGPU_CAPS_ALL                                                                   \
	(AIGPU_CAP_GEMM_I8 | AIGPU_CAP_ELTWISE | AIGPU_CAP_WAIT_MEM | AIGPU_CAP_TIMESTAMP | \
	 AIGPU_CAP_HANG_DEBUG | AIGPU_CAP_PRIORITY)

/* GPU page size; first usable GPU VA; one past the last usable GPU VA. */
#define AIGPU_PAGE_SIZE 4096ull
#define AIGPU_VA_START 0x100000ull
#define AIGPU_VA_END (1ull << 47)

/* ---- Ioctl numbers (ioctl.rs) ---------------------------------------------------------------- */

#define AIGPU_DRM_IOCTL_BASE 'd'
#define AIGPU_DRM_COMMAND_BASE 0x40u

#define DRM_AIGPU_QUERY 0x00u
#define DRM_AIGPU_GEM_CREATE 0x01u
#define DRM_AIGPU_GEM_MMAP_OFFSET 0x02u
#define DRM_AIGPU_VM_BIND 0x03u
#define DRM_AIGPU_VM_UNBIND 0x04u
#define DRM_AIGPU_CTX_CREATE 0x05u
#define DRM_AIGPU_CTX_DESTROY 0x06u
#define DRM_AIGPU_SUBMIT 0x07u
#define DRM_AIGPU_WAIT 0x08u
#define DRM_AIGPU_CTX_STATE 0x09u
#define DRM_AIGPU_NUM_IOCTLS 10u

/* _IOWR('d', DRM_COMMAND_BASE + nr, type), the same number as uapi::ioctl::iowr. */
#define AIGPU_IOWR(nr, type)                                                   \
	((uint32_t)((3u << 30) | (((uint32_t)sizeof(type) & 0x3FFFu) << 16) | \
		    ((uint32_t)AIGPU_DRM_IOCTL_BASE << 8) |                    \
		    (AIGPU_DRM_COMMAND_BASE + (nr))))

/* ---- Ioctl argument structs (ioctl.rs) ------------------------------------------------------ */

/* Query: versions, capabilities and limits. All fields but `flags` are out. */
struct drm_aigpu_query {
	uint32_t flags; /* in: must be zero */
	uint32_t reason; /* out: AIGPU_REASON_* on failure */
	uint32_t uapi_major;
	uint32_t uapi_minor;
	uint32_t driver_major;
	uint32_t driver_minor;
	uint32_t driver_patch;
	uint32_t num_queues; /* hardware queues */
	uint64_t caps; /* AIGPU_CAP_* */
	uint64_t va_start; /* first usable GPU VA */
	uint64_t va_end; /* one past the last usable GPU VA */
	uint32_t page_size; /* GPU page size */
	uint32_t max_cmdbufs; /* most command buffers in one submit */
	uint64_t mem_total; /* memory the device may use, bytes */
	uint64_t mem_used; /* memory allocated in GEM objects on this device, bytes */
	uint64_t max_bo_size; /* largest single GEM object, bytes */
	uint32_t max_in_fences; /* most in-fences in one submit */
	uint32_t max_contexts; /* most contexts per file */
};

/* GEM create: a shmem-backed buffer object. */
struct drm_aigpu_gem_create {
	uint64_t size; /* in: bytes (rounded up to the page size) */
	uint32_t flags; /* in: must be zero */
	uint32_t handle; /* out */
	uint32_t reason; /* out */
	uint32_t pad; /* must be zero */
};

/* GEM mmap offset: the fake offset to pass to mmap() on the DRM fd. */
struct drm_aigpu_gem_mmap_offset {
	uint32_t handle; /* in */
	uint32_t flags; /* in: must be zero */
	uint64_t offset; /* out */
	uint32_t reason; /* out */
	uint32_t pad; /* must be zero */
};

/* drm_aigpu_vm_bind.access bits. */
#define AIGPU_VM_ACCESS_READ (1u << 0)
#define AIGPU_VM_ACCESS_WRITE (1u << 1)

/* VM bind: map [bo_offset, bo_offset + size) of an object at `va` in the file's GPU VM. */
struct drm_aigpu_vm_bind {
	uint32_t handle; /* in: object handle */
	uint32_t flags; /* in: must be zero */
	uint64_t va; /* in: GPU VA (page aligned) */
	uint64_t bo_offset; /* in: offset into the object (page aligned) */
	uint64_t size; /* in: bytes (page aligned, non-zero) */
	uint32_t access; /* in: AIGPU_VM_ACCESS_* (non-empty) */
	uint32_t reason; /* out */
};

/* VM unbind: remove exactly one mapping. */
struct drm_aigpu_vm_unbind {
	uint32_t flags; /* in: must be zero */
	uint32_t reason; /* out */
	uint64_t va; /* in: VA the mapping starts at */
	uint64_t size; /* in: its size */
};

/* Context priorities. */
#define AIGPU_PRIORITY_LOW 0u
#define AIGPU_PRIORITY_NORMAL 1u
#define AIGPU_PRIORITY_HIGH 2u

/* Context (queue) create. */
struct drm_aigpu_ctx_create {
	uint32_t flags; /* in: must be zero */
	uint32_t priority; /* in: AIGPU_PRIORITY_* */
	uint32_t ctx_id; /* out: non-zero */
	uint32_t reason; /* out */
};

/* Context destroy. Pending work is waited for (bounded by the job timeout) before teardown. */
struct drm_aigpu_ctx_destroy {
	uint32_t ctx_id; /* in */
	uint32_t flags; /* in: must be zero */
	uint32_t reason; /* out */
	uint32_t pad; /* must be zero */
};

/* One command buffer of a submit (array element behind drm_aigpu_submit.cmdbufs). */
struct drm_aigpu_cmdbuf {
	uint64_t va; /* GPU VA of the packets (4-byte aligned) */
	uint32_t size; /* bytes (multiple of 4, 1 ..= AIGPU_MAX_CMDBUF_SIZE) */
	uint32_t flags; /* must be zero */
};

/* A fence: a sequence number on a context of the same file. */
struct drm_aigpu_fence {
	uint32_t ctx_id;
	uint32_t flags; /* must be zero */
	uint64_t seqno;
};

/* drm_aigpu_submit.flags: fail with EAGAIN instead of blocking (reason RING_FULL, or
 * AS_SLOTS_BUSY when every address-space slot is held by other files' work; UAPI 1.1). */
#define AIGPU_SUBMIT_FLAG_NO_BLOCK (1u << 0)
/* Limits. */
#define AIGPU_MAX_CMDBUFS 256u
#define AIGPU_MAX_IN_FENCES 16u
#define AIGPU_MAX_CONTEXTS 64u
#define AIGPU_MAX_CMDBUF_SIZE (1u << 20)

/* Submit: many command buffers as one job on a context, after the in-fences signal. */
struct drm_aigpu_submit {
	uint32_t ctx_id; /* in */
	uint32_t flags; /* in: AIGPU_SUBMIT_FLAG_* */
	uint64_t cmdbufs; /* in: user pointer to num_cmdbufs struct drm_aigpu_cmdbuf */
	uint64_t in_fences; /* in: user pointer to num_in_fences struct drm_aigpu_fence */
	uint32_t num_cmdbufs; /* in: 1 ..= AIGPU_MAX_CMDBUFS */
	uint32_t num_in_fences; /* in: 0 ..= AIGPU_MAX_IN_FENCES */
	uint64_t out_seqno; /* out: the job's sequence number on the context */
	uint32_t reason; /* out */
	uint32_t bad_index; /* out: offending command buffer or fence (on failure) */
	uint64_t bad_offset; /* out: byte offset of the offending packet (on failure) */
};

/*
 * Wait until the fence signals or timeout_ns (absolute, CLOCK_MONOTONIC) passes. Outcomes: 0
 * signalled; -ETIMEDOUT (TIMEOUT) still running; -EINTR (INTERRUPTED) call again with the same
 * timeout; -ECANCELED (CTX_LOST) the context was reset or faulted; -ENODEV (DEVICE_LOST).
 */
struct drm_aigpu_wait {
	uint32_t ctx_id; /* in */
	uint32_t flags; /* in: must be zero */
	uint64_t seqno; /* in: sequence number to wait for */
	uint64_t timeout_ns; /* in: absolute CLOCK_MONOTONIC deadline (0: poll) */
	uint64_t completed_seqno; /* out: the context's last completed sequence number */
	uint32_t reason; /* out */
	uint32_t pad; /* must be zero */
};

/* drm_aigpu_ctx_state.reset_status values. */
#define AIGPU_RESET_NONE 0u
#define AIGPU_RESET_GUILTY 1u
#define AIGPU_RESET_INNOCENT 2u

/* drm_aigpu_ctx_state.fault_type values (the device's fault types, 0 if none). */
#define AIGPU_FAULT_UNMAPPED 1u
#define AIGPU_FAULT_PERMISSION 2u
#define AIGPU_FAULT_BAD_PTE 3u
#define AIGPU_FAULT_MALFORMED_PACKET 4u
#define AIGPU_FAULT_BAD_DESCRIPTOR 5u
#define AIGPU_FAULT_BUS_ERROR 6u
/* drm_aigpu_ctx_state.fault_access values. */
#define AIGPU_ACCESS_READ 0u
#define AIGPU_ACCESS_WRITE 1u
#define AIGPU_ACCESS_FETCH 2u

/* Context state: reset status, fault and progress of a context. */
struct drm_aigpu_ctx_state {
	uint32_t ctx_id; /* in */
	uint32_t flags; /* in: must be zero */
	uint32_t reset_status; /* out: AIGPU_RESET_* */
	uint32_t fault_type; /* out: AIGPU_FAULT_*, 0 if none */
	uint64_t fault_va; /* out */
	uint32_t fault_access; /* out: AIGPU_ACCESS_* */
	uint32_t hung; /* out: 1 if banned for a hang (job timeout) */
	uint64_t fault_offset; /* out: byte offset of the faulting packet in its command buffer */
	uint64_t completed_seqno; /* out */
	uint64_t submitted_seqno; /* out */
	uint32_t reason; /* out */
	uint32_t pad; /* must be zero */
	uint32_t ban; /* out (1.2): AIGPU_BAN_* */
	uint32_t dep_ctx_id; /* out (1.2): with AIGPU_BAN_DEPENDENCY, the producer context */
	uint64_t dep_seqno; /* out (1.2): with AIGPU_BAN_DEPENDENCY, the fence value waited for */
};

/* drm_aigpu_ctx_state.ban values. */
#define AIGPU_BAN_NONE 0u
#define AIGPU_BAN_FAULT 1u
#define AIGPU_BAN_HANG 2u
#define AIGPU_BAN_DEPENDENCY 3u
#define AIGPU_BAN_DROPPED 4u

#define DRM_IOCTL_AIGPU_QUERY AIGPU_IOWR(DRM_AIGPU_QUERY, struct drm_aigpu_query)
#define DRM_IOCTL_AIGPU_GEM_CREATE AIGPU_IOWR(DRM_AIGPU_GEM_CREATE, struct drm_aigpu_gem_create)
#define DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET \
	AIGPU_IOWR(DRM_AIGPU_GEM_MMAP_OFFSET, struct drm_aigpu_gem_mmap_offset)
#define DRM_IOCTL_AIGPU_VM_BIND AIGPU_IOWR(DRM_AIGPU_VM_BIND, struct drm_aigpu_vm_bind)
#define DRM_IOCTL_AIGPU_VM_UNBIND AIGPU_IOWR(DRM_AIGPU_VM_UNBIND, struct drm_aigpu_vm_unbind)
#define DRM_IOCTL_AIGPU_CTX_CREATE AIGPU_IOWR(DRM_AIGPU_CTX_CREATE, struct drm_aigpu_ctx_create)
#define DRM_IOCTL_AIGPU_CTX_DESTROY AIGPU_IOWR(DRM_AIGPU_CTX_DESTROY, struct drm_aigpu_ctx_destroy)
#define DRM_IOCTL_AIGPU_SUBMIT AIGPU_IOWR(DRM_AIGPU_SUBMIT, struct drm_aigpu_submit)
#define DRM_IOCTL_AIGPU_WAIT AIGPU_IOWR(DRM_AIGPU_WAIT, struct drm_aigpu_wait)
#define DRM_IOCTL_AIGPU_CTX_STATE AIGPU_IOWR(DRM_AIGPU_CTX_STATE, struct drm_aigpu_ctx_state)

/* ---- Reason codes (reason.rs): why an ioctl failed, in the struct's `reason` field ---------- */

#define AIGPU_REASON_NONE 0u /* no failure */
#define AIGPU_REASON_FLAGS_UNKNOWN 1u /* unknown bits set in the flags field */
#define AIGPU_REASON_PAD_NONZERO 2u /* padding or reserved field is not zero */
#define AIGPU_REASON_HANDLE_INVALID 3u /* GEM handle does not exist in this file */
#define AIGPU_REASON_HANDLE_FOREIGN 4u /* GEM handle names an object not created by aigpu */
#define AIGPU_REASON_SIZE_ZERO 5u /* size is zero */
#define AIGPU_REASON_SIZE_TOO_LARGE 6u /* size exceeds the device or UAPI limit */
#define AIGPU_REASON_OUT_OF_MEMORY 7u /* kernel memory allocation failed */
#define AIGPU_REASON_UNALIGNED 8u /* address, offset or size is not page aligned */
#define AIGPU_REASON_VA_OUT_OF_RANGE 9u /* VA range outside the usable range or overflowing */
#define AIGPU_REASON_VA_OVERLAP 10u /* VA range overlaps an existing mapping */
#define AIGPU_REASON_VA_NOT_MAPPED 11u /* VA range is not exactly one existing mapping */
#define AIGPU_REASON_BO_RANGE 12u /* object offset and size run past the end of the object */
#define AIGPU_REASON_ACCESS_INVALID 13u /* access flags are empty or have unknown bits */
#define AIGPU_REASON_CTX_INVALID 14u /* context id does not name a live context of this file */
#define AIGPU_REASON_CTX_BANNED 15u /* context is banned after a fault or hang */
#define AIGPU_REASON_CTX_LIMIT 16u /* too many contexts on this file (64) */
#define AIGPU_REASON_PRIORITY_INVALID 17u /* priority is not low, normal or high */
#define AIGPU_REASON_CMDBUF_COUNT 18u /* number of command buffers is zero or above the limit */
#define AIGPU_REASON_CMDBUF_BAD 19u /* command buffer VA or size misaligned, zero or too large */
#define AIGPU_REASON_CMDBUF_NOT_MAPPED 20u /* buffer or operand not mapped with the needed access */
#define AIGPU_REASON_PACKET_MALFORMED 21u /* malformed packet (bad_index, bad_offset say where) */
#define AIGPU_REASON_PACKET_HANG_DISABLED 22u /* HANG packet while hang debugging is disabled */
#define AIGPU_REASON_FENCE_CTX_INVALID 23u /* in-fence names an unknown context */
#define AIGPU_REASON_FENCE_NOT_SUBMITTED 24u /* fence sequence number was never submitted */
#define AIGPU_REASON_RING_FULL 25u /* ring is full */
#define AIGPU_REASON_DEVICE_LOST 26u /* device is lost */
#define AIGPU_REASON_BAD_USER_POINTER 27u /* user pointer could not be read or written */
#define AIGPU_REASON_FENCE_COUNT 28u /* too many in-fences */
#define AIGPU_REASON_CTX_LOST 29u /* context was reset or faulted; pending work will not complete */
#define AIGPU_REASON_TIMEOUT 30u /* timed out; the work is still running */
#define AIGPU_REASON_INTERRUPTED 31u /* interrupted by a signal */
#define AIGPU_REASON_OBJECT_LIMIT 32u /* too many objects or mappings on this file */
#define AIGPU_REASON_AS_SLOTS_BUSY 33u /* every address-space slot is held by other files' work */
#define AIGPU_REASON_DEVICE_CTX_LIMIT 34u /* the device has no context left (all 512 taken, by any files) */
#define AIGPU_REASON_DEP_FAILED 35u /* a fence this job waits for will never signal: its producer context failed */
#define AIGPU_REASON_PT_LIMIT 36u /* the bind needs more page tables than the file's budget (2048 tables, 8 MiB) */

#ifdef __cplusplus
}
#endif

#endif /* AIGPU_DRM_H */
