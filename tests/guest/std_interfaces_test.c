// SPDX-License-Identifier: MIT
/*
 * std_interfaces_test: in-guest test of aigpu.ko on the kernel's standard GPU interfaces
 * (docs/kmd.md, "fdinfo", "Device coredump", "Wedged event"); static binary, run by
 * tests/guest/init.sh after exec_test.
 *
 *   std_interfaces_test --module PATH [--params "num_devices=2 mem_mib=64 ..."]
 *
 * Reloads the module with one device, job_timeout_ms=1000 hang_debug=1, then:
 * - fdinfo of a file: every line has the drm-usage-stats shape, every key is one the spec or
 *   docs/kmd.md defines, the values match the work done (memory = the objects created and bound,
 *   busy time grows with jobs and stays below the wall time, job / context counters exact,
 *   drm-active-memory while a job is in the ring); two files have different client ids;
 * - an unprivileged process (uid 65534) reads its own fdinfo, and not root's;
 * - a hang and a page fault each leave a devcoredump of the device (failing_device = the render
 *   node's device) with the fields of the event, the same text as debugfs crashdumps/, and
 *   writing to its data file dismisses it;
 * - a failed reset (device lost) sends the WEDGED uevent, received on a NETLINK_KOBJECT_UEVENT
 *   socket (WEDGED=vendor-specific, PID and TASK of this process, on the device's card node),
 *   leaves a devcoredump of kind lost, and following the documented recovery (close every file,
 *   open again) gives a working device.
 * Then reloads the module with --params.
 *
 * Output: `std_interfaces_test: ok <name>` / `std_interfaces_test: FAIL <name>: <detail>`, then
 * `std_interfaces_test: N passed, M failed`; exit status 0 only without failures.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/klog.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <drm/drm.h>
#include <linux/netlink.h>

#include "aigpu_drm.h"
#define GUEST_TEST "std_interfaces_test"
#include "guest_check.h"

static const char *const OWN_PARAMS = "num_devices=1 mem_mib=64 job_timeout_ms=1000 hang_debug=1";
static const char *const NODE = "/dev/dri/renderD128";
static const char *const DEBUGFS = "/sys/kernel/debug/dri/128";
static const char *const DEVCD = "/sys/class/devcoredump";

#define MIB (1ull << 20)
#define KIB (1ull << 10)
#define DATA_VA 0x40000000ull
#define SMALL_VA 0x50000000ull
#define UNMAPPED_VA 0x7f0010000ull
#define ACCESS_RW (AIGPU_VM_ACCESS_READ | AIGPU_VM_ACCESS_WRITE)

/* ---- small helpers ---- */

static int xioctl(int fd, unsigned long req, void *arg)
{
	return ioctl(fd, req, arg) ? -errno : 0;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A file's content (malloc'd, NUL-terminated), or NULL with errno set. */
static char *read_all(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	ssize_t n = 0;
	while (buf && (n = read(fd, buf + len, cap - 1 - len)) > 0) {
		len += (size_t)n;
		if (len + 1 == cap) {
			char *bigger = realloc(buf, cap * 2);
			if (!bigger)
				break;
			buf = bigger;
			cap *= 2;
		}
	}
	int saved = errno;
	close(fd);
	if (buf && n < 0) {
		free(buf);
		errno = saved;
		return NULL;
	}
	if (buf)
		buf[len] = 0;
	return buf;
}

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, s, strlen(s));
	int r = n == (ssize_t)strlen(s) ? 0 : -errno;
	close(fd);
	return r;
}

/* Prints `text` between `<title>: begin` and `<title>: end` lines (evidence for docs/kmd.md). */
static void show(const char *title, const char *text)
{
	printf(GUEST_TEST ": %s: begin\n%s%s" GUEST_TEST ": %s: end\n", title, text ? text : "(none)\n",
	       text && *text && text[strlen(text) - 1] != '\n' ? "\n" : "", title);
}

/* How many times `s` occurs in the kernel log. */
static int dmesg_count(const char *s)
{
	char *log = NULL;
	int len = klogctl(10, NULL, 0), n = 0;
	if (len > 0 && (log = calloc(1, (size_t)len + 1)) && klogctl(3, log, len) >= 0)
		for (char *p = log; (p = strstr(p, s)); p += strlen(s))
			n++;
	free(log);
	return n;
}

/* ---- a client: one file with a 1 MiB buffer bound read-write at DATA_VA, CPU-mapped ---- */

struct client {
	int fd;
	uint32_t bo, ctx;
	uint8_t *cpu;
	uint32_t next_cmd; /* byte offset of the next command buffer (upper half of the buffer) */
};

