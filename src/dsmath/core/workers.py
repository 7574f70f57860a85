"""Long-lived helper processes spoken to in JSON lines, pooled: the sandbox servers (`dsmath.sandbox.pool`) and the
math-verify workers (`dsmath.rewards.equivalence`) both run on this, so that each call costs a pipe round trip instead
of a Python start-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import threading
import time


def _killpg(pid: int) -> None:
    """Kill a worker's whole process group (it runs in a session of its own)."""
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


class LineWorker:
    """A child process spoken to in JSON lines: it prints ``{"ready": true}`` once, then one answer per request."""

    def __init__(self, argv: list[str], env: dict | None = None, start_timeout_s: float = 120.0):
        import subprocess  # not at module level: the sandbox server, which runs this file, must never load it

        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      env=env, cwd="/", start_new_session=True, close_fds=True)
        self._buf = b""
        if self._read(start_timeout_s) != {"ready": True}:
            self.close()
            raise OSError(f"worker {argv[-1]} did not start")

    def call(self, request: dict, timeout_s: float) -> dict | None:
        """Send one request; its answer, or None when the worker died, garbled or missed the deadline."""
        try:
            self._proc.stdin.write(json.dumps(request).encode() + b"\n")
            self._proc.stdin.flush()
        except (OSError, ValueError):
            return None
        return self._read(timeout_s)

    def _read(self, timeout_s: float) -> dict | None:
        deadline, fd = time.monotonic() + timeout_s, self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            if not (chunk := os.read(fd, 1 << 16)):
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            return None
        return answer if isinstance(answer, dict) else None

    def close(self) -> None:
        _killpg(self._proc.pid)
        self._proc.wait()
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
            self._proc.stdout.close()


class WorkerPool:
    """Up to `size` LineWorkers, started on demand and reused; a worker that fails a call is killed and replaced.

    Thread-safe (at most `size` calls run at once, the others wait) and fork-aware (a forked process starts its own).
    """

    def __init__(self, argv: list[str], size: int, env: dict | None = None):
        if size < 1:
            raise ValueError(f"size: must be >= 1 (got {size})")
        self._argv, self._size, self._env = argv, size, env
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid, self._idle, self._sem = os.getpid(), [], threading.BoundedSemaphore(self._size)

    def call(self, request: dict, timeout_s: float) -> dict | None:
        """One request on a free worker; None when it could not be answered in time (that worker is discarded)."""
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            sem = self._sem
        with sem:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            try:
                worker = worker or LineWorker(self._argv, self._env)
            except OSError:
                return None
            answer = worker.call(request, timeout_s)
            if answer is None:
                worker.close()
            else:
                with self._lock:
                    self._idle.append(worker)
            return answer

    def close(self) -> None:
        with self._lock:
            idle, self._idle = (self._idle, []) if self._pid == os.getpid() else ([], [])
        for worker in idle:
            worker.close()
