/*
 * libumd C ABI test: compiled with -Wall -Wextra -Werror against include/umd.h, linked to the
 * built libumd.so. Drives the success paths and every error class, checking exact codes and
 * the detail fields. Runs on the simulator by default; the QEMU guest runs the same program
 * with UMD_BACKEND=kmd against the real module.
 *
 * Output: "abi_test: ok <name>" / "abi_test: FAIL <name>: ..." lines, then
 * "abi_test: N passed, M failed".
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "umd.h"

static int passed, failed;

static umdErrorDetail detail(void) {
    umdErrorDetail d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS) d.code = 12345;
    return d;
}

static void report(const char *name, int ok, const char *why) {
    if (ok) {
        passed++;
        printf("abi_test: ok %s\n", name);
    } else {
        failed++;
        umdErrorDetail d = detail();
        printf("abi_test: FAIL %s: %s (last detail: %s %s)\n", name, why, umdGetErrorName(d.code), d.message);
    }
}

/* A call must return exactly `want`. */
#define EXPECT_CODE(name, call, want)                                                        \
    do {                                                                                     \
        umdResult r_ = (call);                                                               \
        char why_[256];                                                                      \
        snprintf(why_, sizeof why_, "%s returned %s (%d), expected %s", #call,               \
                 umdGetErrorName(r_), (int)r_, umdGetErrorName(want));                       \
        report(name, r_ == (want), why_);                                                    \
    } while (0)

/* The last detail must have this code, function and message fragment. */
static void expect_detail(const char *name, umdResult code, const char *function, const char *fragment) {
    umdErrorDetail d = detail();
    char why[1200];
    snprintf(why, sizeof why, "detail code %s function '%s' message '%s' (want %s, '%s', '...%s...')",
             umdGetErrorName(d.code), d.function, d.message, umdGetErrorName(code), function, fragment);
    report(name, d.code == code && strcmp(d.function, function) == 0 && strstr(d.message, fragment) != NULL &&
                     d.thread_id != 0 && d.mono_ns != 0 && d.wall_ns != 0 && d.line != 0 && d.file[0] != 0,
           why);
}

