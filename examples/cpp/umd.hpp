// A C++17 RAII wrapper over libumd's C ABI (include/umd.h): copy it into a framework.
//
//  - every failing call throws umd::Error, which carries the code, its name, the action and
//    the whole umdErrorDetail of the failure (read on the failing thread at once);
//  - Device, Context, Buffer and CmdBuf own their handle: move-only, destroyed exactly once by
//    the destructor (or earlier by reset()); a moved-from object holds the null handle 0;
//  - a destructor never throws: a failing destroy is reported to stderr, the way the
//    standard library's streams swallow close errors.
// Destroy children before parents (declare them after): libumd destroys what a context or a
// device still holds, and a child's later destroy then fails with UMD_ERR_INVALID_HANDLE.
#ifndef AIGPU_EXAMPLES_UMD_HPP
#define AIGPU_EXAMPLES_UMD_HPP

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "umd.h"

namespace umd {

class Error : public std::runtime_error {
  public:
    Error(umdResult code, const char *call, const umdErrorDetail &detail)
        : std::runtime_error(describe(code, call, detail)), code_(code), detail_(detail) {}
    umdResult code() const noexcept { return code_; }
    const char *name() const noexcept { return umdGetErrorName(code_); }
    umdErrorAction action() const noexcept { return umdGetErrorAction(code_); }
    bool retryable() const noexcept { return umdIsRetryable(code_) == 1; }
    const umdErrorDetail &detail() const noexcept { return detail_; }

  private:
    static std::string describe(umdResult code, const char *call, const umdErrorDetail &d) {
        std::string s = std::string(call) + " failed: " + umdGetErrorName(code) + " (" +
                        std::to_string(static_cast<int>(code)) + "): ";
        return s + (d.code == code ? d.message : umdGetErrorString(code));
    }
    umdResult code_;
    umdErrorDetail detail_;
};

// Throws for an error; returns a status (UMD_SUCCESS or UMD_STATUS_NOT_READY) unchanged.
inline umdResult check(umdResult r, const char *call) {
    if (r >= 0) return r;
    umdErrorDetail d;
    std::memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    if (umdGetLastErrorDetail(&d) != UMD_SUCCESS) d.code = UMD_SUCCESS;
    throw Error(r, call, d);
}
#define UMD_CHECK(call) ::umd::check((call), #call)

// One owned handle; Destroy is the C destroy function.
template <umdResult (*Destroy)(uint64_t)> class Owned {
  public:
    Owned() = default;
    explicit Owned(uint64_t h) : h_(h) {}
    Owned(const Owned &) = delete;
    Owned &operator=(const Owned &) = delete;
    Owned(Owned &&o) noexcept : h_(std::exchange(o.h_, 0)) {}
    Owned &operator=(Owned &&o) noexcept {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, 0);
        }
        return *this;
    }
    ~Owned() { reset(); }
    uint64_t get() const noexcept { return h_; }
    explicit operator bool() const noexcept { return h_ != 0; }
    void reset() noexcept {
        uint64_t h = std::exchange(h_, 0);
        if (h == 0) return;
        umdResult r = Destroy(h);
        if (r != UMD_SUCCESS) std::fprintf(stderr, "umd: destroy of 0x%016llx failed: %s\n",
                                           static_cast<unsigned long long>(h), umdGetErrorName(r));
    }

  private:
    uint64_t h_ = 0;
};

class Buffer;
class CmdBuf;

class Device {
  public:
    explicit Device(uint32_t index = 0) {
        umdDevice h = 0;
        UMD_CHECK(umdDeviceOpen(index, &h));
        h_ = Owned<umdDeviceClose>(h);
    }
    umdDevice get() const noexcept { return h_.get(); }
    umdDeviceInfo info() const {
        umdDeviceInfo i;
        std::memset(&i, 0, sizeof i);
        i.struct_size = sizeof i;
        UMD_CHECK(umdDeviceGetInfo(get(), &i));
        return i;
    }
    void reset() noexcept { h_.reset(); }

  private:
    Owned<umdDeviceClose> h_;
};

class Context {
  public:
    explicit Context(const Device &dev, umdPriority prio = UMD_PRIORITY_NORMAL) {
        umdContext h = 0;
        UMD_CHECK(umdContextCreate(dev.get(), prio, &h));
        h_ = Owned<umdContextDestroy>(h);
    }
    umdContext get() const noexcept { return h_.get(); }
    umdContextState state() const {
        umdContextState s;
        std::memset(&s, 0, sizeof s);
        s.struct_size = sizeof s;
        UMD_CHECK(umdContextGetState(get(), &s));
        return s;
    }
    void reset() noexcept { h_.reset(); }

  private:
    Owned<umdContextDestroy> h_;
};

