// SPDX-License-Identifier: MIT
/*
 * kmd_test: in-guest test of aigpu.ko through its ioctls (static binary, runs as PID-1's child in
 * the QEMU guest; see tests/guest/init.sh).
 *
 *   kmd_test [--module PATH] [--params "num_devices=2 mem_mib=64"] [--mem-mib N] [--devices N]
 *
 * Expects the module loaded with the given parameters. Checks query values, GEM create / mmap,
 * VM bind / unbind, every validation failure with its exact errno AND reason, foreign handles
 * (a dumb buffer created on the primary node, a PRIME-imported foreign buffer), many files open
 * at once, a child process exiting with live objects and mappings, and module unload refused
 * while a file is open followed by unload / reload cycles (this last part needs --module).
 *
 * Output: one line per check, `kmd_test: ok <name>` or `kmd_test: FAIL <name>: <detail>`, and a
 * final `kmd_test: N passed, M failed`. Exit status 0 only if nothing failed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <drm/drm.h>
#include <drm/drm_mode.h>

#include "aigpu_drm.h"
#define GUEST_TEST "kmd_test"
#include "guest_check.h"

static unsigned mem_mib = 64, num_devices = 2;
static const char *module_params = "num_devices=2 mem_mib=64";


/* ioctl returning 0 or -errno (EINTR/EAGAIN retried). */
static int xioctl(int fd, unsigned long req, void *arg)
{
	int r;

	do {
		r = ioctl(fd, req, arg);
	} while (r == -1 && (errno == EINTR || errno == EAGAIN));
	return r == -1 ? -errno : 0;
}

/* Runs an ioctl expected to fail with -exp_errno and exp_reason in *reason. */
static void expect_fail(const char *name, int fd, unsigned long req, void *arg, __u32 *reason, int exp_errno,
			__u32 exp_reason)
{
	*reason = 0xdeadbeef; /* the driver must overwrite it */
	int r = xioctl(fd, req, arg);

	if (r == -exp_errno && *reason == exp_reason)
		ok(name);
	else
		fail(name, "got rc=%d (%s) reason=%u, want rc=%d (%s) reason=%u", r, strerror(-r), *reason, -exp_errno,
		     strerror(exp_errno), exp_reason);
}

static int open_node(const char *path)
{
	return open(path, O_RDWR | O_CLOEXEC);
}

/* /dev/dri/renderD<128+idx> */
static int open_render(unsigned idx)
{
	char path[64];

	snprintf(path, sizeof(path), "/dev/dri/renderD%u", 128 + idx);
	return open_node(path);
}

static int query(int fd, struct drm_aigpu_query *q)
{
	memset(q, 0, sizeof(*q));
	return xioctl(fd, DRM_IOCTL_AIGPU_QUERY, q);
}

static __u64 mem_used(int fd)
{
	struct drm_aigpu_query q;

	return query(fd, &q) == 0 ? q.mem_used : ~0ULL;
}

static int gem_create(int fd, __u64 size, __u32 *handle)
{
	struct drm_aigpu_gem_create c = { .size = size };
	int r = xioctl(fd, DRM_IOCTL_AIGPU_GEM_CREATE, &c);

	*handle = c.handle;
	return r;
}

static int gem_close(int fd, __u32 handle)
{
	struct drm_gem_close c = { .handle = handle };

	return xioctl(fd, DRM_IOCTL_GEM_CLOSE, &c);
}

static int bind(int fd, __u32 handle, __u64 va, __u64 bo_offset, __u64 size, __u32 access)
{
	struct drm_aigpu_vm_bind b = { .handle = handle, .va = va, .bo_offset = bo_offset, .size = size,
				       .access = access };
	return xioctl(fd, DRM_IOCTL_AIGPU_VM_BIND, &b);
}

static int unbind(int fd, __u64 va, __u64 size)
{
	struct drm_aigpu_vm_unbind u = { .va = va, .size = size };

	return xioctl(fd, DRM_IOCTL_AIGPU_VM_UNBIND, &u);
}

static void *gem_mmap(int fd, __u32 handle, size_t size)
{
	struct drm_aigpu_gem_mmap_offset m = { .handle = handle };

	if (xioctl(fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m))
		return MAP_FAILED;
	return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)m.offset);
}

#define PAGE AIGPU_PAGE_SIZE
#define RW (AIGPU_VM_ACCESS_READ | AIGPU_VM_ACCESS_WRITE)

static void test_version(int fd)
{
	char name[32] = { 0 }, desc[64] = { 0 }, date[32] = { 0 };
	struct drm_version v = { .name = name, .name_len = sizeof(name) - 1, .desc = desc,
				 .desc_len = sizeof(desc) - 1, .date = date, .date_len = sizeof(date) - 1 };
	int r = xioctl(fd, DRM_IOCTL_VERSION, &v);

	CHECK("drm-version", r == 0 && !strcmp(name, "aigpu") && v.version_major == 0 && v.version_minor == 1 &&
		      v.version_patchlevel == 0,
	      "rc=%d name='%s' %d.%d.%d", r, name, v.version_major, v.version_minor, v.version_patchlevel);
}

static void test_probe_line(void)
{
	int len = klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0);
	char want[128];

	if (len <= 0) {
		fail("probe-dmesg-line", "klogctl size: %s", strerror(errno));
		return;
	}
	char *buf = calloc(1, (size_t)len + 1);
	if (!buf) {
		fail("probe-dmesg-line", "out of memory");
		return;
	}
	int n = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf, len);
	for (unsigned i = 0; i < num_devices; i++) {
		snprintf(want, sizeof(want), "aigpu aigpu%u: virtual AI GPU, UAPI %d.%d, driver 0.1.0, %u MiB", i,
			 AIGPU_UAPI_MAJOR, AIGPU_UAPI_MINOR, mem_mib);
		if (n < 0 || !strstr(buf, want)) {
			fail("probe-dmesg-line", "'%s' not in the kernel log", want);
			free(buf);
			return;
		}
	}
	free(buf);
	ok("probe-dmesg-line");
}

