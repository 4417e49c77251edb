"""`migctl run` as a real OS process for crash tests: started with a config file and, optionally, a failpoint
(`MIGCTL_FAILPOINT`, migctl/controller/failpoint.py) at which it SIGKILLs itself."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from migctl.config import Config

from .controlplane import ControlPlane


class ControllerProcess:
    """One `migctl run` process; its output goes to a file (shown when a test fails)."""

    def __init__(self, control_plane: ControlPlane, config: Config, work: Path, failpoint: str = "") -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.config_file = work / "migctl.yaml"
        self.config_file.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_defaults=True)))
        self.log_file = work / "migctl.log"
        exe = shutil.which("migctl", path=str(Path(sys.executable).parent)) or "migctl"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MIGCTL_")}
        if failpoint:
            env["MIGCTL_FAILPOINT"] = failpoint
        with self.log_file.open("w") as out:
            self.proc = subprocess.Popen(
                [exe, "run", "--config", str(self.config_file), "--kubeconfig", str(control_plane.kubeconfig)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def output(self, tail: int = 3000) -> str:
        return self.log_file.read_text()[-tail:]

    def wait_killed(self, timeout: float) -> None:
        """Wait until the failpoint killed the process (AssertionError with its log if it ended otherwise)."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"failpoint never reached within {timeout} s:\n{self.output()}") from None
        assert rc == -signal.SIGKILL, f"exit status {rc}, expected SIGKILL:\n{self.output()}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