static int client_open(struct client *c)
{
	memset(c, 0, sizeof(*c));
	c->cpu = MAP_FAILED;
	c->fd = open(NODE, O_RDWR | O_CLOEXEC);
	if (c->fd < 0)
		return -errno;
	struct drm_aigpu_gem_create gc = { .size = MIB };
	int r = xioctl(c->fd, DRM_IOCTL_AIGPU_GEM_CREATE, &gc);
	c->bo = gc.handle;
	struct drm_aigpu_vm_bind vb = { .handle = c->bo, .va = DATA_VA, .size = MIB, .access = ACCESS_RW };
	r = r ? r : xioctl(c->fd, DRM_IOCTL_AIGPU_VM_BIND, &vb);
	struct drm_aigpu_gem_mmap_offset mo = { .handle = c->bo };
	r = r ? r : xioctl(c->fd, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &mo);
	if (!r) {
		c->cpu = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, (off_t)mo.offset);
		if (c->cpu == MAP_FAILED)
			r = -errno;
	}
	struct drm_aigpu_ctx_create cc = { .priority = AIGPU_PRIORITY_NORMAL };
	r = r ? r : xioctl(c->fd, DRM_IOCTL_AIGPU_CTX_CREATE, &cc);
	c->ctx = cc.ctx_id;
	c->next_cmd = MIB / 2;
	return r;
}

static void client_close(struct client *c)
{
	if (c->cpu != MAP_FAILED)
		munmap(c->cpu, MIB);
	if (c->fd >= 0)
		close(c->fd);
	c->cpu = MAP_FAILED;
	c->fd = -1;
}

/* Packets (docs/hw-spec.md section 6). */
static uint32_t hdr(uint32_t op, uint32_t words)
{
	return op | (words << 16);
}

/* Submits the `n` words at `w` as one command buffer: 0 or -errno; the job's seqno in *seqno. */
static int run_words(struct client *c, const uint32_t *w, uint32_t n, uint64_t *seqno)
{
	uint32_t at = c->next_cmd;
	if (at + n * 4 > MIB)
		at = MIB / 2;
	memcpy(c->cpu + at, w, n * 4);
	c->next_cmd = (at + n * 4 + 63) & ~63u;
	struct drm_aigpu_cmdbuf cb = { .va = DATA_VA + at, .size = n * 4 };
	struct drm_aigpu_submit s = { .ctx_id = c->ctx, .cmdbufs = (uintptr_t)&cb, .num_cmdbufs = 1 };
	int r = xioctl(c->fd, DRM_IOCTL_AIGPU_SUBMIT, &s);
	*seqno = s.out_seqno;
	return r;
}

/* A FILL of `size` bytes of `pattern` at DATA_VA + `off`. */
static int run_fill(struct client *c, uint32_t off, uint32_t size, uint32_t pattern, uint64_t *seqno)
{
	uint64_t dst = DATA_VA + off;
	uint32_t w[6] = { hdr(0x02, 6), (uint32_t)dst, (uint32_t)(dst >> 32), size, 0, pattern };
	return run_words(c, w, 6, seqno);
}

/* WAIT: 0 or -errno, the reason in *reason. */
static int wait_seqno(struct client *c, uint64_t seqno, unsigned ms, uint32_t *reason)
{
	struct drm_aigpu_wait w = { .ctx_id = c->ctx, .seqno = seqno,
				    .timeout_ns = mono_ns() + (uint64_t)ms * 1000000ull };
	int r = xioctl(c->fd, DRM_IOCTL_AIGPU_WAIT, &w);
	*reason = w.reason;
	return r;
}

/* ---- fdinfo (drm-usage-stats) ---- */

#define MAX_KEYS 64
struct fdinfo {
	int n;
	char key[MAX_KEYS][64];
	unsigned long long val[MAX_KEYS];
	char unit[MAX_KEYS][8];
	char text[MAX_KEYS][96];
	char bad[256]; /* the first line that breaks the format, or "" */
};

/* Keys this driver may print: the spec's (docs/kmd.md, "fdinfo") and aigpu's. Prefix match for
 * the `-<engine>` / `-<region>` families; `u` is the unit the key must carry ("" = none). */
static const struct {
	const char *key, *unit;
	int text; /* the value is a string, not a number */
} KNOWN[] = {
	{ "drm-driver", "", 1 },	     { "drm-client-id", "", 0 },	{ "drm-pdev", "", 1 },
	{ "drm-client-name", "", 1 },	     { "drm-engine-compute", "ns", 0 }, { "drm-total-memory", "*", 0 },
	{ "drm-shared-memory", "*", 0 },     { "drm-resident-memory", "*", 0 }, { "drm-active-memory", "*", 0 },
	{ "drm-purgeable-memory", "*", 0 },  { "aigpu-client", "", 0 },	{ "aigpu-contexts", "", 0 },
	{ "aigpu-jobs-submitted", "", 0 },   { "aigpu-jobs-inflight", "", 0 }, { "aigpu-jobs-completed", "", 0 },
	{ "aigpu-faults", "", 0 },	     { "aigpu-hangs", "", 0 },		{ "aigpu-resets", "", 0 },
	{ "aigpu-objects", "", 0 },	     { "aigpu-mappings", "", 0 },	{ "aigpu-lost", "", 0 },
};
/* The VFS's own lines before the driver's. */
static const char *const VFS_KEYS[] = { "pos", "flags", "mnt_id", "ino", NULL };

