// The spdlog side of the logging benchmark (docs/benchmarks.md, "Logging"): the same workload as
// bench/log/src/main.rs, measured the same way, with Debian's libspdlog-dev (1.10):
// an async logger (one worker thread, blocking overflow policy, queue of 16384) with a rotating
// file sink (128 MiB x 5, INFO) and a stderr sink (WARN), a pattern with the same fields as
// libumd's text record (UTC wall time in µs, level, thread id, logger, function, file:line, then
// ctx, code, the quoted message and key=value pairs), and flush on ERROR.
//
// Build: g++ -O2 -std=c++17 spdlog_bench.cpp $(pkg-config --cflags --libs spdlog) -o spdlog_bench
// Run:   spdlog_bench --dir DIR --records N --repeats R --per-thread M
// Prints "key value" lines that umd-log-bench reads.

#define SPDLOG_ACTIVE_LEVEL SPDLOG_LEVEL_TRACE
#include <spdlog/async.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Setup {
    std::shared_ptr<spdlog::details::thread_pool> pool;
    std::shared_ptr<spdlog::async_logger> logger;
};

static size_t g_queue = 16384;

Setup make(const std::string &dir) {
    Setup s;
    s.pool = std::make_shared<spdlog::details::thread_pool>(g_queue, 1);
    auto file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(dir + "/spdlog.log", 128u << 20, 5);
    file->set_level(spdlog::level::info);
    auto console = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    console->set_level(spdlog::level::warn);
    s.logger = std::make_shared<spdlog::async_logger>(
        "umd", spdlog::sinks_init_list{file, console}, s.pool, spdlog::async_overflow_policy::block);
    s.logger->set_level(spdlog::level::info);
    s.logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l tid=%t %n %! %s:%# %v", spdlog::pattern_time_type::utc);
    s.logger->flush_on(spdlog::level::err);
    return s;
}

// Destroying the pool drains the queue and joins the worker: the only way to wait for an async
// spdlog logger to finish writing (its flush() only enqueues a request).
void finish(Setup &s) {
    s.logger->flush();
    s.logger.reset();
    s.pool.reset();
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double tsc_per_ns() {
    double t0 = now_s();
    unsigned long long c0 = __rdtsc();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    double t1 = now_s();
    unsigned long long c1 = __rdtsc();
    return double(c1 - c0) / ((t1 - t0) * 1e9);
}

unsigned long long timer_overhead() {
    std::vector<unsigned long long> v(10000);
    for (auto &x : v) {
        unsigned long long a = __rdtsc();
        unsigned long long b = __rdtsc();
        x = b - a;
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <class T> T median(std::vector<T> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

double disabled_ns(spdlog::async_logger *lg) {
    const long n = 50'000'000;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        SPDLOG_LOGGER_DEBUG(lg, "ctx={} code={} \"buffer allocated\" bytes={} va={}", 7, "UMD_SUCCESS", 4096, i);
    }
    return (now_s() - t0) * 1e9 / n;
}

// Each thread logs `per` records in bursts of 200 with a 1 ms pause (so the worker keeps up and
// what is measured is the enqueue, not a full queue); every GROUP consecutive calls are timed
// together with rdtsc (this VM's TSC advances in steps of about 40 ns, too coarse for one call),
// and a sample is the group's time per call.
constexpr int GROUP = 8;
std::vector<unsigned long long> latency(spdlog::async_logger *lg, int threads, int per, unsigned long long ovh) {
    std::vector<std::vector<unsigned long long>> all(threads);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++) {
        ts.emplace_back([&, t] {
            auto &v = all[t];
            v.reserve(per);
            for (int i = 0; i < per;) {
                for (int j = 0; j < 200 && i < per; j += GROUP, i += GROUP) {
                    unsigned long long a = __rdtsc();
                    for (int g = 0; g < GROUP; g++) {
                        SPDLOG_LOGGER_INFO(lg, "ctx={} code={} \"buffer allocated\" bytes={} va={} t={}", 7, "UMD_SUCCESS", 4096, i + g, t);
                    }
                    unsigned long long b = __rdtsc();
                    v.push_back(b - a > ovh ? b - a - ovh : 0);
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        });
    }
    for (auto &t : ts) t.join();
    std::vector<unsigned long long> out;
    for (auto &v : all) out.insert(out.end(), v.begin(), v.end());
    std::sort(out.begin(), out.end());
    return out;
}

double pct(const std::vector<unsigned long long> &v, double p, double tpn) {
    size_t i = std::min(v.size() - 1, size_t(p * double(v.size())));
    return double(v[i]) / tpn / GROUP;
}

} // namespace

int main(int argc, char **argv) {
    std::string dir = "/tmp/spdlog-bench";
    long records = 1'000'000;
    int repeats = 5, per = 50'000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--records")) records = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats")) repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--per-thread")) per = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--queue")) g_queue = size_t(atol(argv[i + 1]));
    }
    std::string mk = "mkdir -p '" + dir + "'";
    if (system(mk.c_str()) != 0) return 1;
    double tpn = tsc_per_ns();
    unsigned long long ovh = timer_overhead();
    printf("timer_overhead_ns %.1f\n", double(ovh) / tpn);

    std::vector<double> dis, l1[3], l4[3], thr;
    for (int r = 0; r < repeats; r++) {
        Setup s = make(dir);
        dis.push_back(disabled_ns(s.logger.get()));
        auto a = latency(s.logger.get(), 1, per, ovh);
        auto b = latency(s.logger.get(), 4, per, ovh);
        double ps[3] = {0.50, 0.99, 0.999};
        for (int k = 0; k < 3; k++) {
            l1[k].push_back(pct(a, ps[k], tpn));
            l4[k].push_back(pct(b, ps[k], tpn));
        }
        finish(s);

        Setup t = make(dir);
        double t0 = now_s();
        for (long i = 0; i < records; i++) {
            SPDLOG_LOGGER_INFO(t.logger.get(), "ctx={} code={} \"buffer allocated\" bytes={} va={}", 7, "UMD_SUCCESS", 4096, i);
        }
        finish(t);
        thr.push_back(double(records) / (now_s() - t0));
    }
    printf("disabled_ns %.3f\n", median(dis));
    printf("lat1_p50_ns %.1f\nlat1_p99_ns %.1f\nlat1_p999_ns %.1f\n", median(l1[0]), median(l1[1]), median(l1[2]));
    printf("lat4_p50_ns %.1f\nlat4_p99_ns %.1f\nlat4_p999_ns %.1f\n", median(l4[0]), median(l4[1]), median(l4[2]));
    printf("throughput_rps %.0f\n", median(thr));
    return 0;
}
