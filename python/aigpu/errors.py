"""libumd's results as Python exceptions (docs/libumd.md, "Results").

Every failing call raises a UmdError subclass chosen by the code's domain (its value range):
the exception carries the code, its enumerator name, the caller action, whether a retry can
succeed, and the whole umdErrorDetail of the failure (read on the failing thread right after the
call, before anything else can overwrite it).
"""

import ctypes
import enum
from dataclasses import dataclass, fields

from . import _lib

lib = _lib.lib


def _names():
    """Every result code libumd knows, from the library itself (its names are the contract)."""
    out = {}
    for v in range(-1000, 16):
        n = lib.umdGetErrorName(v).decode()
        if n != "UMD_UNKNOWN_RESULT":
            out[n[len("UMD_") :]] = v
    return out


Result = enum.IntEnum("Result", _names())
Result.__doc__ = "umdResult codes (names without the UMD_ prefix: Result.ERR_CTX_LOST)."


class ErrorAction(enum.IntEnum):
    """umdErrorAction: what the caller should do about a result."""

    NONE = 0
    RETRY = 1
    FREE_MEMORY_AND_RETRY = 2
    RECREATE_CONTEXT = 3
    RECREATE_DEVICE = 4
    FIX_CALL = 5
    CHECK_INSTALLATION = 6
    REPORT_BUG = 7
    FIX_CONFIGURATION = 8
    RELEASE_AND_RETRY = 9


def error_name(code):
    """The enumerator name ("UMD_ERR_DEVICE_LOST"); "UMD_UNKNOWN_RESULT" for a non-code."""
    return lib.umdGetErrorName(int(code)).decode()


def error_string(code):
    """One sentence saying what a result means."""
    return lib.umdGetErrorString(int(code)).decode()


def error_action(code):
    """The ErrorAction for a result."""
    a = lib.umdGetErrorAction(int(code))
    try:
        return ErrorAction(a)
    except ValueError:
        return a


def is_retryable(code):
    """True when retrying (possibly after freeing memory) can succeed."""
    return lib.umdIsRetryable(int(code)) == 1


@dataclass(frozen=True)
class ErrorDetail:
    """umdErrorDetail, field for field (strings decoded)."""

    code: int
    action: int
    os_errno: int
    kmd_reason: int
    line: int
    thread_id: int
    context_id: int
    fence_seqno: int
    fault_va: int
    mono_ns: int
    wall_ns: int
    function: str
    file: str
    message: str

    @property
    def name(self):
        return error_name(self.code)

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}


def last_error_detail():
    """The calling thread's most recent failure (code 0 if there was none)."""
    d = _lib.umdErrorDetail()
    d.struct_size = ctypes.sizeof(d)
    r = lib.umdGetLastErrorDetail(ctypes.byref(d))
    if r != 0:
        raise UmdError(r, None, "umdGetLastErrorDetail")
    vals = {}
    for name, _ in _lib.umdErrorDetail._fields_:
        if name == "struct_size":
            continue
        v = getattr(d, name)
        vals[name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    try:
        vals["action"] = ErrorAction(vals["action"])
    except ValueError:
        pass
    return ErrorDetail(**vals)


class UmdError(Exception):
    """A libumd call failed.

    code: the umdResult (int); name: "UMD_ERR_..."; action: ErrorAction; retryable: bool;
    detail: ErrorDetail of this failure (None only if libumd could not give one); call: the C
    function that was called.
    """

    def __init__(self, code, detail, call):
        self.code = int(code)
        self.name = error_name(code)
        self.action = error_action(code)
        self.retryable = is_retryable(code)
        self.detail = detail
        self.call = call
        msg = detail.message if detail is not None and detail.code == self.code else ""
        super().__init__(
            "%s failed: %s (%d): %s" % (call, self.name, self.code, msg or error_string(code))
        )


class InvalidError(UmdError, ValueError):
    """UMD_ERR_INVALID_* (-1..-99): the call itself is wrong."""


class InvalidHandleError(InvalidError):
    """UMD_ERR_INVALID_HANDLE: null, never valid, destroyed, wrong type, or foreign handle."""


class InitError(UmdError):
    """UMD_ERR_INIT_* (-100..-199): the installation or the configuration is wrong."""


class DeviceError(UmdError):
    """UMD_ERR_DEVICE_* (-200..-299)."""


class DeviceLostError(DeviceError):
    """UMD_ERR_DEVICE_LOST: close the device and open it again."""


class ContextError(UmdError):
    """UMD_ERR_CTX_* (-300..-399)."""


class ContextLostError(ContextError):
    """UMD_ERR_CTX_LOST: the context faulted or hung; destroy it and create a new one."""


class DependencyFailedError(ContextError):
    """UMD_ERR_CTX_DEPENDENCY_FAILED: work this depends on failed, so nothing ran on its output;
    the detail names the failed producer. Recreate the contexts of the pipeline."""


class MemError(UmdError):
    """UMD_ERR_MEM_* (-400..-499)."""


class OutOfMemoryError(MemError):
    """UMD_ERR_MEM_OUT_OF_MEMORY: free device memory (or trim the pool) and retry."""


class SubmitError(UmdError):
    """UMD_ERR_SUBMIT_* (-500..-599)."""


class SyncError(UmdError):
    """UMD_ERR_SYNC_* (-600..-699)."""


class SyncTimeoutError(SyncError, TimeoutError):
    """UMD_ERR_SYNC_TIMEOUT: the work is still running; wait again."""


class LogError(UmdError):
    """UMD_ERR_LOG_* (-700..-799): logging failed; the driver itself keeps working."""


class InternalError(UmdError):
    """UMD_ERR_INTERNAL* (-900..-999): a bug in libumd; report it with the detail and the log."""


_SPECIFIC = {
    Result.ERR_INVALID_HANDLE: InvalidHandleError,
    Result.ERR_DEVICE_LOST: DeviceLostError,
    Result.ERR_CTX_LOST: ContextLostError,
    Result.ERR_CTX_DEPENDENCY_FAILED: DependencyFailedError,
    Result.ERR_MEM_OUT_OF_MEMORY: OutOfMemoryError,
    Result.ERR_SYNC_TIMEOUT: SyncTimeoutError,
}
_DOMAINS = (
    (-99, -1, InvalidError),
    (-199, -100, InitError),
    (-299, -200, DeviceError),
    (-399, -300, ContextError),
    (-499, -400, MemError),
    (-599, -500, SubmitError),
    (-699, -600, SyncError),
    (-799, -700, LogError),
    (-999, -900, InternalError),
)


def error_class(code):
    """The exception class raised for a (negative) result code."""
    code = int(code)
    if code in _SPECIFIC:
        return _SPECIFIC[code]
    for lo, hi, cls in _DOMAINS:
        if lo <= code <= hi:
            return cls
    return UmdError


def check(code, call):
    """Raises the matching UmdError for a negative result; returns the result otherwise."""
    if code >= 0:
        return code
    try:
        detail = last_error_detail()
    except UmdError:
        detail = None
    raise error_class(code)(code, detail, call)


def call(name, *args):
    """Calls libumd's `name` and raises on failure; returns the (non-negative) result."""
    return check(getattr(lib, name)(*args), name)