/* Parses the fdinfo text of `fd` of process `pid` (0: self): 0, or -errno when unreadable. */
static int fdinfo_read(pid_t pid, int fd, struct fdinfo *fi)
{
	char path[64];
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/fdinfo/%d", (int)pid, fd);
	else
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	memset(fi, 0, sizeof(*fi));
	char *t = read_all(path);
	if (!t)
		return -errno;
	for (char *line = strtok(t, "\n"); line && fi->n < MAX_KEYS; line = strtok(NULL, "\n")) {
		char *colon = strchr(line, ':');
		int vfs = 0;
		for (int i = 0; VFS_KEYS[i]; i++)
			vfs |= colon && (size_t)(colon - line) == strlen(VFS_KEYS[i]) && !strncmp(line, VFS_KEYS[i], strlen(VFS_KEYS[i]));
		if (vfs)
			continue;
		/* key (no whitespace) ':' '\t' value [' ' unit] */
		int known = -1;
		if (colon && colon[1] == '\t' && (size_t)(colon - line) < sizeof(fi->key[0])) {
			for (size_t i = 0; i < sizeof(KNOWN) / sizeof(KNOWN[0]); i++)
				if ((size_t)(colon - line) == strlen(KNOWN[i].key) && !strncmp(line, KNOWN[i].key, strlen(KNOWN[i].key)))
					known = (int)i;
		}
		char *space = strpbrk(line, " \t");
		if (known < 0 || (space && space < colon)) {
			if (!fi->bad[0])
				snprintf(fi->bad, sizeof(fi->bad), "unknown or malformed line '%s'", line);
			continue;
		}
		int i = fi->n++;
		snprintf(fi->key[i], sizeof(fi->key[i]), "%.*s", (int)(colon - line), line);
		snprintf(fi->text[i], sizeof(fi->text[i]), "%s", colon + 2);
		if (KNOWN[known].text)
			continue;
		char *end;
		errno = 0;
		fi->val[i] = strtoull(colon + 2, &end, 10);
		if (errno || end == colon + 2 || (*end && *end != ' ')) {
			snprintf(fi->bad, sizeof(fi->bad), "'%s': value is not an unsigned integer", line);
			continue;
		}
		if (*end == ' ')
			snprintf(fi->unit[i], sizeof(fi->unit[i]), "%s", end + 1);
		const char *want = KNOWN[known].unit;
		int unit_ok = !strcmp(want, "*") ? (!fi->unit[i][0] || !strcmp(fi->unit[i], "KiB") || !strcmp(fi->unit[i], "MiB"))
						 : !strcmp(want, fi->unit[i]);
		if (!unit_ok && !fi->bad[0])
			snprintf(fi->bad, sizeof(fi->bad), "'%s': unit '%s', the spec says '%s'", line, fi->unit[i], want);
	}
	free(t);
	return 0;
}

/* The value of `key` (bytes for memory keys), or -1 when absent. */
static long long fdinfo_get(const struct fdinfo *fi, const char *key)
{
	for (int i = 0; i < fi->n; i++) {
		if (strcmp(fi->key[i], key))
			continue;
		unsigned long long v = fi->val[i];
		if (!strcmp(fi->unit[i], "KiB"))
			v *= KIB;
		else if (!strcmp(fi->unit[i], "MiB"))
			v *= MIB;
		return (long long)v;
	}
	return -1;
}

static const char *fdinfo_text(const struct fdinfo *fi, const char *key)
{
	for (int i = 0; i < fi->n; i++)
		if (!strcmp(fi->key[i], key))
			return fi->text[i];
	return NULL;
}

