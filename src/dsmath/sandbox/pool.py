"""The client side of the sandbox (the trainer / evaluator process): pools of sandbox servers, each started as
`python -I -S -B server.py` by path (:mod:`dsmath.sandbox.server`, stdlib only, holds the containment), and the
results cache shared by the tool, the PoT evaluation and the PoT reward."""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dsmath.core.workers import WorkerPool
from dsmath.sandbox.server import DEFAULT_MAX_OUTPUT_BYTES, SERVER_GRACE_S, SETUP_FAILED


@dataclass(frozen=True)
class SandboxResult:
    """What a program did: `stdout` (capped), `error` (its stderr plus the sandbox's reason; "" when clean)."""

    stdout: str
    error: str
    timed_out: bool
    exit_code: int | None  # None: it never ran; negative: killed by that signal
    output_exceeded: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_exceeded


_POOLS: dict[int, WorkerPool] = {}
_POOLS_LOCK = threading.Lock()
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")  # run by path: stdlib only, no package
SERVER_ARGV = [sys.executable, "-I", "-S", "-B", SERVER]


def _pool(workers: int) -> WorkerPool:
    with _POOLS_LOCK:
        if workers not in _POOLS:
            _POOLS[workers] = WorkerPool(SERVER_ARGV, workers, env={"PATH": os.defpath, "LANG": "C.UTF-8"})
        return _POOLS[workers]


@atexit.register
def close_pools() -> None:
    """Stop every sandbox server of this process (they also exit by themselves when this process dies)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
    for pool in pools:
        pool.close()


def _result(answer: dict | None, timeout_s: float, cap: int) -> SandboxResult:
    if answer is None:
        return SandboxResult("", "sandbox server did not answer; it was restarted", False, None)
    code, reasons = answer.get("exit_code"), []
    if answer["timed_out"]:
        reasons.append(f"timed out after {timeout_s:g} s")
    if answer["output_exceeded"]:
        reasons.append(f"output limit of {cap} bytes exceeded")
    if code == SETUP_FAILED:
        reasons.append("the sandbox could not be set up")
    elif code is not None and code < 0 and not reasons:
        reasons.append(f"killed by signal {-code}")
    elif code and code > 0 and not answer["stderr"]:
        reasons.append(f"exit code {code}")
    error = "\n".join(filter(None, [answer["stderr"].rstrip("\n"), *reasons]))
    return SandboxResult(answer["stdout"], error, answer["timed_out"], code, answer["output_exceeded"])


def _workdir_base() -> str:
    """Where working directories are made: tmpfs /dev/shm when writable (rmdir on a disk /tmp costs ~3 ms)."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else tempfile.gettempdir()


def _run_on(pool: WorkerPool, code: str, timeout_s: float, memory_mb: int, max_output_bytes: int) -> SandboxResult:
    if not isinstance(code, str):
        return SandboxResult("", f"program is {type(code).__name__}, not str", False, None)
    req = {"code": code, "timeout_s": float(timeout_s), "memory_mb": int(memory_mb),
           "max_output_bytes": int(max_output_bytes), "tmp": _workdir_base()}
    return _result(pool.call(req, timeout_s + SERVER_GRACE_S), timeout_s, max_output_bytes)


def _check_limits(timeout_s: float, memory_mb: int, max_output_bytes: int) -> None:
    if not (timeout_s > 0 and memory_mb >= 16 and max_output_bytes >= 1):
        raise ValueError(f"need timeout_s > 0, memory_mb >= 16, max_output_bytes >= 1 (got {timeout_s}, "
                         f"{memory_mb}, {max_output_bytes})")


def run_python(code: str, timeout_s: float, memory_mb: int,
               max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES) -> SandboxResult:
    """Run one untrusted program (stdin empty, cwd an empty temp dir); never raises because of what the code does."""
    _check_limits(timeout_s, memory_mb, max_output_bytes)
    return _run_on(_pool(1), code, timeout_s, memory_mb, max_output_bytes)


def run_python_batch(codes: list[str], timeout_s: float, memory_mb: int,
                     max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES, workers: int = 2,
                     cache: ResultCache | None = None) -> list[SandboxResult]:
    """Run programs in parallel on `workers` sandbox servers; results in the order of `codes` (len(codes),).

    cache: a :class:`ResultCache` to answer programs run before from, and to keep the new results in; with one, a
    program that occurs several times in `codes` also runs once (every occurrence gets that run's result)."""
    _check_limits(timeout_s, memory_mb, max_output_bytes)
    if cache is not None and all(isinstance(c, str) for c in codes):
        return cache.run(codes, (timeout_s, memory_mb, max_output_bytes),
                         lambda todo: run_python_batch(todo, timeout_s, memory_mb, max_output_bytes, workers))
    pool = _pool(workers)
    if len(codes) <= 1:
        return [_run_on(pool, c, timeout_s, memory_mb, max_output_bytes) for c in codes]
    with ThreadPoolExecutor(max_workers=min(workers, len(codes))) as ex:
        return list(ex.map(lambda c: _run_on(pool, c, timeout_s, memory_mb, max_output_bytes), codes))


class ResultCache:
    """Results of programs already run, by (program text, limits); the least recently used go beyond `max_bytes`.

    Model-written programs repeat: the G samples of a GRPO group, a greedy and a sampled pass over one question, often
    write the same program, and each run costs a fork in the sandbox server (a few ms). A result is taken to be a
    function of the program and its limits; a program that reads the clock or draws from an unseeded `random` gets its
    first run's (valid) result again. Runs that depend on the machine's load rather than on the program are never
    kept: timeouts and servers that did not answer.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes, self.size, self.hits, self.misses = int(max_bytes), 0, 0, 0
        self._items: OrderedDict[tuple, SandboxResult] = OrderedDict()
        self._lock = threading.Lock()

    def run(self, codes: list[str], limits: tuple, execute) -> list[SandboxResult]:
        """The results of `codes` (in order): cached ones looked up, the rest run once each by `execute(programs)`."""
        keys = [(c, *limits) for c in codes]
        unique = list(dict.fromkeys(keys))
        with self._lock:
            found = {k: self._items[k] for k in unique if k in self._items}
            for k in found:
                self._items.move_to_end(k)
        todo = [k for k in unique if k not in found]
        results = execute([k[0] for k in todo]) if todo else []
        with self._lock:
            self.hits += len(keys) - len(todo)
            self.misses += len(todo)
            for k, r in zip(todo, results, strict=True):
                found[k] = r
                self._keep(k, r)
        return [found[k] for k in keys]

    def _keep(self, key: tuple, result: SandboxResult) -> None:
        if result.timed_out or result.exit_code is None or self.max_bytes <= 0:
            return
        cost = _cost(key, result)
        if key in self._items or cost > self.max_bytes:
            return
        self._items[key] = result
        self.size += cost
        while self.size > self.max_bytes:
            self.size -= _cost(*self._items.popitem(last=False))


def _cost(key: tuple, result: SandboxResult) -> int:
    """Bytes an entry counts for: the program, its output and error text, and a fixed overhead."""
    return len(key[0]) + len(result.stdout) + len(result.error) + 64


RESULTS = ResultCache(64 * 2**20)  # this process's results: the tool, the PoT evaluation and the PoT reward share it