static void test_query(int fd)
{
	struct drm_aigpu_query q;
	int r;

	memset(&q, 0, sizeof(q));
	q.reason = 77;
	r = xioctl(fd, DRM_IOCTL_AIGPU_QUERY, &q);
	__u64 caps = AIGPU_CAP_GEMM_I8 | AIGPU_CAP_ELTWISE | AIGPU_CAP_WAIT_MEM | AIGPU_CAP_TIMESTAMP | AIGPU_CAP_PRIORITY;
	CHECK("query", r == 0 && q.reason == 0 && q.flags == 0 && q.uapi_major == AIGPU_UAPI_MAJOR &&
		      q.uapi_minor == AIGPU_UAPI_MINOR && q.driver_major == 0 && q.driver_minor == 1 &&
		      q.driver_patch == 0 && q.num_queues == 4 && q.caps == caps && q.va_start == AIGPU_VA_START &&
		      q.va_end == AIGPU_VA_END && q.page_size == PAGE && q.max_cmdbufs == AIGPU_MAX_CMDBUFS &&
		      q.mem_total == (__u64)mem_mib << 20 && q.mem_used == 0 && q.max_bo_size == q.mem_total &&
		      q.max_in_fences == AIGPU_MAX_IN_FENCES && q.max_contexts == AIGPU_MAX_CONTEXTS,
	      "rc=%d reason=%u uapi %u.%u driver %u.%u.%u queues %u caps %#llx va [%#llx, %#llx) page %u cmdbufs %u "
	      "mem %llu/%llu max_bo %llu fences %u contexts %u",
	      r, q.reason, q.uapi_major, q.uapi_minor, q.driver_major, q.driver_minor, q.driver_patch, q.num_queues,
	      (unsigned long long)q.caps, (unsigned long long)q.va_start, (unsigned long long)q.va_end, q.page_size,
	      q.max_cmdbufs, (unsigned long long)q.mem_used, (unsigned long long)q.mem_total,
	      (unsigned long long)q.max_bo_size, q.max_in_fences, q.max_contexts);

	memset(&q, 0, sizeof(q));
	q.flags = 1;
	expect_fail("query-flags-unknown", fd, DRM_IOCTL_AIGPU_QUERY, &q, &q.reason, EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
}

static void test_gem(int fd)
{
	__u32 h;
	int r = gem_create(fd, 5000, &h);

	CHECK("gem-create", r == 0 && h != 0, "rc=%d handle=%u", r, h);
	if (r)
		return;
	__u64 used = mem_used(fd);
	CHECK("gem-create-rounds-to-pages", used == 2 * PAGE, "mem_used=%llu, want %llu", (unsigned long long)used,
	      2 * PAGE);

	uint32_t *a = gem_mmap(fd, h, 2 * PAGE), *b = gem_mmap(fd, h, 2 * PAGE);
	CHECK("gem-mmap", a != MAP_FAILED && b != MAP_FAILED, "mmap: %s", strerror(errno));
	if (a != MAP_FAILED && b != MAP_FAILED) {
		int zero = 1, same = 1;
		for (size_t i = 0; i < 2 * PAGE / 4; i++)
			zero &= a[i] == 0;
		for (size_t i = 0; i < 2 * PAGE / 4; i++)
			a[i] = 0xA16A0000u ^ (uint32_t)i;
		for (size_t i = 0; i < 2 * PAGE / 4; i++)
			same &= b[i] == (0xA16A0000u ^ (uint32_t)i);
		CHECK("gem-new-object-is-zeroed", zero, "non-zero bytes in a new object");
		CHECK("gem-mmap-write-read", same, "second mapping does not see the first one's writes");
	}
	if (a != MAP_FAILED)
		munmap(a, 2 * PAGE);
	if (b != MAP_FAILED)
		munmap(b, 2 * PAGE);
	r = gem_close(fd, h);
	used = mem_used(fd);
	CHECK("gem-close-frees-memory", r == 0 && used == 0, "close rc=%d, mem_used=%llu", r,
	      (unsigned long long)used);

	/* create: every validation failure */
	struct drm_aigpu_gem_create c;
	memset(&c, 0, sizeof(c));
	c.size = PAGE;
	c.flags = 1;
	expect_fail("gem-create-flags-unknown", fd, DRM_IOCTL_AIGPU_GEM_CREATE, &c, &c.reason, EINVAL,
		    AIGPU_REASON_FLAGS_UNKNOWN);
	memset(&c, 0, sizeof(c));
	c.size = PAGE;
	c.pad = 1;
	expect_fail("gem-create-pad-nonzero", fd, DRM_IOCTL_AIGPU_GEM_CREATE, &c, &c.reason, EINVAL,
		    AIGPU_REASON_PAD_NONZERO);
	memset(&c, 0, sizeof(c));
	expect_fail("gem-create-size-zero", fd, DRM_IOCTL_AIGPU_GEM_CREATE, &c, &c.reason, EINVAL,
		    AIGPU_REASON_SIZE_ZERO);
	memset(&c, 0, sizeof(c));
	c.size = ((__u64)mem_mib << 20) + 1;
	expect_fail("gem-create-size-too-large", fd, DRM_IOCTL_AIGPU_GEM_CREATE, &c, &c.reason, E2BIG,
		    AIGPU_REASON_SIZE_TOO_LARGE);
	memset(&c, 0, sizeof(c));
	c.size = ~0ULL;
	expect_fail("gem-create-size-u64-max", fd, DRM_IOCTL_AIGPU_GEM_CREATE, &c, &c.reason, E2BIG,
		    AIGPU_REASON_SIZE_TOO_LARGE);

	/* the budget: fill it exactly, one more page fails, freeing gives it back */
	__u32 big, more;
	r = gem_create(fd, ((__u64)mem_mib << 20) - PAGE, &big);
	int r2 = gem_create(fd, PAGE, &more);
	CHECK("gem-create-fill-budget", r == 0 && r2 == 0, "rc=%d,%d", r, r2);
	memset(&c, 0, sizeof(c));
	c.size = PAGE;
	expect_fail("gem-create-out-of-budget", fd, DRM_IOCTL_AIGPU_GEM_CREATE, &c, &c.reason, ENOMEM,
		    AIGPU_REASON_OUT_OF_MEMORY);
	if (r == 0)
		gem_close(fd, big);
	if (r2 == 0)
		gem_close(fd, more);
	used = mem_used(fd);
	CHECK("gem-budget-returned", used == 0, "mem_used=%llu", (unsigned long long)used);

	/* mmap offset failures */
	r = gem_create(fd, PAGE, &h);
	struct drm_aigpu_gem_mmap_offset m;
	memset(&m, 0, sizeof(m));
	m.handle = h;
	m.flags = 2;
	expect_fail("mmap-offset-flags-unknown", fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m, &m.reason, EINVAL,
		    AIGPU_REASON_FLAGS_UNKNOWN);
	memset(&m, 0, sizeof(m));
	m.handle = h;
	m.pad = 1;
	expect_fail("mmap-offset-pad-nonzero", fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m, &m.reason, EINVAL,
		    AIGPU_REASON_PAD_NONZERO);
	memset(&m, 0, sizeof(m));
	m.handle = h + 1000;
	expect_fail("mmap-offset-handle-invalid", fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m, &m.reason, ENOENT,
		    AIGPU_REASON_HANDLE_INVALID);
	memset(&m, 0, sizeof(m));
	expect_fail("mmap-offset-handle-zero", fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m, &m.reason, ENOENT,
		    AIGPU_REASON_HANDLE_INVALID);
	if (r == 0)
		gem_close(fd, h);
}

static void bind_fail(const char *name, int fd, __u32 handle, __u32 flags, __u64 va, __u64 bo_offset, __u64 size,
		      __u32 access, int exp_errno, __u32 exp_reason)
{
	struct drm_aigpu_vm_bind b = { .handle = handle, .flags = flags, .va = va, .bo_offset = bo_offset,
				       .size = size, .access = access };
	expect_fail(name, fd, DRM_IOCTL_AIGPU_VM_BIND, &b, &b.reason, exp_errno, exp_reason);
}

static void unbind_fail(const char *name, int fd, __u32 flags, __u64 va, __u64 size, int exp_errno, __u32 exp_reason)
{
	struct drm_aigpu_vm_unbind u = { .flags = flags, .va = va, .size = size };

	expect_fail(name, fd, DRM_IOCTL_AIGPU_VM_UNBIND, &u, &u.reason, exp_errno, exp_reason);
}

static void test_vm(int fd)
{
	const __u64 V = AIGPU_VA_START, OBJ = 16 * PAGE;
	__u32 h;
	int r = gem_create(fd, OBJ, &h);

	if (r) {
		fail("vm-setup", "gem create rc=%d", r);
		return;
	}
	/* success paths */
	r = bind(fd, h, V, 0, OBJ, RW);
	CHECK("vm-bind", r == 0, "rc=%d", r);
	r = unbind(fd, V, OBJ);
	CHECK("vm-unbind", r == 0, "rc=%d", r);
	r = bind(fd, h, V, 0, OBJ, RW);
	CHECK("vm-rebind-after-unbind", r == 0, "rc=%d", r);
	r = bind(fd, h, V + OBJ, 4 * PAGE, 4 * PAGE, AIGPU_VM_ACCESS_READ);
	CHECK("vm-bind-adjacent-with-offset-read-only", r == 0, "rc=%d", r);
	r = bind(fd, h, V + OBJ + 4 * PAGE, 0, PAGE, AIGPU_VM_ACCESS_WRITE);
	CHECK("vm-bind-write-only", r == 0, "rc=%d", r);
	r = bind(fd, h, AIGPU_VA_END - OBJ, 0, OBJ, RW);
	CHECK("vm-bind-top-of-va-range", r == 0, "rc=%d", r);
	r = bind(fd, h, 0x7f1234560000ULL & ~(PAGE - 1), PAGE, 2 * PAGE, RW);
	CHECK("vm-bind-sparse-va", r == 0, "rc=%d", r);

	/* bind: every validation failure, one fault at a time, with the exact errno and reason */
	const __u64 W = V + 0x1000000; /* a free, valid VA */
	bind_fail("vm-bind-flags-unknown", fd, h, 1, W, 0, PAGE, RW, EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	bind_fail("vm-bind-access-empty", fd, h, 0, W, 0, PAGE, 0, EINVAL, AIGPU_REASON_ACCESS_INVALID);
	bind_fail("vm-bind-access-unknown-bit", fd, h, 0, W, 0, PAGE, RW | 4, EINVAL, AIGPU_REASON_ACCESS_INVALID);
	bind_fail("vm-bind-size-zero", fd, h, 0, W, 0, 0, RW, EINVAL, AIGPU_REASON_SIZE_ZERO);
	bind_fail("vm-bind-va-unaligned", fd, h, 0, W + 8, 0, PAGE, RW, EINVAL, AIGPU_REASON_UNALIGNED);
	bind_fail("vm-bind-size-unaligned", fd, h, 0, W, 0, PAGE + 1, RW, EINVAL, AIGPU_REASON_UNALIGNED);
	bind_fail("vm-bind-offset-unaligned", fd, h, 0, W, 12, PAGE, RW, EINVAL, AIGPU_REASON_UNALIGNED);
	bind_fail("vm-bind-va-below-start", fd, h, 0, V - PAGE, 0, PAGE, RW, EINVAL, AIGPU_REASON_VA_OUT_OF_RANGE);
	bind_fail("vm-bind-va-zero", fd, h, 0, 0, 0, PAGE, RW, EINVAL, AIGPU_REASON_VA_OUT_OF_RANGE);
	bind_fail("vm-bind-end-past-va-end", fd, h, 0, AIGPU_VA_END - PAGE, 0, 2 * PAGE, RW, EINVAL,
		  AIGPU_REASON_VA_OUT_OF_RANGE);
	bind_fail("vm-bind-va-at-va-end", fd, h, 0, AIGPU_VA_END, 0, PAGE, RW, EINVAL, AIGPU_REASON_VA_OUT_OF_RANGE);
	bind_fail("vm-bind-va-overflow", fd, h, 0, 0xFFFFFFFFFFFFF000ULL, 0, 2 * PAGE, RW, EINVAL,
		  AIGPU_REASON_VA_OUT_OF_RANGE);
	bind_fail("vm-bind-size-huge-overflow", fd, h, 0, W, 0, 0xFFFFFFFFFFFFF000ULL, RW, EINVAL,
		  AIGPU_REASON_VA_OUT_OF_RANGE);
	bind_fail("vm-bind-handle-invalid", fd, h + 1000, 0, W, 0, PAGE, RW, ENOENT, AIGPU_REASON_HANDLE_INVALID);
	bind_fail("vm-bind-handle-zero", fd, 0, 0, W, 0, PAGE, RW, ENOENT, AIGPU_REASON_HANDLE_INVALID);
	bind_fail("vm-bind-bo-range-past-end", fd, h, 0, W, 15 * PAGE, 2 * PAGE, RW, EINVAL, AIGPU_REASON_BO_RANGE);
	bind_fail("vm-bind-bo-range-size", fd, h, 0, W, 0, OBJ + PAGE, RW, EINVAL, AIGPU_REASON_BO_RANGE);
	bind_fail("vm-bind-bo-offset-at-end", fd, h, 0, W, OBJ, PAGE, RW, EINVAL, AIGPU_REASON_BO_RANGE);
	bind_fail("vm-bind-bo-offset-overflow", fd, h, 0, W, 0xFFFFFFFFFFFFF000ULL, 2 * PAGE, RW, EINVAL,
		  AIGPU_REASON_BO_RANGE);
	bind_fail("vm-bind-overlap-exact", fd, h, 0, V, 0, OBJ, RW, EINVAL, AIGPU_REASON_VA_OVERLAP);
	bind_fail("vm-bind-overlap-inside", fd, h, 0, V + PAGE, 0, PAGE, RW, EINVAL, AIGPU_REASON_VA_OVERLAP);
	bind_fail("vm-bind-overlap-front", fd, h, 0, AIGPU_VA_END - OBJ - PAGE, 0, 2 * PAGE, RW, EINVAL,
		  AIGPU_REASON_VA_OVERLAP);
	bind_fail("vm-bind-overlap-tail", fd, h, 0, V + OBJ - PAGE, 0, 2 * PAGE, RW, EINVAL, AIGPU_REASON_VA_OVERLAP);
	bind_fail("vm-bind-overlap-covering", fd, h, 0, V + OBJ - PAGE, 0, 7 * PAGE, RW, EINVAL,
		  AIGPU_REASON_VA_OVERLAP);
	bind_fail("vm-bind-overlap-next-start", fd, h, 0, V + OBJ + 3 * PAGE, 0, 2 * PAGE, RW, EINVAL,
		  AIGPU_REASON_VA_OVERLAP);
	bind_fail("vm-bind-overlap-top", fd, h, 0, AIGPU_VA_END - PAGE, 0, PAGE, RW, EINVAL, AIGPU_REASON_VA_OVERLAP);
	/* a free gap between two mappings is bindable */
	r = bind(fd, h, V + OBJ + 5 * PAGE, 0, 3 * PAGE, RW);
	CHECK("vm-bind-into-gap", r == 0, "rc=%d", r);

	/* unbind: every validation failure */
	unbind_fail("vm-unbind-flags-unknown", fd, 1, V, OBJ, EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	unbind_fail("vm-unbind-size-zero", fd, 0, V, 0, EINVAL, AIGPU_REASON_SIZE_ZERO);
	unbind_fail("vm-unbind-unaligned", fd, 0, V + 1, OBJ, EINVAL, AIGPU_REASON_UNALIGNED);
	unbind_fail("vm-unbind-out-of-range", fd, 0, 0, PAGE, EINVAL, AIGPU_REASON_VA_OUT_OF_RANGE);
	unbind_fail("vm-unbind-overflow", fd, 0, 0xFFFFFFFFFFFFF000ULL, 2 * PAGE, EINVAL, AIGPU_REASON_VA_OUT_OF_RANGE);
	unbind_fail("vm-unbind-not-mapped", fd, 0, W, PAGE, EINVAL, AIGPU_REASON_VA_NOT_MAPPED);
	unbind_fail("vm-unbind-part-of-mapping", fd, 0, V, PAGE, EINVAL, AIGPU_REASON_VA_NOT_MAPPED);
	unbind_fail("vm-unbind-middle-of-mapping", fd, 0, V + PAGE, PAGE, EINVAL, AIGPU_REASON_VA_NOT_MAPPED);
	unbind_fail("vm-unbind-two-mappings", fd, 0, V, OBJ + 4 * PAGE, EINVAL, AIGPU_REASON_VA_NOT_MAPPED);
	r = unbind(fd, V + OBJ, 4 * PAGE);
	CHECK("vm-unbind-second", r == 0, "rc=%d", r);
	unbind_fail("vm-unbind-twice", fd, 0, V + OBJ, 4 * PAGE, EINVAL, AIGPU_REASON_VA_NOT_MAPPED);

	/* the mapping keeps the object: close the handle while mapped, memory stays accounted */
	__u64 before = mem_used(fd);
	r = gem_close(fd, h);
	__u64 after_close = mem_used(fd);
	CHECK("vm-mapping-holds-object", r == 0 && after_close == before && before >= OBJ,
	      "close rc=%d mem_used %llu -> %llu", r, (unsigned long long)before, (unsigned long long)after_close);
	r = unbind(fd, V, OBJ);
	int r2 = unbind(fd, V + OBJ + 4 * PAGE, PAGE);
	int r3 = unbind(fd, AIGPU_VA_END - OBJ, OBJ);
	int r4 = unbind(fd, 0x7f1234560000ULL & ~(PAGE - 1), 2 * PAGE);
	int r5 = unbind(fd, V + OBJ + 5 * PAGE, 3 * PAGE);
	__u64 after = mem_used(fd);
	CHECK("vm-last-unbind-frees-object", !r && !r2 && !r3 && !r4 && !r5 && after == before - OBJ,
	      "rc=%d,%d,%d,%d,%d mem_used %llu", r, r2, r3, r4, r5, (unsigned long long)after);

}

/* Many binds / unbinds spread over the VA space: page tables are allocated and freed again. */
static void test_vm_spread(int fd)
{
	const __u64 V = AIGPU_VA_START;
	__u32 h = 0;
	int r = gem_create(fd, 64 * PAGE, &h), bad = r;

	for (int round = 0; round < 3 && !bad; round++) {
		for (__u64 i = 0; i < 64 && !bad; i++)
			bad = bind(fd, h, V + i * (1ULL << 30) + (i % 7) * (2ULL << 20), i * PAGE, PAGE, RW);
		for (__u64 i = 0; i < 64 && !bad; i++)
			bad = unbind(fd, V + i * (1ULL << 30) + (i % 7) * (2ULL << 20), PAGE);
	}
	CHECK("vm-bind-unbind-many-tables", bad == 0, "rc=%d", bad);
	/* one large mapping */
	__u32 hb;
	r = gem_create(fd, 8ULL << 20, &hb);
	if (!r) {
		int rb = bind(fd, hb, V + (3ULL << 40), 0, 8ULL << 20, RW);
		int ru = rb ? rb : unbind(fd, V + (3ULL << 40), 8ULL << 20);
		CHECK("vm-bind-8mib", rb == 0 && ru == 0, "bind rc=%d unbind rc=%d", rb, ru);
		gem_close(fd, hb);
	} else {
		fail("vm-bind-8mib", "gem create rc=%d", r);
	}
	if (h)
		gem_close(fd, h);
}

static int ctx_create(int fd, __u32 priority, __u32 *id)
{
	struct drm_aigpu_ctx_create c = { .priority = priority };
	int r = xioctl(fd, DRM_IOCTL_AIGPU_CTX_CREATE, &c);

	*id = c.ctx_id;
	return r;
}

static int ctx_destroy(int fd, __u32 id)
{
	struct drm_aigpu_ctx_destroy d = { .ctx_id = id };

	return xioctl(fd, DRM_IOCTL_AIGPU_CTX_DESTROY, &d);
}

/* Contexts and the argument checks of SUBMIT / WAIT (execution itself: exec_test.c). */
static void test_ctx(int fd)
{
	__u32 lo, no, hi;
	int r1 = ctx_create(fd, AIGPU_PRIORITY_LOW, &lo), r2 = ctx_create(fd, AIGPU_PRIORITY_NORMAL, &no),
	    r3 = ctx_create(fd, AIGPU_PRIORITY_HIGH, &hi);
	CHECK("ctx-create", !r1 && !r2 && !r3 && lo && no && hi && lo != no && no != hi && lo != hi,
	      "rc=%d,%d,%d ids %u %u %u", r1, r2, r3, lo, no, hi);

	struct drm_aigpu_ctx_create cc = { .flags = 1 };
	expect_fail("ctx-create-flags-unknown", fd, DRM_IOCTL_AIGPU_CTX_CREATE, &cc, &cc.reason, EINVAL,
		    AIGPU_REASON_FLAGS_UNKNOWN);
	cc = (struct drm_aigpu_ctx_create){ .priority = AIGPU_PRIORITY_HIGH + 1 };
	expect_fail("ctx-create-priority-invalid", fd, DRM_IOCTL_AIGPU_CTX_CREATE, &cc, &cc.reason, EINVAL,
		    AIGPU_REASON_PRIORITY_INVALID);

	/* the per-file limit: 64 contexts, three exist already */
	__u32 ids[AIGPU_MAX_CONTEXTS];
	int n = 0, r = 0;
	while (n < (int)AIGPU_MAX_CONTEXTS - 3 && !(r = ctx_create(fd, AIGPU_PRIORITY_NORMAL, &ids[n])))
		n++;
	CHECK("ctx-create-up-to-limit", r == 0 && n == (int)AIGPU_MAX_CONTEXTS - 3, "created %d more, rc=%d", n, r);
	cc = (struct drm_aigpu_ctx_create){ .priority = AIGPU_PRIORITY_NORMAL };
	expect_fail("ctx-create-limit", fd, DRM_IOCTL_AIGPU_CTX_CREATE, &cc, &cc.reason, EBUSY, AIGPU_REASON_CTX_LIMIT);
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad |= ctx_destroy(fd, ids[i]);
	r = ctx_create(fd, AIGPU_PRIORITY_NORMAL, &ids[0]);
	CHECK("ctx-destroy-frees-slots", !bad && !r, "destroy rc=%d create rc=%d", bad, r);
	if (!r)
		ctx_destroy(fd, ids[0]);

	/* destroy */
	struct drm_aigpu_ctx_destroy cd = { .ctx_id = lo, .flags = 1 };
	expect_fail("ctx-destroy-flags-unknown", fd, DRM_IOCTL_AIGPU_CTX_DESTROY, &cd, &cd.reason, EINVAL,
		    AIGPU_REASON_FLAGS_UNKNOWN);
	cd = (struct drm_aigpu_ctx_destroy){ .ctx_id = lo, .pad = 1 };
	expect_fail("ctx-destroy-pad-nonzero", fd, DRM_IOCTL_AIGPU_CTX_DESTROY, &cd, &cd.reason, EINVAL,
		    AIGPU_REASON_PAD_NONZERO);
	cd = (struct drm_aigpu_ctx_destroy){ .ctx_id = 0 };
	expect_fail("ctx-destroy-id-zero", fd, DRM_IOCTL_AIGPU_CTX_DESTROY, &cd, &cd.reason, EINVAL,
		    AIGPU_REASON_CTX_INVALID);
	cd = (struct drm_aigpu_ctx_destroy){ .ctx_id = 0xfffffff0 };
	expect_fail("ctx-destroy-id-unknown", fd, DRM_IOCTL_AIGPU_CTX_DESTROY, &cd, &cd.reason, EINVAL,
		    AIGPU_REASON_CTX_INVALID);
	int other = open_render(0);
	cd = (struct drm_aigpu_ctx_destroy){ .ctx_id = lo };
	expect_fail("ctx-destroy-other-files-context", other, DRM_IOCTL_AIGPU_CTX_DESTROY, &cd, &cd.reason, EINVAL,
		    AIGPU_REASON_CTX_INVALID);
	close(other);
	r = ctx_destroy(fd, lo);
	CHECK("ctx-destroy", r == 0, "rc=%d", r);
	cd = (struct drm_aigpu_ctx_destroy){ .ctx_id = lo };
	expect_fail("ctx-destroy-twice", fd, DRM_IOCTL_AIGPU_CTX_DESTROY, &cd, &cd.reason, EINVAL,
		    AIGPU_REASON_CTX_INVALID);

	/* state */
	struct drm_aigpu_ctx_state cs = { .ctx_id = no, .reset_status = 9, .hung = 9, .completed_seqno = 9 };
	r = xioctl(fd, DRM_IOCTL_AIGPU_CTX_STATE, &cs);
	CHECK("ctx-state", r == 0 && cs.ctx_id == no && cs.reset_status == AIGPU_RESET_NONE && !cs.hung &&
		      !cs.fault_type && !cs.fault_va && !cs.completed_seqno && !cs.submitted_seqno && !cs.reason,
	      "rc=%d reset %u hung %u fault %u completed %llu submitted %llu", r, cs.reset_status, cs.hung,
	      cs.fault_type, (unsigned long long)cs.completed_seqno, (unsigned long long)cs.submitted_seqno);
	cs = (struct drm_aigpu_ctx_state){ .ctx_id = no, .flags = 1 };
	expect_fail("ctx-state-flags-unknown", fd, DRM_IOCTL_AIGPU_CTX_STATE, &cs, &cs.reason, EINVAL,
		    AIGPU_REASON_FLAGS_UNKNOWN);
	cs = (struct drm_aigpu_ctx_state){ .ctx_id = no, .pad = 1 };
	expect_fail("ctx-state-pad-nonzero", fd, DRM_IOCTL_AIGPU_CTX_STATE, &cs, &cs.reason, EINVAL,
		    AIGPU_REASON_PAD_NONZERO);
	cs = (struct drm_aigpu_ctx_state){ .ctx_id = lo };
	expect_fail("ctx-state-destroyed", fd, DRM_IOCTL_AIGPU_CTX_STATE, &cs, &cs.reason, EINVAL,
		    AIGPU_REASON_CTX_INVALID);

	/* wait: nothing was submitted, so only seqno 0 exists (and is signalled) */
	struct drm_aigpu_wait w = { .ctx_id = no, .completed_seqno = 77 };
	r = xioctl(fd, DRM_IOCTL_AIGPU_WAIT, &w);
	CHECK("wait-seqno-0", r == 0 && w.completed_seqno == 0 && w.reason == 0, "rc=%d completed %llu", r,
	      (unsigned long long)w.completed_seqno);
	w = (struct drm_aigpu_wait){ .ctx_id = no, .seqno = 1 };
	expect_fail("wait-not-submitted", fd, DRM_IOCTL_AIGPU_WAIT, &w, &w.reason, EINVAL,
		    AIGPU_REASON_FENCE_NOT_SUBMITTED);
	w = (struct drm_aigpu_wait){ .ctx_id = lo };
	expect_fail("wait-ctx-invalid", fd, DRM_IOCTL_AIGPU_WAIT, &w, &w.reason, EINVAL, AIGPU_REASON_CTX_INVALID);
	w = (struct drm_aigpu_wait){ .ctx_id = no, .flags = 1 };
	expect_fail("wait-flags-unknown", fd, DRM_IOCTL_AIGPU_WAIT, &w, &w.reason, EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	w = (struct drm_aigpu_wait){ .ctx_id = no, .pad = 1 };
	expect_fail("wait-pad-nonzero", fd, DRM_IOCTL_AIGPU_WAIT, &w, &w.reason, EINVAL, AIGPU_REASON_PAD_NONZERO);

	/* submit: argument checks */
	struct drm_aigpu_submit s = { .ctx_id = no, .num_cmdbufs = 1, .flags = 2 };
	expect_fail("submit-flags-unknown", fd, DRM_IOCTL_AIGPU_SUBMIT, &s, &s.reason, EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	s = (struct drm_aigpu_submit){ .ctx_id = no, .num_cmdbufs = 0 };
	expect_fail("submit-no-cmdbufs", fd, DRM_IOCTL_AIGPU_SUBMIT, &s, &s.reason, EINVAL, AIGPU_REASON_CMDBUF_COUNT);
	s = (struct drm_aigpu_submit){ .ctx_id = no, .num_cmdbufs = AIGPU_MAX_CMDBUFS + 1 };
	expect_fail("submit-too-many-cmdbufs", fd, DRM_IOCTL_AIGPU_SUBMIT, &s, &s.reason, EINVAL,
		    AIGPU_REASON_CMDBUF_COUNT);
	s = (struct drm_aigpu_submit){ .ctx_id = no, .num_cmdbufs = 1, .num_in_fences = AIGPU_MAX_IN_FENCES + 1 };
	expect_fail("submit-too-many-fences", fd, DRM_IOCTL_AIGPU_SUBMIT, &s, &s.reason, EINVAL,
		    AIGPU_REASON_FENCE_COUNT);
	/* The command buffers are copied in first (exec_test covers validation and execution). */
	s = (struct drm_aigpu_submit){ .ctx_id = no, .num_cmdbufs = 1, .flags = AIGPU_SUBMIT_FLAG_NO_BLOCK };
	expect_fail("submit-cmdbufs-unreadable", fd, DRM_IOCTL_AIGPU_SUBMIT, &s, &s.reason, EFAULT,
		    AIGPU_REASON_BAD_USER_POINTER);

	int rr = xioctl(fd, DRM_IOWR(DRM_COMMAND_BASE + 10, struct drm_aigpu_query), &cs);
	CHECK("ioctl-beyond-table", rr == -EINVAL, "rc=%d", rr);
	/* `no` and `hi` stay alive: file close tears them down */
}

/* Foreign GEM handles: objects in the file's handle table that aigpu did not create. */
static void test_foreign(void)
{
	int fd = open_node("/dev/dri/card0");

	if (fd < 0) {
		fail("foreign-open-card0", "%s", strerror(errno));
		return;
	}
	struct drm_mode_create_dumb d = { .width = 64, .height = 64, .bpp = 32 };
	int r = xioctl(fd, DRM_IOCTL_MODE_CREATE_DUMB, &d);
	CHECK("foreign-dumb-create", r == 0 && d.handle, "rc=%d (%s)", r, strerror(-r));
	if (r == 0) {
		struct drm_aigpu_gem_mmap_offset m = { .handle = d.handle };
		expect_fail("foreign-dumb-mmap-offset", fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m, &m.reason, EINVAL,
			    AIGPU_REASON_HANDLE_FOREIGN);
		bind_fail("foreign-dumb-vm-bind", fd, d.handle, 0, AIGPU_VA_START, 0, PAGE, RW, EINVAL,
			  AIGPU_REASON_HANDLE_FOREIGN);
		/* our own objects still work on the primary node, next to the dumb buffer */
		__u32 h;
		int rc = gem_create(fd, PAGE, &h);
		int rb = rc ? rc : bind(fd, h, AIGPU_VA_START, 0, PAGE, RW);
		CHECK("foreign-own-object-on-card0", rc == 0 && rb == 0, "create rc=%d bind rc=%d", rc, rb);
		if (!rc)
			gem_close(fd, h);
		/* GEM_CHANGE_HANDLE would move handles without open/close callbacks (the tracking is by
		 * object, so it would stay right); Linux 7.3 wires the ioctl to drm_invalid_op. */
		struct drm_gem_change_handle ch = { .handle = d.handle, .new_handle = 4000 };
		int rch = xioctl(fd, DRM_IOCTL_GEM_CHANGE_HANDLE, &ch);
		if (rch == -EINVAL) {
			printf("kmd_test: skip change-handle: DRM_IOCTL_GEM_CHANGE_HANDLE disabled in this kernel\n");
		} else if (rch == 0) {
			d.handle = 4000;
			bind_fail("foreign-dumb-vm-bind-after-change-handle", fd, d.handle, 0, AIGPU_VA_START + 8 * PAGE,
				  0, PAGE, RW, EINVAL, AIGPU_REASON_HANDLE_FOREIGN);
			rc = gem_create(fd, PAGE, &h);
			ch = (struct drm_gem_change_handle){ .handle = h, .new_handle = 5000 };
			rch = rc ? rc : xioctl(fd, DRM_IOCTL_GEM_CHANGE_HANDLE, &ch);
			rb = rch ? rch : bind(fd, 5000, AIGPU_VA_START + 16 * PAGE, 0, PAGE, RW);
			CHECK("own-object-after-change-handle", rc == 0 && rch == 0 && rb == 0, "create %d change %d bind %d",
			      rc, rch, rb);
			if (!rch)
				gem_close(fd, 5000);
		} else {
			fail("foreign-dumb-change-handle", "rc=%d", rch);
		}
		/* closing the dumb buffer and reusing its handle number for our object */
		gem_close(fd, d.handle);
		rc = gem_create(fd, PAGE, &h);
		rb = rc ? rc : bind(fd, h, AIGPU_VA_START + PAGE, 0, PAGE, RW);
		CHECK("foreign-handle-reuse", rc == 0 && rb == 0, "create rc=%d (handle %u, dumb was %u) bind rc=%d", rc,
		      h, d.handle, rb);
	}

	/* PRIME: a dumb buffer of device 1 imported into device 0 becomes a C-side shmem object */
	int fd1 = num_devices > 1 ? open_node("/dev/dri/card1") : -1;
	int rfd = open_render(0);
	if (fd1 >= 0 && rfd >= 0) {
		struct drm_mode_create_dumb d1 = { .width = 64, .height = 64, .bpp = 32 };
		struct drm_prime_handle ex = { 0 }, im = { 0 };
		int r1 = xioctl(fd1, DRM_IOCTL_MODE_CREATE_DUMB, &d1);
		ex.handle = d1.handle;
		ex.flags = DRM_CLOEXEC | DRM_RDWR;
		int r2 = r1 ? r1 : xioctl(fd1, DRM_IOCTL_PRIME_HANDLE_TO_FD, &ex);
		im.fd = ex.fd;
		int r3 = r2 ? r2 : xioctl(rfd, DRM_IOCTL_PRIME_FD_TO_HANDLE, &im);
		if (r3 == 0) {
			ok("foreign-prime-import");
			struct drm_aigpu_gem_mmap_offset m = { .handle = im.handle };
			expect_fail("foreign-prime-mmap-offset", rfd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m, &m.reason,
				    EINVAL, AIGPU_REASON_HANDLE_FOREIGN);
			bind_fail("foreign-prime-vm-bind", rfd, im.handle, 0, AIGPU_VA_START, 0, PAGE, RW, EINVAL,
				  AIGPU_REASON_HANDLE_FOREIGN);
			gem_close(rfd, im.handle);
		} else {
			printf("kmd_test: skip foreign-prime-import: create rc=%d export rc=%d import rc=%d\n", r1, r2, r3);
		}
		if (r2 == 0)
			close(ex.fd);
		if (r1 == 0)
			gem_close(fd1, d1.handle);

		/* PRIME of our own object into another file of the same device: a real aigpu object */
		__u32 h;
		int rfd2 = open_render(0);
		int rc = gem_create(rfd, PAGE, &h);
		struct drm_prime_handle e2 = { .handle = h, .flags = DRM_CLOEXEC | DRM_RDWR }, i2 = { 0 };
		int re = rc ? rc : xioctl(rfd, DRM_IOCTL_PRIME_HANDLE_TO_FD, &e2);
		i2.fd = e2.fd;
		int ri = re ? re : xioctl(rfd2, DRM_IOCTL_PRIME_FD_TO_HANDLE, &i2);
		int rb = ri ? ri : bind(rfd2, i2.handle, AIGPU_VA_START, 0, PAGE, RW);
		CHECK("prime-own-object-accepted", rc == 0 && re == 0 && ri == 0 && rb == 0,
		      "create %d export %d import %d bind %d", rc, re, ri, rb);
		if (re == 0)
			close(e2.fd);
		if (rfd2 >= 0)
			close(rfd2);
	}
	if (rfd >= 0)
		close(rfd);
	if (fd1 >= 0)
		close(fd1);
	close(fd);
}

/* Separate address spaces per file, many files at once, on every device. */
static void test_many_files(void)
{
	enum { N = 48 };
	int fds[N], bad = 0;
	__u32 h[N];

	for (int i = 0; i < N; i++) {
		fds[i] = open_render((unsigned)i % num_devices);
		if (fds[i] < 0) {
			bad = -errno;
			break;
		}
		/* the same VA in every file: separate address spaces */
		int r = gem_create(fds[i], (__u64)(i + 1) * PAGE, &h[i]);
		r = r ? r : bind(fds[i], h[i], AIGPU_VA_START, 0, (__u64)(i + 1) * PAGE, RW);
		if (r) {
			bad = r;
			break;
		}
		uint32_t *p = gem_mmap(fds[i], h[i], PAGE);
		if (p == MAP_FAILED) {
			bad = -errno;
			break;
		}
		p[0] = (uint32_t)i;
		munmap(p, PAGE);
	}
	CHECK("many-files-open-bind", bad == 0, "rc=%d", bad);
	int same = 1;
	for (int i = 0; i < N && !bad; i++) {
		uint32_t *p = gem_mmap(fds[i], h[i], PAGE);
		same &= p != MAP_FAILED && p[0] == (uint32_t)i;
		if (p != MAP_FAILED)
			munmap(p, PAGE);
	}
	CHECK("many-files-independent", !bad && same, "objects mixed up between files");
	for (int i = 0; i < N; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	int fd = open_render(0);
	__u64 used = mem_used(fd);
	CHECK("many-files-closed-memory-freed", used == 0, "mem_used=%llu", (unsigned long long)used);
	close(fd);
}

/* A child that exits with live objects, mappings and CPU mmaps. */
static void test_child_exit(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open_render(0);
		for (int i = 0; i < 8 && fd >= 0; i++) {
			__u32 h;
			if (gem_create(fd, 4 * PAGE, &h))
				_exit(2);
			if (bind(fd, h, AIGPU_VA_START + (__u64)i * (1ULL << 32), 0, 4 * PAGE, RW))
				_exit(3);
			if (bind(fd, h, AIGPU_VA_START + (__u64)i * (1ULL << 32) + 8 * PAGE, PAGE, PAGE, RW))
				_exit(4);
			uint32_t *p = gem_mmap(fd, h, 4 * PAGE);
			if (p == MAP_FAILED)
				_exit(5);
			p[100] = 42; /* fault pages in, leave the mapping */
		}
		_exit(fd >= 0 ? 0 : 1);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	int fd = open_render(0);
	__u64 used = mem_used(fd);
	CHECK("child-exit-with-live-objects", WIFEXITED(status) && WEXITSTATUS(status) == 0 && used == 0,
	      "child status %#x, mem_used after exit %llu", status, (unsigned long long)used);
	close(fd);
}

static int node_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static void test_module_cycle(void)
{
	if (!module_path) {
		printf("kmd_test: skip module-cycle: no --module\n");
		return;
	}
	int fd = open_render(0);
	int r = delete_module("aigpu");
	CHECK("module-unload-refused-while-open", r == -EWOULDBLOCK || r == -EBUSY, "delete_module rc=%d (%s)", r,
	      strerror(-r));
	close(fd);
	if (r == 0) /* it went away: load it back for the rest */
		load_module(module_params);

	for (int cycle = 0; cycle < 3; cycle++) {
		char name[64];
		r = delete_module("aigpu");
		int gone = !node_exists("/dev/dri/renderD128");
		snprintf(name, sizeof(name), "module-unload-%d", cycle);
		CHECK(name, r == 0 && gone, "rc=%d (%s), render node %s", r, strerror(-r), gone ? "gone" : "still there");
		r = load_module(module_params);
		snprintf(name, sizeof(name), "module-reload-%d", cycle);
		int fd2 = r ? -1 : open_render(0);
		struct drm_aigpu_query q;
		int rq = fd2 < 0 ? -ENODEV : query(fd2, &q);
		CHECK(name, r == 0 && rq == 0 && q.mem_used == 0, "load rc=%d query rc=%d", r, rq);
		if (fd2 >= 0) {
			/* leave something behind for the next unload to tear down via file close */
			__u32 h;
			if (gem_create(fd2, PAGE, &h) == 0)
				bind(fd2, h, AIGPU_VA_START, 0, PAGE, RW);
			close(fd2);
		}
	}

	/* parameter range checks: the load fails, nothing is left registered */
	r = delete_module("aigpu");
	static const char *const bad[] = { "num_devices=0", "num_devices=9", "mem_mib=0", "mem_mib=16385" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char name[64];
		int rl = load_module(bad[i]);
		snprintf(name, sizeof(name), "module-param-rejected-%s", bad[i]);
		CHECK(name, rl == -EINVAL && !node_exists("/dev/dri/renderD128"), "load rc=%d", rl);
		if (rl == 0)
			delete_module("aigpu");
	}
	/* back to the state the test started with */
	r = load_module(module_params);
	CHECK("module-final-reload", r == 0, "rc=%d", r);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--module") && i + 1 < argc)
			module_path = argv[++i];
		else if (!strcmp(argv[i], "--params") && i + 1 < argc)
			module_params = argv[++i];
		else if (!strcmp(argv[i], "--mem-mib") && i + 1 < argc)
			mem_mib = (unsigned)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--devices") && i + 1 < argc)
			num_devices = (unsigned)strtoul(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "usage: %s [--module PATH] [--params STR] [--mem-mib N] [--devices N]\n", argv[0]);
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	int fd = open_render(0);
	CHECK("open-render-node", fd >= 0, "open /dev/dri/renderD128: %s", strerror(errno));
	if (fd >= 0) {
		test_probe_line();
		test_version(fd);
		test_query(fd);
		test_gem(fd);
		test_vm(fd);
		test_vm_spread(fd);
		test_ctx(fd);
		close(fd);
		test_foreign();
		test_many_files();
		test_child_exit();
		test_module_cycle();
	}
	printf("kmd_test: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