static void test_fdinfo(void)
{
	struct client c;
	int r = client_open(&c);
	/* A second object, 64 KiB, bound but never CPU-mapped, and a third of 64 KiB not bound. */
	struct drm_aigpu_gem_create small = { .size = 64 * KIB }, unbound = { .size = 64 * KIB };
	r = r ? r : xioctl(c.fd, DRM_IOCTL_AIGPU_GEM_CREATE, &small);
	r = r ? r : xioctl(c.fd, DRM_IOCTL_AIGPU_GEM_CREATE, &unbound);
	struct drm_aigpu_vm_bind vb = { .handle = small.handle, .va = SMALL_VA, .size = 64 * KIB, .access = ACCESS_RW };
	r = r ? r : xioctl(c.fd, DRM_IOCTL_AIGPU_VM_BIND, &vb);
	if (r) {
		fail("fdinfo", "setup rc=%d", r);
		client_close(&c);
		return;
	}
	struct fdinfo a, b, d;
	r = fdinfo_read(0, c.fd, &a);
	CHECK("fdinfo-format", r == 0 && !a.bad[0] && a.n > 0, "rc=%d %s", r, a.bad);
	const char *drv = fdinfo_text(&a, "drm-driver");
	CHECK("fdinfo-drm-driver", drv && !strcmp(drv, "aigpu"), "drm-driver '%s'", drv ? drv : "(none)");
	long long total = fdinfo_get(&a, "drm-total-memory"), res = fdinfo_get(&a, "drm-resident-memory");
	long long shared = fdinfo_get(&a, "drm-shared-memory"), active = fdinfo_get(&a, "drm-active-memory");
	CHECK("fdinfo-memory-matches-objects",
	      total == (long long)(MIB + 128 * KIB) && res == (long long)(MIB + 64 * KIB) && shared == 0 && active == 0,
	      "total %lld resident %lld shared %lld active %lld (want %llu, %llu, 0, 0)", total, res, shared, active,
	      MIB + 128 * KIB, MIB + 64 * KIB);
	CHECK("fdinfo-idle-counters",
	      fdinfo_get(&a, "drm-engine-compute") == 0 && fdinfo_get(&a, "aigpu-contexts") == 1 &&
		      fdinfo_get(&a, "aigpu-jobs-submitted") == 0 && fdinfo_get(&a, "aigpu-objects") == 3 &&
		      fdinfo_get(&a, "aigpu-mappings") == 2 && fdinfo_get(&a, "aigpu-lost") == 0,
	      "engine %lld contexts %lld jobs %lld objects %lld mappings %lld lost %lld",
	      fdinfo_get(&a, "drm-engine-compute"), fdinfo_get(&a, "aigpu-contexts"),
	      fdinfo_get(&a, "aigpu-jobs-submitted"), fdinfo_get(&a, "aigpu-objects"), fdinfo_get(&a, "aigpu-mappings"),
	      fdinfo_get(&a, "aigpu-lost"));

	/* Work: 8 fills of 256 KiB, then 8 more; busy time grows and stays below the wall time. */
	uint64_t t0 = mono_ns(), seq = 0;
	uint32_t reason = 0;
	for (int i = 0; i < 8 && !r; i++)
		r = run_fill(&c, 0, 256 * KIB, 0x1000u + (uint32_t)i, &seq);
	r = r ? r : wait_seqno(&c, seq, 30000, &reason);
	uint64_t t1 = mono_ns();
	int rb = r ? r : fdinfo_read(0, c.fd, &b);
	for (int i = 0; i < 8 && !r; i++)
		r = run_fill(&c, 0, 256 * KIB, 0x2000u + (uint32_t)i, &seq);
	r = r ? r : wait_seqno(&c, seq, 30000, &reason);
	uint64_t t2 = mono_ns();
	int rd = r ? r : fdinfo_read(0, c.fd, &d);
	long long e1 = fdinfo_get(&b, "drm-engine-compute"), e2 = fdinfo_get(&d, "drm-engine-compute");
	char fpath[64];
	snprintf(fpath, sizeof(fpath), "/proc/self/fdinfo/%d", c.fd);
	char *ftext = read_all(fpath);
	show("fdinfo after 16 jobs", ftext);
	free(ftext);
	CHECK("fdinfo-busy-grows-with-work",
	      r == 0 && rb == 0 && rd == 0 && e1 > 0 && e2 > e1 && (uint64_t)e1 <= t1 - t0 && (uint64_t)(e2 - e1) <= t2 - t1,
	      "rc=%d reason=%u: busy %lld ns after %llu ns, %lld ns after %llu ns more", r, reason, e1,
	      (unsigned long long)(t1 - t0), e2, (unsigned long long)(t2 - t1));
	CHECK("fdinfo-job-counters",
	      fdinfo_get(&d, "aigpu-jobs-submitted") == 16 && fdinfo_get(&d, "aigpu-jobs-completed") == 16 &&
		      fdinfo_get(&d, "aigpu-jobs-inflight") == 0 && fdinfo_get(&d, "aigpu-faults") == 0 &&
		      fdinfo_get(&d, "aigpu-resets") == 0 && !d.bad[0],
	      "submitted %lld completed %lld inflight %lld faults %lld resets %lld %s",
	      fdinfo_get(&d, "aigpu-jobs-submitted"), fdinfo_get(&d, "aigpu-jobs-completed"),
	      fdinfo_get(&d, "aigpu-jobs-inflight"), fdinfo_get(&d, "aigpu-faults"), fdinfo_get(&d, "aigpu-resets"), d.bad);

	/* A job that waits for memory the CPU writes: in the ring, every object counts as active. */
	uint64_t flag = DATA_VA + 0x1000;
	*(volatile uint64_t *)(c.cpu + 0x1000) = 0;
	uint32_t w[5] = { hdr(0x07, 5), (uint32_t)flag, (uint32_t)(flag >> 32), 1, 0 };
	r = run_words(&c, w, 5, &seq);
	struct fdinfo e;
	int re = fdinfo_read(0, c.fd, &e);
	*(volatile uint64_t *)(c.cpu + 0x1000) = 1;
	int rw = wait_seqno(&c, seq, 30000, &reason);
	struct fdinfo f;
	int rf = fdinfo_read(0, c.fd, &f);
	CHECK("fdinfo-active-while-in-ring",
	      r == 0 && re == 0 && rw == 0 && rf == 0 && fdinfo_get(&e, "aigpu-jobs-inflight") == 1 &&
		      fdinfo_get(&e, "drm-active-memory") == (long long)(MIB + 128 * KIB) &&
		      fdinfo_get(&f, "drm-active-memory") == 0 && fdinfo_get(&f, "aigpu-jobs-completed") == 17,
	      "rc %d/%d/%d/%d: inflight %lld active %lld, after: active %lld completed %lld", r, re, rw, rf,
	      fdinfo_get(&e, "aigpu-jobs-inflight"), fdinfo_get(&e, "drm-active-memory"),
	      fdinfo_get(&f, "drm-active-memory"), fdinfo_get(&f, "aigpu-jobs-completed"));

	/* Another file of the same process: its own client id and numbers. */
	int fd2 = open(NODE, O_RDWR | O_CLOEXEC);
	struct fdinfo g;
	int rg = fd2 < 0 ? -errno : fdinfo_read(0, fd2, &g);
	CHECK("fdinfo-per-file", rg == 0 && fdinfo_get(&g, "drm-client-id") >= 0 &&
					 fdinfo_get(&g, "drm-client-id") != fdinfo_get(&a, "drm-client-id") &&
					 fdinfo_get(&g, "aigpu-objects") == 0 && fdinfo_get(&g, "drm-total-memory") == 0 &&
					 fdinfo_get(&g, "drm-engine-compute") == 0,
	      "rc=%d client ids %lld / %lld, objects %lld, total %lld", rg, fdinfo_get(&g, "drm-client-id"),
	      fdinfo_get(&a, "drm-client-id"), fdinfo_get(&g, "aigpu-objects"), fdinfo_get(&g, "drm-total-memory"));
	if (fd2 >= 0)
		close(fd2);

	/* Unprivileged: a process of uid 65534 reads its own fdinfo, not root's. */
	struct stat sb;
	int rs = stat(NODE, &sb);
	chmod(NODE, 0666);
	int pipefd[2];
	if (rs || pipe(pipefd)) {
		fail("fdinfo-unprivileged", "setup: stat/pipe failed");
	} else {
		pid_t child = fork();
		if (child == 0) {
			close(pipefd[0]);
			int res[3] = { -1, -1, -1 };
			if (setgid(65534) == 0 && setuid(65534) == 0) {
				int fd = open(NODE, O_RDWR | O_CLOEXEC);
				struct drm_aigpu_gem_create o = { .size = 64 * KIB };
				struct fdinfo own, root;
				res[0] = fd < 0 ? -errno : xioctl(fd, DRM_IOCTL_AIGPU_GEM_CREATE, &o);
				res[1] = res[0] ? res[0] : fdinfo_read(0, fd, &own);
				if (!res[1] && (fdinfo_get(&own, "drm-total-memory") != (long long)(64 * KIB) || own.bad[0]))
					res[1] = -EBADMSG;
				res[2] = fdinfo_read(getppid(), c.fd, &root);
			}
			if (write(pipefd[1], res, sizeof(res)) != sizeof(res))
				_exit(2);
			_exit(0);
		}
		close(pipefd[1]);
		int res[3] = { -9, -9, -9 };
		ssize_t n = read(pipefd[0], res, sizeof(res));
		close(pipefd[0]);
		waitpid(child, NULL, 0);
		CHECK("fdinfo-unprivileged-own-readable-root-not",
		      n == sizeof(res) && res[0] == 0 && res[1] == 0 && res[2] == -EACCES,
		      "create %d, own fdinfo %d, root's fdinfo %d (want 0, 0, %d)", res[0], res[1], res[2], -EACCES);
		chmod(NODE, sb.st_mode & 07777);
	}
	client_close(&c);
}

