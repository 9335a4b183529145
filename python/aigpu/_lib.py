"""Loading libumd.so.1 and declaring its C ABI (include/umd.h) for ctypes.

Every handle (umdDevice, umdContext, umdBuffer, umdCmdBuf) is a uint64_t whose top byte is the
object type and whose middle bits are a generation (umd/src/handle.rs): it must be passed and
returned as c_uint64, never as a C int or a pointer, or the type bits are lost.
"""

import ctypes
import os
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int32,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)

SONAME = "libumd.so.1"

# Handles and device addresses (typedef uint64_t in umd.h).
umdDevice = c_uint64
umdContext = c_uint64
umdBuffer = c_uint64
umdCmdBuf = c_uint64
umdDevicePtr = c_uint64
umdResult = c_int32

UMD_DETAIL_FUNCTION_LEN = 64
UMD_DETAIL_FILE_LEN = 128
UMD_DETAIL_MESSAGE_LEN = 768


class umdGemmI8Args(Structure):
    _fields_ = [
        ("a", umdDevicePtr),
        ("b", umdDevicePtr),
        ("c", umdDevicePtr),
        ("m", c_uint32),
        ("n", c_uint32),
        ("k", c_uint32),
        ("lda", c_uint32),
        ("ldb", c_uint32),
        ("ldc", c_uint32),
        ("flags", c_uint32),
        ("reserved", c_uint32),
    ]


class umdContextState(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("reset_status", c_uint32),
        ("hung", c_uint32),
        ("fault_type", c_uint32),
        ("fault_va", c_uint64),
        ("fault_access", c_uint32),
        ("reserved", c_uint32),
        ("fault_offset", c_uint64),
        ("completed_seqno", c_uint64),
        ("submitted_seqno", c_uint64),
        ("ban", c_uint32),
        ("reserved2", c_uint32),
        ("dep_context_id", c_uint64),
        ("dep_seqno", c_uint64),
    ]


class umdDeviceInfo(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("index", c_uint32),
        ("backend", c_char * 8),
        ("location", c_char * 64),
        ("uapi_major", c_uint32),
        ("uapi_minor", c_uint32),
        ("driver_major", c_uint32),
        ("driver_minor", c_uint32),
        ("driver_patch", c_uint32),
        ("num_queues", c_uint32),
        ("caps", c_uint64),
        ("mem_total", c_uint64),
        ("max_alloc", c_uint64),
        ("va_start", c_uint64),
        ("va_end", c_uint64),
        ("page_size", c_uint32),
        ("max_cmdbufs_per_submit", c_uint32),
        ("pci_address", c_char * 16),
    ]


class umdErrorDetail(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("code", c_int32),
        ("action", c_int32),
        ("os_errno", c_int32),
        ("kmd_reason", c_uint32),
        ("line", c_uint32),
        ("thread_id", c_uint64),
        ("context_id", c_uint64),
        ("fence_seqno", c_uint64),
        ("fault_va", c_uint64),
        ("mono_ns", c_uint64),
        ("wall_ns", c_uint64),
        ("function", c_char * UMD_DETAIL_FUNCTION_LEN),
        ("file", c_char * UMD_DETAIL_FILE_LEN),
        ("message", c_char * UMD_DETAIL_MESSAGE_LEN),
    ]


class umdLogStats(Structure):
    _fields_ = [("struct_size", c_uint32), ("file_ok", c_uint32)] + [
        (n, c_uint64)
        for n in (
            "dropped",
            "failed_file",
            "failed_console",
            "written_file",
            "written_console",
            "rotations",
            "flush_timeouts",
            "ring_records",
            "blackbox_dumps",
            "queued",
            "queue_capacity",
        )
    ]


class umdMemAllocInfo(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("flags", c_uint32),
        ("size", c_uint64),
        ("alignment", c_uint64),
        ("tag", c_char_p),
    ]


class umdMemCounter(Structure):
    _fields_ = [
        ("current", c_uint64),
        ("peak", c_uint64),
        ("allocated", c_uint64),
        ("freed", c_uint64),
    ]


