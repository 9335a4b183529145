// SPDX-License-Identifier: GPL-2.0
/*
 * procfault_test: process-level faults against aigpu.ko (docs/kmd.md, "Fuzzing"), on the module
 * init.sh has loaded (hang debugging on, the job timeout given by --timeout-ms):
 *
 * - kill -9 of a process with jobs queued behind a stalled one, and with a HANG queued;
 * - exit without closing anything (objects, mappings, CPU maps, contexts, queued jobs);
 * - --procs processes at once, each submitting jobs and checking their results;
 * - rmmod while a file is open, and while only a CPU map of an object is left: refused (EBUSY /
 *   EWOULDBLOCK), the module still loaded and working;
 * - close() of the fd while another thread waits on a fence of it: the waiter returns with a
 *   documented outcome once the job completes, and the file is released after.
 *
 * After each, a new client opens the device, submits a FILL and waits: exit 0 and the exact
 * pattern in memory. Output as tests/guest/guest_check.h: `procfault_test: ok NAME`, `FAIL`, and
 * `procfault_test: N passed, M failed`.
 */
#define _GNU_SOURCE
#define GUEST_TEST "procfault_test"
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "aigpu_drm.h"
#include "guest_check.h"
#include "guest_uapi.h"

#define VA 0x40000000ull
#define BUF (256u * 1024u)
#define CMD (BUF / 2)

static const char *node = "/dev/dri/renderD128";
static unsigned timeout_ms = 2000, nprocs = 12;


/* A client: one file, one object of BUF bytes bound at VA and CPU-mapped, one context. */
struct cl {
	int fd;
	uint8_t *map;
	uint32_t ctx;
	unsigned cmd_at;
};

static int cl_open(struct cl *c, uint32_t prio)
{
	memset(c, 0, sizeof(*c));
	c->fd = open(node, O_RDWR | O_CLOEXEC);
	if (c->fd < 0)
		return -errno;
	struct drm_aigpu_gem_create g = { .size = BUF };
	int r = rawioctl(c->fd, DRM_IOCTL_AIGPU_GEM_CREATE, &g);
	if (r)
		return r;
	struct drm_aigpu_vm_bind b = { .handle = g.handle, .va = VA, .size = BUF, .access = RW };
	if ((r = rawioctl(c->fd, DRM_IOCTL_AIGPU_VM_BIND, &b)))
		return r;
	struct drm_aigpu_gem_mmap_offset m = { .handle = g.handle };
	if ((r = rawioctl(c->fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m)))
		return r;
	c->map = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, (off_t)m.offset);
	if (c->map == MAP_FAILED)
		return -errno;
	struct drm_aigpu_ctx_create cc = { .priority = prio };
	if ((r = rawioctl(c->fd, DRM_IOCTL_AIGPU_CTX_CREATE, &cc)))
		return r;
	c->ctx = cc.ctx_id;
	c->cmd_at = CMD;
	return 0;
}

static void cl_close(struct cl *c)
{
	if (c->map && c->map != MAP_FAILED)
		munmap(c->map, BUF);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->map = NULL;
}

static uint32_t *cmd(struct cl *c, uint64_t *va)
{
	if (c->cmd_at + 128 > BUF)
		c->cmd_at = CMD;
	*va = VA + c->cmd_at;
	uint32_t *p = (uint32_t *)(c->map + c->cmd_at);
	c->cmd_at += 128;
	return p;
}

/* Submits [p0, p) at va; 0 or -errno, the seqno in *seq. */
static int submit(struct cl *c, uint64_t va, uint32_t *p0, uint32_t *p, uint64_t *seq)
{
	struct drm_aigpu_cmdbuf cb = { .va = va, .size = (uint32_t)((p - p0) * 4) };
	struct drm_aigpu_submit s = { .ctx_id = c->ctx, .cmdbufs = (uintptr_t)&cb, .num_cmdbufs = 1 };
	int r = rawioctl(c->fd, DRM_IOCTL_AIGPU_SUBMIT, &s);

	if (seq)
		*seq = s.out_seqno;
	return r;
}

