// SPDX-License-Identifier: GPL-2.0
/*
 * aigpu_fuzz: a UAPI fuzzer for aigpu.ko that knows every aigpu ioctl (include/aigpu_drm.h) and
 * the generic DRM ioctls a render node allows, keeps track of what its process owns (GEM handles,
 * mappings, contexts, submitted seqnos, CPU mmaps) and mostly issues well-formed sequences with
 * one targeted corruption at a time. docs/kmd.md, "Fuzzing", describes it.
 *
 *   aigpu_fuzz [--seed S] [--iters N] [--time SECS] [--uid UID] [--node PATH] [--node2 PATH]
 *              [--procs P] [--hangs H] [--log N]
 *
 * Oracle: for a corruption the UAPI says MUST fail (docs/kmd.md, "Errors: errno plus reason":
 * the check order and the errno / reason table) an ioctl that succeeds, or that fails with
 * another errno or reason than the table gives for the first failing check, is a finding. Only
 * what the docs state is asserted; outcomes they leave open (e.g. what a random packet does on the
 * device, a wait's outcome) are only counted. While another process shares the file (after
 * fork()) the assertions that depend on the file's state (handles, contexts, mappings, seqnos)
 * are off and only the state-free ones (flags, pad, counts, pointers, packet format) stay.
 *
 * Reproducible: the xorshift generator is seeded from --seed (default: from the clock, printed);
 * a finding prints the seed, the operation number and the last --log operations with their
 * arguments and results; `--seed S --iters N` replays the same sequence (timing-dependent
 * outcomes, such as which child is killed where, aside).
 *
 * Output: `fuzz: FINDING ...` lines (scripts/run-guest.sh fails the run on them) and one summary
 * line `fuzz: seed=S iters=N ioctls=M <ioctl>=<count>... findings=F`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <grp.h>
#include <unistd.h>

#include <drm/drm.h>
#include "aigpu_drm.h"
#include "../guest/guest_uapi.h"

/* The work object: data in the lower half, command buffers in the upper half. */
#define WORK_VA 0x40000000ull
#define WORK_SIZE (256u * 1024u)
#define WORK_DATA (WORK_SIZE / 2)
#define WORK_CMD_CHILD (WORK_DATA + WORK_DATA / 2) /* a forked child's command buffers */
/* Random binds land in [BIND_BASE, BIND_BASE + BIND_SPAN): small enough to overlap often. */
#define BIND_BASE 0x100000000ull
#define BIND_SPAN (256ull * PAGE)

#define MAX_BOS 24
#define MAX_MAPS 48
#define MAX_CTXS 8
#define MAX_DEAD 32
#define MAX_ORPHANS 16

/* ---- counters shared by every process of the run (an anonymous shared mapping) ---- */
enum op {
	OP_QUERY, OP_GEM_CREATE, OP_MMAP_OFFSET, OP_VM_BIND, OP_VM_UNBIND, OP_CTX_CREATE,
	OP_CTX_DESTROY, OP_SUBMIT, OP_WAIT, OP_CTX_STATE, OP_GEM_CLOSE, OP_PRIME_TO_FD,
	OP_PRIME_TO_HANDLE, OP_FLINK, OP_SET_VERSION, OP_VERSION, OP_BAD_NR, OP_COUNT
};
static const char *const op_name[OP_COUNT] = {
	"query", "gem_create", "mmap_offset", "vm_bind", "vm_unbind", "ctx_create", "ctx_destroy",
	"submit", "wait", "ctx_state", "gem_close", "prime_to_fd", "prime_to_handle", "flink",
	"set_version", "version", "bad_nr",
};
struct shared {
	uint64_t ioctls[OP_COUNT];
	uint64_t iters, findings, forks, killed, exited_open, hangs, mmaps, closes, storms;
};
static struct shared *sh;

static void bump(uint64_t *p, uint64_t n) { __atomic_fetch_add(p, n, __ATOMIC_RELAXED); }

/* ---- xorshift64* ---- */
static uint64_t rng;
static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 2685821657736338717ull;
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }
static int chance(unsigned pct) { return below(100) < pct; }

static uint64_t seed, opno, my_iters; /* my_iters: the main process's iterations (a child: at its fork) */
static unsigned log_n = 48;
static char (*oplog)[200];
static int is_child;