/* ---- devcoredump ---- */

/* The resolved path of the render node's device (the devcoredump's failing device); `out` has
 * room for PATH_MAX bytes. */
static int node_device(char *out)
{
	return realpath("/sys/class/drm/renderD128/device", out) ? 0 : -errno;
}

/* Dismisses every pending devcoredump of any device. */
static void devcd_dismiss_all(void)
{
	DIR *d = opendir(DEVCD);
	struct dirent *e;
	char path[PATH_MAX];

	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "devcd", 5))
			continue;
		snprintf(path, sizeof(path), "%s/%s/data", DEVCD, e->d_name);
		write_str(path, "1");
	}
	if (d)
		closedir(d);
}

/* The pending devcoredump of our device: its text (malloc'd) and its directory in `dir`, or
 * NULL. Waits up to `ms` for it to appear. */
static char *devcd_ours(char *dir, size_t len, unsigned ms)
{
	char want[PATH_MAX], link[PATH_MAX + 64], got[PATH_MAX];
	if (node_device(want))
		return NULL;
	uint64_t deadline = mono_ns() + (uint64_t)ms * 1000000ull;
	do {
		DIR *d = opendir(DEVCD);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (strncmp(e->d_name, "devcd", 5))
				continue;
			snprintf(link, sizeof(link), "%s/%s/failing_device", DEVCD, e->d_name);
			if (!realpath(link, got) || strcmp(got, want))
				continue;
			snprintf(dir, len, "%s/%s", DEVCD, e->d_name);
			closedir(d);
			snprintf(link, sizeof(link), "%s/data", dir);
			return read_all(link);
		}
		if (d)
			closedir(d);
		usleep(20000);
	} while (mono_ns() < deadline);
	return NULL;
}

