/*
 * aigpu demo: an int8 two-layer MLP forward pass on the virtual GPU through libumd's C ABI,
 * the way a framework would drive it, checked element for element against a CPU reference.
 *
 *   y = W2 · requant(relu(W1 · x))        x: int8 [BATCH x IN], W1: int8 [IN x HID],
 *                                          W2: int8 [HID x OUT], y: int32 [BATCH x OUT]
 *
 * relu runs on the int32 accumulators before requantisation: requant is monotonic and maps 0 to
 * 0, so relu(requant(h)) == requant(relu(h)) and this order needs no int8 relu.
 *
 * Build and run: scripts/demo.sh (the README's first command).
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "umd.h"

enum { BATCH = 64, IN = 256, HID = 256, OUT = 64 };
static const int32_t REQ_SCALE = 3;
static const uint32_t REQ_SHIFT = 12;

/* Every call is checked: on failure print the code, its name and the detail, and stop. */
#define CHECK(call)                                                                          \
    do {                                                                                     \
        umdResult r_ = (call);                                                               \
        if (r_ != UMD_SUCCESS) {                                                             \
            umdErrorDetail d_;                                                               \
            memset(&d_, 0, sizeof d_);                                                       \
            d_.struct_size = sizeof d_;                                                      \
            if (umdGetLastErrorDetail(&d_) != UMD_SUCCESS) d_.message[0] = 0;                \
            fprintf(stderr, "mlp_demo: %s failed: %s (%d): %s\n", #call,                     \
                    umdGetErrorName(r_), (int)r_, d_.message);                               \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static uint32_t rng = 12345u;
static int8_t rand_i8(void) {
    rng = rng * 1103515245u + 12345u;
    return (int8_t)((rng >> 16) & 0xff);
}

static int8_t requant_ref(int32_t a) {
    int64_t p = (int64_t)a * REQ_SCALE;
    int64_t r = (p + ((int64_t)1 << (REQ_SHIFT - 1))) >> REQ_SHIFT;
    return (int8_t)(r < -128 ? -128 : r > 127 ? 127 : r);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(void) {
    static int8_t x[BATCH * IN], w1[IN * HID], w2[HID * OUT], h8[BATCH * HID];
    static int32_t h32[BATCH * HID], y_ref[BATCH * OUT], y[BATCH * OUT];
    for (size_t i = 0; i < sizeof x; i++) x[i] = rand_i8();
    for (size_t i = 0; i < sizeof w1; i++) w1[i] = rand_i8();
    for (size_t i = 0; i < sizeof w2; i++) w2[i] = rand_i8();

    /* CPU reference. */
    double t0 = now_ms();
    for (int i = 0; i < BATCH; i++)
        for (int j = 0; j < HID; j++) {
            int32_t acc = 0;
            for (int l = 0; l < IN; l++) acc += (int32_t)x[i * IN + l] * w1[l * HID + j];
            h32[i * HID + j] = acc;
            h8[i * HID + j] = requant_ref(acc > 0 ? acc : 0);
        }
    for (int i = 0; i < BATCH; i++)
        for (int j = 0; j < OUT; j++) {
            int32_t acc = 0;
            for (int l = 0; l < HID; l++) acc += (int32_t)h8[i * HID + l] * w2[l * OUT + j];
            y_ref[i * OUT + j] = acc;
        }
    double cpu_ms = now_ms() - t0;

    umdDevice dev;
    umdContext ctx;
    umdDeviceInfo info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK(umdDeviceOpen(0, &dev));
    CHECK(umdDeviceGetInfo(dev, &info));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &ctx));

    umdBuffer bx, bw1, bw2, bh, bh8, by;
    CHECK(umdMemAlloc(ctx, sizeof x, UMD_MEM_READ_ONLY, &bx));
    CHECK(umdMemAlloc(ctx, sizeof w1, UMD_MEM_READ_ONLY, &bw1));
    CHECK(umdMemAlloc(ctx, sizeof w2, UMD_MEM_READ_ONLY, &bw2));
    CHECK(umdMemAlloc(ctx, sizeof h32, 0, &bh));
    CHECK(umdMemAlloc(ctx, sizeof h8, 0, &bh8));
    CHECK(umdMemAlloc(ctx, sizeof y, 0, &by));
    CHECK(umdMemcpyHtoD(bx, 0, x, sizeof x));
    CHECK(umdMemcpyHtoD(bw1, 0, w1, sizeof w1));
    CHECK(umdMemcpyHtoD(bw2, 0, w2, sizeof w2));

    umdDevicePtr vx, vw1, vw2, vh, vh8, vy;
    CHECK(umdMemGetAddress(bx, &vx));
    CHECK(umdMemGetAddress(bw1, &vw1));
    CHECK(umdMemGetAddress(bw2, &vw2));
    CHECK(umdMemGetAddress(bh, &vh));
    CHECK(umdMemGetAddress(bh8, &vh8));
    CHECK(umdMemGetAddress(by, &vy));

    /* One command buffer, one submit: the whole forward pass is a single job. */
    umdCmdBuf cb;
    CHECK(umdCmdBufCreate(ctx, &cb));
    CHECK(umdCmdBufBegin(cb));
    umdGemmI8Args g1 = {.a = vx, .b = vw1, .c = vh, .m = BATCH, .n = HID, .k = IN, .lda = IN, .ldb = HID, .ldc = HID};
    CHECK(umdCmdGemmI8(cb, &g1));
    CHECK(umdCmdEltwise(cb, UMD_ELTWISE_RELU, BATCH * HID, vh, vh, 0));
    CHECK(umdCmdRequantize(cb, BATCH * HID, vh8, vh, REQ_SCALE, REQ_SHIFT));
    umdGemmI8Args g2 = {.a = vh8, .b = vw2, .c = vy, .m = BATCH, .n = OUT, .k = HID, .lda = HID, .ldb = OUT, .ldc = OUT};
    CHECK(umdCmdGemmI8(cb, &g2));
    CHECK(umdCmdBufEnd(cb));

    umdFence done;
    double t1 = now_ms();
    CHECK(umdSubmit(ctx, &cb, 1, NULL, 0, &done));
    CHECK(umdFenceWait(&done, 30ull * 1000 * 1000 * 1000));
    double gpu_ms = now_ms() - t1;
    CHECK(umdMemcpyDtoH(y, by, 0, sizeof y));

    int mismatches = 0;
    int64_t checksum = 0;
    for (int i = 0; i < BATCH * OUT; i++) {
        checksum += y[i];
        if (y[i] != y_ref[i]) {
            if (mismatches < 5)
                fprintf(stderr, "mlp_demo: mismatch at [%d][%d]: gpu %" PRId32 ", cpu %" PRId32 "\n", i / OUT, i % OUT,
                        y[i], y_ref[i]);
            mismatches++;
        }
    }

    CHECK(umdCmdBufDestroy(cb));
    CHECK(umdMemFree(bx));
    CHECK(umdMemFree(bw1));
    CHECK(umdMemFree(bw2));
    CHECK(umdMemFree(bh));
    CHECK(umdMemFree(bh8));
    CHECK(umdMemFree(by));
    CHECK(umdContextDestroy(ctx));
    CHECK(umdDeviceClose(dev));

    /* The log is asynchronous: flush it so its lines (e.g. why the simulator was chosen) come
     * before the summary on the terminal. A failed flush only means a later ordering. */
    if (umdLogFlush(1000) != UMD_SUCCESS) fprintf(stderr, "mlp_demo: log flush timed out\n");
    printf("aigpu MLP demo: int8 [%d x %d] -> GEMM %dx%d -> relu -> requant(x%d >> %u) -> GEMM %dx%d -> int32 [%d x %d]\n",
           BATCH, IN, IN, HID, REQ_SCALE, REQ_SHIFT, HID, OUT, BATCH, OUT);
    printf("backend:  %s (%s), UAPI %u.%u, driver %u.%u.%u, %" PRIu64 " MiB\n", info.backend, info.location,
           info.uapi_major, info.uapi_minor, info.driver_major, info.driver_minor, info.driver_patch,
           info.mem_total >> 20);
    printf("result:   %s: %d of %d outputs match the CPU reference (checksum %" PRId64 ")\n",
           mismatches == 0 ? "PASS" : "FAIL", BATCH * OUT - mismatches, BATCH * OUT, checksum);
    printf("time:     GPU submit+wait %.2f ms, CPU reference %.2f ms\n", gpu_ms, cpu_ms);
    char log_path[512];
    size_t needed = 0;
    if (umdLogGetFilePath(log_path, sizeof log_path, &needed) == UMD_SUCCESS)
        printf("log:      %s (file, INFO and worse); console: stderr (WARN and worse)\n", log_path);
    else
        printf("log:      console only (stderr, WARN and worse): the log file could not be opened\n");

    return mismatches == 0 ? 0 : 1;
}