#define MUST(call)                                                                           \
    do {                                                                                     \
        umdResult r_ = (call);                                                               \
        if (r_ != UMD_SUCCESS) {                                                             \
            report(#call, 0, umdGetErrorName(r_));                                           \
            printf("abi_test: %d passed, %d failed\n", passed, failed);                      \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static const uint64_t SEC = 1000000000ull;

/* A command buffer with one FILL of `size` bytes at `va`, ended. */
static umdCmdBuf fill_cmd(umdContext ctx, umdDevicePtr va, uint64_t size, uint32_t pattern) {
    umdCmdBuf cb;
    MUST(umdCmdBufCreate(ctx, &cb));
    MUST(umdCmdBufBegin(cb));
    MUST(umdCmdFill(cb, va, size, pattern));
    MUST(umdCmdBufEnd(cb));
    return cb;
}

static void test_error_queries(void) {
    report("name of a code", strcmp(umdGetErrorName(UMD_ERR_DEVICE_LOST), "UMD_ERR_DEVICE_LOST") == 0, "wrong name");
    report("name of a non-code", strcmp(umdGetErrorName(-123456), "UMD_UNKNOWN_RESULT") == 0, "wrong name");
    report("string of a code", strstr(umdGetErrorString(UMD_ERR_SYNC_TIMEOUT), "still running") != NULL, "wrong text");
    report("action of OOM", umdGetErrorAction(UMD_ERR_MEM_OUT_OF_MEMORY) == UMD_ACTION_FREE_MEMORY_AND_RETRY, "wrong action");
    report("action of device lost", umdGetErrorAction(UMD_ERR_DEVICE_LOST) == UMD_ACTION_RECREATE_DEVICE, "wrong action");
    report("timeout is retryable", umdIsRetryable(UMD_ERR_SYNC_TIMEOUT) == 1, "not retryable");
    report("bad handle is not retryable", umdIsRetryable(UMD_ERR_INVALID_HANDLE) == 0, "retryable");
    uint32_t ma = 99, mi = 99, pa = 99, ua = 99, ui = 99;
    EXPECT_CODE("version", umdGetVersion(&ma, &mi, &pa, &ua, &ui), UMD_SUCCESS);
    report("version values", ma == UMD_VERSION_MAJOR && mi == UMD_VERSION_MINOR && ua == 1 && ui == 3, "wrong version");
    umdErrorDetail d;
    memset(&d, 0, sizeof d);
    d.struct_size = 0;
    EXPECT_CODE("detail with struct_size 0", umdGetLastErrorDetail(&d), UMD_ERR_INVALID_STRUCT_SIZE);
    EXPECT_CODE("detail NULL", umdGetLastErrorDetail(NULL), UMD_ERR_INVALID_POINTER);
    d = detail();
    report("no failure yet: detail code is success", d.code == UMD_SUCCESS, "detail not empty");
}

/* The PCI address sysfs gives render node `node` (`/dev/dri/renderD128`): the last component of
 * /sys/class/drm/<name>/device when that device's subsystem is `pci` (docs/kmd.md,
 * "Attachments"), else "" (a faux device). Read here independently of libumd's own reader. */
static void sysfs_pci_address(const char *node, char *out, size_t n) {
    out[0] = '\0';
    const char *name = strrchr(node, '/');
    if (!name) return;
    char path[256], link[256];
    snprintf(path, sizeof path, "/sys/class/drm/%s/device/subsystem", name + 1);
    ssize_t len = readlink(path, link, sizeof link - 1);
    if (len < 0) return;
    link[len] = '\0';
    const char *sub = strrchr(link, '/');
    if (strcmp(sub ? sub + 1 : link, "pci") != 0) return;
    snprintf(path, sizeof path, "/sys/class/drm/%s/device", name + 1);
    len = readlink(path, link, sizeof link - 1);
    if (len < 0) return;
    link[len] = '\0';
    const char *dev = strrchr(link, '/');
    dev = dev ? dev + 1 : link;
    size_t dn = strlen(dev);
    if (dn >= n) return; /* no PCI address is that long: leave "" so the check fails */
    memcpy(out, dev, dn + 1);
}

/* Every device's umdDeviceInfo.pci_address is what sysfs says (the simulator's: ""), and a
 * version-1 struct_size gets the version-1 fields only. The line names the address so the
 * guest suite can check the PCI function's GPU reported it (tests/guest/init.sh). */
static void test_pci_addresses(uint32_t count) {
    for (uint32_t i = 0; i < count; i++) {
        umdDevice d;
        if (umdDeviceOpen(i, &d) != UMD_SUCCESS) {
            report("open for pci_address", 0, "umdDeviceOpen failed");
            continue;
        }
        umdDeviceInfo info;
        memset(&info, 0x5a, sizeof info);
        info.struct_size = sizeof info;
        char want[32] = "";
        char name[96];
        if (umdDeviceGetInfo(d, &info) != UMD_SUCCESS) {
            report("info for pci_address", 0, "umdDeviceGetInfo failed");
        } else {
            if (strcmp(info.backend, "kmd") == 0) sysfs_pci_address(info.location, want, sizeof want);
            snprintf(name, sizeof name, "device %u pci_address '%.16s'", i, info.pci_address);
            report(name, memchr(info.pci_address, '\0', sizeof info.pci_address) && strcmp(info.pci_address, want) == 0,
                   "differs from sysfs (or not NUL-terminated)");
        }
        umdDeviceInfo v1;
        memset(&v1, 0x5a, sizeof v1);
        v1.struct_size = UMD_DEVICE_INFO_SIZE_V1;
        EXPECT_CODE("info version 1", umdDeviceGetInfo(d, &v1), UMD_SUCCESS);
        report("info version 1 leaves pci_address alone", (unsigned char)v1.pci_address[0] == 0x5a,
               "a version-1 caller's struct was written past its size");
        EXPECT_CODE("close after pci_address", umdDeviceClose(d), UMD_SUCCESS);
    }
}

int main(void) {
    /* Defaults for the simulator; the guest run overrides them (setenv does not overwrite). */
    setenv("UMD_BACKEND", "sim", 0);
    setenv("UMD_SIM_DEVICES", "2", 0);
    setenv("UMD_SIM_MEM_MIB", "64", 0);
    setenv("UMD_SIM_JOB_TIMEOUT_MS", "300", 0);
    setenv("UMD_SIM_HANG_DEBUG", "1", 0);

    test_error_queries();

    /* ---- devices ---- */
    uint32_t count = 0;
    EXPECT_CODE("device count", umdGetDeviceCount(&count), UMD_SUCCESS);
    report("at least one device", count >= 1, "no device");
    EXPECT_CODE("device count NULL", umdGetDeviceCount(NULL), UMD_ERR_INVALID_POINTER);
    expect_detail("device count NULL detail", UMD_ERR_INVALID_POINTER, "umdGetDeviceCount", "argument 'count' is NULL");
    umdDevice dev, dev2;
    EXPECT_CODE("open NULL out", umdDeviceOpen(0, NULL), UMD_ERR_INVALID_POINTER);
    EXPECT_CODE("open index out of range", umdDeviceOpen(count, &dev), UMD_ERR_DEVICE_NOT_FOUND);
    MUST(umdDeviceOpen(0, &dev));
    MUST(umdDeviceOpen(0, &dev2)); /* a second open: its own address space */
    umdDeviceInfo info;
    memset(&info, 0, sizeof info);
    EXPECT_CODE("info struct_size 0", umdDeviceGetInfo(dev, &info), UMD_ERR_INVALID_STRUCT_SIZE);
    info.struct_size = sizeof info;
    EXPECT_CODE("info", umdDeviceGetInfo(dev, &info), UMD_SUCCESS);
    report("info values", info.uapi_major == 1 && info.page_size == 4096 && info.mem_total >= (16u << 20) &&
                              info.num_queues == 4 && info.va_start == 0x100000,
           "unexpected info");
    test_pci_addresses(count);

    /* ---- contexts ---- */
    umdContext ctx, ctx_b, ctx_other;
    EXPECT_CODE("context bad priority", umdContextCreate(dev, 7, &ctx), UMD_ERR_INVALID_ARGUMENT);
    expect_detail("context bad priority detail", UMD_ERR_INVALID_ARGUMENT, "umdContextCreate", "priority 7");
    EXPECT_CODE("context on a closed-never device", umdContextCreate(0, UMD_PRIORITY_NORMAL, &ctx), UMD_ERR_INVALID_HANDLE);
    expect_detail("null handle detail", UMD_ERR_INVALID_HANDLE, "umdContextCreate", "null handle");
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx));
    MUST(umdContextCreate(dev, UMD_PRIORITY_HIGH, &ctx_b));
    MUST(umdContextCreate(dev2, UMD_PRIORITY_NORMAL, &ctx_other));

    /* ---- memory ---- */
    umdBuffer buf, ro;
    EXPECT_CODE("alloc absurd", umdMemAlloc(ctx, 1ull << 62, 0, &buf), UMD_ERR_MEM_TOO_LARGE);
    expect_detail("alloc absurd detail", UMD_ERR_MEM_TOO_LARGE, "umdMemAlloc", "can never succeed");
    /* Every failure on a valid context handle names that context, whichever check failed first
     * (the absurd size names it from the pool; the others fail before the pool is reached). */
    const uint64_t ctx_id = detail().context_id;
    report("a failure on a context names it", ctx_id != 0, "context_id 0");
    EXPECT_CODE("alloc zero", umdMemAlloc(ctx, 0, 0, &buf), UMD_ERR_INVALID_SIZE);
    report("alloc zero names the context", detail().context_id == ctx_id, "context_id differs");
    EXPECT_CODE("alloc unknown flags", umdMemAlloc(ctx, 4096, 0x80, &buf), UMD_ERR_INVALID_FLAGS);
    report("alloc flags names the context", detail().context_id == ctx_id, "context_id differs");
    EXPECT_CODE("alloc NULL out", umdMemAlloc(ctx, 4096, 0, NULL), UMD_ERR_INVALID_POINTER);
    report("alloc NULL out names the context", detail().context_id == ctx_id, "context_id differs");
    MUST(umdMemAlloc(ctx, 1 << 20, 0, &buf));
    MUST(umdMemAlloc(ctx, 4096, UMD_MEM_READ_ONLY, &ro));
    {
        /* Out of memory now (not "too large"): two halves of the device cannot both fit. */
        umdBuffer half1, half2;
        uint64_t half = info.mem_total / 2 + 4096;
        MUST(umdMemAlloc(ctx, half, 0, &half1));
        EXPECT_CODE("alloc out of memory", umdMemAlloc(ctx, half, 0, &half2), UMD_ERR_MEM_OUT_OF_MEMORY);
        char frag[64];
        snprintf(frag, sizeof frag, "requested %" PRIu64 " bytes", half);
        expect_detail("out of memory detail names the request", UMD_ERR_MEM_OUT_OF_MEMORY, "umdMemAlloc", frag);
        expect_detail("out of memory detail names the device total", UMD_ERR_MEM_OUT_OF_MEMORY, "umdMemAlloc", "device total");
        report("out of memory is retryable", umdIsRetryable(UMD_ERR_MEM_OUT_OF_MEMORY) == 1, "no");
        MUST(umdMemFree(half1));
        EXPECT_CODE("alloc after freeing succeeds", umdMemAlloc(ctx, half, 0, &half2), UMD_SUCCESS);
        MUST(umdMemFree(half2));
    }
    umdDevicePtr va = 0, ro_va = 0;
    MUST(umdMemGetAddress(buf, &va));
    MUST(umdMemGetAddress(ro, &ro_va));
    report("GPU address in the VA range", va >= info.va_start && va < info.va_end && va % 4096 == 0, "bad VA");
    uint8_t host[256];
    memset(host, 0xAB, sizeof host);
    EXPECT_CODE("HtoD", umdMemcpyHtoD(buf, 100, host, sizeof host), UMD_SUCCESS);
    EXPECT_CODE("HtoD past the end", umdMemcpyHtoD(buf, (1 << 20) - 10, host, 11), UMD_ERR_INVALID_RANGE);
    expect_detail("HtoD past the end detail", UMD_ERR_INVALID_RANGE, "umdMemcpyHtoD", "runs past the end");
    EXPECT_CODE("HtoD offset overflow", umdMemcpyHtoD(buf, UINT64_MAX, host, 2), UMD_ERR_INVALID_RANGE);
    EXPECT_CODE("HtoD zero size", umdMemcpyHtoD(buf, 0, host, 0), UMD_ERR_INVALID_SIZE);
    EXPECT_CODE("HtoD NULL src", umdMemcpyHtoD(buf, 0, NULL, 4), UMD_ERR_INVALID_POINTER);
    EXPECT_CODE("DtoH NULL dst", umdMemcpyDtoH(NULL, buf, 0, 4), UMD_ERR_INVALID_POINTER);
    uint8_t back[256];
    EXPECT_CODE("DtoH", umdMemcpyDtoH(back, buf, 100, sizeof back), UMD_SUCCESS);
    report("DtoH data", memcmp(back, host, sizeof back) == 0, "data differs");
    void *p1 = NULL, *p2 = NULL;
    EXPECT_CODE("unmap unmapped", umdMemUnmap(buf), UMD_ERR_MEM_NOT_MAPPED);
    MUST(umdMemMap(buf, &p1));
    MUST(umdMemMap(buf, &p2));
    report("map twice gives the same pointer", p1 != NULL && p1 == p2 && ((uint8_t *)p1)[100] == 0xAB, "different");
    MUST(umdMemUnmap(buf));
    MUST(umdMemUnmap(buf));

    /* ---- handles: never valid, destroyed, wrong type, foreign ---- */
    umdBuffer tmp;
    MUST(umdMemAlloc(ctx, 4096, 0, &tmp));
    MUST(umdMemFree(tmp));
    EXPECT_CODE("double free", umdMemFree(tmp), UMD_ERR_INVALID_HANDLE);
    expect_detail("destroyed handle detail", UMD_ERR_INVALID_HANDLE, "umdMemFree", "was destroyed: it was buffer");
    /* The detail names the buffer, its size and where it was allocated and freed. */
    expect_detail("double free names the buffer", UMD_ERR_INVALID_HANDLE, "umdMemFree", "4096 bytes at VA 0x");
    expect_detail("double free names the free", UMD_ERR_INVALID_HANDLE, "umdMemFree", ", freed ");
    {
        umdDevicePtr stale_va = 0;
        EXPECT_CODE("use after free", umdMemGetAddress(tmp, &stale_va), UMD_ERR_INVALID_HANDLE);
        expect_detail("use after free detail", UMD_ERR_INVALID_HANDLE, "umdMemGetAddress", "was destroyed: it was buffer");
    }
    EXPECT_CODE("forged handle", umdMemFree((umdBuffer)0x0300000100abcdefull), UMD_ERR_INVALID_HANDLE);
    expect_detail("forged handle detail", UMD_ERR_INVALID_HANDLE, "umdMemFree", "never valid");
    EXPECT_CODE("wrong type", umdMemFree((umdBuffer)ctx), UMD_ERR_INVALID_HANDLE);
    expect_detail("wrong type detail", UMD_ERR_INVALID_HANDLE, "umdMemFree", "is a umdContext handle (wrong type)");
    {
        umdCmdBuf foreign = fill_cmd(ctx_other, 0x100000, 4, 0);
        umdFence f;
        EXPECT_CODE("foreign command buffer", umdSubmit(ctx, &foreign, 1, NULL, 0, &f), UMD_ERR_INVALID_HANDLE);
        expect_detail("foreign detail", UMD_ERR_INVALID_HANDLE, "umdSubmit", "another device");
        umdFence other = {ctx_other, 0};
        umdCmdBuf mine = fill_cmd(ctx, va, 16, 1);
        EXPECT_CODE("wait fence of another device", umdSubmit(ctx, &mine, 1, &other, 1, &f), UMD_ERR_SUBMIT_BAD_WAIT_FENCE);
        MUST(umdCmdBufDestroy(foreign));
        MUST(umdCmdBufDestroy(mine));
    }


    /* ==== memory pool (issue 6): statistics, reuse gated on fences, validation, trim, history ====
     * Added with the caching pool; uses its own contexts so the checks below are unaffected. */
    {
        umdContext cp, cq;
        MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &cp));
        MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &cq));
        umdMemStats s0, s1;
        memset(&s0, 0, sizeof s0);
        EXPECT_CODE("pool stats struct_size 0", umdMemGetStats(dev, &s0), UMD_ERR_INVALID_STRUCT_SIZE);
        EXPECT_CODE("pool stats NULL", umdMemGetStats(dev, NULL), UMD_ERR_INVALID_POINTER);
        s0.struct_size = sizeof s0;
        MUST(umdMemGetStats(dev, &s0));
        report("pool stats: pool on, device total", s0.pool_enabled == 1 && s0.device_total == info.mem_total &&
                                                        s0.reserved_bytes[UMD_MEM_POOL_ALL].current >= (2u << 20),
               "unexpected stats");
        /* A 100-byte request takes a 512-byte small block; freeing and allocating again reuses it. */
        umdBuffer p1, p2;
        umdDevicePtr a1 = 0, a2 = 0;
        MUST(umdMemAlloc(cp, 100, 0, &p1));
        MUST(umdMemGetAddress(p1, &a1));
        s1.struct_size = sizeof s1;
        MUST(umdMemGetStats(dev, &s1));
        report("pool stats: exact allocated/requested deltas",
               s1.allocated_bytes[UMD_MEM_POOL_SMALL].current - s0.allocated_bytes[UMD_MEM_POOL_SMALL].current == 512 &&
                   s1.requested_bytes[UMD_MEM_POOL_ALL].current - s0.requested_bytes[UMD_MEM_POOL_ALL].current == 100 &&
                   s1.num_allocs - s0.num_allocs == 1 && s1.num_kernel_allocs == s0.num_kernel_allocs,
               "wrong deltas");
        MUST(umdMemFree(p1));
        MUST(umdMemAlloc(cp, 100, 0, &p2));
        MUST(umdMemGetAddress(p2, &a2));
        MUST(umdMemGetStats(dev, &s0));
        report("freed block reused (same VA, a cache hit)", a1 == a2 && s0.num_cache_hits - s1.num_cache_hits == 1, "not reused");
        umdMemContextStats cs;
        memset(&cs, 0, sizeof cs);
        cs.struct_size = sizeof cs;
        MUST(umdMemGetContextStats(cp, &cs));
        report("context stats", cs.allocated_bytes.current == 512 && cs.requested_bytes.current == 100 &&
                                    cs.num_allocs == 2 && cs.num_frees == 1 && cs.allocation_count.peak == 1,
               "wrong context stats");

        /* Alignment and tags. */
        umdMemAllocInfo ai;
        memset(&ai, 0, sizeof ai);
        ai.struct_size = sizeof ai;
        ai.size = 3000;
        ai.alignment = 65536;
        ai.tag = "pool-test-aligned";
        umdBuffer al;
        umdDevicePtr ava = 0;
        MUST(umdMemAllocEx(cp, &ai, &al));
        MUST(umdMemGetAddress(al, &ava));
        report("alignment honoured", ava % 65536 == 0, "misaligned");
        ai.alignment = 3000;
        EXPECT_CODE("alignment not a power of two", umdMemAllocEx(cp, &ai, &al), UMD_ERR_INVALID_ARGUMENT);
        ai.struct_size = 4;
        EXPECT_CODE("alloc info struct_size too small", umdMemAllocEx(cp, &ai, &al), UMD_ERR_INVALID_STRUCT_SIZE);

        /* Free by address: wrong context, interior, success, double free, never allocated. */
        EXPECT_CODE("free on the wrong context", umdMemFreeAddress(cq, ava), UMD_ERR_MEM_WRONG_CONTEXT);
        expect_detail("wrong context detail", UMD_ERR_MEM_WRONG_CONTEXT, "umdMemFreeAddress", "allocated on context");
        EXPECT_CODE("free of an interior address", umdMemFreeAddress(cp, ava + 64), UMD_ERR_MEM_INVALID_FREE);
        expect_detail("interior free detail", UMD_ERR_MEM_INVALID_FREE, "umdMemFreeAddress", "64 bytes into buffer");
        EXPECT_CODE("free by address", umdMemFreeAddress(cp, ava), UMD_SUCCESS);
        EXPECT_CODE("freed handle is gone", umdMemFree(al), UMD_ERR_INVALID_HANDLE);
        EXPECT_CODE("double free by address", umdMemFreeAddress(cp, ava), UMD_ERR_MEM_DOUBLE_FREE);
        expect_detail("double free detail", UMD_ERR_MEM_DOUBLE_FREE, "umdMemFreeAddress", "double free of");
        EXPECT_CODE("free of a never-allocated address", umdMemFreeAddress(cp, 0x7f0000000ull), UMD_ERR_MEM_INVALID_FREE);
        expect_detail("never allocated detail", UMD_ERR_MEM_INVALID_FREE, "umdMemFreeAddress", "never allocated");

        /* Use after free and out of bounds are rejected at submit, precisely. */
        umdBuffer x;
        umdDevicePtr xva = 0;
        MUST(umdMemAlloc(cp, 4096, 0, &x));
        MUST(umdMemGetAddress(x, &xva));
        umdCmdBuf oob = fill_cmd(cp, xva, 8192, 7);
        umdFence f;
        EXPECT_CODE("out-of-bounds access rejected at submit", umdSubmit(cp, &oob, 1, NULL, 0, &f), UMD_ERR_MEM_OUT_OF_BOUNDS);
        expect_detail("out-of-bounds detail", UMD_ERR_MEM_OUT_OF_BOUNDS, "umdSubmit", "past the end of buffer");
        umdCmdBuf uaf = fill_cmd(cp, xva, 4096, 7);
        MUST(umdMemFree(x));
        EXPECT_CODE("use after free rejected at submit", umdSubmit(cp, &uaf, 1, NULL, 0, &f), UMD_ERR_MEM_USE_AFTER_FREE);
        expect_detail("use-after-free detail", UMD_ERR_MEM_USE_AFTER_FREE, "umdSubmit", "packet at byte offset 0 writes");
        report("use-after-free detail has the VA", detail().fault_va == xva, "no fault VA");
        MUST(umdCmdBufDestroy(oob));
        MUST(umdCmdBufDestroy(uaf));

        /* Reuse waits for the fence: a job blocked on a flag uses y; y freed meanwhile is not
         * handed out again until the job completed. */
        umdBuffer flag, y, y2, y3;
        umdDevicePtr fva = 0, yva = 0, y2va = 0, y3va = 0;
        MUST(umdMemAlloc(cp, 4096, 0, &flag));
        MUST(umdMemAlloc(cp, 8192, 0, &y));
        MUST(umdMemGetAddress(flag, &fva));
        MUST(umdMemGetAddress(y, &yva));
        umdCmdBuf gate;
        MUST(umdCmdBufCreate(cp, &gate));
        MUST(umdCmdBufBegin(gate));
        MUST(umdCmdWaitValue(gate, fva, 1));
        MUST(umdCmdFill(gate, yva, 8192, 0x99));
        MUST(umdCmdBufEnd(gate));
        MUST(umdSubmit(cp, &gate, 1, NULL, 0, &f));
        MUST(umdMemGetStats(dev, &s0));
        MUST(umdMemFree(y));
        MUST(umdMemGetStats(dev, &s1));
        report("free while in use is deferred", s1.num_deferred_frees - s0.num_deferred_frees == 1 &&
                                                    s1.active_bytes[UMD_MEM_POOL_ALL].current == s0.active_bytes[UMD_MEM_POOL_ALL].current,
               "not deferred");
        MUST(umdMemAlloc(cp, 8192, 0, &y2));
        MUST(umdMemGetAddress(y2, &y2va));
        report("not reused before the fence", y2va != yva, "reused while the job runs");
        uint64_t one = 1;
        MUST(umdMemcpyHtoD(flag, 0, &one, 8));
        EXPECT_CODE("gated job completes", umdFenceWait(&f, 10 * SEC), UMD_SUCCESS);
        MUST(umdMemAlloc(cp, 8192, 0, &y3));
        MUST(umdMemGetAddress(y3, &y3va));
        report("reused after the fence", y3va == yva, "not reused after the fence");
        MUST(umdCmdBufDestroy(gate));
        MUST(umdMemFree(y2));
        MUST(umdMemFree(y3));
        MUST(umdMemFree(flag));

        /* Trim and release threshold: exact accounting of what went back to the kernel. */
        umdBuffer big;
        MUST(umdMemAlloc(cp, 3u << 20, 0, &big));
        MUST(umdMemFree(big));
        MUST(umdMemGetStats(dev, &s0));
        uint64_t released = 0;
        EXPECT_CODE("trim", umdMemTrim(dev, 0, &released), UMD_SUCCESS);
        MUST(umdMemGetStats(dev, &s1));
        report("trim released the cached large block", released >= (3u << 20) &&
                   s0.reserved_bytes[UMD_MEM_POOL_ALL].current - s1.reserved_bytes[UMD_MEM_POOL_ALL].current == released &&
                   s1.num_trims == s0.num_trims + 1,
               "wrong trim accounting");
        MUST(umdMemSetReleaseThreshold(dev, 0));
        MUST(umdMemAlloc(cp, 3u << 20, 0, &big));
        MUST(umdMemFree(big));
        MUST(umdMemGetStats(dev, &s1));
        report("release threshold 0 keeps nothing cached", s1.release_threshold == 0 &&
                   s1.cached_bytes[UMD_MEM_POOL_LARGE].current == 0 && s1.segment_count[UMD_MEM_POOL_LARGE].current == 0,
               "large segment still cached");
        MUST(umdMemSetReleaseThreshold(dev, UINT64_MAX));

        /* History (off here: UMD_POOL_HISTORY unset) and peak reset. */
        uint64_t need = 0;
        EXPECT_CODE("history size query", umdMemDumpHistory(dev, NULL, 0, &need), UMD_SUCCESS);
        report("history off: empty text", need == 1, "history not empty");
        char tiny[1];
        EXPECT_CODE("history into a buffer of its size", umdMemDumpHistory(dev, tiny, sizeof tiny, &need), UMD_SUCCESS);
        MUST(umdMemResetPeakStats(dev));
        MUST(umdMemGetStats(dev, &s1));
        report("peak reset", s1.allocated_bytes[UMD_MEM_POOL_ALL].peak == s1.allocated_bytes[UMD_MEM_POOL_ALL].current, "peak not reset");

        /* Leak report at context destroy: the leaked buffer is freed and its handle dies. */
        umdBuffer leak;
        ai.struct_size = sizeof ai;
        ai.alignment = 0;
        ai.size = 1000;
        ai.tag = "leaked-on-purpose";
        MUST(umdMemAllocEx(cq, &ai, &leak));
        MUST(umdMemGetStats(dev, &s0));
        EXPECT_CODE("destroy a context with a leak", umdContextDestroy(cq), UMD_SUCCESS);
        MUST(umdMemGetStats(dev, &s1));
        report("leaked buffer freed", s0.allocation_count[UMD_MEM_POOL_ALL].current - s1.allocation_count[UMD_MEM_POOL_ALL].current == 1,
               "leak not freed");
        EXPECT_CODE("leaked handle is gone", umdMemFree(leak), UMD_ERR_INVALID_HANDLE);
        MUST(umdMemFree(p2));
        MUST(umdContextDestroy(cp));
    }

    /* ---- command buffers ---- */
    umdCmdBuf cb;
    MUST(umdCmdBufCreate(ctx, &cb));
    EXPECT_CODE("record before begin", umdCmdFill(cb, va, 16, 0), UMD_ERR_INVALID_STATE);
    umdFence fence;
    EXPECT_CODE("submit never-ended", umdSubmit(ctx, &cb, 1, NULL, 0, &fence), UMD_ERR_INVALID_STATE);
    expect_detail("submit never-ended detail", UMD_ERR_INVALID_STATE, "umdSubmit", "not ended");
    MUST(umdCmdBufBegin(cb));
    EXPECT_CODE("begin twice", umdCmdBufBegin(cb), UMD_ERR_INVALID_STATE);
    EXPECT_CODE("fill size not multiple of 4", umdCmdFill(cb, va, 3, 0), UMD_ERR_INVALID_SIZE);
    expect_detail("fill detail", UMD_ERR_INVALID_SIZE, "umdCmdFill", "FILL size is zero or not a multiple of 4: argument 'size' is 3.");
    EXPECT_CODE("fill size 0", umdCmdFill(cb, va, 0, 0), UMD_ERR_INVALID_SIZE);
    umdGemmI8Args bad = {.a = va, .b = va, .c = va, .m = 0, .n = 4, .k = 4, .lda = 4, .ldb = 4, .ldc = 4};
    EXPECT_CODE("gemm m = 0", umdCmdGemmI8(cb, &bad), UMD_ERR_INVALID_SIZE);
    expect_detail("gemm m = 0 detail", UMD_ERR_INVALID_SIZE, "umdCmdGemmI8", "GEMM dimension is zero or above 4096: argument 'm' is 0.");
    bad.m = 4;
    bad.k = 5000;
    EXPECT_CODE("gemm k above 4096", umdCmdGemmI8(cb, &bad), UMD_ERR_INVALID_SIZE);
    expect_detail("gemm k detail", UMD_ERR_INVALID_SIZE, "umdCmdGemmI8", "argument 'k' is 5000.");
    bad.k = 4;
    bad.lda = 2;
    EXPECT_CODE("gemm lda < k", umdCmdGemmI8(cb, &bad), UMD_ERR_INVALID_ARGUMENT);
    expect_detail("gemm lda detail", UMD_ERR_INVALID_ARGUMENT, "umdCmdGemmI8", "GEMM leading dimension smaller than the row: argument 'lda' is 2.");
    bad.lda = 4;
    bad.flags = 0x40;
    EXPECT_CODE("gemm unknown flags", umdCmdGemmI8(cb, &bad), UMD_ERR_INVALID_FLAGS);
    report("gemm flags names the command buffer's context", detail().context_id == ctx_id, "context_id differs");
    EXPECT_CODE("gemm NULL args", umdCmdGemmI8(cb, NULL), UMD_ERR_INVALID_POINTER);
    EXPECT_CODE("eltwise bad op", umdCmdEltwise(cb, 9, 4, va, va, va), UMD_ERR_INVALID_ARGUMENT);
    EXPECT_CODE("relu with b", umdCmdEltwise(cb, UMD_ELTWISE_RELU, 4, va, va, va), UMD_ERR_INVALID_ARGUMENT);
    EXPECT_CODE("requant shift 63", umdCmdRequantize(cb, 4, va, va + 64, 1, 63), UMD_ERR_INVALID_ARGUMENT);
    EXPECT_CODE("timestamp unaligned", umdCmdTimestamp(cb, va + 4), UMD_ERR_INVALID_ARGUMENT);
    EXPECT_CODE("copy overlapping", umdCmdCopy(cb, va + 8, va, 16), UMD_ERR_INVALID_ARGUMENT);
    EXPECT_CODE("copy zero", umdCmdCopy(cb, va + 64, va, 0), UMD_ERR_INVALID_SIZE);
    expect_detail("copy zero detail", UMD_ERR_INVALID_SIZE, "umdCmdCopy", "COPY size is zero: argument 'size' is 0.");
    EXPECT_CODE("end without packets", umdCmdBufEnd(cb), UMD_SUCCESS);
    EXPECT_CODE("end twice", umdCmdBufEnd(cb), UMD_ERR_INVALID_STATE);
    EXPECT_CODE("submit 0 buffers", umdSubmit(ctx, &cb, 0, NULL, 0, &fence), UMD_ERR_INVALID_ARGUMENT);
    EXPECT_CODE("submit NULL fence", umdSubmit(ctx, &cb, 1, NULL, 0, NULL), UMD_ERR_INVALID_POINTER);
    report("submit NULL fence names the context", detail().context_id == ctx_id, "context_id differs");
    EXPECT_CODE("submit NULL array", umdSubmit(ctx, NULL, 1, NULL, 0, &fence), UMD_ERR_INVALID_POINTER);

    /* ---- success path: fill, copy, element-wise, timestamp, write/wait value, read back ---- */
    {
        MUST(umdCmdBufBegin(cb));
        MUST(umdCmdFill(cb, va, 4096, 0x11223344u));
        MUST(umdCmdCopy(cb, va + 8192, va, 4096));
        MUST(umdCmdEltwise(cb, UMD_ELTWISE_ADD, 16, va + 16384, va, va + 8192));
        MUST(umdCmdTimestamp(cb, va + 20480));
        MUST(umdCmdWriteValue(cb, va + 20488, 0x1234567890ull));
        MUST(umdCmdWaitValue(cb, va + 20488, 0x1234567890ull));
        MUST(umdCmdBufEnd(cb));
        EXPECT_CODE("submit", umdSubmit(ctx, &cb, 1, NULL, 0, &fence), UMD_SUCCESS);
        report("fence names the context and seqno 1", fence.context == ctx && fence.seqno == 1, "bad fence");
        EXPECT_CODE("wait", umdFenceWait(&fence, 10 * SEC), UMD_SUCCESS);
        EXPECT_CODE("query signalled", umdFenceQuery(&fence), UMD_SUCCESS);
        uint32_t words[4];
        uint32_t sums[16];
        uint64_t ts = 0, val = 0;
        MUST(umdMemcpyDtoH(words, buf, 8192, sizeof words));
        MUST(umdMemcpyDtoH(sums, buf, 16384, sizeof sums));
        MUST(umdMemcpyDtoH(&ts, buf, 20480, 8));
        MUST(umdMemcpyDtoH(&val, buf, 20488, 8));
        report("fill+copy data", words[0] == 0x11223344u && words[3] == 0x11223344u, "wrong data");
        report("eltwise add data (wrapping)", sums[0] == 0x22446688u && sums[15] == 0x22446688u, "wrong sums");
        report("timestamp written", ts != 0, "zero timestamp");
        report("write value", val == 0x1234567890ull, "wrong value");
    }

    /* ---- batched submit with a cross-context dependency ---- */
    {
        umdCmdBuf a = fill_cmd(ctx, va + 32768, 4096, 0xA5A5A5A5u), b;
        umdFence fa, fb;
        MUST(umdSubmit(ctx, &a, 1, NULL, 0, &fa));
        MUST(umdCmdBufCreate(ctx_b, &b));
        MUST(umdCmdBufBegin(b));
        MUST(umdCmdCopy(b, va + 40960, va + 32768, 4096));
        MUST(umdCmdBufEnd(b));
        umdCmdBuf batch[3] = {b, b, b};
        EXPECT_CODE("batched submit after a fence of another context", umdSubmit(ctx_b, batch, 3, &fa, 1, &fb), UMD_SUCCESS);
        umdFence fx;
        umdCmdBuf mixed[2] = {b, a};
        EXPECT_CODE("a command buffer of another context is refused", umdSubmit(ctx_b, mixed, 2, NULL, 0, &fx), UMD_ERR_INVALID_ARGUMENT);
        expect_detail("foreign command buffer detail", UMD_ERR_INVALID_ARGUMENT, "umdSubmit", "cmdbufs[1] was created on context ");
        umdErrorDetail fd = detail();
        report("foreign command buffer names both contexts and the submitting one",
               strstr(fd.message, "was created on context ") != NULL && fd.context_id != 0, fd.message);
        EXPECT_CODE("wait batched", umdFenceWait(&fb, 10 * SEC), UMD_SUCCESS);
        uint32_t w = 0;
        MUST(umdMemcpyDtoH(&w, buf, 40960 + 4092, 4));
        report("dependency respected", w == 0xA5A5A5A5u, "copy ran before its input was written");
        umdFence never = {ctx, 99};
        EXPECT_CODE("wait on a fence never submitted", umdFenceWait(&never, SEC), UMD_ERR_SYNC_FENCE_NEVER_SUBMITTED);
        expect_detail("never submitted detail", UMD_ERR_SYNC_FENCE_NEVER_SUBMITTED, "umdFenceWait", "seqno 99 was never submitted");
        EXPECT_CODE("submit waiting on a fence never submitted", umdSubmit(ctx_b, &b, 1, &never, 1, &fb), UMD_ERR_SUBMIT_BAD_WAIT_FENCE);
        umdFence zero = {ctx, 0};
        EXPECT_CODE("seqno 0 is signalled", umdFenceWait(&zero, 0), UMD_SUCCESS);
        MUST(umdCmdBufDestroy(a));
        MUST(umdCmdBufDestroy(b));
    }

    /* ---- submit to a destroyed context ---- */
    {
        umdContext gone;
        MUST(umdContextCreate(dev, UMD_PRIORITY_LOW, &gone));
        umdCmdBuf c2 = fill_cmd(gone, va, 16, 0);
        MUST(umdContextDestroy(gone));
        umdFence f;
        EXPECT_CODE("submit to destroyed context", umdSubmit(gone, &c2, 1, NULL, 0, &f), UMD_ERR_INVALID_HANDLE);
        expect_detail("destroyed context detail", UMD_ERR_INVALID_HANDLE, "umdSubmit", "umdContext handle");
        EXPECT_CODE("command buffer of a destroyed context is gone too", umdCmdBufDestroy(c2), UMD_ERR_INVALID_HANDLE);
    }

    /* ---- GPU page fault: context lost, fault VA in the detail, others unharmed ---- */
    const uint64_t BAD_VA = 0x7f0010000ull;
    umdContext victim;
    MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &victim));
    {
        umdCmdBuf c = fill_cmd(victim, va, 16, 0), badcmd;
        MUST(umdCmdBufCreate(victim, &badcmd));
        MUST(umdCmdBufBegin(badcmd));
        MUST(umdCmdCopy(badcmd, va, BAD_VA, 64));
        MUST(umdCmdBufEnd(badcmd));
        umdFence f;
        MUST(umdSubmit(victim, &badcmd, 1, NULL, 0, &f));
        EXPECT_CODE("read of an unmapped VA loses the context", umdFenceWait(&f, 10 * SEC), UMD_ERR_CTX_LOST);
        umdErrorDetail d = detail();
        report("fault VA in the detail", d.fault_va == BAD_VA && d.fence_seqno == f.seqno && d.context_id != 0,
               "wrong detail fields");
        expect_detail("fault detail names the fault", UMD_ERR_CTX_LOST, "umdFenceWait", "'unmapped' (read access) at VA 0x7f0010000");
        umdContextState st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        EXPECT_CODE("context state of the lost context", umdContextGetState(victim, &st), UMD_SUCCESS);
        report("state: guilty page fault", st.reset_status == UMD_RESET_GUILTY && st.fault_type == 1 &&
                                                st.fault_va == BAD_VA && st.fault_access == 0 && st.hung == 0,
               "wrong state");
        EXPECT_CODE("later submit to the lost context", umdSubmit(victim, &c, 1, NULL, 0, &f), UMD_ERR_CTX_LOST);
        /* Another context keeps working. */
        umdCmdBuf ok = fill_cmd(ctx_b, va + 4096, 64, 0x5A5A5A5Au);
        MUST(umdSubmit(ctx_b, &ok, 1, NULL, 0, &f));
        EXPECT_CODE("other context unharmed", umdFenceWait(&f, 10 * SEC), UMD_SUCCESS);
        /* Write to a read-only buffer: a permission fault with the write access type. */
        umdContext v2;
        MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &v2));
        umdCmdBuf w = fill_cmd(v2, ro_va, 16, 1);
        MUST(umdSubmit(v2, &w, 1, NULL, 0, &f));
        EXPECT_CODE("write to a read-only buffer loses the context", umdFenceWait(&f, 10 * SEC), UMD_ERR_CTX_LOST);
        expect_detail("permission fault detail", UMD_ERR_CTX_LOST, "umdFenceWait", "'permission' (write access)");
        MUST(umdCmdBufDestroy(c));
        MUST(umdCmdBufDestroy(badcmd));
        MUST(umdCmdBufDestroy(ok));
        MUST(umdCmdBufDestroy(w));
        MUST(umdContextDestroy(v2));
    }
    EXPECT_CODE("destroying a lost context", umdContextDestroy(victim), UMD_SUCCESS);

    /* ---- HANG: timed out while running, then reset: lost; innocent work completes ---- */
    {
        umdContext hanger;
        MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &hanger));
        umdCmdBuf h;
        MUST(umdCmdBufCreate(hanger, &h));
        MUST(umdCmdBufBegin(h));
        MUST(umdCmdDebugHang(h));
        MUST(umdCmdBufEnd(h));
        umdFence fh, fi;
        MUST(umdSubmit(hanger, &h, 1, NULL, 0, &fh));
        umdCmdBuf inn = fill_cmd(ctx_b, va + 12288, 64, 0x77777777u);
        MUST(umdSubmit(ctx_b, &inn, 1, NULL, 0, &fi));
        EXPECT_CODE("short wait on a hung job times out", umdFenceWait(&fh, 20 * 1000 * 1000), UMD_ERR_SYNC_TIMEOUT);
        expect_detail("timeout detail", UMD_ERR_SYNC_TIMEOUT, "umdFenceWait", "still running");
        EXPECT_CODE("query of the hung job: not ready", umdFenceQuery(&fh), UMD_STATUS_NOT_READY);
        EXPECT_CODE("after the job timeout the context is lost", umdFenceWait(&fh, 30 * SEC), UMD_ERR_CTX_LOST);
        expect_detail("hang detail", UMD_ERR_CTX_LOST, "umdFenceWait", "hung the GPU");
        umdContextState st;
        memset(&st, 0, sizeof st);
        st.struct_size = sizeof st;
        MUST(umdContextGetState(hanger, &st));
        report("state: guilty hang", st.reset_status == UMD_RESET_GUILTY && st.hung == 1, "wrong state");
        EXPECT_CODE("innocent work completes after the reset", umdFenceWait(&fi, 30 * SEC), UMD_SUCCESS);
        uint32_t w = 0;
        MUST(umdMemcpyDtoH(&w, buf, 12288, 4));
        report("innocent data written", w == 0x77777777u, "innocent work lost");
        MUST(umdCmdBufDestroy(h));
        MUST(umdCmdBufDestroy(inn));
        MUST(umdContextDestroy(hanger));
    }

    /* ---- device lost: a failed reset; every API fails fast afterwards ---- */
    {
        umdContext hanger;
        MUST(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &hanger));
        umdCmdBuf h;
        MUST(umdCmdBufCreate(hanger, &h));
        MUST(umdCmdBufBegin(h));
        MUST(umdCmdDebugHang(h));
        MUST(umdCmdBufEnd(h));
        EXPECT_CODE("inject a reset failure", umdDebugInjectFault(dev, UMD_DEBUG_FAULT_RESET_FAILURE), UMD_SUCCESS);
        EXPECT_CODE("inject bad fault", umdDebugInjectFault(dev, 77), UMD_ERR_INVALID_ARGUMENT);
        umdFence fh;
        MUST(umdSubmit(hanger, &h, 1, NULL, 0, &fh));
        EXPECT_CODE("wait sees device lost", umdFenceWait(&fh, 30 * SEC), UMD_ERR_DEVICE_LOST);
        expect_detail("device lost detail", UMD_ERR_DEVICE_LOST, "umdFenceWait", "was lost");
        umdBuffer b2;
        EXPECT_CODE("alloc after device lost", umdMemAlloc(ctx, 4096, 0, &b2), UMD_ERR_DEVICE_LOST);
        expect_detail("fast fail detail", UMD_ERR_DEVICE_LOST, "umdMemAlloc", "fails fast");
        EXPECT_CODE("submit after device lost", umdSubmit(ctx, &cb, 1, NULL, 0, &fence), UMD_ERR_DEVICE_LOST);
        EXPECT_CODE("wait after device lost", umdFenceWait(&fence, SEC), UMD_ERR_DEVICE_LOST);
        EXPECT_CODE("copy after device lost", umdMemcpyHtoD(buf, 0, host, 4), UMD_ERR_DEVICE_LOST);
        EXPECT_CODE("context create after device lost", umdContextCreate(dev, UMD_PRIORITY_NORMAL, &hanger), UMD_ERR_DEVICE_LOST);
        EXPECT_CODE("info after device lost", umdDeviceGetInfo(dev, &info), UMD_ERR_DEVICE_LOST);
        /* The other open of the same device is lost too (the device is gone for everyone). */
        umdCmdBuf o = 0;
        umdResult r = umdCmdBufCreate(ctx_other, &o);
        if (r == UMD_SUCCESS) {
            MUST(umdCmdBufBegin(o));
            MUST(umdCmdFill(o, 0x100000, 4, 0));
            r = umdCmdBufEnd(o);
        }
        /* The pool serves umdCmdBufEnd's upload from cached memory without a kernel call, so the
         * other open learns of the loss at its next kernel call: the submit. */
        if (r == UMD_SUCCESS) {
            umdFence fo;
            r = umdSubmit(ctx_other, &o, 1, NULL, 0, &fo);
        }
        report("second open of a lost device fails with device lost", r == UMD_ERR_DEVICE_LOST, umdGetErrorName(r));
        umdDevice again;
        EXPECT_CODE("open while the lost device is still open elsewhere", umdDeviceOpen(0, &again), UMD_ERR_DEVICE_LOST);
        EXPECT_CODE("cleanup after device lost: free", umdMemFree(buf), UMD_SUCCESS);
        EXPECT_CODE("cleanup after device lost: close", umdDeviceClose(dev), UMD_SUCCESS);
        EXPECT_CODE("cleanup after device lost: close second", umdDeviceClose(dev2), UMD_SUCCESS);
        EXPECT_CODE("closed device handle", umdDeviceClose(dev), UMD_ERR_INVALID_HANDLE);
    }

    /* A fresh open after every file of the lost device closed gets a new device. */
    {
        umdDevice fresh;
        umdContext c;
        umdBuffer b;
        EXPECT_CODE("reopen after loss", umdDeviceOpen(0, &fresh), UMD_SUCCESS);
        EXPECT_CODE("works after reopen", umdContextCreate(fresh, UMD_PRIORITY_NORMAL, &c), UMD_SUCCESS);
        EXPECT_CODE("alloc after reopen", umdMemAlloc(c, 4096, 0, &b), UMD_SUCCESS);
        EXPECT_CODE("close with live objects (leak report)", umdDeviceClose(fresh), UMD_SUCCESS);
        EXPECT_CODE("leaked buffer handle is gone", umdMemFree(b), UMD_ERR_INVALID_HANDLE);
    }

    printf("abi_test: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