/* The debugfs crash dump with the number of the dump `text` (its first line), or NULL. */
static char *debugfs_crash_of(const char *text)
{
	const char *head = "aigpu crash dump ";
	if (!text || strncmp(text, head, strlen(head)))
		return NULL;
	char path[256];
	snprintf(path, sizeof(path), "%s/crashdumps/crash-%lu", DEBUGFS, strtoul(text + strlen(head), NULL, 10));
	return read_all(path);
}

static const char *first_missing(const char *text, const char *const *want)
{
	for (; *want; want++)
		if (!text || !strstr(text, *want))
			return *want;
	return NULL;
}

/* Checks the devcoredump of one event: fields, same text as debugfs, dismissed by a write. */
static void check_devcd(const char *name, const char *const *want)
{
	char dir[PATH_MAX], path[PATH_MAX + 8], full[128];
	char *text = devcd_ours(dir, sizeof(dir), 5000);
	char title[PATH_MAX + 64];
	snprintf(title, sizeof(title), "devcoredump %s (%s)", name, text ? dir : "none");
	show(title, text);
	const char *miss = first_missing(text, want);
	snprintf(full, sizeof(full), "devcoredump-%s-fields", name);
	CHECK(full, text && !miss, "lacks '%s':\n%s", miss ? miss : "", text ? text : "(no devcoredump of our device)");
	char *crash = debugfs_crash_of(text);
	snprintf(full, sizeof(full), "devcoredump-%s-same-as-debugfs", name);
	CHECK(full, text && crash && !strcmp(text, crash), "devcoredump and debugfs differ:\n%s\n--- debugfs:\n%s",
	      text ? text : "(none)", crash ? crash : "(none)");
	if (text) {
		snprintf(path, sizeof(path), "%s/data", dir);
		int r = write_str(path, "1");
		struct stat st;
		int gone = 0;
		for (int i = 0; i < 100 && !gone; i++, usleep(20000))
			gone = stat(dir, &st) != 0;
		snprintf(full, sizeof(full), "devcoredump-%s-dismissed", name);
		CHECK(full, r == 0 && gone, "write rc=%d, %s still there", r, dir);
	}
	free(text);
	free(crash);
}

static void test_devcoredump(void)
{
	char comm[16] = "", proc[64], ctxline[64];
	prctl(PR_GET_NAME, comm);
	devcd_dismiss_all();

	/* A hang: HANG runs until the job timeout (hang_debug=1); a second context's job waits
	 * behind it in the same ring (low priority: both on queue 3): innocent, resubmitted by the
	 * reset. */
	struct client c;
	uint64_t seq, seq2 = 0;
	uint32_t reason, reason2 = 0, guilty = 0;
	int r = client_open(&c);
	struct drm_aigpu_ctx_create lo = { .priority = AIGPU_PRIORITY_LOW }, cc = { .priority = AIGPU_PRIORITY_LOW };
	r = r ? r : xioctl(c.fd, DRM_IOCTL_AIGPU_CTX_CREATE, &lo);
	r = r ? r : xioctl(c.fd, DRM_IOCTL_AIGPU_CTX_CREATE, &cc);
	c.ctx = lo.ctx_id;
	uint32_t hang[1] = { hdr(0x7f, 1) };
	r = r ? r : run_words(&c, hang, 1, &seq);
	guilty = c.ctx;
	c.ctx = cc.ctx_id;
	r = r ? r : run_fill(&c, 0, 64, 0x1a1a1a1au, &seq2);
	c.ctx = guilty;
	int w = r ? r : wait_seqno(&c, seq, 30000, &reason);
	c.ctx = cc.ctx_id;
	int w2 = r ? r : wait_seqno(&c, seq2, 30000, &reason2);
	c.ctx = guilty;
	CHECK("devcoredump-hang-setup", r == 0 && w == -ECANCELED && reason == AIGPU_REASON_CTX_LOST && w2 == 0,
	      "setup %d, wait %d reason %u, innocent's wait %d reason %u", r, w, reason, w2, reason2);
	snprintf(proc, sizeof(proc), "process pid=%d comm=%s client=", (int)getpid(), comm);
	snprintf(ctxline, sizeof(ctxline), "context ctx=%u queue=", c.ctx);
	char innocent[96];
	snprintf(innocent, sizeof(innocent), "\ninnocent ctx=%u client=", cc.ctx_id);
	char innocent2[96];
	snprintf(innocent2, sizeof(innocent2), " pid=%d comm=%s queue=", (int)getpid(), comm);
	const char *const hang_want[] = { "aigpu crash dump ", "\nkernel=", " driver=", " device=aigpu0\n", "time_wall=",
					 "\nkind=hang\n", proc, ctxline, "\nhang job=", "\nring queue=", "\njob id=",
					 "HANG   <- executing", innocent, innocent2, " prio=low inflight=1\n",
					 "\nregisters:\n", "\nend\n", NULL };
	check_devcd("hang", hang_want);
	struct fdinfo fi;
	r = fdinfo_read(0, c.fd, &fi);
	CHECK("fdinfo-after-hang", r == 0 && fdinfo_get(&fi, "aigpu-hangs") == 1 && fdinfo_get(&fi, "aigpu-resets") == 2 &&
					   fdinfo_get(&fi, "aigpu-faults") == 0 && fdinfo_get(&fi, "aigpu-contexts") == 3,
	      "rc=%d hangs %lld resets %lld faults %lld contexts %lld", r, fdinfo_get(&fi, "aigpu-hangs"),
	      fdinfo_get(&fi, "aigpu-resets"), fdinfo_get(&fi, "aigpu-faults"), fdinfo_get(&fi, "aigpu-contexts"));
	client_close(&c);

	/* A page fault: a COPY from an unmapped address. */
	r = client_open(&c);
	uint64_t src = UNMAPPED_VA, dst = DATA_VA;
	uint32_t copy[7] = { hdr(0x01, 7), (uint32_t)src, (uint32_t)(src >> 32), (uint32_t)dst, (uint32_t)(dst >> 32), 64, 0 };
	r = r ? r : run_words(&c, copy, 7, &seq);
	w = r ? r : wait_seqno(&c, seq, 30000, &reason);
	CHECK("devcoredump-fault-setup", r == 0 && w == -ECANCELED && reason == AIGPU_REASON_CTX_LOST,
	      "setup %d, wait %d reason %u", r, w, reason);
	snprintf(ctxline, sizeof(ctxline), "context ctx=%u queue=", c.ctx);
	const char *const fault_want[] = { "\nkind=page_fault\n", proc, ctxline,
					  "\nfault type=unmapped access=read va=0x7f0010000 offset=0 job=",
					  "   <- fault", "\npagewalk va=0x7f0010000 ", "\nregisters:\n", "\nend\n", NULL };
	check_devcd("fault", fault_want);
	r = fdinfo_read(0, c.fd, &fi);
	CHECK("fdinfo-after-fault", r == 0 && fdinfo_get(&fi, "aigpu-faults") == 1 && fdinfo_get(&fi, "aigpu-resets") == 1 &&
					    fdinfo_get(&fi, "aigpu-hangs") == 0,
	      "rc=%d faults %lld resets %lld hangs %lld", r, fdinfo_get(&fi, "aigpu-faults"), fdinfo_get(&fi, "aigpu-resets"),
	      fdinfo_get(&fi, "aigpu-hangs"));
	client_close(&c);
}

