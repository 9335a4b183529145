/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the in-guest test programs (kmd_test.c, exec_test.c) share: the check reporting that
 * scripts/run-guest.sh reads (`<prog>: ok NAME`, `<prog>: FAIL NAME: why`, and the final
 * `<prog>: N passed, M failed` each program prints from `passed` / `failed`), and loading and
 * unloading the module under test. Define GUEST_TEST (the program's name) before including.
 */
#ifndef AIGPU_GUEST_CHECK_H
#define AIGPU_GUEST_CHECK_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef GUEST_TEST
#error "define GUEST_TEST (the test program's name) before including guest_check.h"
#endif

static int passed, failed;
/* The aigpu.ko the program loads and unloads (--module). */
static const char *module_path;

static inline void ok(const char *name)
{
	passed++;
	printf(GUEST_TEST ": ok %s\n", name);
	fflush(stdout);
}

static inline void __attribute__((format(printf, 2, 3))) fail(const char *name, const char *fmt, ...)
{
	va_list ap;

	failed++;
	printf(GUEST_TEST ": FAIL %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

#define CHECK(name, cond, ...) do { if (cond) ok(name); else fail(name, __VA_ARGS__); } while (0)

/* 0 or -errno; O_NONBLOCK: fail with EWOULDBLOCK/EBUSY instead of waiting for users to go. */
static inline int delete_module(const char *name)
{
	return syscall(SYS_delete_module, name, O_NONBLOCK) ? -errno : 0;
}

/* Loads module_path with `params`: 0 or -errno. */
static inline int load_module(const char *params)
{
	int fd = open(module_path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	int r = syscall(SYS_finit_module, fd, params, 0) ? -errno : 0;
	close(fd);
	return r;
}

#endif
