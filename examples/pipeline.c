/*
 * A three-stage pipeline on three contexts of one device, chained by cross-context fences
 * (umdSubmit's wait list takes fences of any context of the same device):
 *
 *   ctx "layer1" (normal):  h32[s] = x[s] · W1                     waits: act(i-2) (h32[s] free)
 *   ctx "act"    (high):    h8[s]  = requant(relu(h32[s]))         waits: layer1(i), layer2(i-2)
 *   ctx "layer2" (normal):  y[i]   = h8[s] · W2                    waits: act(i)
 *
 * Batches alternate between two slots s = i % 2, so batch i+1's first layer overlaps batch i's
 * later stages; the host waits for layer1(i-2) before it overwrites x[s]. Every output is
 * checked against a CPU reference. Prints "pipeline: <n> batches on 3 contexts ok".
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "umd.h"

enum { M = 16, K = 64, H = 64, N = 32, BATCHES = 6, SLOTS = 2 };
static const int32_t SCALE = 5;
static const uint32_t SHIFT = 10;
static const uint64_t TIMEOUT_NS = 10ull * 1000 * 1000 * 1000;

#define CHECK(call)                                                                          \
    do {                                                                                     \
        umdResult r_ = (call);                                                               \
        if (r_ != UMD_SUCCESS) {                                                             \
            umdErrorDetail d_;                                                               \
            memset(&d_, 0, sizeof d_);                                                       \
            d_.struct_size = sizeof d_;                                                      \
            if (umdGetLastErrorDetail(&d_) != UMD_SUCCESS) d_.message[0] = 0;                \
            fprintf(stderr, "pipeline: %s failed: %s (%d): %s\n", #call, umdGetErrorName(r_), \
                    (int)r_, d_.message);                                                    \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static uint32_t seed = 99;
static int8_t rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return (int8_t)(seed >> 16);
}

static int8_t requant(int32_t v) {
    int64_t p = (int64_t)(v > 0 ? v : 0) * SCALE;
    int64_t r = (p + ((int64_t)1 << (SHIFT - 1))) >> SHIFT;
    return (int8_t)(r < -128 ? -128 : r > 127 ? 127 : r);
}

typedef struct {
    umdBuffer buf;
    umdDevicePtr va;
} Buf;

static Buf alloc(umdContext ctx, uint64_t size) {
    Buf b;
    CHECK(umdMemAlloc(ctx, size, 0, &b.buf));
    CHECK(umdMemGetAddress(b.buf, &b.va));
    return b;
}

static umdGemmI8Args gemm(umdDevicePtr a, umdDevicePtr b, umdDevicePtr c, uint32_t m, uint32_t n, uint32_t k) {
    umdGemmI8Args g;
    memset(&g, 0, sizeof g);
    g.a = a, g.b = b, g.c = c, g.m = m, g.n = n, g.k = k, g.lda = k, g.ldb = n, g.ldc = n;
    return g;
}

int main(void) {
    static int8_t x[BATCHES][M * K], w1[K * H], w2[H * N];
    static int32_t y[BATCHES][M * N];
    for (size_t i = 0; i < sizeof x; i++) ((int8_t *)x)[i] = rnd();
    for (size_t i = 0; i < sizeof w1; i++) w1[i] = rnd();
    for (size_t i = 0; i < sizeof w2; i++) w2[i] = rnd();

    umdDevice dev;
    umdContext l1, act, l2;
    CHECK(umdDeviceOpen(0, &dev));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &l1));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_HIGH, &act));
    CHECK(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &l2));

    /* Each buffer is allocated on the context that writes it. */
    Buf bw1 = alloc(l1, sizeof w1), bw2 = alloc(l2, sizeof w2);
    Buf bx[SLOTS], bh32[SLOTS], bh8[SLOTS], by[BATCHES];
    umdCmdBuf c1[SLOTS], ca[SLOTS], c2[BATCHES];
    for (int s = 0; s < SLOTS; s++) {
        bx[s] = alloc(l1, M * K);
        bh32[s] = alloc(l1, M * H * 4);
        bh8[s] = alloc(act, M * H);
        umdGemmI8Args g = gemm(bx[s].va, bw1.va, bh32[s].va, M, H, K);
        CHECK(umdCmdBufCreate(l1, &c1[s]));
        CHECK(umdCmdBufBegin(c1[s]));
        CHECK(umdCmdGemmI8(c1[s], &g));
        CHECK(umdCmdBufEnd(c1[s]));
        CHECK(umdCmdBufCreate(act, &ca[s]));
        CHECK(umdCmdBufBegin(ca[s]));
        CHECK(umdCmdEltwise(ca[s], UMD_ELTWISE_RELU, M * H, bh32[s].va, bh32[s].va, 0));
        CHECK(umdCmdRequantize(ca[s], M * H, bh8[s].va, bh32[s].va, SCALE, SHIFT));
        CHECK(umdCmdBufEnd(ca[s]));
    }
    for (int i = 0; i < BATCHES; i++) {
        by[i] = alloc(l2, M * N * 4);
        umdGemmI8Args g = gemm(bh8[i % SLOTS].va, bw2.va, by[i].va, M, N, H);
        CHECK(umdCmdBufCreate(l2, &c2[i]));
        CHECK(umdCmdBufBegin(c2[i]));
        CHECK(umdCmdGemmI8(c2[i], &g));
        CHECK(umdCmdBufEnd(c2[i]));
    }
    CHECK(umdMemcpyHtoD(bw1.buf, 0, w1, sizeof w1));
    CHECK(umdMemcpyHtoD(bw2.buf, 0, w2, sizeof w2));

    umdFence f1[BATCHES], fa[BATCHES], f2[BATCHES];
    for (int i = 0; i < BATCHES; i++) {
        int s = i % SLOTS;
        if (i >= SLOTS) CHECK(umdFenceWait(&f1[i - SLOTS], TIMEOUT_NS)); /* x[s] is free again */
        CHECK(umdMemcpyHtoD(bx[s].buf, 0, x[i], sizeof x[i]));

        umdFence w[2];
        uint32_t nw = 0;
        if (i >= SLOTS) w[nw++] = fa[i - SLOTS]; /* act(i-2) has read h32[s] */
        CHECK(umdSubmit(l1, &c1[s], 1, w, nw, &f1[i]));

        nw = 0;
        w[nw++] = f1[i];                          /* cross-context: layer1 -> act */
        if (i >= SLOTS) w[nw++] = f2[i - SLOTS]; /* layer2(i-2) has read h8[s] */
        CHECK(umdSubmit(act, &ca[s], 1, w, nw, &fa[i]));

        CHECK(umdSubmit(l2, &c2[i], 1, &fa[i], 1, &f2[i])); /* cross-context: act -> layer2 */
    }
    for (int i = 0; i < BATCHES; i++) {
        CHECK(umdFenceWait(&f2[i], TIMEOUT_NS));
        CHECK(umdMemcpyDtoH(y[i], by[i].buf, 0, sizeof y[i]));
    }

    int bad = 0;
    static int8_t h8[M * H];
    for (int i = 0; i < BATCHES && !bad; i++) {
        for (int r = 0; r < M; r++)
            for (int c = 0; c < H; c++) {
                int32_t acc = 0;
                for (int l = 0; l < K; l++) acc += (int32_t)x[i][r * K + l] * w1[l * H + c];
                h8[r * H + c] = requant(acc);
            }
        for (int r = 0; r < M && !bad; r++)
            for (int c = 0; c < N; c++) {
                int32_t acc = 0;
                for (int l = 0; l < H; l++) acc += (int32_t)h8[r * H + l] * w2[l * N + c];
                if (acc != y[i][r * N + c]) {
                    fprintf(stderr, "pipeline: batch %d [%d][%d]: gpu %" PRId32 ", cpu %" PRId32 "\n", i, r, c,
                            y[i][r * N + c], acc);
                    bad = 1;
                    break;
                }
            }
    }

    for (int i = 0; i < BATCHES; i++) {
        CHECK(umdCmdBufDestroy(c2[i]));
        CHECK(umdMemFree(by[i].buf));
    }
    for (int s = 0; s < SLOTS; s++) {
        CHECK(umdCmdBufDestroy(c1[s]));
        CHECK(umdCmdBufDestroy(ca[s]));
        CHECK(umdMemFree(bx[s].buf));
        CHECK(umdMemFree(bh32[s].buf));
        CHECK(umdMemFree(bh8[s].buf));
    }
    CHECK(umdMemFree(bw1.buf));
    CHECK(umdMemFree(bw2.buf));
    CHECK(umdContextDestroy(l2));
    CHECK(umdContextDestroy(act));
    CHECK(umdContextDestroy(l1));
    CHECK(umdDeviceClose(dev));
    if (bad) return 1;
    printf("pipeline: %d batches on 3 contexts ok\n", BATCHES);
    return 0;
}