/* A FILL of `size` bytes of `pattern` at data offset `off`. */
static int submit_fill(struct cl *c, unsigned off, unsigned size, uint32_t pattern, uint64_t *seq)
{
	uint64_t va;
	uint32_t *p0 = cmd(c, &va), *p = p0;

	*p++ = HDR(0x02, 0, 6);
	p = emit64(p, VA + off);
	p = emit64(p, size);
	*p++ = pattern;
	return submit(c, va, p0, p, seq);
}

/* A WAIT_MEM on the u64 at data offset `off` reaching `value`: the job stalls until then. */
static int submit_stall(struct cl *c, unsigned off, uint64_t value, uint64_t *seq)
{
	uint64_t va;
	uint32_t *p0 = cmd(c, &va), *p = p0;

	*p++ = HDR(0x07, 0, 5);
	p = emit64(p, VA + off);
	p = emit64(p, value);
	return submit(c, va, p0, p, seq);
}

static int submit_hang(struct cl *c, uint64_t *seq)
{
	uint64_t va;
	uint32_t *p0 = cmd(c, &va), *p = p0;

	*p++ = HDR(0x7f, 0, 1);
	return submit(c, va, p0, p, seq);
}

static int wait_ms(struct cl *c, uint64_t seq, unsigned ms, uint32_t *reason)
{
	struct drm_aigpu_wait w = { .ctx_id = c->ctx, .seqno = seq, .timeout_ns = now_ns() + ms * 1000000ull };
	int r = rawioctl(c->fd, DRM_IOCTL_AIGPU_WAIT, &w);

	if (reason)
		*reason = w.reason;
	return r;
}

/* A fresh client: FILL, wait, exact data. 0 or a negative code; `why` says what. */
static int client_works(uint32_t pattern, char *why, size_t n)
{
	struct cl c;
	uint64_t seq = 0;
	uint32_t reason = 0;
	int r = cl_open(&c, AIGPU_PRIORITY_NORMAL);

	if (r) {
		snprintf(why, n, "open/setup rc=%d", r);
		cl_close(&c);
		return r;
	}
	memset(c.map, 0, 4096);
	if ((r = submit_fill(&c, 0, 4096, pattern, &seq))) {
		snprintf(why, n, "submit rc=%d", r);
	} else if ((r = wait_ms(&c, seq, 4 * timeout_ms + 10000, &reason))) {
		snprintf(why, n, "wait seq %llu rc=%d reason=%u", (unsigned long long)seq, r, reason);
	} else {
		for (unsigned i = 0; i < 4096 / 4; i++)
			if (((uint32_t *)c.map)[i] != pattern) {
				snprintf(why, n, "word %u is %#x, want %#x", i, ((uint32_t *)c.map)[i], pattern);
				r = -EBADMSG;
				break;
			}
	}
	cl_close(&c);
	return r;
}

static void check_after(const char *what, uint32_t pattern)
{
	char why[160] = "", name[96];
	int r = client_works(pattern, why, sizeof(why));

	snprintf(name, sizeof(name), "after-%s-new-client-works", what);
	CHECK(name, r == 0, "%s", why);
}

/* A child that queues work and tells the parent through `pipefd` (then sleeps). */
static pid_t queued_child(int hang, int *ready)
{
	int pfd[2];

	if (pipe(pfd))
		return -1;
	pid_t p = fork();
	if (p == 0) {
		close(pfd[0]);
		struct cl c;
		char ok = 0;
		if (cl_open(&c, AIGPU_PRIORITY_LOW) == 0) {
			uint64_t seq;
			int r = submit_stall(&c, 64, 1, &seq);
			if (!r && hang)
				r = submit_hang(&c, &seq);
			for (int i = 0; !r && i < 8; i++)
				r = submit_fill(&c, 4096 + i * 256, 256, 0x11110000u + i, &seq);
			ok = r == 0;
		}
		if (write(pfd[1], &ok, 1) != 1)
			_exit(2);
		for (;;)
			pause();
	}
	close(pfd[1]);
	char ok = 0;
	*ready = read(pfd[0], &ok, 1) == 1 && ok;
	close(pfd[0]);
	return p;
}

