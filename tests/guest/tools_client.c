// SPDX-License-Identifier: GPL-2.0
/*
 * A client of known usage for the triage tools' in-guest test (tests/guest/tools_test.sh),
 * written from the public UAPI alone (include/aigpu_drm.h, docs/uapi.md, docs/hw-spec.md section
 * 6), as an outsider's program would be:
 *
 *   tools_client work NODE [NODE2]
 *                                        opens NODE and leaves known work on it: 3 GEM objects
 *                                        (1 MiB and 256 KiB bound in the GPU VM, 64 KiB never
 *                                        bound nor touched), 2 contexts, 5 FILL jobs (3 on the
 *                                        first context, 2 on the second), each waited for; opens
 *                                        NODE2 too (e.g. the device's primary node), with nothing
 *                                        on it. Prints the line `tools_client work: pid=P ...;
 *                                        holding` with the values NODE's fdinfo must show, then
 *                                        holds the files until killed.
 *   tools_client hang NODE               one context, one job that is a HANG packet (the module
 *                                        needs hang_debug=1): the job timeout resets the engine
 *                                        and bans the context. Prints `tools_client hang:
 *                                        pid=P ctx=C submit=0 wait=-125 reason=29` and exits 0
 *                                        when the wait failed so (CTX_LOST), else 1.
 *
 * (tools_test.sh starts it through `su` for another user: a process that drops its own uid is no
 * longer dumpable, and its /proc/<pid>/fdinfo is then closed to that user too.)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "aigpu_drm.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
/* GPU VAs of the two bound objects. */
#define VA_MAIN 0x40000000ull /* 1 MiB: data in the lower half, command buffers in the upper */
#define VA_AUX 0x50000000ull /* 256 KiB */

static int xioctl(int fd, unsigned long req, void *arg)
{
	int r;
	do
		r = ioctl(fd, req, arg);
	while (r < 0 && errno == EINTR);
	return r < 0 ? -errno : 0;
}

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int gem(int fd, uint64_t size, uint32_t *handle)
{
	struct drm_aigpu_gem_create c = { .size = size };
	int r = xioctl(fd, DRM_IOCTL_AIGPU_GEM_CREATE, &c);
	*handle = c.handle;
	return r;
}

static int bind(int fd, uint32_t handle, uint64_t va, uint64_t size)
{
	struct drm_aigpu_vm_bind b = { .handle = handle, .va = va, .size = size,
				       .access = AIGPU_VM_ACCESS_READ | AIGPU_VM_ACCESS_WRITE };
	return xioctl(fd, DRM_IOCTL_AIGPU_VM_BIND, &b);
}

static int ctx_create(int fd, uint32_t *ctx)
{
	struct drm_aigpu_ctx_create c = { .priority = AIGPU_PRIORITY_NORMAL };
	int r = xioctl(fd, DRM_IOCTL_AIGPU_CTX_CREATE, &c);
	*ctx = c.ctx_id;
	return r;
}

/* Submits the `n` words already written at VA `va` as one command buffer on `ctx` and waits up
 * to 30 s: 0, or -errno of the submit or the wait (the wait's reason in *reason). */
static int run(int fd, uint32_t ctx, uint64_t va, uint32_t n, uint32_t *reason)
{
	struct drm_aigpu_cmdbuf cb = { .va = va, .size = n * 4 };
	struct drm_aigpu_submit s = { .ctx_id = ctx, .cmdbufs = (uintptr_t)&cb, .num_cmdbufs = 1 };
	*reason = 0;
	int r = xioctl(fd, DRM_IOCTL_AIGPU_SUBMIT, &s);
	if (r) {
		*reason = s.reason;
		return r;
	}
	struct drm_aigpu_wait w = { .ctx_id = ctx, .seqno = s.out_seqno, .timeout_ns = mono_ns() + 30000000000ull };
	r = xioctl(fd, DRM_IOCTL_AIGPU_WAIT, &w);
	*reason = w.reason;
	return r;
}

static uint32_t hdr(uint32_t op, uint32_t words)
{
	return op | (words << 16);
}

