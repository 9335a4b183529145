/* The check helpers of the small C test programs (dependency.c, batch.c, interrupt.c): each
 * defines CHECK_PROG (its name, the prefix of every line) before including this. Every check
 * prints "<prog>: ok <name>" or "<prog>: FAIL <name>: <why>"; the last line is
 * "<prog>: N passed, M failed" (check_summary), which the tests driving them read. */
#ifndef AIGPU_TEST_CHECK_H
#define AIGPU_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <umd.h>

static int check_passed, check_failed;

static void check(const char *name, int ok, const char *why) {
    if (ok) {
        check_passed++;
        printf("%s: ok %s\n", CHECK_PROG, name);
    } else {
        check_failed++;
        printf("%s: FAIL %s: %s\n", CHECK_PROG, name, why);
    }
}

/* The detail of the calling thread's last failure (code UMD_SUCCESS if it cannot be read). */
static umdErrorDetail detail(void) {
    umdErrorDetail d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS)
        d.code = UMD_SUCCESS;
    return d;
}

/* A call that must succeed; the program stops at the first one that does not. */
#define MUST(call)                                                                                  \
    do {                                                                                            \
        umdResult r_ = (call);                                                                      \
        if (r_ != UMD_SUCCESS) {                                                                    \
            printf("%s: FAIL %s = %s: %s\n", CHECK_PROG, #call, umdGetErrorName(r_), detail().message); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* The last line; the program's exit status. */
static int check_summary(void) {
    printf("%s: %d passed, %d failed\n", CHECK_PROG, check_passed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
