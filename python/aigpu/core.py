"""Devices, contexts, buffers, command buffers and fences over libumd's C ABI.

Lifetimes follow libumd's (docs/libumd.md, "Handles"): destroying a context destroys its command
buffers and frees its buffers; closing a device does the same for everything on it. Each object
here holds its parent alive, so garbage collection never destroys a parent under a live child;
every close is idempotent (an explicit close, the `with` block's end and the collector's
finaliser together call the C destroy function exactly once); a parent's close marks its children
closed without calling C for them again. A closed object keeps its (now stale) handle: using it
raises InvalidHandleError whose detail says the object "was destroyed".
"""

import ctypes
import threading
import weakref
from collections import namedtuple
from ctypes import byref, c_uint32, c_uint64, c_void_p, sizeof

from . import _lib
from .errors import call

PRIORITY_LOW = 0
PRIORITY_NORMAL = 1
PRIORITY_HIGH = 2
MEM_READ_ONLY = 1
ELTWISE_ADD = 0
ELTWISE_MUL = 1
ELTWISE_RELU = 2
GEMM_ACCUMULATE = 1
RESET_NONE = 0
RESET_GUILTY = 1
RESET_INNOCENT = 2
DEBUG_FAULT_MEM_ERROR = 1
DEBUG_FAULT_RESET_FAILURE = 2
DEBUG_FAULT_FALL_OFF_BUS = 3
TIMEOUT_INFINITE = (1 << 64) - 1

Version = namedtuple("Version", "major minor patch uapi_major uapi_minor")


def version():
    """libumd's version and the UAPI version it speaks."""
    v = [c_uint32() for _ in range(5)]
    call("umdGetVersion", *[byref(x) for x in v])
    return Version(*[x.value for x in v])


def device_count():
    """Devices on the backend UMD_BACKEND selects."""
    n = c_uint32()
    call("umdGetDeviceCount", byref(n))
    return n.value


def _struct(cls):
    s = cls()
    s.struct_size = sizeof(cls)
    return s


def _to_dict(s):
    out = {}
    for name, _ in s._fields_:
        if name in ("struct_size", "reserved", "reserved2"):
            continue
        v = getattr(s, name)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, _lib.umdMemCounter):
            v = _to_dict(v)
        out[name] = v
    return out


def _read_string(fn, *lead):
    """The two-call pattern of umdLogGetFilter & co.: ask for the size, then fill."""
    needed = ctypes.c_size_t()
    call(fn, *lead, None, 0, byref(needed))
    buf = ctypes.create_string_buffer(max(needed.value, 1))
    call(fn, *lead, buf, len(buf), byref(needed))
    return buf.value.decode("utf-8", "replace")


class _Resource:
    """A libumd object: a uint64 handle and exactly one destroy call."""

    _kind = "object"

    def __init__(self, handle, parent):
        self._handle = int(handle)
        self._alive = True
        self._lock = threading.Lock()
        self._parent = parent  # strong: the parent outlives us
        self._children = weakref.WeakSet()
        if parent is not None:
            parent._children.add(self)

    @property
    def handle(self):
        """The C handle (uint64: type, generation, slot index); stale once closed."""
        return self._handle

    @property
    def closed(self):
        return not self._alive

    def _destroy(self, handle):
        raise NotImplementedError

    def _mark_closed(self):
        """The C object is gone (destroyed with its parent): never destroy it again."""
        with self._lock:
            self._alive = False
        for c in list(self._children):
            c._mark_closed()

    def close(self):
        """Destroys the object (once; later calls do nothing)."""
        with self._lock:
            if not self._alive:
                return
            self._alive = False
        try:
            self._destroy(self._handle)
        finally:
            for c in list(self._children):
                c._mark_closed()
            if self._parent is not None:
                self._parent._children.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._alive:
                self.close()
        except Exception:  # no raising from a finaliser (interpreter shutdown, lost device)
            pass

    def __repr__(self):
        state = "closed" if not self._alive else "open"
        return "<aigpu.%s 0x%016x %s>" % (type(self).__name__, self._handle, state)