static int work(const char *node, const char *node2)
{
	int fd = open(node, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		printf("tools_client work: open %s: %s\n", node, strerror(errno));
		return 1;
	}
	if (node2 && open(node2, O_RDWR | O_CLOEXEC) < 0) {
		printf("tools_client work: open %s: %s\n", node2, strerror(errno));
		return 1;
	}
	uint32_t main_bo, aux_bo, spare_bo, ctx[2];
	int r = gem(fd, MIB, &main_bo);
	r = r ? r : gem(fd, 256 * KIB, &aux_bo);
	r = r ? r : gem(fd, 64 * KIB, &spare_bo);
	r = r ? r : bind(fd, main_bo, VA_MAIN, MIB);
	r = r ? r : bind(fd, aux_bo, VA_AUX, 256 * KIB);
	struct drm_aigpu_gem_mmap_offset mo = { .handle = main_bo };
	r = r ? r : xioctl(fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &mo);
	uint32_t *cpu = MAP_FAILED;
	if (!r) {
		cpu = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)mo.offset);
		if (cpu == MAP_FAILED)
			r = -errno;
	}
	r = r ? r : ctx_create(fd, &ctx[0]);
	r = r ? r : ctx_create(fd, &ctx[1]);
	if (r) {
		printf("tools_client work: setup rc=%d (%s)\n", r, strerror(-r));
		return 1;
	}
	/* 5 jobs, each one FILL of 4 KiB (job i fills page i of the aux object with i + 1), its
	 * command buffer at 512 KiB + i * 64 in the main object. */
	const int jobs = 5;
	for (int i = 0; i < jobs; i++) {
		uint64_t dst = VA_AUX + (uint64_t)i * 4096;
		uint32_t at = (uint32_t)(MIB / 2) + (uint32_t)i * 64;
		uint32_t w[6] = { hdr(0x02, 6), (uint32_t)dst, (uint32_t)(dst >> 32), 4096, 0, (uint32_t)i + 1 };
		memcpy((uint8_t *)cpu + at, w, sizeof(w));
		uint32_t reason;
		r = run(fd, ctx[i < 3 ? 0 : 1], VA_MAIN + at, 6, &reason);
		if (r) {
			printf("tools_client work: job %d rc=%d reason=%u\n", i, r, reason);
			return 1;
		}
	}
	printf("tools_client work: pid=%d node=%s objects=3 total=%llu resident=%llu mappings=2 contexts=2 "
	       "jobs=%d completed=%d; holding\n",
	       (int)getpid(), node, (MIB + 256 * KIB + 64 * KIB), (MIB + 256 * KIB), jobs, jobs);
	fflush(stdout);
	for (;;)
		pause();
}

static int hang(const char *node)
{
	int fd = open(node, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		printf("tools_client hang: open %s: %s\n", node, strerror(errno));
		return 1;
	}
	uint32_t bo, ctx;
	int r = gem(fd, 64 * KIB, &bo);
	r = r ? r : bind(fd, bo, VA_MAIN, 64 * KIB);
	struct drm_aigpu_gem_mmap_offset mo = { .handle = bo };
	r = r ? r : xioctl(fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &mo);
	uint32_t *cpu = MAP_FAILED;
	if (!r) {
		cpu = mmap(NULL, 64 * KIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)mo.offset);
		if (cpu == MAP_FAILED)
			r = -errno;
	}
	r = r ? r : ctx_create(fd, &ctx);
	if (r) {
		printf("tools_client hang: setup rc=%d (%s)\n", r, strerror(-r));
		return 1;
	}
	cpu[0] = hdr(0x7f, 1); /* HANG */
	struct drm_aigpu_cmdbuf cb = { .va = VA_MAIN, .size = 4 };
	struct drm_aigpu_submit s = { .ctx_id = ctx, .cmdbufs = (uintptr_t)&cb, .num_cmdbufs = 1 };
	int sr = xioctl(fd, DRM_IOCTL_AIGPU_SUBMIT, &s);
	struct drm_aigpu_wait w = { .ctx_id = ctx, .seqno = s.out_seqno, .timeout_ns = mono_ns() + 30000000000ull };
	int wr = sr ? sr : xioctl(fd, DRM_IOCTL_AIGPU_WAIT, &w);
	printf("tools_client hang: pid=%d ctx=%u submit=%d wait=%d reason=%u\n", (int)getpid(), ctx, sr, wr,
	       sr ? s.reason : w.reason);
	close(fd);
	return sr == 0 && wr == -ECANCELED && w.reason == AIGPU_REASON_CTX_LOST ? 0 : 1;
}

int main(int argc, char **argv)
{
	int i = 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((i + 2 == argc || i + 3 == argc) && !strcmp(argv[i], "work"))
		return work(argv[i + 1], i + 3 == argc ? argv[i + 2] : NULL);
	if (i + 2 == argc && !strcmp(argv[i], "hang"))
		return hang(argv[i + 1]);
	fprintf(stderr, "usage: %s work NODE [NODE2] | hang NODE\n", argv[0]);
	return 2;
}
