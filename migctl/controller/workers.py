"""The controller's worker threads: one per node change, resumed after restarts, with a doubling backoff.

A mixin of `loop.Controller`, apart so the loop reads as watch, lead, plan and decide. Each worker runs one
actuator call (start, drive, release) and, whatever happens, records its outcome: a failure backs the node off
(no hot loop), the pods of a finished change settle, and the controller reconciles again.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable

from migctl.adapters.kube import Stopped
from migctl.adapters.kube.errors import KubeError
from migctl.config import ControllerSettings
from migctl.controller.actuator import Actuator, NodeChanged, Target
from migctl.reconcile.facts import NodeFacts, resumptions
from migctl.reconcile.nodestate import LeftAlone

log = logging.getLogger("migctl.controller.loop")


class Workers:
    """What `loop.Controller` keeps of its workers, and the methods that start them."""

    settings: ControllerSettings
    clock: Callable[[], float]
    actuator: Actuator | None
    workers: dict[str, threading.Thread]
    settled: dict[str, float]  # pod -> until when it stays out of planning
    strays: set[str]  # in-flight nodes that left node_selector (or were never in the cache)
    resume_after: dict[str, tuple[float, int]]  # node -> (not before, failed resumes in a row)
    _lock: threading.Lock

    def trigger(self, delay: float, job_id: str = "debounce") -> None:
        raise NotImplementedError

    def _resume(self, facts: dict[str, NodeFacts], in_flight: set[str], now: float) -> None:
        """Hand every node left mid-way to a worker: `drive` (leader) or `release` (dry run, once abandoned; a
        node outside node_selector). A resume that failed waits a doubling backoff (no hot loop)."""
        not_before = {n: until for n, (until, _) in self.resume_after.items()}
        for name, why in resumptions(facts.values(), in_flight, not_before, now, self.settings):
            log.info("node %s: %s", name, why or "resuming", extra={"node": name})
            fn: Callable[[Actuator], str] = (
                functools.partial(Actuator.release, name=name, why=why)
                if why
                else functools.partial(Actuator.drive, name=name)
            )
            self._spawn(name, fn)
            in_flight.add(name)
        for name in sorted(self.strays - set(facts) - in_flight) if not self.settings.dry_run else ():
            if not_before.get(name, 0.0) <= now:
                self._spawn(name, functools.partial(self._release_stray, name=name))
                in_flight.add(name)

    def _release_stray(self, actuator: Actuator, name: str) -> str:
        """A node in flight outside node_selector: released once abandoned (it may be another deployment's)."""
        outcome = actuator.release(name, "released: the node left migctl's node_selector mid-phase", True)
        if outcome != "waiting":
            self.strays.discard(name)
        return outcome

    def _spawn(self, node: str, fn: Callable[[Actuator], str], target: Target | None = None) -> None:
        actuator = self.actuator
        if actuator is None:
            return

        def run() -> None:
            outcome, failed = "aborted", True
            try:
                outcome = fn(actuator)
                failed = False
            except NodeChanged as e:
                log.info("node %s: not started: %s; re-planning", node, e, extra={"node": node})
            except LeftAlone as e:  # another migctl version's change: retried after the backoff, never rolled back
                log.warning("node %s: %s", node, e, extra={"node": node})
            except Stopped:
                failed = False
                log.info("node %s: stopped acting (leadership lost or shutting down)", node, extra={"node": node})
            except KubeError as e:
                log.error("node %s: API error %s; resuming on a later reconcile", node, e, extra={"node": node})
            except Exception:
                log.exception("node %s: actuation crashed; resuming on a later reconcile", node)
            finally:
                now = self.clock()
                with self._lock:
                    if failed:
                        n = self.resume_after.get(node, (0.0, 0))[1] + 1
                        self.resume_after[node] = (now + min(300.0, self.settings.resync_interval_s * 2 ** (n - 1)), n)
                    else:
                        self.resume_after.pop(node, None)
                    if target is not None:
                        for p in target.pods:  # reserved while in flight; settle after success
                            if outcome == "succeeded":
                                self.settled[p] = now + self.settings.settle_s
                            else:
                                self.settled.pop(p, None)
                    if self.workers.get(node) is threading.current_thread():
                        del self.workers[node]
                self.trigger(self.settings.debounce_s)

        t = threading.Thread(target=run, name=f"actuate-{node}", daemon=True)
        with self._lock:
            self.workers[node] = t
        t.start()
