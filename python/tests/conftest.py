"""pytest set-up: the simulator backend and a private log directory unless the caller chose."""

import os
import subprocess
import sys
import tempfile

import pytest

os.environ.setdefault("UMD_BACKEND", "sim")
if "UMD_LOG_DIR" not in os.environ:
    os.environ["UMD_LOG_DIR"] = tempfile.mkdtemp(prefix="aigpu-pytest-logs-")

# The source tree's package, unless the caller is testing an installed one (PYTHONPATH) and says
# so (tests/install/test_install.sh).
if os.environ.get("AIGPU_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aigpu  # noqa: E402  (after the environment: libumd reads it once per process)


@pytest.fixture
def dev():
    with aigpu.Device(0) as d:
        yield d


@pytest.fixture
def ctx(dev):
    with dev.context() as c:
        yield c


def run_py(code, **env):
    """Runs `code` in a fresh interpreter (libumd reads its environment once per process)
    with extra environment variables; returns its stdout, fails the test on a non-zero exit."""
    e = dict(os.environ)
    e.update({k: str(v) for k, v in env.items()})
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(aigpu.__file__)))
    e["PYTHONPATH"] = pkg + os.pathsep + e.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout, p.stderr)
    return p.stdout

# The tests provoke failures on purpose: libumd's WARN lines for them go to the log file only
# (UMD_LOG_DIR); the console keeps ERROR records.
aigpu.log.set_filter("error", aigpu.log.Sink.CONSOLE)
