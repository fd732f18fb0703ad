"""A real kvtierd child process in its own runtime directory and shm prefix (tests/python and
tests/fidelity use it). The binary is $KVTIER_KVTIERD, else <build>/daemon/kvtierd with <build> =
$KVTIER_BUILD_DIR or <repo>/build."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import kvtier

REPO = Path(__file__).resolve().parents[2]


def kvtierd_path() -> Path:
    explicit = os.environ.get("KVTIER_KVTIERD")
    if explicit:
        return Path(explicit)
    build = Path(os.environ.get("KVTIER_BUILD_DIR", REPO / "build"))
    return build / "daemon" / "kvtierd"


class Daemon:
    """A kvtierd child process; stop() ends it (SIGTERM, then SIGKILL) and removes its directory and
    the shared-memory segments named with its prefix."""

    def __init__(self, extra: list[str] | None = None) -> None:
        binary = kvtierd_path()
        if not binary.exists():
            raise FileNotFoundError(f"kvtierd not found at {binary}: build it or set KVTIER_KVTIERD")
        self.dir = Path(tempfile.mkdtemp(prefix="kvtier-py-"))
        os.chmod(self.dir, 0o755)
        self.socket = str(self.dir / "kvtierd.sock")
        self.prefix = "kvpy-" + uuid.uuid4().hex[:12]
        self.log_path = self.dir / "kvtierd.log"
        argv = [str(binary), "--set", f"daemon.runtime_dir={self.dir}", "--set", f"daemon.shm_prefix={self.prefix}"]
        self.argv = argv + (extra or [])
        self._log = open(self.log_path, "wb")
        self._start()

    def _start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def kill(self) -> None:
        """A crash: SIGKILL, the socket file and every segment left behind."""
        self.process.kill()
        self.process.wait()

    def restart(self) -> None:
        """A successor on the same socket, runtime directory and shm prefix (after kill or stop)."""
        if self.process.poll() is None:
            raise RuntimeError("kvtierd is still running")
        self._start()

    def _wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"kvtierd exited with {self.process.returncode}: {self.log()}")
            try:
                kvtier.Client(self.socket, "probe").close()
                return
            except kvtier.UnavailableError:
                time.sleep(0.02)
        raise RuntimeError(f"kvtierd did not start within {timeout}s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def connect(self, name: str = "pytest", role: kvtier.Role = kvtier.Role.ENGINE) -> kvtier.Client:
        return kvtier.Client(self.socket, name, role)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        # A stopped kvtierd leaves its clients' pools for a successor; this one has none.
        for segment in Path("/dev/shm").glob(f"kvtier.{self.prefix}-*"):
            segment.unlink(missing_ok=True)

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
