/* SPDX-License-Identifier: MIT */
/*
 * Private stand-in for include/aigpu_drm.h, used by kmd_test.c only while the project's C UAPI
 * header has not landed (scripts/build-initramfs.sh picks the real one when it exists). Mirrors
 * uapi/src/v1/{ioctl,reason,version}.rs; the layout asserts below catch drift in the sizes.
 */
#ifndef AIGPU_DRM_COMPAT_H
#define AIGPU_DRM_COMPAT_H
#include <drm/drm.h>

#define AIGPU_UAPI_MAJOR 1
#define AIGPU_UAPI_MINOR 0
#define AIGPU_PAGE_SIZE 4096ULL
#define AIGPU_VA_START 0x100000ULL
#define AIGPU_VA_END (1ULL << 47)

#define AIGPU_CAP_GEMM_I8    (1ULL << 0)
#define AIGPU_CAP_ELTWISE    (1ULL << 1)
#define AIGPU_CAP_WAIT_MEM   (1ULL << 2)
#define AIGPU_CAP_TIMESTAMP  (1ULL << 3)
#define AIGPU_CAP_HANG_DEBUG (1ULL << 4)
#define AIGPU_CAP_PRIORITY   (1ULL << 5)

#define AIGPU_VM_ACCESS_READ  (1u << 0)
#define AIGPU_VM_ACCESS_WRITE (1u << 1)
#define AIGPU_MAX_CMDBUFS 256
#define AIGPU_MAX_IN_FENCES 16
#define AIGPU_MAX_CONTEXTS 64

enum aigpu_reason {
	AIGPU_REASON_NONE = 0,
	AIGPU_REASON_FLAGS_UNKNOWN = 1,
	AIGPU_REASON_PAD_NONZERO = 2,
	AIGPU_REASON_HANDLE_INVALID = 3,
	AIGPU_REASON_HANDLE_FOREIGN = 4,
	AIGPU_REASON_SIZE_ZERO = 5,
	AIGPU_REASON_SIZE_TOO_LARGE = 6,
	AIGPU_REASON_OUT_OF_MEMORY = 7,
	AIGPU_REASON_UNALIGNED = 8,
	AIGPU_REASON_VA_OUT_OF_RANGE = 9,
	AIGPU_REASON_VA_OVERLAP = 10,
	AIGPU_REASON_VA_NOT_MAPPED = 11,
	AIGPU_REASON_BO_RANGE = 12,
	AIGPU_REASON_ACCESS_INVALID = 13,
	AIGPU_REASON_OBJECT_LIMIT = 32,
};

struct drm_aigpu_query {
	__u32 flags, reason, uapi_major, uapi_minor, driver_major, driver_minor, driver_patch, num_queues;
	__u64 caps, va_start, va_end;
	__u32 page_size, max_cmdbufs;
	__u64 mem_total, mem_used, max_bo_size;
	__u32 max_in_fences, max_contexts;
};
struct drm_aigpu_gem_create { __u64 size; __u32 flags, handle, reason, pad; };
struct drm_aigpu_gem_mmap_offset { __u32 handle, flags; __u64 offset; __u32 reason, pad; };
struct drm_aigpu_vm_bind { __u32 handle, flags; __u64 va, bo_offset, size; __u32 access, reason; };
struct drm_aigpu_vm_unbind { __u32 flags, reason; __u64 va, size; };
struct drm_aigpu_ctx_create { __u32 flags, priority, ctx_id, reason; };
struct drm_aigpu_ctx_destroy { __u32 ctx_id, flags, reason, pad; };
struct drm_aigpu_submit {
	__u32 ctx_id, flags; __u64 cmdbufs, in_fences; __u32 num_cmdbufs, num_in_fences;
	__u64 out_seqno; __u32 reason, bad_index; __u64 bad_offset;
};
struct drm_aigpu_wait { __u32 ctx_id, flags; __u64 seqno, timeout_ns, completed_seqno; __u32 reason, pad; };
struct drm_aigpu_ctx_state {
	__u32 ctx_id, flags, reset_status, fault_type; __u64 fault_va; __u32 fault_access, hung;
	__u64 fault_offset, completed_seqno, submitted_seqno; __u32 reason, pad;
};

_Static_assert(sizeof(struct drm_aigpu_query) == 96, "query");
_Static_assert(sizeof(struct drm_aigpu_gem_create) == 24, "gem_create");
_Static_assert(sizeof(struct drm_aigpu_gem_mmap_offset) == 24, "gem_mmap_offset");
_Static_assert(sizeof(struct drm_aigpu_vm_bind) == 40, "vm_bind");
_Static_assert(sizeof(struct drm_aigpu_vm_unbind) == 24, "vm_unbind");
_Static_assert(sizeof(struct drm_aigpu_ctx_create) == 16, "ctx_create");
_Static_assert(sizeof(struct drm_aigpu_ctx_destroy) == 16, "ctx_destroy");
_Static_assert(sizeof(struct drm_aigpu_submit) == 56, "submit");
_Static_assert(sizeof(struct drm_aigpu_wait) == 40, "wait");
_Static_assert(sizeof(struct drm_aigpu_ctx_state) == 64, "ctx_state");

#define DRM_AIGPU_QUERY           0x00
#define DRM_AIGPU_GEM_CREATE      0x01
#define DRM_AIGPU_GEM_MMAP_OFFSET 0x02
#define DRM_AIGPU_VM_BIND         0x03
#define DRM_AIGPU_VM_UNBIND       0x04
#define DRM_AIGPU_CTX_CREATE      0x05
#define DRM_AIGPU_CTX_DESTROY     0x06
#define DRM_AIGPU_SUBMIT          0x07
#define DRM_AIGPU_WAIT            0x08
#define DRM_AIGPU_CTX_STATE       0x09

#define DRM_IOCTL_AIGPU_QUERY           DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_QUERY, struct drm_aigpu_query)
#define DRM_IOCTL_AIGPU_GEM_CREATE      DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_GEM_CREATE, struct drm_aigpu_gem_create)
#define DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_GEM_MMAP_OFFSET, struct drm_aigpu_gem_mmap_offset)
#define DRM_IOCTL_AIGPU_VM_BIND         DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_VM_BIND, struct drm_aigpu_vm_bind)
#define DRM_IOCTL_AIGPU_VM_UNBIND       DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_VM_UNBIND, struct drm_aigpu_vm_unbind)
#define DRM_IOCTL_AIGPU_CTX_CREATE      DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_CTX_CREATE, struct drm_aigpu_ctx_create)
#define DRM_IOCTL_AIGPU_CTX_DESTROY     DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_CTX_DESTROY, struct drm_aigpu_ctx_destroy)
#define DRM_IOCTL_AIGPU_SUBMIT          DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_SUBMIT, struct drm_aigpu_submit)
#define DRM_IOCTL_AIGPU_WAIT            DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_WAIT, struct drm_aigpu_wait)
#define DRM_IOCTL_AIGPU_CTX_STATE       DRM_IOWR(DRM_COMMAND_BASE + DRM_AIGPU_CTX_STATE, struct drm_aigpu_ctx_state)
#endif
