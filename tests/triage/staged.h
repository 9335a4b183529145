/* staged.h: the checks every staged failure program shares (tests/triage/README.md). Each program
 * stages one ordinary failure through include/umd.h and exits as an application would: with the
 * failing call's code printed and status 1, or 0 when nothing returned an error. */
#ifndef STAGED_H
#define STAGED_H
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include "umd.h"

static inline int staged_fail(umdResult r, const char *call) {
    umdErrorDetail d = {.struct_size = sizeof d};
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS) d.message[0] = '\0';
    fprintf(stderr, "%s: %s: %s\n", call, umdGetErrorName(r), d.message);
    return 1;
}

/* Fails the program at the first error. */
#define CHECK(call)                                              \
    do {                                                         \
        umdResult r_ = (call);                                   \
        if (r_ != UMD_SUCCESS) return staged_fail(r_, #call);    \
    } while (0)

/* Opens device 0 and one normal-priority context on it. */
#define OPEN(dev, ctx)                                           \
    do {                                                         \
        CHECK(umdDeviceOpen(0, &(dev)));                         \
        CHECK(umdContextCreate((dev), UMD_PRIORITY_NORMAL, &(ctx))); \
    } while (0)

/* Records `packets` into a fresh command buffer on `ctx`. */
#define RECORD(ctx, cb, packets)                                 \
    do {                                                         \
        CHECK(umdCmdBufCreate((ctx), &(cb)));                    \
        CHECK(umdCmdBufBegin(cb));                               \
        packets;                                                 \
        CHECK(umdCmdBufEnd(cb));                                 \
    } while (0)
#endif
