"""Is the process that opened a run still alive? Identity of a process (host, boot, pid namespace, pid, start
time) recorded when a stage run starts, and the test that it has certainly ended (stdlib only; Linux /proc, and a
conservative "alive" wherever it cannot tell). :mod:`dsmath.runtime.tracking` uses it to close the MLflow runs of
stages killed with SIGKILL."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _proc_stat(pid: int) -> tuple[str, str]:
    """(state, start time in clock ticks since boot) of a process from /proc/<pid>/stat; ('', '') if unknown."""
    stat = _read(f"/proc/{pid}/stat")
    fields = stat.rsplit(")", 1)[-1].split() if stat else []  # after the command name, which may hold spaces
    return (fields[0], fields[19]) if len(fields) > 19 else ("", "")


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """Where process `pid` (default: this one) runs, enough to tell later whether it is gone: host name, boot id
    and pid namespace (Linux; '' elsewhere), pid and the process's start time (clock ticks since boot)."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id"),
            "pidns": _pid_namespace(), "pid": pid, "start": _proc_stat(pid)[1]}


def process_gone(identity: Mapping[str, Any]) -> bool:
    """Whether the process described by `identity` (:func:`process_identity`) has certainly ended.

    Only a process of this very machine, boot and pid namespace can be judged (same host name, boot id and pid
    namespace as this process); it has ended when its pid is free, belongs to a zombie, or belongs to a process
    started at another time (the pid was reused). Anything else, including a process of another host or container,
    is taken as alive: it cannot be checked from here.
    """
    here = process_identity()
    if any(identity.get(k) != here[k] for k in ("host", "boot", "pidns")):
        return False
    pid = identity.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    except OSError:
        return False
    state, start = _proc_stat(pid)
    return state == "Z" or bool(identity.get("start") and start and start != identity["start"])
