/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the in-guest programs that drive aigpu's UAPI directly share (exec_test.c,
 * procfault_test.c, tests/fuzz/aigpu_fuzz.c): a monotonic clock, an ioctl that returns 0 or
 * -errno, and the packet encoding of docs/hw-spec.md section 6 (header word, 64-bit operands as
 * two little-endian words). Include after aigpu_drm.h.
 */
#ifndef AIGPU_GUEST_UAPI_H
#define AIGPU_GUEST_UAPI_H

#include <errno.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <time.h>

#define PAGE 4096ull
#define RW (AIGPU_VM_ACCESS_READ | AIGPU_VM_ACCESS_WRITE)

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ioctl returning 0 or -errno; no retry (EINTR and EAGAIN are outcomes here). */
static inline int rawioctl(int fd, unsigned long req, void *arg)
{
	return ioctl(fd, req, arg) == -1 ? -errno : 0;
}

/* A packet header: opcode, flags, length in words (docs/hw-spec.md section 6). */
#define HDR(op, flags, words) ((uint32_t)(op) | ((uint32_t)(flags) << 8) | ((uint32_t)(words) << 16))

/* A 64-bit operand: low word first. Returns the next free word. */
static inline uint32_t *emit64(uint32_t *p, uint64_t v)
{
	p[0] = (uint32_t)v;
	p[1] = (uint32_t)(v >> 32);
	return p + 2;
}

#endif