/* ---- the wedged event ---- */

/* Waits up to `ms` for a uevent with WEDGED= on `sock`: its NUL-separated text (malloc'd) with
 * the NULs turned into newlines, or NULL. */
static char *recv_wedged(int sock, unsigned ms)
{
	char buf[4096];
	uint64_t deadline = mono_ns() + (uint64_t)ms * 1000000ull;
	while (mono_ns() < deadline) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t n = recv(sock, buf, sizeof(buf) - 1, 0);
		if (n <= 0)
			continue;
		for (ssize_t i = 0; i < n; i++)
			if (!buf[i])
				buf[i] = '\n';
		buf[n] = 0;
		if (strstr(buf, "\nWEDGED="))
			return strdup(buf);
	}
	return NULL;
}

static void test_wedged(void)
{
	char comm[16] = "", want_pid[32], want_task[40], card[PATH_MAX] = "", node[PATH_MAX];
	prctl(PR_GET_NAME, comm);
	devcd_dismiss_all();
	/* The card node of our device: /sys/class/drm/card<N> with the render node's device. */
	node_device(node);
	DIR *d = opendir("/sys/class/drm");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char p[PATH_MAX + 300], got[PATH_MAX];
		if (strncmp(e->d_name, "card", 4) || strchr(e->d_name, '-'))
			continue;
		snprintf(p, sizeof(p), "/sys/class/drm/%s/device", e->d_name);
		if (realpath(p, got) && !strcmp(got, node)) {
			snprintf(p, sizeof(p), "/sys/class/drm/%s", e->d_name);
			if (!realpath(p, card))
				card[0] = 0;
		}
	}
	if (d)
		closedir(d);

	int sock = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_pid = 0, .nl_groups = 1 };
	if (sock < 0 || bind(sock, (struct sockaddr *)&sa, sizeof(sa)) || !card[0]) {
		fail("wedged", "setup: netlink socket %d errno %d, card '%s'", sock, errno, card);
		if (sock >= 0)
			close(sock);
		return;
	}
	/* The driver's lines (rules::lost): the loss with its cause, the event with the process it
	 * names, the re-initialisation. */
	const char *LOST = "device lost: cause=reset_failed injected=1; every ioctl now fails with ENODEV";
	const char *REINIT = "device re-initialised: method=power_cycle lost_cause=reset_failed; no context was left on it";
	char wedged[160];
	snprintf(wedged, sizeof(wedged),
		 "wedged: recovery=vendor-specific uevent=sent pid=%d comm=%s; close every file of the device, the next "
		 "open re-initialises it",
		 (int)getpid(), comm);
	int sent_before = dmesg_count(wedged), lost_before = dmesg_count(LOST), reinit_before = dmesg_count(REINIT);

	/* A hang whose engine reset fails: the device is lost. */
	struct client c;
	uint64_t seq;
	uint32_t reason;
	int r = client_open(&c);
	char inject[256];
	snprintf(inject, sizeof(inject), "%s/inject_reset_failure", DEBUGFS);
	r = r ? r : write_str(inject, "1");
	uint32_t hang[1] = { hdr(0x7f, 1) };
	r = r ? r : run_words(&c, hang, 1, &seq);
	int w = r ? r : wait_seqno(&c, seq, 30000, &reason);
	CHECK("wedged-device-lost", r == 0 && w == -ENODEV && reason == AIGPU_REASON_DEVICE_LOST,
	      "setup %d, wait %d reason %u", r, w, reason);
	char *ev = recv_wedged(sock, 10000);
	show("wedged uevent (NUL-separated fields, one a line)", ev);
	snprintf(want_pid, sizeof(want_pid), "\nPID=%d\n", (int)getpid());
	snprintf(want_task, sizeof(want_task), "\nTASK=%s\n", comm);
	/* DEVPATH is the card node's sysfs path without /sys. */
	char want_dev[PATH_MAX + 16];
	snprintf(want_dev, sizeof(want_dev), "\nDEVPATH=%s\n", card + strlen("/sys"));
	const char *const ev_want[] = { "change@", "\nACTION=change\n", want_dev, "\nSUBSYSTEM=drm\n",
				       "\nWEDGED=vendor-specific\n", want_pid, want_task, NULL };
	const char *miss = first_missing(ev, ev_want);
	CHECK("wedged-uevent", ev && !miss, "lacks '%s' in:\n%s", miss ? miss : "", ev ? ev : "(no WEDGED uevent in 10 s)");
	free(ev);
	CHECK("wedged-dmesg-once", dmesg_count(wedged) == sent_before + 1, "'%s': %d lines (was %d)", wedged,
	      dmesg_count(wedged), sent_before);
	CHECK("wedged-lost-line-once", dmesg_count(LOST) == lost_before + 1, "'%s': %d lines (was %d)", LOST,
	      dmesg_count(LOST), lost_before);
	struct fdinfo fi;
	int rf = fdinfo_read(0, c.fd, &fi);
	CHECK("wedged-fdinfo-lost", rf == 0 && fdinfo_get(&fi, "aigpu-lost") == 1, "rc=%d aigpu-lost %lld", rf,
	      fdinfo_get(&fi, "aigpu-lost"));
	char proc[64];
	snprintf(proc, sizeof(proc), "process pid=%d comm=%s client=", (int)getpid(), comm);
	const char *const lost_want[] = { "\nkind=lost\n", proc, "\nlost id=0x", " expected=0x41494750\n", "\nregisters:\n",
					 "\nend\n", NULL };
	check_devcd("lost", lost_want);

	/* The recovery the event names (docs/kmd.md, "Wedged event"): close every file, open again. */
	struct drm_aigpu_query q = { 0 };
	r = xioctl(c.fd, DRM_IOCTL_AIGPU_QUERY, &q);
	CHECK("wedged-ioctls-fail-until-recovery", r == -ENODEV && q.reason == AIGPU_REASON_DEVICE_LOST,
	      "rc=%d reason=%u", r, q.reason);
	client_close(&c);
	r = client_open(&c);
	if (!r)
		memset(c.cpu, 0, 64);
	r = r ? r : run_fill(&c, 0, 64, 0x600dd00du, &seq);
	w = r ? r : wait_seqno(&c, seq, 10000, &reason);
	CHECK("wedged-recovery-works", r == 0 && w == 0 && *(volatile uint32_t *)(c.cpu + 60) == 0x600dd00du,
	      "open/submit %d, wait %d reason %u", r, w, reason);
	CHECK("wedged-reinit-line", dmesg_count(REINIT) == reinit_before + 1, "'%s': %d lines (was %d)", REINIT,
	      dmesg_count(REINIT), reinit_before);
	client_close(&c);
	close(sock);
}

int main(int argc, char **argv)
{
	const char *params = "num_devices=2 mem_mib=64";

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--module") && i + 1 < argc)
			module_path = argv[++i];
		else if (!strcmp(argv[i], "--params") && i + 1 < argc)
			params = argv[++i];
		else {
			fprintf(stderr, "usage: %s --module PATH [--params STR]\n", argv[0]);
			return 2;
		}
	}
	if (!module_path) {
		fprintf(stderr, "usage: %s --module PATH [--params STR]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int r = delete_module("aigpu");
	r = (r && r != -ENOENT) ? r : load_module(OWN_PARAMS);
	CHECK("reload-own-params", r == 0, "rc=%d", r);
	if (r == 0) {
		test_fdinfo();
		test_devcoredump();
		test_wedged();
	}
	devcd_dismiss_all();
	r = delete_module("aigpu");
	r = r ? r : load_module(params);
	CHECK("reload-given-params", r == 0, "rc=%d", r);
	printf(GUEST_TEST ": %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
