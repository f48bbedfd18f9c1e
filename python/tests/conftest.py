"""Fixtures of the Python client's tests: a real lathed (from the build directory: LATHED_BIN)
with a token, and a real lathe-worker (LATHE_WORKER_BIN) measuring on this machine. CTest
sets those variables and PYTHONPATH (python/CMakeLists.txt)."""

import shutil
import tempfile

import pytest

from fleet import TOKEN, Daemon  # noqa: F401 (TOKEN is the tests')


@pytest.fixture(scope="session")
def fleet():
    """A lathed with the token and one worker, shared by the tests of the session."""
    workdir = tempfile.mkdtemp(prefix="lathe_pytest_")
    d = Daemon(workdir)
    d.start_worker()
    yield d
    d.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def scratch():
    workdir = tempfile.mkdtemp(prefix="lathe_pytest_")
    yield workdir
    shutil.rmtree(workdir, ignore_errors=True)