static void logop(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logop(const char *fmt, ...)
{
	va_list ap;
	char *s = oplog[opno % log_n];
	int n = snprintf(s, 200, "#%" PRIu64 " ", opno);

	va_start(ap, fmt);
	vsnprintf(s + n, 200 - n, fmt, ap);
	va_end(ap);
	opno++;
}

static void finding(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void finding(const char *fmt, ...)
{
	va_list ap;
	char what[300];

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	bump(&sh->findings, 1);
	printf("fuzz: FINDING seed=%" PRIu64 " op=%" PRIu64 " pid=%d%s: %s\n", seed, opno ? opno - 1 : 0,
	       getpid(), is_child ? " (forked child)" : "", what);
	printf("fuzz: FINDING replay: aigpu_fuzz --seed %" PRIu64 " --iters %" PRIu64 "\n", seed,
	       my_iters + 1);
	uint64_t first = opno > log_n ? opno - log_n : 0;
	for (uint64_t i = first; i < opno; i++)
		printf("fuzz: FINDING seq %s\n", oplog[i % log_n]);
	fflush(stdout);
}


/* ---- the process's view of its file ---- */
struct bo { uint32_t handle; uint64_t size; };
struct vmap { uint64_t va, size; };
struct ctx { uint32_t id; uint64_t submitted; };
struct cpumap { void *p; size_t len; };

struct st {
	int fd;
	int shared; /* another process holds this file: state-dependent assertions off */
	struct bo bos[MAX_BOS];
	int nbos;
	struct vmap maps[MAX_MAPS];
	int nmaps;
	struct ctx ctxs[MAX_CTXS];
	int nctxs;
	uint32_t dead_ctx[MAX_DEAD], dead_handle[MAX_DEAD];
	int ndead_ctx, ndead_handle;
	uint32_t work; /* work object's handle (0: none) */
	uint8_t *work_map;
	unsigned cmd_at;
};
static struct st S;
static pid_t child = -1; /* the forked child (at most one at a time) */
static struct cpumap orphans[MAX_ORPHANS]; /* CPU maps kept past the close of their file */
static int norphans;

static const char *node = "/dev/dri/renderD128", *node2 = "/dev/dri/renderD129";
static int peer_fd = -1, other_fd = -1; /* a second file on the device; a file on device 1 */
static uint32_t peer_ctx, peer_handle;
static struct drm_aigpu_query q;
static int hang_debug;
static uint64_t hang_budget = 2;

static int xioctl(int fd, enum op op, unsigned long req, void *arg)
{
	bump(&sh->ioctls[op], 1);
	return ioctl(fd, req, arg) == -1 ? -errno : 0;
}

/* The expected outcome of a corrupted call: `want` is -errno, `reason` its reason. */
static void expect(const char *what, int rc, uint32_t reason, int want, uint32_t want_reason)
{
	if (rc != want || reason != want_reason)
		finding("%s: rc=%d reason=%u, the UAPI says rc=%d reason=%u", what, rc, reason, want,
			want_reason);
}
static void expect_fail(const char *what, int rc, uint32_t reason)
{
	if (rc == 0)
		finding("%s: succeeded (reason=%u), the UAPI says it must fail", what, reason);
}

static int have_ctx(uint32_t id)
{
	for (int i = 0; i < S.nctxs; i++)
		if (S.ctxs[i].id == id)
			return 1;
	return 0;
}
static int have_handle(uint32_t h)
{
	if (h == S.work)
		return 1;
	for (int i = 0; i < S.nbos; i++)
		if (S.bos[i].handle == h)
			return 1;
	return 0;
}
/* A handle number this file surely lacks. */
static uint32_t absent_handle(void)
{
	if (!S.shared && S.ndead_handle && chance(50)) {
		uint32_t h = S.dead_handle[below(S.ndead_handle)];
		if (!have_handle(h))
			return h;
	}
	uint32_t h;
	do
		h = chance(50) ? (uint32_t)rnd() : 100000 + (uint32_t)below(1000);
	while (h == 0 || have_handle(h));
	return h;
}
/* A context id this file surely lacks: the peer file's, a destroyed one, 0 or random. */
static uint32_t absent_ctx(void)
{
	uint32_t id;

	switch (below(4)) {
	case 0:
		if (peer_ctx)
			return peer_ctx;
		/* fallthrough */
	case 1:
		if (!S.shared && S.ndead_ctx) {
			id = S.dead_ctx[below(S.ndead_ctx)];
			if (!have_ctx(id))
				return id;
		}
		/* fallthrough */
	case 2:
		if (!have_ctx(0))
			return 0;
		/* fallthrough */
	default:
		do
			id = (uint32_t)rnd() | 0x80000000u;
		while (have_ctx(id));
		return id;
	}
}
static void dead_ctx_add(uint32_t id)
{
	if (S.ndead_ctx < MAX_DEAD)
		S.dead_ctx[S.ndead_ctx++] = id;
	else
		S.dead_ctx[below(MAX_DEAD)] = id;
}
static void dead_handle_add(uint32_t h)
{
	if (S.ndead_handle < MAX_DEAD)
		S.dead_handle[S.ndead_handle++] = h;
	else
		S.dead_handle[below(MAX_DEAD)] = h;
}
static uint32_t bad_flags(void)
{
	uint32_t f;

	do
		f = chance(50) ? 1u << below(32) : (uint32_t)rnd();
	while (!f);
	return f;
}
static uint32_t bad_pad(void) { return bad_flags(); }

/* ---- file setup ---- */
static int open_node(const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

static void state_reset(void)
{
	memset(&S, 0, sizeof(S));
	S.fd = -1;
}

/* Opens a fresh file with the work object (bound at WORK_VA, CPU-mapped). */
static int state_open(void)
{
	state_reset();
	S.fd = open_node(node);
	if (S.fd < 0)
		return S.fd;
	struct drm_aigpu_gem_create c = { .size = WORK_SIZE };
	int r = xioctl(S.fd, OP_GEM_CREATE, DRM_IOCTL_AIGPU_GEM_CREATE, &c);
	logop("open %s fd=%d; gem_create size=%u rc=%d handle=%u", node, S.fd, WORK_SIZE, r, c.handle);
	if (r)
		return r;
	S.work = c.handle;
	struct drm_aigpu_vm_bind b = { .handle = S.work, .va = WORK_VA, .size = WORK_SIZE, .access = RW };
	r = xioctl(S.fd, OP_VM_BIND, DRM_IOCTL_AIGPU_VM_BIND, &b);
	logop("vm_bind work va=%#llx rc=%d", WORK_VA, r);
	if (r)
		return r;
	S.maps[S.nmaps++] = (struct vmap){ WORK_VA, WORK_SIZE };
	struct drm_aigpu_gem_mmap_offset m = { .handle = S.work };
	r = xioctl(S.fd, OP_MMAP_OFFSET, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m);
	if (r)
		return r;
	void *p = mmap(NULL, WORK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, S.fd, (off_t)m.offset);
	if (p == MAP_FAILED)
		return -errno;
	S.work_map = p;
	bump(&sh->mmaps, 1);
	return 0;
}

/* Closes the file; its work object's CPU map is kept (touched later) as an orphan. */
static void state_close(void)
{
	if (S.work_map) {
		if (norphans < MAX_ORPHANS && chance(50)) {
			orphans[norphans++] = (struct cpumap){ S.work_map, WORK_SIZE };
		} else {
			munmap(S.work_map, WORK_SIZE);
		}
	}
	if (S.fd >= 0)
		close(S.fd);
	logop("close fd=%d", S.fd);
	bump(&sh->closes, 1);
	state_reset();
}

static void touch_orphans(void)
{
	for (int i = 0; i < norphans; i++) {
		volatile uint8_t *p = orphans[i].p;
		size_t off = below(orphans[i].len);
		p[off] = (uint8_t)(p[off] + 1);
	}
	if (norphans && chance(30)) {
		int i = (int)below(norphans);
		munmap(orphans[i].p, orphans[i].len);
		orphans[i] = orphans[--norphans];
	}
}

/* ---- packets (docs/hw-spec.md section 6, uapi/src/v1/packet.rs; HDR, emit64: guest_uapi.h) ---- */
/* A data VA in the work object, `align`-aligned, with `len` bytes room. */
static uint64_t data_va(uint64_t len, uint64_t align)
{
	uint64_t off = below(WORK_DATA - len);
	return WORK_VA + (off & ~(align - 1));
}
/* One well-formed packet that touches only the work object's data half and never stalls. */
static uint32_t *valid_packet(uint32_t *p)
{
	switch (below(6)) {
	case 0:
		*p++ = HDR(0x00, 0, 1);
		return p;
	case 1: { /* FILL */
		uint64_t size = 4 * (1 + below(256));
		*p++ = HDR(0x02, 0, 6);
		p = emit64(p, data_va(size, 4));
		p = emit64(p, size);
		*p++ = (uint32_t)rnd();
		return p;
	}
	case 2: { /* COPY between the two quarters of the data half */
		uint64_t size = 1 + below(1024), q4 = WORK_DATA / 2;
		*p++ = HDR(0x01, 0, 7);
		p = emit64(p, WORK_VA + below(q4 - size));
		p = emit64(p, WORK_VA + q4 + below(q4 - size));
		return emit64(p, size);
	}
	case 3: /* TIMESTAMP */
		*p++ = HDR(0x05, 0, 3);
		return emit64(p, data_va(8, 8));
	case 4: /* FENCE */
		*p++ = HDR(0x06, chance(50) ? 1 : 0, 5);
		p = emit64(p, data_va(8, 8));
		return emit64(p, rnd());
	default: /* WAIT_MEM for a value always reached */
		*p++ = HDR(0x07, 0, 5);
		p = emit64(p, data_va(8, 8));
		return emit64(p, 0);
	}
}
/* Random words shaped like a packet: a known or random opcode, random length and operands. */
static uint32_t *random_packet(uint32_t *p, unsigned room)
{
	static const uint8_t ops[] = { 0, 1, 2, 3, 4, 5, 6, 0x7f };
	static const uint8_t lens[] = { 1, 7, 6, 13, 11, 3, 5, 1 };
	unsigned k = (unsigned)below(sizeof(ops));
	uint8_t op = chance(80) ? ops[k] : (uint8_t)rnd();
	unsigned words = chance(80) ? lens[k] : (unsigned)below(16);

	if (op == 0x7f || op == 0x07 || op == 0x03 || op == 0x04)
		op = 0x00; /* stalls and long packets only where chosen on purpose */
	if (words > room)
		words = room;
	*p++ = HDR(op, chance(85) ? 0 : below(256), words);
	for (unsigned i = 1; i < words; i++) {
		switch (below(4)) {
		case 0: p[i - 1] = (uint32_t)rnd(); break;
		case 1: p[i - 1] = (uint32_t)below(64); break;
		/* Addresses stay in the data half: the device never rewrites a
		 * command buffer the CPU has not submitted yet (see cmd_alloc). */
		case 2: p[i - 1] = (uint32_t)(WORK_VA + below(WORK_DATA)); break;
		default: p[i - 1] = 0; break;
		}
	}
	return p + (words ? words - 1 : 0);
}
/*
 * Room for a command buffer of `words` words in the work object's upper half.
 * A forked child shares the parent's work object (MAP_SHARED), so each process
 * writes its command buffers in its own quarter: were they shared, one process's
 * valid packets could overwrite another's deliberately malformed header between
 * the write and the SUBMIT copy-in, and a corruption the oracle requires to fail
 * would succeed (a finding the kernel is not responsible for).
 */
static uint32_t *cmd_alloc(unsigned words, uint64_t *va)
{
	unsigned bytes = (words * 4 + 63) & ~63u;
	unsigned lo = is_child ? WORK_CMD_CHILD : WORK_DATA, hi = is_child ? WORK_SIZE : WORK_CMD_CHILD;

	if (S.cmd_at < lo || S.cmd_at + bytes > hi)
		S.cmd_at = lo;
	*va = WORK_VA + S.cmd_at;
	uint32_t *p = (uint32_t *)(S.work_map + S.cmd_at);
	S.cmd_at += bytes;
	return p;
}

/* ---- operations ---- */
static void do_query(void)
{
	struct drm_aigpu_query a = { 0 };
	int bad = chance(30);

	if (bad)
		a.flags = bad_flags();
	int r = xioctl(S.fd, OP_QUERY, DRM_IOCTL_AIGPU_QUERY, &a);
	logop("query flags=%#x rc=%d reason=%u", a.flags, r, a.reason);
	if (bad)
		expect("QUERY with unknown flags", r, a.reason, -EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	else if (r)
		finding("QUERY failed: rc=%d reason=%u", r, a.reason);
}

static void do_gem_create(void)
{
	struct drm_aigpu_gem_create c = { .size = PAGE * (1 + below(64)) };
	int kind = chance(60) ? 0 : 1 + (int)below(5);

	if (kind == 0 && S.nbos >= MAX_BOS)
		kind = 4;
	switch (kind) {
	case 1: c.flags = bad_flags(); break;
	case 2: c.pad = bad_pad(); break;
	case 3: c.size = 0; break;
	case 4: c.size = q.max_bo_size + 1 + below(1ull << 40); break;
	case 5: c.size = 1 + below(3 * PAGE); break; /* unaligned: rounded up */
	}
	int r = xioctl(S.fd, OP_GEM_CREATE, DRM_IOCTL_AIGPU_GEM_CREATE, &c);
	logop("gem_create size=%llu flags=%#x pad=%#x rc=%d reason=%u handle=%u",
	      (unsigned long long)c.size, c.flags, c.pad, r, c.reason, c.handle);
	switch (kind) {
	case 1: expect("GEM_CREATE unknown flags", r, c.reason, -EINVAL, AIGPU_REASON_FLAGS_UNKNOWN); break;
	case 2: expect("GEM_CREATE pad", r, c.reason, -EINVAL, AIGPU_REASON_PAD_NONZERO); break;
	case 3: expect("GEM_CREATE size 0", r, c.reason, -EINVAL, AIGPU_REASON_SIZE_ZERO); break;
	case 4: expect("GEM_CREATE size > max_bo_size", r, c.reason, -E2BIG, AIGPU_REASON_SIZE_TOO_LARGE); break;
	default:
		if (r && !(r == -ENOMEM && c.reason == AIGPU_REASON_OUT_OF_MEMORY))
			finding("GEM_CREATE size %llu: rc=%d reason=%u", (unsigned long long)c.size, r, c.reason);
	}
	if (!r && c.handle) {
		if (S.nbos < MAX_BOS)
			S.bos[S.nbos++] = (struct bo){ c.handle, (c.size + PAGE - 1) & ~(PAGE - 1) };
		else {
			struct drm_gem_close gc = { .handle = c.handle };
			xioctl(S.fd, OP_GEM_CLOSE, DRM_IOCTL_GEM_CLOSE, &gc);
		}
	}
}

static struct bo *pick_bo(void)
{
	return S.nbos ? &S.bos[below(S.nbos)] : NULL;
}

static void do_mmap(void)
{
	struct bo *b = pick_bo();
	struct drm_aigpu_gem_mmap_offset m = { .handle = b ? b->handle : S.work };
	uint64_t size = b ? b->size : WORK_SIZE;
	int kind = chance(60) ? 0 : 1 + (int)below(3);

	if (kind == 1) m.flags = bad_flags();
	if (kind == 2) m.pad = bad_pad();
	if (kind == 3) m.handle = absent_handle();
	int r = xioctl(S.fd, OP_MMAP_OFFSET, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m);
	logop("mmap_offset handle=%u flags=%#x pad=%#x rc=%d reason=%u off=%#llx", m.handle, m.flags,
	      m.pad, r, m.reason, (unsigned long long)m.offset);
	if (kind == 1) expect("GEM_MMAP_OFFSET unknown flags", r, m.reason, -EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	if (kind == 2) expect("GEM_MMAP_OFFSET pad", r, m.reason, -EINVAL, AIGPU_REASON_PAD_NONZERO);
	if (kind == 3 && !S.shared)
		expect("GEM_MMAP_OFFSET unknown handle", r, m.reason, -ENOENT, AIGPU_REASON_HANDLE_INVALID);
	if (kind == 0 && r && !S.shared)
		finding("GEM_MMAP_OFFSET of an own handle: rc=%d reason=%u", r, m.reason);
	if (kind || r)
		return;
	/* Map (sometimes past the end or at a wrong offset), touch, unmap. */
	size_t len = chance(90) ? size : size + PAGE;
	off_t off = (off_t)m.offset + (chance(90) ? 0 : (off_t)PAGE * (off_t)(1 + below(4)));
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, S.fd, off);
	logop("mmap len=%zu off=%#llx -> %s", len, (unsigned long long)off, p == MAP_FAILED ? "failed" : "ok");
	if (p == MAP_FAILED)
		return;
	bump(&sh->mmaps, 1);
	if (len == size && off == (off_t)m.offset) {
		volatile uint8_t *v = p;
		for (uint64_t i = 0; i < size; i += PAGE * (1 + below(4)))
			v[i] = (uint8_t)(v[i] + 1);
		if (norphans < MAX_ORPHANS && chance(20)) {
			orphans[norphans++] = (struct cpumap){ p, len };
			return;
		}
	}
	munmap(p, len);
}

static int map_overlaps(uint64_t va, uint64_t size)
{
	for (int i = 0; i < S.nmaps; i++)
		if (va < S.maps[i].va + S.maps[i].size && S.maps[i].va < va + size)
			return 1;
	return 0;
}

static void do_vm_bind(void)
{
	struct bo *b = pick_bo();
	if (!b)
		return;
	uint64_t pages = b->size / PAGE, first = below(pages), n = 1 + below(pages - first);
	struct drm_aigpu_vm_bind a = {
		.handle = b->handle, .va = BIND_BASE + PAGE * below(BIND_SPAN / PAGE),
		.bo_offset = first * PAGE, .size = n * PAGE, .access = 1 + (uint32_t)below(3),
	};
	int kind = chance(50) ? 0 : 1 + (int)below(9);
	const char *what = "valid";

	switch (kind) {
	case 1: a.flags = bad_flags(); what = "flags"; break;
	case 2: a.handle = absent_handle(); what = "handle"; break;
	case 3: a.access = chance(30) ? 0 : (uint32_t)rnd() | 4u; what = "access"; break;
	case 4: a.size = 0; what = "size0"; break;
	case 5: /* one of bo_offset, va, size unaligned */
		switch (below(3)) {
		case 0: a.bo_offset += 1 + below(PAGE - 1); break;
		case 1: a.va += 1 + below(PAGE - 1); break;
		default: a.size -= 1 + below(PAGE - 1); if (!a.size) a.size = 1; break;
		}
		what = "unaligned";
		break;
	case 6: /* VA below the start, past the end, or wrapping */
		switch (below(3)) {
		case 0: a.va = PAGE * below(AIGPU_VA_START / PAGE); break;
		case 1: a.va = AIGPU_VA_END - a.size + PAGE * (1 + below(64)); break;
		default: a.va = (0ull - a.size) & ~(PAGE - 1); if (!a.va) a.va = 0ull - PAGE; break;
		}
		what = "va_range";
		break;
	case 7: /* object range past its end or overflowing */
		if (chance(50))
			a.bo_offset = b->size - PAGE * below(pages < 2 ? 1 : 2), a.size = b->size;
		else
			a.bo_offset = (0ull - PAGE) & ~(PAGE - 1);
		what = "bo_range";
		break;
	case 8: /* exactly on an existing mapping */
		if (S.nmaps) {
			struct vmap *m = &S.maps[below(S.nmaps)];
			a.va = m->va + PAGE * below(m->size / PAGE);
			if (a.size > 1ull << 30) a.size = PAGE;
		}
		what = "overlap";
		break;
	case 9: /* the top of the VA range */
		a.va = AIGPU_VA_END - a.size;
		what = "top";
		break;
	}
	int overlap = map_overlaps(a.va, a.size);
	int r = xioctl(S.fd, OP_VM_BIND, DRM_IOCTL_AIGPU_VM_BIND, &a);
	logop("vm_bind[%s] handle=%u flags=%#x va=%#llx bo_offset=%#llx size=%#llx access=%#x rc=%d reason=%u",
	      what, a.handle, a.flags, (unsigned long long)a.va, (unsigned long long)a.bo_offset,
	      (unsigned long long)a.size, a.access, r, a.reason);
	switch (kind) {
	case 1: expect("VM_BIND unknown flags", r, a.reason, -EINVAL, AIGPU_REASON_FLAGS_UNKNOWN); break;
	case 2: if (!S.shared) expect("VM_BIND unknown handle", r, a.reason, -ENOENT, AIGPU_REASON_HANDLE_INVALID); break;
	case 3: if (!S.shared) expect("VM_BIND bad access", r, a.reason, -EINVAL, AIGPU_REASON_ACCESS_INVALID); break;
	case 4: if (!S.shared) expect("VM_BIND size 0", r, a.reason, -EINVAL, AIGPU_REASON_SIZE_ZERO); break;
	case 5: if (!S.shared) expect("VM_BIND unaligned", r, a.reason, -EINVAL, AIGPU_REASON_UNALIGNED); break;
	case 6: if (!S.shared) expect("VM_BIND VA out of range", r, a.reason, -EINVAL, AIGPU_REASON_VA_OUT_OF_RANGE); break;
	case 7: if (!S.shared) expect("VM_BIND object range", r, a.reason, -EINVAL, AIGPU_REASON_BO_RANGE); break;
	default:
		if (S.shared)
			break;
		if (a.va + a.size < a.va || a.va + a.size > AIGPU_VA_END)
			expect("VM_BIND VA past the end", r, a.reason, -EINVAL, AIGPU_REASON_VA_OUT_OF_RANGE);
		else if (overlap)
			expect("VM_BIND overlapping", r, a.reason, -EINVAL, AIGPU_REASON_VA_OVERLAP);
		else if (r && !((r == -ENOMEM && a.reason == AIGPU_REASON_OUT_OF_MEMORY) ||
				(r == -ENOSPC && a.reason == AIGPU_REASON_OBJECT_LIMIT) ||
				(r == -ENOSPC && a.reason == AIGPU_REASON_PT_LIMIT)))
			finding("VM_BIND of a free range: rc=%d reason=%u", r, a.reason);
	}
	if (r == 0) {
		if (S.nmaps < MAX_MAPS)
			S.maps[S.nmaps++] = (struct vmap){ a.va, a.size };
		else {
			struct drm_aigpu_vm_unbind u = { .va = a.va, .size = a.size };
			xioctl(S.fd, OP_VM_UNBIND, DRM_IOCTL_AIGPU_VM_UNBIND, &u);
		}
	}
}

static void do_vm_unbind(void)
{
	int idx = S.nmaps > 1 ? 1 + (int)below(S.nmaps - 1) : -1; /* never the work mapping */
	struct drm_aigpu_vm_unbind u = { 0 };
	int kind = idx >= 0 && chance(60) ? 0 : 1 + (int)below(5);

	if (idx >= 0) {
		u.va = S.maps[idx].va;
		u.size = S.maps[idx].size;
	} else {
		u.va = BIND_BASE + PAGE * below(BIND_SPAN / PAGE);
		u.size = PAGE;
	}
	switch (kind) {
	case 1: u.flags = bad_flags(); break;
	case 2: u.size = 0; break;
	case 3: u.va += 1 + below(PAGE - 1); break;
	case 4: u.va = chance(50) ? 0 : (0ull - PAGE); break;
	case 5: /* a part of a mapping, or a range nothing is mapped at */
		if (idx >= 0 && u.size > PAGE)
			u.size -= PAGE;
		else
			u.va = BIND_BASE + BIND_SPAN + PAGE * below(1024);
		break;
	}
	int r = xioctl(S.fd, OP_VM_UNBIND, DRM_IOCTL_AIGPU_VM_UNBIND, &u);
	logop("vm_unbind[%d] flags=%#x va=%#llx size=%#llx rc=%d reason=%u", kind, u.flags,
	      (unsigned long long)u.va, (unsigned long long)u.size, r, u.reason);
	switch (kind) {
	case 0: if (r && !S.shared) finding("VM_UNBIND of an own mapping: rc=%d reason=%u", r, u.reason); break;
	case 1: expect("VM_UNBIND unknown flags", r, u.reason, -EINVAL, AIGPU_REASON_FLAGS_UNKNOWN); break;
	case 2: if (!S.shared) expect("VM_UNBIND size 0", r, u.reason, -EINVAL, AIGPU_REASON_SIZE_ZERO); break;
	case 3: if (!S.shared) expect("VM_UNBIND unaligned", r, u.reason, -EINVAL, AIGPU_REASON_UNALIGNED); break;
	case 4: if (!S.shared) expect("VM_UNBIND VA out of range", r, u.reason, -EINVAL, AIGPU_REASON_VA_OUT_OF_RANGE); break;
	case 5: if (!S.shared) expect("VM_UNBIND not exactly a mapping", r, u.reason, -EINVAL, AIGPU_REASON_VA_NOT_MAPPED); break;
	}
	if (r == 0 && kind == 0)
		S.maps[idx] = S.maps[--S.nmaps];
}

static void do_ctx_create(void)
{
	struct drm_aigpu_ctx_create c = { .priority = (uint32_t)below(3) };
	int kind = S.nctxs < MAX_CTXS && chance(70) ? 0 : 1 + (int)below(2);

	if (kind == 1) c.flags = bad_flags();
	if (kind == 2) c.priority = 3 + (uint32_t)below(0xfffffff0u);
	int r = xioctl(S.fd, OP_CTX_CREATE, DRM_IOCTL_AIGPU_CTX_CREATE, &c);
	logop("ctx_create flags=%#x prio=%u rc=%d reason=%u id=%u", c.flags, c.priority, r, c.reason, c.ctx_id);
	if (kind == 1) expect("CTX_CREATE unknown flags", r, c.reason, -EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	if (kind == 2) expect("CTX_CREATE bad priority", r, c.reason, -EINVAL, AIGPU_REASON_PRIORITY_INVALID);
	if (kind == 0 && r && !S.shared &&
	    !(r == -EBUSY && (c.reason == AIGPU_REASON_DEVICE_CTX_LIMIT || c.reason == AIGPU_REASON_CTX_LIMIT)))
		finding("CTX_CREATE: rc=%d reason=%u", r, c.reason);
	if (kind == 0 && !r && !S.shared && c.ctx_id == 0)
		finding("CTX_CREATE returned ctx_id 0");
	if (!r && S.nctxs < MAX_CTXS)
		S.ctxs[S.nctxs++] = (struct ctx){ c.ctx_id, 0 };
	else if (!r) {
		struct drm_aigpu_ctx_destroy d = { .ctx_id = c.ctx_id };
		xioctl(S.fd, OP_CTX_DESTROY, DRM_IOCTL_AIGPU_CTX_DESTROY, &d);
	}
}

static void do_ctx_destroy(void)
{
	int idx = S.nctxs ? (int)below(S.nctxs) : -1;
	struct drm_aigpu_ctx_destroy d = { .ctx_id = idx >= 0 ? S.ctxs[idx].id : absent_ctx() };
	int kind = idx >= 0 && chance(60) ? 0 : 1 + (int)below(3);

	if (kind == 1) d.flags = bad_flags();
	if (kind == 2) d.pad = bad_pad();
	if (kind == 3) d.ctx_id = absent_ctx();
	int r = xioctl(S.fd, OP_CTX_DESTROY, DRM_IOCTL_AIGPU_CTX_DESTROY, &d);
	logop("ctx_destroy id=%u flags=%#x pad=%#x rc=%d reason=%u", d.ctx_id, d.flags, d.pad, r, d.reason);
	if (kind == 1) expect("CTX_DESTROY unknown flags", r, d.reason, -EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	if (kind == 2) expect("CTX_DESTROY pad", r, d.reason, -EINVAL, AIGPU_REASON_PAD_NONZERO);
	if (kind == 3 && !S.shared) expect("CTX_DESTROY unknown context", r, d.reason, -EINVAL, AIGPU_REASON_CTX_INVALID);
	if (kind == 0 && !r) {
		dead_ctx_add(d.ctx_id);
		S.ctxs[idx] = S.ctxs[--S.nctxs];
	}
}

static void do_ctx_state(void)
{
	int idx = S.nctxs ? (int)below(S.nctxs) : -1;
	struct drm_aigpu_ctx_state s = { .ctx_id = idx >= 0 ? S.ctxs[idx].id : absent_ctx() };
	int kind = idx >= 0 && chance(60) ? 0 : 1 + (int)below(3);

	if (kind == 1) s.flags = bad_flags();
	if (kind == 2) s.pad = bad_pad();
	if (kind == 3) s.ctx_id = absent_ctx();
	int r = xioctl(S.fd, OP_CTX_STATE, DRM_IOCTL_AIGPU_CTX_STATE, &s);
	logop("ctx_state id=%u flags=%#x pad=%#x rc=%d reason=%u reset=%u fault=%u hung=%u done=%llu sub=%llu",
	      s.ctx_id, s.flags, s.pad, r, s.reason, s.reset_status, s.fault_type, s.hung,
	      (unsigned long long)s.completed_seqno, (unsigned long long)s.submitted_seqno);
	if (kind == 1) expect("CTX_STATE unknown flags", r, s.reason, -EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	if (kind == 2) expect("CTX_STATE pad", r, s.reason, -EINVAL, AIGPU_REASON_PAD_NONZERO);
	if (kind == 3 && !S.shared) expect("CTX_STATE unknown context", r, s.reason, -EINVAL, AIGPU_REASON_CTX_INVALID);
	if (kind == 0 && !S.shared) {
		if (r)
			finding("CTX_STATE of a live context: rc=%d reason=%u", r, s.reason);
		else if (s.submitted_seqno != S.ctxs[idx].submitted || s.completed_seqno > s.submitted_seqno)
			finding("CTX_STATE: submitted %llu completed %llu, this process submitted %llu",
				(unsigned long long)s.submitted_seqno, (unsigned long long)s.completed_seqno,
				(unsigned long long)S.ctxs[idx].submitted);
	}
}

static void do_wait(void)
{
	int idx = S.nctxs ? (int)below(S.nctxs) : -1;
	struct drm_aigpu_wait w = { .ctx_id = idx >= 0 ? S.ctxs[idx].id : absent_ctx() };
	int kind = idx >= 0 && chance(70) ? 0 : 1 + (int)below(4);

	if (idx >= 0)
		w.seqno = below(S.ctxs[idx].submitted + 1);
	/* Short deadlines only: 0 (poll), already passed, or up to 20 ms ahead. */
	switch (below(3)) {
	case 0: w.timeout_ns = 0; break;
	case 1: w.timeout_ns = below(now_ns()); break;
	default: w.timeout_ns = now_ns() + below(20000000); break;
	}
	if (kind == 1) w.flags = bad_flags();
	if (kind == 2) w.pad = bad_pad();
	if (kind == 3) w.ctx_id = absent_ctx();
	if (kind == 4) {
		if (idx < 0)
			w.ctx_id = absent_ctx();
		else
			w.seqno = S.ctxs[idx].submitted + 1 + below(1000);
	}
	int r = xioctl(S.fd, OP_WAIT, DRM_IOCTL_AIGPU_WAIT, &w);
	logop("wait id=%u seqno=%llu flags=%#x pad=%#x tmo=%llu rc=%d reason=%u done=%llu", w.ctx_id,
	      (unsigned long long)w.seqno, w.flags, w.pad, (unsigned long long)w.timeout_ns, r, w.reason,
	      (unsigned long long)w.completed_seqno);
	if (kind == 1) expect("WAIT unknown flags", r, w.reason, -EINVAL, AIGPU_REASON_FLAGS_UNKNOWN);
	if (kind == 2) expect("WAIT pad", r, w.reason, -EINVAL, AIGPU_REASON_PAD_NONZERO);
	if ((kind == 3 || (kind == 4 && idx < 0)) && !S.shared)
		expect("WAIT unknown context", r, w.reason, -EINVAL, AIGPU_REASON_CTX_INVALID);
	if (kind == 4 && idx >= 0 && !S.shared)
		expect("WAIT seqno never submitted", r, w.reason, -EINVAL, AIGPU_REASON_FENCE_NOT_SUBMITTED);
	if (kind == 0 && !S.shared && r && !(r == -ETIMEDOUT && w.reason == AIGPU_REASON_TIMEOUT) &&
	    !(r == -ECANCELED && (w.reason == AIGPU_REASON_CTX_LOST || w.reason == AIGPU_REASON_DEP_FAILED)) &&
	    !(r == -EINTR && w.reason == AIGPU_REASON_INTERRUPTED))
		finding("WAIT: rc=%d reason=%u, not an outcome docs/kmd.md lists", r, w.reason);
}

/* SUBMIT: a well-formed job on the work object, or one corruption of it. */
static void do_submit(void)
{
	int idx = S.nctxs ? (int)below(S.nctxs) : -1;
	if (!S.work_map)
		return;
	unsigned ncb = 1 + (unsigned)below(chance(90) ? 3 : 8);
	struct drm_aigpu_cmdbuf cbs[AIGPU_MAX_CMDBUFS + 2];
	struct drm_aigpu_fence fences[AIGPU_MAX_IN_FENCES + 2];
	unsigned nf = 0;
	int kind = chance(45) ? 0 : 1 + (int)below(14);
	int hang = 0;

	memset(cbs, 0, sizeof(cbs));
	memset(fences, 0, sizeof(fences));
	if (kind == 14 && !(hang_debug && idx >= 0 && chance(50) &&
			    __atomic_fetch_add(&sh->hangs, 1, __ATOMIC_RELAXED) < hang_budget))
		kind = 0;
	for (unsigned i = 0; i < ncb; i++) {
		unsigned npk = 1 + (unsigned)below(6);
		uint64_t va;
		uint32_t *p0 = cmd_alloc(npk * 13, &va), *p = p0;
		for (unsigned k = 0; k < npk; k++)
			p = valid_packet(p);
		cbs[i] = (struct drm_aigpu_cmdbuf){ .va = va, .size = (uint32_t)((p - p0) * 4) };
	}
	/* In-fences on own contexts' submitted seqnos. */
	if (idx >= 0 && chance(30)) {
		nf = 1 + (unsigned)below(3);
		for (unsigned i = 0; i < nf; i++) {
			struct ctx *c = &S.ctxs[below(S.nctxs)];
			fences[i] = (struct drm_aigpu_fence){ .ctx_id = c->id, .seqno = below(c->submitted + 1) };
		}
	}
	struct drm_aigpu_submit s = {
		.ctx_id = idx >= 0 ? S.ctxs[idx].id : absent_ctx(), .flags = chance(50) ? AIGPU_SUBMIT_FLAG_NO_BLOCK : 0,
		.cmdbufs = (uintptr_t)cbs, .in_fences = (uintptr_t)fences, .num_cmdbufs = ncb, .num_in_fences = nf,
	};
	unsigned bi = (unsigned)below(ncb);
	const char *what = "valid";
	int want = 0;
	uint32_t want_reason = 0;
	switch (kind) {
	case 1: s.flags |= bad_flags() & ~AIGPU_SUBMIT_FLAG_NO_BLOCK; if (!(s.flags & ~1u)) s.flags |= 2;
		what = "flags"; want = -EINVAL; want_reason = AIGPU_REASON_FLAGS_UNKNOWN; break;
	case 2: s.num_cmdbufs = chance(50) ? 0 : AIGPU_MAX_CMDBUFS + 1 + (uint32_t)below(1u << 20);
		what = "cmdbuf_count"; want = -EINVAL; want_reason = AIGPU_REASON_CMDBUF_COUNT; break;
	case 3: s.num_in_fences = AIGPU_MAX_IN_FENCES + 1 + (uint32_t)below(1000);
		what = "fence_count"; want = -EINVAL; want_reason = AIGPU_REASON_FENCE_COUNT; break;
	case 4: if (chance(50)) s.cmdbufs = chance(50) ? 8 : (uint64_t)-4096; else { s.in_fences = 16; s.num_in_fences = nf ? nf : 1; }
		what = "pointer"; want = -EFAULT; want_reason = AIGPU_REASON_BAD_USER_POINTER; break;
	case 5: cbs[bi].flags = bad_flags();
		what = "cmdbuf_flags"; want = -EINVAL; want_reason = AIGPU_REASON_FLAGS_UNKNOWN; break;
	case 6: switch (below(4)) {
		case 0: cbs[bi].va += 1 + below(3); break;
		case 1: cbs[bi].size = 0; break;
		case 2: cbs[bi].size |= 1 + (uint32_t)below(3); break;
		default: cbs[bi].size = AIGPU_MAX_CMDBUF_SIZE + 4 * (1 + (uint32_t)below(1000)); break;
		}
		what = "cmdbuf_bad"; want = -EINVAL; want_reason = AIGPU_REASON_CMDBUF_BAD; break;
	case 7: cbs[bi].va = chance(50) ? BIND_BASE + BIND_SPAN + PAGE * below(4096) : WORK_VA + WORK_SIZE - 4 * below(4);
		if (cbs[bi].va >= WORK_VA + WORK_SIZE - 16 && cbs[bi].va < WORK_VA + WORK_SIZE) cbs[bi].size = 64;
		what = "cmdbuf_unmapped"; want = -EINVAL; want_reason = AIGPU_REASON_CMDBUF_NOT_MAPPED; break;
	case 8: { /* first packet of buffer bi malformed: unknown opcode or zero length */
		uint32_t *p = (uint32_t *)(S.work_map + (cbs[bi].va - WORK_VA));
		uint8_t op;
		do
			op = (uint8_t)rnd();
		while (op <= 7 || op == 0x7f);
		p[0] = chance(50) ? HDR(op, 0, 1) : HDR(below(8), below(2), 0);
		what = "malformed"; want = -EINVAL; want_reason = AIGPU_REASON_PACKET_MALFORMED; break;
	}
	case 9: { /* a random packet stream: only counted, the device decides */
		uint64_t va;
		unsigned words = 1 + (unsigned)below(64);
		uint32_t *p0 = cmd_alloc(words + 16, &va), *p = p0;
		while ((unsigned)(p - p0) < words)
			p = random_packet(p, words - (unsigned)(p - p0));
		cbs[bi] = (struct drm_aigpu_cmdbuf){ .va = va, .size = (uint32_t)((p - p0) * 4) };
		what = "random"; want = 1; break;
	}
	case 10: s.ctx_id = absent_ctx(); what = "ctx"; want = -EINVAL; want_reason = AIGPU_REASON_CTX_INVALID; break;
	case 11: if (idx < 0) { kind = 0; break; }
		nf = s.num_in_fences = 1;
		bi = 0;
		fences[0] = (struct drm_aigpu_fence){ .ctx_id = s.ctx_id, .seqno = S.ctxs[idx].submitted };
		switch (below(3)) {
		case 0: fences[bi].flags = bad_flags(); want_reason = AIGPU_REASON_FLAGS_UNKNOWN; break;
		case 1: fences[bi].ctx_id = absent_ctx(); want_reason = AIGPU_REASON_FENCE_CTX_INVALID; break;
		default: fences[bi].seqno = S.ctxs[idx].submitted + 1 + below(100); want_reason = AIGPU_REASON_FENCE_NOT_SUBMITTED; break;
		}
		what = "fence"; want = -EINVAL; break;
	case 12: { /* HANG while hang debugging is off */
		if (hang_debug) { kind = 0; break; }
		uint32_t *p = (uint32_t *)(S.work_map + (cbs[bi].va - WORK_VA));
		p[0] = HDR(0x7f, 0, 1);
		what = "hang_disabled"; want = -EINVAL; want_reason = AIGPU_REASON_PACKET_HANG_DISABLED; break;
	}
	case 13: /* a tiny GEMM on the work object (m, n, k <= 8): counted, not asserted */
	{
		uint64_t va;
		uint32_t *p0 = cmd_alloc(16, &va), *p = p0;
		uint32_t m = 1 + (uint32_t)below(8), n = 1 + (uint32_t)below(8), k = 1 + (uint32_t)below(8);
		*p++ = HDR(0x03, 0, 13);
		p = emit64(p, WORK_VA);
		p = emit64(p, WORK_VA + 4096);
		p = emit64(p, WORK_VA + 8192);
		*p++ = m; *p++ = n; *p++ = k; *p++ = k; *p++ = n; *p++ = n;
		cbs[bi] = (struct drm_aigpu_cmdbuf){ .va = va, .size = (uint32_t)((p - p0) * 4) };
		what = "gemm"; want = 1; break;
	}
	case 14: { /* one HANG (bounded by the job timeout): its context is banned */
		uint32_t *p = (uint32_t *)(S.work_map + (cbs[bi].va - WORK_VA));
		p[0] = HDR(0x7f, 0, 1);
		cbs[bi].size = 4;
		hang = 1;
		what = "hang"; want = 1; break;
	}
	}
	int r = xioctl(S.fd, OP_SUBMIT, DRM_IOCTL_AIGPU_SUBMIT, &s);
	logop("submit[%s] ctx=%u flags=%#x ncb=%u nf=%u cb[%u]={va=%#llx size=%u flags=%#x} rc=%d reason=%u bad=%u@%llu seq=%llu",
	      what, s.ctx_id, s.flags, s.num_cmdbufs, s.num_in_fences, bi, (unsigned long long)cbs[bi].va,
	      cbs[bi].size, cbs[bi].flags, r, s.reason, s.bad_index, (unsigned long long)s.bad_offset,
	      (unsigned long long)s.out_seqno);
	if (hang)
		printf("fuzz: pid %d submitted a HANG job (ctx %u, rc %d)\n", getpid(), s.ctx_id, r);
	/* Without a live context every command-buffer check still comes first. */
	if (idx < 0 && want == 0) {
		want = -EINVAL;
		want_reason = AIGPU_REASON_CTX_INVALID;
	}
	int state_dep = kind == 7 || kind == 10 || kind == 11 || idx < 0;
	if (want < 0 && (!state_dep || !S.shared)) {
		/* A banned context answers ECANCELED only after the command-buffer checks. */
		if (idx >= 0 && (kind == 11) && r == -ECANCELED &&
		    (s.reason == AIGPU_REASON_CTX_BANNED || s.reason == AIGPU_REASON_DEP_FAILED))
			;
		else if (S.shared && ((kind >= 5 && kind <= 8) || kind == 12))
			/* Another process writes the shared work object: an earlier buffer's
			 * packets may fail first. */
			expect_fail(what, r, s.reason);
		else {
			char w[64];
			snprintf(w, sizeof(w), "SUBMIT corrupted (%s)", what);
			expect(w, r, s.reason, want, want_reason);
			if (!r)
				; /* counted as a finding by expect() */
			else if ((kind >= 5 && kind <= 8) && r == want && s.reason == want_reason && s.bad_index != bi)
				finding("SUBMIT %s: bad_index=%u, the corrupted buffer is %u", what, s.bad_index, bi);
			else if (kind == 8 && r == want && s.reason == want_reason && s.bad_offset != 0)
				finding("SUBMIT malformed first packet: bad_offset=%llu, want 0", (unsigned long long)s.bad_offset);
		}
	} else if (want == 0 && !S.shared && r &&
		   !(r == -ECANCELED && s.reason == AIGPU_REASON_CTX_BANNED) &&
		   /* DEP_FAILED: an in-fence's producer failed, or this context was banned
		    * for that earlier (every later SUBMIT on it says so, docs/kmd.md). */
		   !(r == -ECANCELED && s.reason == AIGPU_REASON_DEP_FAILED) &&
		   !(r == -EAGAIN && (s.reason == AIGPU_REASON_RING_FULL || s.reason == AIGPU_REASON_AS_SLOTS_BUSY)) &&
		   !(r == -EINTR && s.reason == AIGPU_REASON_INTERRUPTED)) {
		finding("SUBMIT of a well-formed job: rc=%d reason=%u bad=%u@%llu", r, s.reason, s.bad_index,
			(unsigned long long)s.bad_offset);
	}
	if (r == 0 && idx >= 0) {
		if (!S.shared && s.out_seqno != S.ctxs[idx].submitted + 1)
			finding("SUBMIT seqno %llu, want %llu", (unsigned long long)s.out_seqno,
				(unsigned long long)S.ctxs[idx].submitted + 1);
		if (s.out_seqno > S.ctxs[idx].submitted)
			S.ctxs[idx].submitted = s.out_seqno;
		/* Rewrite the command buffer after the submit (the device must not care). */
		if (chance(10))
			memset(S.work_map + (cbs[0].va - WORK_VA), (int)below(256), 16);
	}
}

static void do_gem_close(void)
{
	int idx = S.nbos ? (int)below(S.nbos) : -1;
	struct drm_gem_close c = { .handle = idx >= 0 && chance(70) ? S.bos[idx].handle : absent_handle() };
	int own = idx >= 0 && c.handle == S.bos[idx].handle;

	if (chance(5))
		c.pad = bad_pad();
	int r = xioctl(S.fd, OP_GEM_CLOSE, DRM_IOCTL_GEM_CLOSE, &c);
	logop("gem_close handle=%u pad=%#x rc=%d", c.handle, c.pad, r);
	if (!own && !S.shared)
		expect_fail("GEM_CLOSE of an unknown handle", r, 0);
	if (own && !r) {
		dead_handle_add(c.handle);
		S.bos[idx] = S.bos[--S.nbos];
	}
}

/* PRIME: export an own object, import it back (the same handle), into the peer file (a new
 * handle, an aigpu object) and into a file of device 1 (an object aigpu did not create there:
 * docs/kmd.md, "Foreign GEM handles"), and use the imports. */
static void do_prime(void)
{
	struct bo *b = pick_bo();
	struct drm_prime_handle e = { .handle = b && chance(85) ? b->handle : absent_handle(),
				      .flags = DRM_CLOEXEC | (chance(50) ? DRM_RDWR : 0), .fd = -1 };
	int own = b && e.handle == b->handle;
	int r = xioctl(S.fd, OP_PRIME_TO_FD, DRM_IOCTL_PRIME_HANDLE_TO_FD, &e);
	logop("prime_handle_to_fd handle=%u rc=%d fd=%d", e.handle, r, e.fd);
	if (!own && !S.shared)
		expect_fail("PRIME_HANDLE_TO_FD of an unknown handle", r, 0);
	if (r) {
		struct drm_prime_handle i = { .fd = chance(50) ? -1 : 0 };
		r = xioctl(S.fd, OP_PRIME_TO_HANDLE, DRM_IOCTL_PRIME_FD_TO_HANDLE, &i);
		logop("prime_fd_to_handle fd=%d rc=%d", i.fd, r);
		expect_fail("PRIME_FD_TO_HANDLE of a non-dma-buf fd", r, 0);
		return;
	}
	struct drm_prime_handle i = { .fd = e.fd };
	r = xioctl(S.fd, OP_PRIME_TO_HANDLE, DRM_IOCTL_PRIME_FD_TO_HANDLE, &i);
	logop("prime_fd_to_handle (self) fd=%d rc=%d handle=%u", e.fd, r, i.handle);
	if (!S.shared && (r || i.handle != e.handle))
		finding("PRIME import into the exporting file: rc=%d handle %u, want 0 and %u", r, i.handle, e.handle);
	int tgt = chance(50) ? peer_fd : other_fd;
	if (tgt >= 0) {
		struct drm_prime_handle j = { .fd = e.fd };
		r = xioctl(tgt, OP_PRIME_TO_HANDLE, DRM_IOCTL_PRIME_FD_TO_HANDLE, &j);
		logop("prime_fd_to_handle (%s) fd=%d rc=%d handle=%u", tgt == peer_fd ? "peer" : "device 1", e.fd, r, j.handle);
		if (!r) {
			struct drm_aigpu_gem_mmap_offset m = { .handle = j.handle };
			int r2 = xioctl(tgt, OP_MMAP_OFFSET, DRM_IOCTL_AIGPU_GEM_MMAP_OFFSET, &m);
			logop("mmap_offset (import) handle=%u rc=%d reason=%u", j.handle, r2, m.reason);
			/* The peer and device-1 files are shared with forked children, which may
			 * close the same import's handle (one handle per object and file) meanwhile. */
			int alone = !is_child && child <= 0;
			if (!alone)
				;
			else if (tgt == other_fd)
				expect("GEM_MMAP_OFFSET of another device's import", r2, m.reason, -EINVAL,
				       AIGPU_REASON_HANDLE_FOREIGN);
			else if (r2)
				finding("GEM_MMAP_OFFSET of an own object imported into another file: rc=%d reason=%u", r2, m.reason);
			struct drm_aigpu_vm_bind vb = { .handle = j.handle, .va = BIND_BASE + PAGE * below(64),
							.size = PAGE, .access = RW };
			r2 = xioctl(tgt, OP_VM_BIND, DRM_IOCTL_AIGPU_VM_BIND, &vb);
			logop("vm_bind (import) handle=%u rc=%d reason=%u", j.handle, r2, vb.reason);
			if (alone && tgt == other_fd)
				expect("VM_BIND of another device's import", r2, vb.reason, -EINVAL, AIGPU_REASON_HANDLE_FOREIGN);
			if (!r2 && chance(50)) {
				struct drm_aigpu_vm_unbind u = { .va = vb.va, .size = PAGE };
				xioctl(tgt, OP_VM_UNBIND, DRM_IOCTL_AIGPU_VM_UNBIND, &u);
			}
			if (chance(70)) {
				struct drm_gem_close gc = { .handle = j.handle };
				xioctl(tgt, OP_GEM_CLOSE, DRM_IOCTL_GEM_CLOSE, &gc);
			}
		}
	}
	close(e.fd);
}

/* Generic DRM ioctls with no aigpu state: VERSION (render allowed), FLINK and SET_VERSION
 * (master only: a render node refuses them), and unknown driver ioctl numbers and sizes. */
static void do_generic(void)
{
	switch (below(4)) {
	case 0: {
		char name[32], date[32], desc[64];
		size_t given = below(2) ? sizeof(name) : below(4);
		struct drm_version v = { .name_len = given, .name = name,
					 .date_len = sizeof(date), .date = date, .desc_len = sizeof(desc), .desc = desc };
		int r = xioctl(S.fd, OP_VERSION, DRM_IOCTL_VERSION, &v);
		logop("version name_len=%zu rc=%d", v.name_len, r);
		if (r)
			finding("DRM_IOCTL_VERSION: rc=%d", r);
		else if (given >= v.name_len && (v.name_len != strlen(AIGPU_DRIVER_NAME) ||
						  memcmp(name, AIGPU_DRIVER_NAME, v.name_len)))
			finding("DRM_IOCTL_VERSION: name is not %s", AIGPU_DRIVER_NAME);
		break;
	}
	case 1: {
		struct drm_gem_flink f = { .handle = S.nbos ? S.bos[0].handle : absent_handle() };
		int r = xioctl(S.fd, OP_FLINK, DRM_IOCTL_GEM_FLINK, &f);
		logop("gem_flink handle=%u rc=%d name=%u", f.handle, r, f.name);
		expect_fail("GEM_FLINK on a render node", r, 0);
		break;
	}
	case 2: {
		struct drm_set_version sv = { .drm_di_major = (int)below(3) - 1, .drm_di_minor = (int)below(5) - 1,
					      .drm_dd_major = (int)below(3) - 1, .drm_dd_minor = (int)below(3) - 1 };
		int r = xioctl(S.fd, OP_SET_VERSION, DRM_IOCTL_SET_VERSION, &sv);
		logop("set_version %d.%d %d.%d rc=%d", sv.drm_di_major, sv.drm_di_minor, sv.drm_dd_major,
		      sv.drm_dd_minor, r);
		break;
	}
	default: { /* an unknown aigpu number, or a known one with a wrong size or direction */
		uint8_t buf[512];
		for (unsigned i = 0; i < sizeof(buf); i++)
			buf[i] = chance(80) ? 0 : (uint8_t)rnd();
		uint32_t nr = chance(50) ? DRM_AIGPU_NUM_IOCTLS + (uint32_t)below(0x60 - DRM_AIGPU_NUM_IOCTLS)
					 : (uint32_t)below(DRM_AIGPU_NUM_IOCTLS);
		uint32_t size = (uint32_t)below(sizeof(buf));
		uint32_t dir = (uint32_t)below(4);
		unsigned long req = (dir << 30) | (size << 16) | ((uint32_t)AIGPU_DRM_IOCTL_BASE << 8) |
				    (AIGPU_DRM_COMMAND_BASE + nr);
		/* Known numbers go to the peer file: what they create there is not tracked. */
		int fd = nr < DRM_AIGPU_NUM_IOCTLS ? peer_fd : S.fd;
		if (fd < 0)
			break;
		int r = xioctl(fd, OP_BAD_NR, req, buf);
		logop("raw ioctl nr=%#x size=%u dir=%u rc=%d", nr, size, dir, r);
		if (nr >= DRM_AIGPU_NUM_IOCTLS)
			expect_fail("unknown aigpu ioctl number", r, 0);
		break;
	}
	}
}

/* Destroy storm: every context, mapping and object of the file in random order. */
static void destroy_storm(void)
{
	bump(&sh->storms, 1);
	logop("destroy storm: %d ctxs %d maps %d bos", S.nctxs, S.nmaps, S.nbos);
	while (S.nctxs || S.nmaps > 1 || S.nbos) {
		unsigned w = (unsigned)below(3);
		if (w == 0 && S.nctxs) {
			int i = (int)below(S.nctxs);
			struct drm_aigpu_ctx_destroy d = { .ctx_id = S.ctxs[i].id };
			int r = xioctl(S.fd, OP_CTX_DESTROY, DRM_IOCTL_AIGPU_CTX_DESTROY, &d);
			logop("storm ctx_destroy %u rc=%d reason=%u", d.ctx_id, r, d.reason);
			if (r && !S.shared && !(r == -EINTR))
				finding("CTX_DESTROY of a live context: rc=%d reason=%u", r, d.reason);
			dead_ctx_add(d.ctx_id);
			S.ctxs[i] = S.ctxs[--S.nctxs];
		} else if (w == 1 && S.nmaps > 1) {
			int i = 1 + (int)below(S.nmaps - 1);
			struct drm_aigpu_vm_unbind u = { .va = S.maps[i].va, .size = S.maps[i].size };
			int r = xioctl(S.fd, OP_VM_UNBIND, DRM_IOCTL_AIGPU_VM_UNBIND, &u);
			logop("storm vm_unbind %#llx+%#llx rc=%d reason=%u", (unsigned long long)u.va,
			      (unsigned long long)u.size, r, u.reason);
			if (r && !S.shared)
				finding("VM_UNBIND of an own mapping: rc=%d reason=%u", r, u.reason);
			S.maps[i] = S.maps[--S.nmaps];
		} else if (w == 2 && S.nbos) {
			int i = (int)below(S.nbos);
			struct drm_gem_close c = { .handle = S.bos[i].handle };
			int r = xioctl(S.fd, OP_GEM_CLOSE, DRM_IOCTL_GEM_CLOSE, &c);
			logop("storm gem_close %u rc=%d", c.handle, r);
			if (r && !S.shared)
				finding("GEM_CLOSE of an own handle: rc=%d", r);
			dead_handle_add(c.handle);
			S.bos[i] = S.bos[--S.nbos];
		}
	}
}

/* ---- processes ---- */
static unsigned max_procs = 4;
static int live_children;

static void reap(int block)
{
	int status;
	pid_t p;

	while (child > 0 && (p = waitpid(child, &status, block ? 0 : WNOHANG)) > 0) {
		if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
			finding("forked child %d died of signal %d", p, WTERMSIG(status));
		if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3)
			finding("forked child %d exited %d", p, WEXITSTATUS(status));
		child = -1;
		live_children--;
		/* The file was shared: start again from a fresh file. */
		state_close();
		if (state_open())
			finding("reopening %s failed", node);
	}
}

static void run(uint64_t iters, uint64_t deadline);

static void do_fork(uint64_t deadline)
{
	if (is_child || child > 0 || (unsigned)live_children + 1 >= max_procs)
		return;
	fflush(stdout);
	uint64_t cseed = rnd() | 1;
	pid_t p = fork();
	if (p < 0)
		return;
	bump(&sh->forks, 1);
	if (p == 0) {
		is_child = 1;
		rng = cseed;
		S.shared = 1;
		logop("forked child, rng=%#llx", (unsigned long long)cseed);
		/* Fuzz the inherited file, then (sometimes) a file of its own. */
		run(50 + below(200), deadline);
		if (chance(30)) {
			bump(&sh->exited_open, 1);
			_exit(3); /* exit without closing anything */
		}
		state_close();
		if (state_open() == 0) {
			run(50 + below(200), deadline);
		}
		if (chance(50)) {
			bump(&sh->exited_open, 1);
			_exit(3);
		}
		state_close();
		_exit(0);
	}
	child = p;
	live_children++;
	S.shared = 1;
	logop("fork -> child %d", p);
}

static void maybe_kill_child(void)
{
	if (child > 0 && chance(30)) {
		/* Kill it mid-work (it is likely inside an ioctl or between two). */
		usleep((useconds_t)below(5000));
		kill(child, SIGKILL);
		bump(&sh->killed, 1);
		logop("SIGKILL child %d", child);
		reap(1);
	}
}

static void run(uint64_t iters, uint64_t deadline)
{
	for (uint64_t i = 0; i < iters && now_ns() < deadline; i++) {
		bump(&sh->iters, 1);
		if (!is_child)
			my_iters++;
		if (!is_child)
			reap(0);
		unsigned w = (unsigned)below(1000);
		if (w < 40) do_query();
		else if (w < 120) do_gem_create();
		else if (w < 180) do_mmap();
		else if (w < 300) do_vm_bind();
		else if (w < 370) do_vm_unbind();
		else if (w < 440) do_ctx_create();
		else if (w < 490) do_ctx_destroy();
		else if (w < 700) do_submit();
		else if (w < 800) do_wait();
		else if (w < 840) do_ctx_state();
		else if (w < 880) do_gem_close();
		else if (w < 910) do_prime();
		else if (w < 950) do_generic();
		else if (w < 960) touch_orphans();
		else if (w < 968) destroy_storm();
		else if (w < 975) {
			if (!S.shared) { state_close(); if (state_open()) finding("reopening %s failed", node); }
		} else if (w < 990) do_fork(deadline);
		else maybe_kill_child();
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: aigpu_fuzz [--seed S] [--iters N] [--time SECS] [--uid UID] [--node PATH]"
			" [--node2 PATH] [--procs P] [--hangs H] [--log N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t iters = UINT64_MAX;
	double secs = 0;
	long uid = -1;
	int have_seed = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			usage();
		if (!strcmp(a, "--seed") || !strcmp(a, "--replay")) seed = strtoull(v, NULL, 0), have_seed = 1;
		else if (!strcmp(a, "--iters")) iters = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--time")) secs = strtod(v, NULL);
		else if (!strcmp(a, "--uid")) uid = strtol(v, NULL, 0);
		else if (!strcmp(a, "--node")) node = v;
		else if (!strcmp(a, "--node2")) node2 = v;
		else if (!strcmp(a, "--procs")) max_procs = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--hangs")) hang_budget = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--log")) log_n = (unsigned)strtoul(v, NULL, 0);
		else usage();
		i++;
	}
	if (!have_seed)
		seed = now_ns() ^ ((uint64_t)getpid() << 32);
	if (!log_n)
		log_n = 1;
	if (iters == UINT64_MAX && secs <= 0)
		iters = 10000;
	uint64_t deadline = secs > 0 ? now_ns() + (uint64_t)(secs * 1e9) : UINT64_MAX;
	rng = seed ? seed : 0x9e3779b97f4a7c15ull;
	setvbuf(stdout, NULL, _IOLBF, 0);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	oplog = calloc(log_n, sizeof(*oplog));
	if (sh == MAP_FAILED || !oplog)
		return 2;
	memset(sh, 0, sizeof(*sh));
	if (uid >= 0) {
		/* An unprivileged user: no supplementary groups, then gid, then uid. */
		if (setgroups(0, NULL) || setgid((gid_t)uid) || setuid((uid_t)uid)) {
			printf("fuzz: FAIL cannot become uid %ld: %s\n", uid, strerror(errno));
			return 1;
		}
	}
	printf("fuzz: start seed=%" PRIu64 " uid=%d node=%s iters=%s time=%.0fs procs=%u hangs=%" PRIu64 "\n",
	       seed, (int)getuid(), node, iters == UINT64_MAX ? "unbounded" : "bounded", secs, max_procs, hang_budget);
	signal(SIGPIPE, SIG_IGN);
	if (state_open()) {
		printf("fuzz: FAIL cannot open %s and set up its work object: %s\n", node, strerror(errno));
		return 1;
	}
	if (xioctl(S.fd, OP_QUERY, DRM_IOCTL_AIGPU_QUERY, &q)) {
		printf("fuzz: FAIL QUERY\n");
		return 1;
	}
	hang_debug = !!(q.caps & AIGPU_CAP_HANG_DEBUG);
	/* The peer file on the same device (its context id and handle are foreign to ours) and a
	 * file on device 1 (PRIME imports into it are objects aigpu did not create there). */
	peer_fd = open_node(node);
	if (peer_fd >= 0) {
		struct drm_aigpu_ctx_create c = { .priority = AIGPU_PRIORITY_NORMAL };
		struct drm_aigpu_gem_create g = { .size = PAGE };
		if (!xioctl(peer_fd, OP_CTX_CREATE, DRM_IOCTL_AIGPU_CTX_CREATE, &c))
			peer_ctx = c.ctx_id;
		if (!xioctl(peer_fd, OP_GEM_CREATE, DRM_IOCTL_AIGPU_GEM_CREATE, &g))
			peer_handle = g.handle;
	}
	other_fd = open_node(node2);
	if (other_fd < 0)
		other_fd = -1;
	run(iters, deadline);
	if (child > 0) {
		if (chance(50)) {
			kill(child, SIGKILL);
			bump(&sh->killed, 1);
		}
		reap(1);
	}
	state_close();
	while (norphans)
		munmap(orphans[norphans - 1].p, orphans[norphans - 1].len), norphans--;
	uint64_t total = 0;
	for (int i = 0; i < OP_COUNT; i++)
		total += sh->ioctls[i];
	printf("fuzz: seed=%" PRIu64 " iters=%" PRIu64 " ioctls=%" PRIu64, seed, sh->iters, total);
	for (int i = 0; i < OP_COUNT; i++)
		printf(" %s=%" PRIu64, op_name[i], sh->ioctls[i]);
	printf(" forks=%" PRIu64 " killed=%" PRIu64 " exit_open=%" PRIu64 " hangs=%" PRIu64
	       " mmaps=%" PRIu64 " closes=%" PRIu64 " storms=%" PRIu64 " uid=%d findings=%" PRIu64 "\n",
	       sh->forks, sh->killed, sh->exited_open, sh->hangs < hang_budget ? sh->hangs : hang_budget,
	       sh->mmaps, sh->closes, sh->storms, (int)getuid(), sh->findings);
	(void)peer_handle;
	return sh->findings ? 1 : 0;
}
