/* callsites.c: allocations and frees at known lines in known functions, for umd/tests/callsites.rs
 * (the application's call sites in the log records, the error detail and the leak report).
 * Built with -g and -rdynamic (its functions are exported, so dladdr names them) or stripped.
 * Keep the marked lines where they are: the test asserts them. */
#include <stdio.h>
#include <string.h>
#include "umd.h"

#define CHECK(call)                                                               \
    do {                                                                          \
        umdResult r_ = (call);                                                    \
        if (r_ != UMD_SUCCESS) {                                                  \
            fprintf(stderr, "%s: %s\n", #call, umdGetErrorName(r_));              \
            return 1;                                                             \
        }                                                                         \
    } while (0)

__attribute__((noinline)) int make_scratch(umdContext ctx, umdBuffer *b) {
    return umdMemAlloc(ctx, 4096, 0, b); /* line 19: make_scratch's alloc */
}

__attribute__((noinline)) int drop_scratch(umdBuffer b) {
    return umdMemFree(b); /* line 23: drop_scratch's free */
}

__attribute__((noinline)) int make_tagged(umdContext ctx, umdBuffer *b) {
    umdMemAllocInfo info = {.struct_size = sizeof info, .size = 8192, .tag = "tagged"};
    return umdMemAllocEx(ctx, &info, b); /* line 28: make_tagged's alloc */
}

__attribute__((noinline)) int free_by_address(umdContext ctx, umdDevicePtr va) {
    return umdMemFreeAddress(ctx, va); /* line 32: free_by_address's free */
}

__attribute__((noinline)) int leak_one(umdContext ctx, umdBuffer *b) {
    return umdMemAlloc(ctx, 12288, 0, b); /* line 36: leak_one's alloc */
}

int main(void) {
    umdDevice dev;
    umdContext ctx;
    umdBuffer a, t, l;
    umdDevicePtr va;
    CHECK(umdDeviceOpen(0, &dev));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx));
    CHECK(make_scratch(ctx, &a));
    CHECK(drop_scratch(a));
    CHECK(make_tagged(ctx, &t));
    CHECK(umdMemGetAddress(t, &va));
    CHECK(free_by_address(ctx, va));
    umdResult r = free_by_address(ctx, va); /* the double free */
    umdErrorDetail d = {.struct_size = sizeof d};
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS) return 1;
    printf("double_free %s %s\n", umdGetErrorName(r), d.message);
    /* A use after free: a fill of a buffer freed before the submit that replays it. */
    umdBuffer u;
    umdDevicePtr uva;
    umdCmdBuf cb;
    umdFence done;
    CHECK(make_scratch(ctx, &u));
    CHECK(umdMemGetAddress(u, &uva));
    CHECK(umdCmdBufCreate(ctx, &cb));
    CHECK(umdCmdBufBegin(cb));
    CHECK(umdCmdFill(cb, uva, 4096, 0x2a2a2a2a));
    CHECK(umdCmdBufEnd(cb));
    CHECK(drop_scratch(u));
    r = umdSubmit(ctx, &cb, 1, NULL, 0, &done);
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS) return 1;
    printf("use_after_free %s %s\n", umdGetErrorName(r), d.message);
    CHECK(umdCmdBufDestroy(cb));
    /* umdMemFree of the handle freed above, then a use of it after its slot went to another. */
    r = drop_scratch(u);
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS) return 1;
    printf("handle_double_free %s %s\n", umdGetErrorName(r), d.message);
    umdBuffer w;
    CHECK(make_scratch(ctx, &w));
    r = umdMemGetAddress(u, &uva);
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS) return 1;
    printf("handle_reused %s %s\n", umdGetErrorName(r), d.message);
    CHECK(drop_scratch(w));
    CHECK(leak_one(ctx, &l));
    CHECK(umdContextDestroy(ctx)); /* reports the leak */
    CHECK(umdDeviceClose(dev));
    return 0;
}
