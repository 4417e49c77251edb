"""The controller's scheduler runs jobs on daemon threads: a process never waits at exit for a plan in progress."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

from migctl.controller.scheduling import make_scheduler

_BLOCKED_AT_EXIT = textwrap.dedent(
    """
    import threading, time
    from migctl.controller.scheduling import make_scheduler
    started = threading.Event()
    s = make_scheduler()
    s.start()
    s.add_job(lambda: (started.set(), time.sleep(3600)))
    assert started.wait(30)
    s.shutdown(wait=False)
    print("main returns")
    """
)


def test_a_job_still_running_does_not_keep_the_process_alive() -> None:
    # With APScheduler's default pool the interpreter joins the running job at exit: this would take an hour.
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED_AT_EXIT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "main returns" in done.stdout


def test_jobs_run_coalesced_and_report_their_errors() -> None:
    scheduler = make_scheduler()
    ran, failed = threading.Event(), threading.Event()
    daemon: list[bool] = []

    def job() -> None:
        daemon.append(threading.current_thread().daemon)
        ran.set()

    def listener(event: object) -> None:
        if getattr(event, "exception", None) is not None:
            failed.set()

    scheduler.add_listener(listener)
    scheduler.start()
    try:
        scheduler.add_job(job)
        scheduler.add_job(lambda: 1 / 0)
        assert ran.wait(10) and failed.wait(10)
    finally:
        scheduler.shutdown(wait=False)
    assert daemon == [True]
