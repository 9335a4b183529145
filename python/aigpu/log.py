"""libumd's logging controls (docs/logging.md): levels, filters, format, file sink, flush."""

import ctypes
import enum
from ctypes import byref

from . import _lib
from .core import _read_string, _struct, _to_dict
from .errors import call


class Level(enum.IntEnum):
    OFF = 0
    ERROR = 1
    WARN = 2
    INFO = 3
    DEBUG = 4
    TRACE = 5


class Sink(enum.IntFlag):
    CONSOLE = 1
    FILE = 2
    ALL = 3


class Format(enum.IntEnum):
    TEXT = 0
    JSON = 1


def set_level(level, module=None, sinks=Sink.ALL):
    """Sets one module's level ("umd::memory"; None: the default level) on `sinks`."""
    m = module.encode() if module else None
    call("umdLogSetLevel", m, int(level), int(sinks))


def set_filter(filter, sinks=Sink.ALL):
    """Replaces the whole filter of `sinks` ("warn,umd::memory=debug", RUST_LOG syntax)."""
    call("umdLogSetFilter", int(sinks), filter.encode())


def get_filter(sink):
    """The filter of one sink (Sink.CONSOLE or Sink.FILE) in canonical RUST_LOG syntax."""
    return _read_string("umdLogGetFilter", int(sink))


def set_format(fmt, sinks=Sink.ALL):
    call("umdLogSetFormat", int(sinks), int(fmt))


def set_file(directory=None, max_bytes=0, max_files=0):
    """Moves the file sink to `directory` (None: keep) with its rotation limits (0: keep)."""
    d = str(directory).encode() if directory is not None else None
    call("umdLogSetFile", d, int(max_bytes), int(max_files))


def file_path():
    """The active log file; LogError (UMD_ERR_LOG_IO) when none is open."""
    return _read_string("umdLogGetFilePath")


def flush(timeout_ms=5000):
    """Waits until every record logged so far is written (and the file fdatasync'ed)."""
    call("umdLogFlush", int(timeout_ms))


def stats():
    """umdLogStats as a dict."""
    s = _struct(_lib.umdLogStats)
    call("umdLogGetStats", byref(s))
    return _to_dict(s)


def dump_blackbox():
    """Writes the emergency ring (the last WARN-and-worse records) to a file; its path."""
    return _read_string("umdLogDumpBlackbox")


__all__ = [
    "Level",
    "Sink",
    "Format",
    "set_level",
    "set_filter",
    "get_filter",
    "set_format",
    "set_file",
    "file_path",
    "flush",
    "stats",
    "dump_blackbox",
]
del ctypes
