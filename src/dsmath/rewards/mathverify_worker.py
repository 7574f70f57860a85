"""Worker process for the slow path of answer equivalence: math-verify (LaTeX -> sympy) in a killable process.

Run as a script by :mod:`dsmath.rewards.equivalence` through :class:`dsmath.core.workers.WorkerPool`. Protocol, JSON
lines: prints ``{"ready": true}`` once, then answers each ``{"pred": str, "gold": str}`` with ``{"equal": bool}``.
sympy can spend unbounded time inside one C call (``10^{10^{10}}`` evaluates a 4-GB integer), which neither signals
nor thread exceptions interrupt; the caller kills this process at its deadline instead. The parsers see model text,
so the worker also caps its address space and refuses processes, signals, network and file writes (audit hook).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys

DENIED_EVENTS = ("os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "os.kill", "os.remove",
                 "os.rename", "os.rmdir", "os.truncate", "os.symlink", "os.link", "shutil.", "subprocess.", "socket.",
                 "ctypes.dlopen")  # fmt: skip
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
MEMORY_LIMIT_MB = 1024  # address-space cap: a huge power fails with MemoryError instead of eating the machine


def _as_latex(answer: str) -> str:
    """Wrap a bare answer so math-verify's LaTeX extractor sees exactly it."""
    answer = answer.strip()
    return answer if answer.startswith("$") or answer.startswith("\\(") else f"${answer}$"


def _refuse_side_effects(event: str, args: tuple) -> None:
    """Audit hook (defence in depth; the parsers see model text): no processes, signals, network or file writes."""
    if event.startswith(DENIED_EVENTS):
        raise PermissionError(f"math-verify worker: {event} is not allowed")
    if event == "open" and (args[2] & WRITE_FLAGS if args[1] is None else str(args[1]).strip("rbt")):
        raise PermissionError("math-verify worker: opening files for writing is not allowed")


def main() -> None:
    sys.path.pop(0)  # this file's directory holds modules that must not shadow anything
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_MB << 20, MEMORY_LIMIT_MB << 20))
    logging.disable(logging.WARNING)  # math-verify warns once that we time it out ourselves
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    sys.addaudithook(_refuse_side_effects)
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            gold = parse(_as_latex(req["gold"]), extraction_config=configs, parsing_timeout=None)
            pred = parse(_as_latex(req["pred"]), extraction_config=configs, parsing_timeout=None)
            equal = bool(gold and pred and verify(gold, pred, timeout_seconds=None))
        except Exception:  # noqa: BLE001 - an unparsable answer is simply not equivalent
            equal = False
        out.write(json.dumps({"equal": equal}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
