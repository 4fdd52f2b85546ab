"""A pytest plugin for ``bench/gpu_session.sh``: each failed test's report is appended to the file that
``CIRCUITOP_FAILURES`` names as the report arrives (under xdist too: the controller receives every
worker's reports), so a test stage stopped at its time limit still says why its tests failed; pytest
prints its own summary only at the end. Load it with ``-p bench.pytest_failures``."""

from __future__ import annotations

import os

__all__ = ["pytest_configure", "pytest_runtest_logreport"]

#: the characters of each traceback kept (its end, where the assertion or error is)
KEEP = 4000


_WORKER = False


def pytest_configure(config) -> None:
    global _WORKER
    _WORKER = hasattr(config, "workerinput")  # an xdist worker (its controller writes its reports)


def pytest_runtest_logreport(report) -> None:
    path = os.environ.get("CIRCUITOP_FAILURES")
    if path and report.failed and not _WORKER:  # once, by the controller
        with open(path, "a") as out:
            out.write(f"== {report.nodeid} ({report.when})\n{report.longreprtext[-KEEP:]}\n\n")