class Device(_Resource):
    """An open device (umdDeviceOpen)."""

    def __init__(self, index=0):
        h = c_uint64()
        call("umdDeviceOpen", int(index), byref(h))
        super().__init__(h.value, None)
        self.index = int(index)

    def _destroy(self, handle):
        call("umdDeviceClose", handle)

    @property
    def info(self):
        """umdDeviceInfo as a dict (backend, location, mem_total, max_alloc, ...)."""
        s = _struct(_lib.umdDeviceInfo)
        call("umdDeviceGetInfo", self._handle, byref(s))
        return _to_dict(s)

    def context(self, priority=PRIORITY_NORMAL):
        """A new Context on this device."""
        return Context(self, priority)

    def mem_stats(self):
        """The pool statistics: gauges as {"all"|"small"|"large": {current, peak, ...}}."""
        s = _struct(_lib.umdMemStats)
        call("umdMemGetStats", self._handle, byref(s))
        out = {"pool_enabled": bool(s.pool_enabled)}
        for g in _lib.MEM_STATS_GAUGES:
            arr = getattr(s, g)
            out[g] = {p: _to_dict(arr[i]) for i, p in enumerate(("all", "small", "large"))}
        for n in _lib.MEM_STATS_SCALARS:
            out[n] = getattr(s, n)
        return out

    def reset_peak_stats(self):
        call("umdMemResetPeakStats", self._handle)

    def trim(self, keep_bytes=0):
        """Returns cached memory to the kernel; the bytes released."""
        released = c_uint64()
        call("umdMemTrim", self._handle, int(keep_bytes), byref(released))
        return released.value

    def set_release_threshold(self, nbytes):
        call("umdMemSetReleaseThreshold", self._handle, int(nbytes))

    def dump_history(self):
        """The allocation history (UMD_POOL_HISTORY=N) as JSON lines."""
        needed = c_uint64()
        call("umdMemDumpHistory", self._handle, None, 0, byref(needed))
        buf = ctypes.create_string_buffer(max(needed.value, 1))
        call("umdMemDumpHistory", self._handle, buf, len(buf), byref(needed))
        return buf.value.decode()

    def inject_fault(self, fault):
        """Test hook (umdDebugInjectFault, DEBUG_FAULT_*): never in production code."""
        call("umdDebugInjectFault", self._handle, int(fault))


class Context(_Resource):
    """A context: a queue of work with its own fence timeline (umdContextCreate)."""

    def __init__(self, device, priority=PRIORITY_NORMAL):
        h = c_uint64()
        call("umdContextCreate", device.handle, int(priority), byref(h))
        super().__init__(h.value, device)
        self.device = device

    def _destroy(self, handle):
        call("umdContextDestroy", handle)

    def alloc(self, nbytes, read_only=False, alignment=0, tag=None):
        """A new Buffer of `nbytes` bytes (umdMemAllocEx)."""
        return Buffer(self, nbytes, read_only, alignment, tag)

    def empty(self, shape, dtype, read_only=False, tag=None):
        """A Buffer sized for an array of `shape` and `dtype` (contents undefined)."""
        import numpy as np

        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return Buffer(self, n, read_only, 0, tag)

    def from_numpy(self, array, read_only=False, tag=None):
        """A Buffer holding a copy of `array` (C order)."""
        import numpy as np

        a = np.ascontiguousarray(array)
        b = Buffer(self, max(a.nbytes, 1), read_only, 0, tag)
        if a.nbytes:
            b.write(a)
        return b

    def cmdbuf(self):
        """A new, empty CmdBuf."""
        return CmdBuf(self)

    def submit(self, cmdbufs, waits=()):
        """Submits ended command buffers as one job after the `waits` fences; its Fence."""
        if isinstance(cmdbufs, CmdBuf):
            cmdbufs = [cmdbufs]
        cbs = (_lib.umdCmdBuf * max(len(cmdbufs), 1))(*[c.handle for c in cmdbufs])
        ws = (_lib.umdFence * max(len(waits), 1))(*[w._c() for w in waits])
        out = _lib.umdFence()
        call("umdSubmit", self._handle, cbs, len(cmdbufs), ws, len(waits), byref(out))
        return Fence(self, out.seqno)

    def state(self):
        """umdContextState as a dict (reset_status, hung, fault_*, completed/submitted seqno,
        ban, and dep_context_id / dep_seqno for a context banned by a failed dependency)."""
        s = _struct(_lib.umdContextState)
        call("umdContextGetState", self._handle, byref(s))
        return _to_dict(s)

    def mem_stats(self):
        """umdMemContextStats as a dict."""
        s = _struct(_lib.umdMemContextStats)
        call("umdMemGetContextStats", self._handle, byref(s))
        return _to_dict(s)

    @property
    def id(self):
        """libumd's context id (as in log lines: ctx=N and in ErrorDetail.context_id)."""
        return self.mem_stats()["context_id"]

    def free_address(self, address):
        """Frees the buffer at GPU address `address` (the device-pointer style)."""
        address = _va(address)
        call("umdMemFreeAddress", self._handle, address)
        for b in list(self._children):
            if isinstance(b, Buffer) and b.address == address:
                b._mark_closed()


