"""Services on loopback for the e2e tests: a Prefect server, an MLflow server, Prefect workers, each a process (group)
of its own whose output is kept; and the death of a machine (its whole process tree killed at once)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """A started process with its output collected (`lines`) and written to `log`."""

    def __init__(self, cmd: list[str], cwd: Path, env: dict, log: Path):
        self.log = log.open("w")
        self.lines: list[str] = []
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            self.lines.append(line)

    def wait_http(self, url: str, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                return
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"{url} did not answer; output:\n{''.join(self.lines[-30:])}") from None
                time.sleep(0.5)

    def kill_tree(self) -> list[str]:
        """SIGKILL this process and every descendant at once (a machine that dies: nobody reports anything)."""
        import psutil

        root = psutil.Process(self.proc.pid)
        tree = [root, *root.children(recursive=True)]
        names = [" ".join(p.cmdline()[:4]) for p in tree]
        for p in tree:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.wait(timeout=30)
        return names

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        self.log.close()


def prefect_server(home: Path, env: dict, logs: Path) -> tuple[Service, str]:
    port = free_port()
    server = Service([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)], home,
                     env | {"PREFECT_HOME": str(home)}, logs / "prefect-server.log")
    url = f"http://127.0.0.1:{port}/api"
    server.wait_http(f"{url}/health")
    return server, url


def mlflow_server(root: Path, env: dict, logs: Path) -> tuple[Service, str]:
    """`mlflow server` with proxied artifacts (clients upload through it, as from another machine)."""
    port = free_port()
    server = Service([str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                      "--backend-store-uri", f"sqlite:///{root}/mlflow-server.db",
                      "--artifacts-destination", str(root / "mlflow-artifacts")], root, env,
                     logs / "mlflow-server.log")
    url = f"http://127.0.0.1:{port}"
    server.wait_http(f"{url}/health")
    return server, url


def worker(machine: Path, pool: str, env: dict, logs: Path) -> Service:
    """`prefect worker start` on a process pool, one flow run at a time, in `machine` (a checkout of the project):
    what `make worker POOL=...` runs on each machine."""
    return Service([str(BIN / "prefect"), "worker", "start", "--pool", pool, "--type", "process", "--limit", "1",
                    "--name", machine.name], machine,
                   env | {"DSMATH_PROJECT": str(machine), "PYTHONPATH": str(machine),
                          "PREFECT_HOME": str(machine / ".prefect")}, logs / f"worker-{machine.name}.log")
