"""aigpu: Python bindings for libumd, the aigpu user-mode driver (include/umd.h over ctypes).

    import numpy as np, aigpu
    with aigpu.Device(0) as dev, dev.context() as ctx:
        a = ctx.from_numpy(np.ones((4, 8), np.int8))
        ...

Every failing call raises a UmdError subclass (aigpu.errors) carrying the code's name, the
action and the whole umdErrorDetail. Objects close with `with`, close(), or the garbage
collector, exactly once. Handles are uint64 values with type bits (`obj.handle`).
See docs/install.md ("Python") in the repository.
"""

from . import log
from ._lib import SONAME, library_path
from ._version import __version__
from .core import (
    DEBUG_FAULT_FALL_OFF_BUS,
    DEBUG_FAULT_MEM_ERROR,
    DEBUG_FAULT_RESET_FAILURE,
    ELTWISE_ADD,
    ELTWISE_MUL,
    ELTWISE_RELU,
    GEMM_ACCUMULATE,
    MEM_READ_ONLY,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    RESET_GUILTY,
    RESET_INNOCENT,
    RESET_NONE,
    TIMEOUT_INFINITE,
    Buffer,
    CmdBuf,
    Context,
    Device,
    Fence,
    Mapping,
    Version,
    device_count,
    version,
)
from .errors import (
    ContextError,
    ContextLostError,
    DependencyFailedError,
    DeviceError,
    DeviceLostError,
    ErrorAction,
    ErrorDetail,
    InitError,
    InternalError,
    InvalidError,
    InvalidHandleError,
    LogError,
    MemError,
    OutOfMemoryError,
    Result,
    SubmitError,
    SyncError,
    SyncTimeoutError,
    UmdError,
    error_action,
    error_class,
    error_name,
    error_string,
    is_retryable,
    last_error_detail,
)

__all__ = [n for n in dir() if not n.startswith("_")] + ["__version__"]