class Buffer {
  public:
    Buffer(const Context &ctx, uint64_t size, uint32_t flags = 0) : size_(size) {
        umdBuffer h = 0;
        UMD_CHECK(umdMemAlloc(ctx.get(), size, flags, &h));
        h_ = Owned<umdMemFree>(h);
        UMD_CHECK(umdMemGetAddress(h, &va_));
    }
    umdBuffer get() const noexcept { return h_.get(); }
    umdDevicePtr va(uint64_t offset = 0) const noexcept { return va_ + offset; }
    uint64_t size() const noexcept { return size_; }
    template <class T> void upload(const std::vector<T> &v, uint64_t offset = 0) {
        UMD_CHECK(umdMemcpyHtoD(get(), offset, v.data(), v.size() * sizeof(T)));
    }
    template <class T> std::vector<T> download(size_t count, uint64_t offset = 0) const {
        std::vector<T> v(count);
        UMD_CHECK(umdMemcpyDtoH(v.data(), get(), offset, count * sizeof(T)));
        return v;
    }
    void reset() noexcept { h_.reset(); }

  private:
    Owned<umdMemFree> h_;
    umdDevicePtr va_ = 0;
    uint64_t size_ = 0;
};

class Fence {
  public:
    Fence() { f_ = umdFence{0, 0}; }
    explicit Fence(umdFence f) : f_(f) {}
    const umdFence &get() const noexcept { return f_; }
    void wait(uint64_t timeout_ns = UMD_TIMEOUT_INFINITE) const {
        UMD_CHECK(umdFenceWait(&f_, timeout_ns));
    }
    bool ready() const { return UMD_CHECK(umdFenceQuery(&f_)) == UMD_SUCCESS; }

  private:
    umdFence f_;
};

class CmdBuf {
  public:
    explicit CmdBuf(const Context &ctx) {
        umdCmdBuf h = 0;
        UMD_CHECK(umdCmdBufCreate(ctx.get(), &h));
        h_ = Owned<umdCmdBufDestroy>(h);
    }
    umdCmdBuf get() const noexcept { return h_.get(); }
    CmdBuf &begin() { UMD_CHECK(umdCmdBufBegin(get())); return *this; }
    CmdBuf &end() { UMD_CHECK(umdCmdBufEnd(get())); return *this; }
    CmdBuf &copy(umdDevicePtr dst, umdDevicePtr src, uint64_t size) {
        UMD_CHECK(umdCmdCopy(get(), dst, src, size));
        return *this;
    }
    CmdBuf &fill(umdDevicePtr dst, uint64_t size, uint32_t pattern) {
        UMD_CHECK(umdCmdFill(get(), dst, size, pattern));
        return *this;
    }
    CmdBuf &gemm_i8(umdDevicePtr a, umdDevicePtr b, umdDevicePtr c, uint32_t m, uint32_t n,
                    uint32_t k, uint32_t flags = 0) {
        umdGemmI8Args g;
        std::memset(&g, 0, sizeof g);
        g.a = a; g.b = b; g.c = c; g.m = m; g.n = n; g.k = k;
        g.lda = k; g.ldb = n; g.ldc = n; g.flags = flags;
        UMD_CHECK(umdCmdGemmI8(get(), &g));
        return *this;
    }
    CmdBuf &eltwise(uint32_t op, uint32_t count, umdDevicePtr dst, umdDevicePtr a, umdDevicePtr b = 0) {
        UMD_CHECK(umdCmdEltwise(get(), op, count, dst, a, b));
        return *this;
    }
    CmdBuf &write_value(umdDevicePtr dst, uint64_t value) {
        UMD_CHECK(umdCmdWriteValue(get(), dst, value));
        return *this;
    }
    CmdBuf &wait_value(umdDevicePtr addr, uint64_t value) {
        UMD_CHECK(umdCmdWaitValue(get(), addr, value));
        return *this;
    }
    void reset() noexcept { h_.reset(); }

  private:
    Owned<umdCmdBufDestroy> h_;
};

// Submits command buffers as one job on ctx after the wait fences.
inline Fence submit(const Context &ctx, std::initializer_list<const CmdBuf *> cbs,
                    std::initializer_list<Fence> waits = {}) {
    std::vector<umdCmdBuf> c;
    for (const CmdBuf *cb : cbs) c.push_back(cb->get());
    std::vector<umdFence> w;
    for (const Fence &f : waits) w.push_back(f.get());
    umdFence out{0, 0};
    UMD_CHECK(umdSubmit(ctx.get(), c.data(), static_cast<uint32_t>(c.size()),
                        w.empty() ? nullptr : w.data(), static_cast<uint32_t>(w.size()), &out));
    return Fence(out);
}

}  // namespace umd

#endif  // AIGPU_EXAMPLES_UMD_HPP
