// An int8 GEMM plus ReLU through the RAII wrapper (examples/cpp/umd.hpp), checked against the
// CPU. Built and run against an installed libumd by tests/install/test_install.sh (pkg-config
// and CMake); prints one line "raii_gemm: <m>x<n>x<k> ok, checksum <sum>" or throws.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "umd.hpp"

int main() try {
    constexpr uint32_t M = 32, N = 48, K = 64;
    std::vector<int8_t> a(M * K), b(K * N);
    uint32_t seed = 7;
    auto next = [&seed] { seed = seed * 1103515245u + 12345u; return static_cast<int8_t>(seed >> 16); };
    for (auto &x : a) x = next();
    for (auto &x : b) x = next();
    std::vector<int32_t> ref(M * N);
    for (uint32_t i = 0; i < M; i++)
        for (uint32_t j = 0; j < N; j++) {
            int32_t acc = 0;
            for (uint32_t l = 0; l < K; l++) acc += int32_t(a[i * K + l]) * b[l * N + j];
            ref[i * N + j] = acc > 0 ? acc : 0;
        }

    // Declaration order is destruction order reversed: buffers and the command buffer go
    // before their context, the context before the device.
    umd::Device dev(0);
    umd::Context ctx(dev);
    umd::Buffer ba(ctx, a.size(), UMD_MEM_READ_ONLY), bb(ctx, b.size(), UMD_MEM_READ_ONLY);
    umd::Buffer bc(ctx, ref.size() * sizeof(int32_t));
    ba.upload(a);
    bb.upload(b);
    umd::CmdBuf cb(ctx);
    cb.begin()
        .gemm_i8(ba.va(), bb.va(), bc.va(), M, N, K)
        .eltwise(UMD_ELTWISE_RELU, M * N, bc.va(), bc.va())
        .end();
    umd::submit(ctx, {&cb}).wait(10ull * 1000 * 1000 * 1000);
    std::vector<int32_t> c = bc.download<int32_t>(ref.size());
    int64_t sum = 0;
    for (size_t i = 0; i < c.size(); i++) {
        if (c[i] != ref[i]) {
            std::fprintf(stderr, "raii_gemm: mismatch at %zu: gpu %d, cpu %d\n", i, c[i], ref[i]);
            return 1;
        }
        sum += c[i];
    }
    std::printf("raii_gemm: %ux%ux%u ok, checksum %lld\n", M, N, K, static_cast<long long>(sum));
    return 0;
} catch (const umd::Error &e) {
    std::fprintf(stderr, "raii_gemm: %s [action %d]\n", e.what(), static_cast<int>(e.action()));
    return 1;
} catch (const std::exception &e) {
    std::fprintf(stderr, "raii_gemm: %s\n", e.what());
    return 1;
}
