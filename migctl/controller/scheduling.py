"""The controller's job scheduler (APScheduler), with jobs on daemon threads.

Why not APScheduler's default thread pool: `concurrent.futures` threads are joined when the interpreter exits, so
SIGTERM during a long plan (a large cluster, or one full of objects migctl reads and rejects) kept the process
alive until the plan ended, past the kubelet's grace period, and the pod was killed instead of stopping. A plan is
safe to abandon: it writes nothing by itself, and every write after `Controller.halt` is refused by the term's API.
What must finish (a node change's worker, the Lease release) is joined by `Controller.stop`, not by the pool.
"""

from __future__ import annotations

import threading
from typing import Any

from apscheduler.executors.base import BaseExecutor, run_job
from apscheduler.schedulers.background import BackgroundScheduler


class DaemonThreadExecutor(BaseExecutor):  # type: ignore[misc]  # APScheduler is unannotated
    """Each job run on its own daemon thread (the scheduler's `max_instances` still bounds runs of one job)."""

    def _do_submit_job(self, job: Any, run_times: list[Any]) -> None:
        def run() -> None:
            try:
                events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
            except BaseException as e:  # run_job reports a job's own errors as events; this is APScheduler's
                self._run_job_error(job.id, e, e.__traceback__)
            else:
                self._run_job_success(job.id, events)

        threading.Thread(target=run, name=f"migctl-job-{job.id}", daemon=True).start()


def make_scheduler() -> BackgroundScheduler:
    """Coalesced jobs that run however late (a trigger is a reconcile owed, never a deadline), on daemon threads."""
    return BackgroundScheduler(
        executors={"default": DaemonThreadExecutor()},
        job_defaults={"coalesce": True, "misfire_grace_time": None},
    )