MEM_STATS_GAUGES = (
    "allocated_bytes",
    "requested_bytes",
    "reserved_bytes",
    "active_bytes",
    "cached_bytes",
    "allocation_count",
    "segment_count",
    "active_count",
    "cached_count",
)
MEM_STATS_SCALARS = (
    "num_allocs",
    "num_frees",
    "num_cache_hits",
    "num_cache_misses",
    "num_kernel_allocs",
    "num_kernel_frees",
    "num_kernel_calls",
    "num_alloc_retries",
    "num_ooms",
    "num_deferred_frees",
    "num_trims",
    "num_segments_released",
    "largest_free_block",
    "fragmentation_bytes",
    "largest_recent_request",
    "release_threshold",
    "history_capacity",
    "history_events",
    "device_total",
    "device_free",
)


class umdMemStats(Structure):
    _fields_ = (
        [("struct_size", c_uint32), ("pool_enabled", c_uint32)]
        + [(n, umdMemCounter * 3) for n in MEM_STATS_GAUGES]
        + [(n, c_uint64) for n in MEM_STATS_SCALARS]
    )


class umdMemContextStats(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("reserved", c_uint32),
        ("context_id", c_uint64),
        ("allocated_bytes", umdMemCounter),
        ("requested_bytes", umdMemCounter),
        ("allocation_count", umdMemCounter),
        ("num_allocs", c_uint64),
        ("num_frees", c_uint64),
        ("num_cache_hits", c_uint64),
    ]


class umdFence(Structure):
    _fields_ = [("context", umdContext), ("seqno", c_uint64)]


STRUCTS = (
    umdGemmI8Args,
    umdContextState,
    umdDeviceInfo,
    umdErrorDetail,
    umdLogStats,
    umdMemAllocInfo,
    umdMemCounter,
    umdMemStats,
    umdMemContextStats,
    umdFence,
)

P = POINTER
# name: argument types. Every one returns umdResult unless listed in _OTHER_RESTYPES.
_FUNCTIONS = {
    "umdCmdBufCreate": (umdContext, P(umdCmdBuf)),
    "umdCmdBufDestroy": (umdCmdBuf,),
    "umdCmdBufBegin": (umdCmdBuf,),
    "umdCmdBufEnd": (umdCmdBuf,),
    "umdCmdCopy": (umdCmdBuf, umdDevicePtr, umdDevicePtr, c_uint64),
    "umdCmdFill": (umdCmdBuf, umdDevicePtr, c_uint64, c_uint32),
    "umdCmdGemmI8": (umdCmdBuf, P(umdGemmI8Args)),
    "umdCmdEltwise": (umdCmdBuf, c_uint32, c_uint32, umdDevicePtr, umdDevicePtr, umdDevicePtr),
    "umdCmdRequantize": (umdCmdBuf, c_uint32, umdDevicePtr, umdDevicePtr, c_int32, c_uint32),
    "umdCmdTimestamp": (umdCmdBuf, umdDevicePtr),
    "umdCmdWriteValue": (umdCmdBuf, umdDevicePtr, c_uint64),
    "umdCmdWaitValue": (umdCmdBuf, umdDevicePtr, c_uint64),
    "umdCmdDebugHang": (umdCmdBuf,),
    "umdContextCreate": (umdDevice, c_uint32, P(umdContext)),
    "umdContextDestroy": (umdContext,),
    "umdContextGetState": (umdContext, P(umdContextState)),
    "umdGetDeviceCount": (P(c_uint32),),
    "umdDeviceOpen": (c_uint32, P(umdDevice)),
    "umdDeviceClose": (umdDevice,),
    "umdDeviceGetInfo": (umdDevice, P(umdDeviceInfo)),
    "umdDebugInjectFault": (umdDevice, c_uint32),
    "umdGetVersion": (P(c_uint32),) * 5,
    "umdGetErrorName": (c_int32,),
    "umdGetErrorString": (c_int32,),
    "umdGetErrorAction": (c_int32,),
    "umdIsRetryable": (c_int32,),
    "umdGetLastErrorDetail": (P(umdErrorDetail),),
    "umdLogSetLevel": (c_char_p, c_int32, c_uint32),
    "umdLogSetFilter": (c_uint32, c_char_p),
    "umdLogGetFilter": (c_uint32, c_void_p, c_size_t, P(c_size_t)),
    "umdLogSetFormat": (c_uint32, c_uint32),
    "umdLogSetFile": (c_char_p, c_uint64, c_uint32),
    "umdLogGetFilePath": (c_void_p, c_size_t, P(c_size_t)),
    "umdLogFlush": (c_uint32,),
    "umdLogGetStats": (P(umdLogStats),),
    "umdLogDumpBlackbox": (c_void_p, c_size_t, P(c_size_t)),
    "umdMemAlloc": (umdContext, c_uint64, c_uint32, P(umdBuffer)),
    "umdMemAllocEx": (umdContext, P(umdMemAllocInfo), P(umdBuffer)),
    "umdMemFreeAddress": (umdContext, umdDevicePtr),
    "umdMemFree": (umdBuffer,),
    "umdMemGetAddress": (umdBuffer, P(umdDevicePtr)),
    "umdMemMap": (umdBuffer, P(c_void_p)),
    "umdMemUnmap": (umdBuffer,),
    "umdMemcpyHtoD": (umdBuffer, c_uint64, c_void_p, c_uint64),
    "umdMemcpyDtoH": (c_void_p, umdBuffer, c_uint64, c_uint64),
    "umdMemGetStats": (umdDevice, P(umdMemStats)),
    "umdMemGetContextStats": (umdContext, P(umdMemContextStats)),
    "umdMemResetPeakStats": (umdDevice,),
    "umdMemTrim": (umdDevice, c_uint64, P(c_uint64)),
    "umdMemSetReleaseThreshold": (umdDevice, c_uint64),
    "umdMemDumpHistory": (umdDevice, c_void_p, c_uint64, P(c_uint64)),
    "umdMemDumpHistoryToFile": (umdDevice, c_char_p),
    "umdSubmit": (umdContext, P(umdCmdBuf), c_uint32, P(umdFence), c_uint32, P(umdFence)),
    "umdFenceQuery": (P(umdFence),),
    "umdFenceWait": (P(umdFence), c_uint64),
}
_OTHER_RESTYPES = {
    "umdGetErrorName": c_char_p,
    "umdGetErrorString": c_char_p,
    "umdGetErrorAction": c_int32,
    "umdIsRetryable": c_int32,
}