static void test_kill_queued(int hang)
{
	const char *name = hang ? "kill9-with-hang-queued" : "kill9-with-queued-jobs";
	int ready = 0;
	pid_t p = queued_child(hang, &ready);

	if (p < 0) {
		fail(name, "fork failed");
		return;
	}
	uint64_t t0 = now_ns();
	kill(p, SIGKILL);
	int st = 0;
	waitpid(p, &st, 0);
	double secs = (double)(now_ns() - t0) / 1e9;
	/* The file's close waits for its jobs, bounded by twice the job timeout plus a second
	 * (docs/kmd.md, "Submission, fences and waits"), then resets the engine. */
	double bound = 2.0 * timeout_ms / 1000.0 + 1.0 + 5.0;
	CHECK(name, ready && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && secs < bound,
	      "queued %d, status %#x, reaped after %.1f s (bound %.1f s)", ready, st, secs, bound);
	check_after(name, hang ? 0xa5a50001u : 0xa5a50002u);
}

static void test_exit_without_close(void)
{
	pid_t p = fork();

	if (p == 0) {
		struct cl c;
		uint64_t seq;
		if (cl_open(&c, AIGPU_PRIORITY_HIGH))
			_exit(2);
		for (int i = 0; i < 16; i++)
			if (submit_fill(&c, 8192 + i * 64, 64, (uint32_t)i, &seq))
				_exit(3);
		struct drm_aigpu_gem_create g = { .size = 64 * 1024 };
		rawioctl(c.fd, DRM_IOCTL_AIGPU_GEM_CREATE, &g);
		struct drm_aigpu_vm_bind b = { .handle = g.handle, .va = VA + 0x1000000, .size = 64 * 1024, .access = RW };
		rawioctl(c.fd, DRM_IOCTL_AIGPU_VM_BIND, &b);
		_exit(0); /* nothing closed, unmapped or destroyed */
	}
	int st = 0;
	waitpid(p, &st, 0);
	CHECK("exit-without-close", WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
	check_after("exit-without-close", 0xa5a50003u);
}

/* One of many processes: 24 FILLs of its own pattern, waits, exact data. Exit code 0 if so. */
static int many_one(unsigned id)
{
	struct cl c;
	uint64_t seq = 0;
	uint32_t reason;

	if (cl_open(&c, id % 3))
		return 2;
	for (unsigned i = 0; i < 24; i++) {
		int r;
		while ((r = submit_fill(&c, i * 1024, 1024, (id << 16) | i, &seq)) == -EINTR)
			;
		if (r)
			return 3;
	}
	if (wait_ms(&c, seq, 60000, &reason))
		return 4;
	for (unsigned i = 0; i < 24; i++)
		for (unsigned w = 0; w < 256; w++)
			if (((uint32_t *)c.map)[i * 256 + w] != ((id << 16) | i))
				return 5;
	cl_close(&c);
	return 0;
}

static void test_many(void)
{
	pid_t pids[64];
	int bad = 0, codes[64];
	unsigned n = nprocs > 64 ? 64 : nprocs;

	for (unsigned i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(many_one(i + 1));
	}
	for (unsigned i = 0; i < n; i++) {
		int st = 0;
		waitpid(pids[i], &st, 0);
		codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		bad += codes[i] != 0;
	}
	char name[64];
	snprintf(name, sizeof(name), "%u-processes-submit-at-once", n);
	CHECK(name, bad == 0, "%d of %u processes failed (first code %d)", bad, n, codes[0]);
	check_after(name, 0xa5a50004u);
}

static void test_rmmod_open(void)
{
	struct cl c;
	int r = cl_open(&c, AIGPU_PRIORITY_NORMAL);

	if (r) {
		fail("rmmod-while-open", "setup rc=%d", r);
		cl_close(&c);
		return;
	}
	r = delete_module("aigpu");
	CHECK("rmmod-while-open-refused", r == -EBUSY || r == -EWOULDBLOCK || r == -EAGAIN,
	      "delete_module rc=%d", r);
	uint64_t seq;
	uint32_t reason = 0;
	int s = submit_fill(&c, 0, 256, 0x5a5a5a5au, &seq);
	int w = s ? s : wait_ms(&c, seq, 10000, &reason);
	CHECK("rmmod-refused-file-still-works", w == 0 && ((uint32_t *)c.map)[63] == 0x5a5a5a5au,
	      "submit %d wait %d reason %u", s, w, reason);
	/* Only the CPU map left: it still holds the object, hence the module. */
	close(c.fd);
	c.fd = -1;
	r = delete_module("aigpu");
	CHECK("rmmod-with-only-a-cpu-map-refused", r == -EBUSY || r == -EWOULDBLOCK || r == -EAGAIN,
	      "delete_module rc=%d", r);
	((volatile uint8_t *)c.map)[100] = 1;
	cl_close(&c);
	check_after("rmmod-attempts", 0xa5a50005u);
}

struct waiter {
	struct cl *c;
	uint64_t seq;
	int rc;
	uint32_t reason;
	volatile int done;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	w->rc = wait_ms(w->c, w->seq, 4 * timeout_ms + 10000, &w->reason);
	w->done = 1;
	return NULL;
}

static void test_close_under_wait(void)
{
	struct cl c;
	uint64_t seq = 0;
	int r = cl_open(&c, AIGPU_PRIORITY_NORMAL);

	if (!r) {
		((volatile uint64_t *)c.map)[8] = 0;
		r = submit_stall(&c, 64, 7, &seq);
	}
	if (r) {
		fail("close-while-another-thread-waits", "setup rc=%d", r);
		cl_close(&c);
		return;
	}
	struct waiter w = { .c = &c, .seq = seq };
	pthread_t t;
	int fd = c.fd;
	pthread_create(&t, NULL, waiter_main, &w);
	usleep(100000);
	close(fd); /* the waiter's ioctl still holds the file */
	usleep(100000);
	int early = w.done;
	((volatile uint64_t *)c.map)[8] = 7; /* release the stalled job through the CPU map */
	uint64_t t0 = now_ns();
	while (!w.done && now_ns() - t0 < (4ull * timeout_ms + 12000) * 1000000ull)
		usleep(10000);
	int done = w.done;
	if (done)
		pthread_join(t, NULL);
	/* Documented outcomes of WAIT (docs/kmd.md, "Errors"): signalled, the context lost (the
	 * job timeout fired first), or closing; EBADF is not one (the ioctl got its file first). */
	CHECK("close-while-another-thread-waits", done && !early &&
	      (w.rc == 0 || (w.rc == -ECANCELED && w.reason == AIGPU_REASON_CTX_LOST)),
	      "done %d (early %d) rc %d reason %u", done, early, w.rc, w.reason);
	c.fd = -1;
	cl_close(&c);
	if (!done)
		return; /* the thread still uses c */
	check_after("close-under-wait", 0xa5a50006u);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--node")) node = argv[i + 1];
		else if (!strcmp(argv[i], "--timeout-ms")) timeout_ms = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--procs")) nprocs = (unsigned)strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--module")) module_path = argv[i + 1];
	}
	check_after("start", 0xa5a50000u);
	test_kill_queued(0);
	test_kill_queued(1);
	test_exit_without_close();
	test_many();
	test_rmmod_open();
	test_close_under_wait();
	printf(GUEST_TEST ": %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
