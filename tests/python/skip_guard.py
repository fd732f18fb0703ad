"""pytest hooks that fail the run when a test skips for a reason not listed in ALLOWED: a missing
package or model must fail the test command, not pass it silently. tests/python/conftest.py and
tests/vllm/conftest.py import them."""

from __future__ import annotations

import pytest

# The one skip the test command allows: a GPU test on a machine without a GPU (it says so).
ALLOWED = ("no CUDA device",)

_unexpected: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if not any(allowed in reason for allowed in ALLOWED):
        _unexpected.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexpected:
        print("\nskip_guard: tests skipped for a reason the test command does not allow:")
        for line in _unexpected:
            print(f"  {line}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