def _candidates():
    """Where libumd is looked for, in order (docs/install.md, "Python")."""
    explicit = os.environ.get("AIGPU_UMD_LIBRARY")
    if explicit:
        return [explicit]  # asked for exactly this one: nothing else
    found = [SONAME]  # the loader's search: LD_LIBRARY_PATH, the ld.so cache
    try:
        from . import _install  # written by scripts/install.sh

        found.append(os.path.join(_install.LIBDIR, _install.SONAME))
    except ImportError:
        pass
    # Running from the source tree (python/aigpu): the cargo build's library.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isfile(os.path.join(root, "Cargo.toml")):
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
        found.append(os.path.join(target, "release", "libumd.so"))
    return found


def _load():
    tried = []
    for c in _candidates():
        try:
            return ctypes.CDLL(c), tried
        except OSError as e:
            tried.append("%s (%s)" % (c, e))
    raise ImportError(
        "aigpu: cannot load libumd: tried "
        + "; ".join(tried)
        + ". Install it (scripts/install.sh), or set LD_LIBRARY_PATH to its directory, or "
        "AIGPU_UMD_LIBRARY to the file."
    )


lib, _tried = _load()
for _name, _args in _FUNCTIONS.items():
    _fn = getattr(lib, _name)
    _fn.argtypes = list(_args)
    _fn.restype = _OTHER_RESTYPES.get(_name, umdResult)
del _name, _args, _fn


class _DlInfo(Structure):
    _fields_ = [
        ("dli_fname", c_char_p),
        ("dli_fbase", c_void_p),
        ("dli_sname", c_char_p),
        ("dli_saddr", c_void_p),
    ]


def library_path():
    """The file libumd was loaded from (dladdr on one of its functions)."""
    libc = ctypes.CDLL(None)
    dladdr = libc.dladdr
    dladdr.argtypes = [c_void_p, POINTER(_DlInfo)]
    dladdr.restype = ctypes.c_int
    info = _DlInfo()
    addr = ctypes.cast(lib.umdGetVersion, c_void_p)
    if not dladdr(addr, ctypes.byref(info)) or not info.dli_fname:
        return lib._name
    return os.path.realpath(info.dli_fname.decode())