class Buffer(_Resource):
    """Device memory (umdMemAllocEx); `address` is its GPU virtual address."""

    def __init__(self, context, nbytes, read_only=False, alignment=0, tag=None):
        info = _struct(_lib.umdMemAllocInfo)
        info.flags = 1 if read_only else 0
        info.size = int(nbytes)
        info.alignment = int(alignment)
        info.tag = tag.encode() if tag is not None else None
        h = c_uint64()
        call("umdMemAllocEx", context.handle, byref(info), byref(h))
        super().__init__(h.value, context)
        self.context = context
        self.nbytes = int(nbytes)
        self.read_only = bool(read_only)
        self.tag = tag
        try:
            va = c_uint64()
            call("umdMemGetAddress", h.value, byref(va))
            self.address = va.value
        except BaseException:
            self.close()
            raise

    def _destroy(self, handle):
        call("umdMemFree", handle)

    def va(self, offset=0):
        """The GPU address `offset` bytes into the buffer."""
        return self.address + int(offset)

    def write(self, data, offset=0):
        """Copies host data (bytes, bytearray, memoryview, numpy array) to the buffer."""
        ptr, n, keep = _host_source(data)
        call("umdMemcpyHtoD", self._handle, int(offset), ptr, n)
        del keep

    def read(self, nbytes=None, offset=0):
        """Copies `nbytes` (default: to the end) from the buffer into new bytes."""
        n = self.nbytes - int(offset) if nbytes is None else int(nbytes)
        out = ctypes.create_string_buffer(n)
        call("umdMemcpyDtoH", out, self._handle, int(offset), n)
        return out.raw

    def to_numpy(self, dtype="uint8", shape=None, offset=0):
        """A new numpy array copied from the buffer (default: the whole buffer, 1-D)."""
        import numpy as np

        dt = np.dtype(dtype)
        if shape is None:
            shape = ((self.nbytes - int(offset)) // dt.itemsize,)
        out = np.empty(shape, dt)
        if out.nbytes:
            call("umdMemcpyDtoH", out.ctypes.data, self._handle, int(offset), out.nbytes)
        return out

    def map(self):
        """A Mapping of the buffer for zero-copy CPU access (numpy / memoryview)."""
        return Mapping(self)


class Mapping:
    """A CPU mapping of a Buffer (umdMemMap ... umdMemUnmap).

    np.asarray(mapping) and mapping.as_array(dtype, shape) are views of device memory (no copy);
    they keep the mapping, and so the buffer, alive. Make sure the GPU work writing the buffer
    has completed (wait on its fence) before reading through them.
    """

    def __init__(self, buffer):
        p = c_void_p()
        call("umdMemMap", buffer.handle, byref(p))
        self.buffer = buffer
        self.host_address = p.value
        self.nbytes = buffer.nbytes
        self._lock = threading.Lock()
        self._mapped = True

    @property
    def __array_interface__(self):
        return {
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (self.host_address, False),
            "version": 3,
        }

    def as_array(self, dtype="uint8", shape=None, offset=0):
        """A numpy view of the mapped memory."""
        import numpy as np

        raw = np.asarray(self)[int(offset) :]
        dt = np.dtype(dtype)
        n = raw.nbytes // dt.itemsize
        a = raw[: n * dt.itemsize].view(dt)
        return a if shape is None else a.reshape(shape)

    def memoryview(self):
        """A writable memoryview of the mapped bytes (it keeps this mapping alive)."""
        raw = (ctypes.c_ubyte * self.nbytes).from_address(self.host_address)
        raw._keep_mapping = self  # the memoryview holds `raw`, `raw` holds the mapping
        return memoryview(raw).cast("B")

    def close(self):
        """umdMemUnmap (once)."""
        with self._lock:
            if not self._mapped:
                return
            self._mapped = False
        if self.buffer._alive:
            call("umdMemUnmap", self.buffer.handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class CmdBuf(_Resource):
    """A command buffer (umdCmdBufCreate). Record with `with cb.record(): cb.copy(...)`.

    Address arguments are GPU addresses: an int (buffer.va(offset)) or a Buffer (its start);
    a Buffer passed so is kept alive by the command buffer until the next begin() or close().
    """

    def __init__(self, context):
        h = c_uint64()
        call("umdCmdBufCreate", context.handle, byref(h))
        super().__init__(h.value, context)
        self.context = context
        self._uses = []  # Buffers named in the recording: kept alive while it can be submitted

    def _destroy(self, handle):
        call("umdCmdBufDestroy", handle)

    def _va(self, x):
        if isinstance(x, Buffer):
            self._uses.append(x)
        return _va(x)

    def begin(self):
        call("umdCmdBufBegin", self._handle)
        self._uses = []
        return self

    def end(self):
        call("umdCmdBufEnd", self._handle)

    def record(self):
        """Context manager: begin, then end when the block finishes without an exception."""
        return _Recording(self)

    def copy(self, dst, src, nbytes):
        call("umdCmdCopy", self._handle, self._va(dst), self._va(src), int(nbytes))

    def fill(self, dst, nbytes, pattern):
        call("umdCmdFill", self._handle, self._va(dst), int(nbytes), int(pattern) & 0xFFFFFFFF)

    def gemm_i8(self, a, b, c, m, n, k, lda=None, ldb=None, ldc=None, accumulate=False):
        """C[m x n] (+)= A[m x k] * B[k x n]; int8 A, B, int32 C, row-major."""
        g = _lib.umdGemmI8Args(
            a=self._va(a),
            b=self._va(b),
            c=self._va(c),
            m=m,
            n=n,
            k=k,
            lda=k if lda is None else lda,
            ldb=n if ldb is None else ldb,
            ldc=n if ldc is None else ldc,
            flags=GEMM_ACCUMULATE if accumulate else 0,
        )
        call("umdCmdGemmI8", self._handle, byref(g))

    def eltwise(self, op, count, dst, a, b=0):
        call("umdCmdEltwise", self._handle, int(op), int(count), self._va(dst), self._va(a), self._va(b))

    def requantize(self, count, dst, src, scale, shift):
        call("umdCmdRequantize", self._handle, int(count), self._va(dst), self._va(src), int(scale), int(shift))

    def timestamp(self, dst):
        call("umdCmdTimestamp", self._handle, self._va(dst))

    def write_value(self, dst, value):
        call("umdCmdWriteValue", self._handle, self._va(dst), int(value))

    def wait_value(self, addr, value):
        call("umdCmdWaitValue", self._handle, self._va(addr), int(value))

    def debug_hang(self):
        call("umdCmdDebugHang", self._handle)


class _Recording:
    def __init__(self, cb):
        self.cb = cb

    def __enter__(self):
        return self.cb.begin()

    def __exit__(self, exc_type, *rest):
        if exc_type is None:
            self.cb.end()


class Fence:
    """Completion of a submitted job: (context, seqno). Seqno 0 is always signalled."""

    def __init__(self, context, seqno):
        self.context = context  # keeps the context (and its device) alive while waited on
        self.seqno = int(seqno)

    def _c(self):
        return _lib.umdFence(self.context.handle, self.seqno)

    def wait(self, timeout=None):
        """Waits up to `timeout` seconds (None: forever); raises SyncTimeoutError, ..."""
        ns = TIMEOUT_INFINITE if timeout is None else int(timeout * 1e9)
        f = self._c()
        call("umdFenceWait", byref(f), ns)

    def query(self):
        """True once signalled, False while running; raises if it never will."""
        f = self._c()
        return call("umdFenceQuery", byref(f)) == 0

    def __repr__(self):
        return "<aigpu.Fence ctx 0x%016x seqno %d>" % (self.context.handle, self.seqno)


def _va(x):
    if isinstance(x, Buffer):
        return x.address
    return int(x)


def _host_source(data):
    """(pointer, nbytes, keep-alive) for host data to copy from."""
    if isinstance(data, bytes):
        return ctypes.c_char_p(data), len(data), data
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if np is not None and isinstance(data, np.ndarray):
        a = np.ascontiguousarray(data)
        return a.ctypes.data, a.nbytes, a
    mv = memoryview(data)
    if not mv.c_contiguous or mv.readonly:
        b = mv.tobytes()
        return ctypes.c_char_p(b), len(b), b
    mv = mv.cast("B")
    raw = (ctypes.c_char * len(mv)).from_buffer(mv)
    return ctypes.addressof(raw), len(mv), (raw, mv)
