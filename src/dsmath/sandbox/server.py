"""Run model-written Python in a contained child process (program-of-thought and tool-integrated rewards).

Containment, outermost layer first:

1. kernel: every program is a forked child in its own session, killed with its whole process group at the wall-clock
   deadline; RLIMIT_CPU = ceil(timeout_s) + 1 s (SIGKILL one second later), RLIMIT_AS = memory_mb, RLIMIT_FSIZE =
   max_output_bytes, RLIMIT_NOFILE = 32, no core files; the working directory is a fresh empty directory removed
   afterwards (without recursion, whatever its depth; within CLEANUP_BUDGET_S before the answer, the rest right after
   it; after its first answer a server removes what dead servers of its pid namespace left). When the server runs as
   root the child becomes uid/gid 65534 (nobody; where the kernel allows it) with RLIMIT_NPROC = 0, so the kernel
   itself refuses fork, threads, signals to our processes, reading root's 0700 directories and writes to root-owned
   files.
2. interpreter: a PEP 578 audit hook (it cannot be removed) refuses process creation and signals, sockets, ctypes,
   every import of a module that was not preloaded, opening or changing paths outside the working directory,
   changing directory, links, more than MAX_WRITE_OPENS opens for writing and MAX_MKDIRS directories, rewriting
   function code or defaults, and every way to a frame (sys._getframe, tracing and profiling, tb_frame / gi_frame /
   cr_frame / ag_frame; the server's own traceback printing may read tb_frame once the program has ended); its
   counters cannot be reset (itertools.count). Things that raise no audit event are taken away in the child:
   os.mknod/os.mkfifo are removed; thread starters (_thread.start_new_thread and its aliases, threading's
   _start_new_thread) and the builtin/extension module loaders of _imp are replaced by functions that raise
   PermissionError, so no thread starts even where the kernel would allow it. The server's own globals (reachable
   without a frame, through object.__subclasses__() and __globals__) hold no hidden module but `select` and
   `resource` (see _prune_globals). Not covered: stat/access/readlink on outside paths (metadata only).
3. output: stdout and stderr are read up to max_output_bytes each; a program that writes more is killed.

Speed: a small server (`python -I -S -B server.py`: stdlib only, common math modules preloaded) forks one child per
program (about a millisecond) instead of starting an interpreter per program. The client keeps up to `workers`
servers and talks to each in JSON lines (:mod:`dsmath.sandbox.pool`, on :class:`dsmath.core.workers.WorkerPool`,
also used by the equivalence checker). Linux only
(pidfd_open, setrlimit). Programs see the standard library modules in ``PRELOAD`` and nothing else.
"""

from __future__ import annotations

# `# client`: the modules the client side (pool.py) imports, loaded here too so that a program sees the interpreter it
# always saw (logging comes with concurrent.futures; threading's classes exist, and are refused); _prune_globals then
# drops them from this module's globals
import atexit  # noqa: F401  # client
import builtins
import contextlib
import errno
import json
import linecache
import math
import os
import resource
import select
import sys
import tempfile  # noqa: F401  # client
import threading  # noqa: F401  # client
import time
import traceback
from collections import OrderedDict  # noqa: F401  # client
from concurrent.futures import ThreadPoolExecutor  # noqa: F401  # client
from dataclasses import dataclass  # noqa: F401  # client
from itertools import count

DEFAULT_MAX_OUTPUT_BYTES = 65536  # params.yaml sandbox.max_output_bytes overrides it in the reward layer
NOBODY = 65534  # uid/gid the child drops to when the server runs as root
SIGKILL = 9  # POSIX; the server imports no `signal` module so that programs cannot reach one through frames
SERVER_GRACE_S = 5.0  # the client waits timeout_s + this for the server's answer before killing the server
SETUP_FAILED = 125  # child exit code when containment could not be set up (the program never ran)
MAX_WRITE_OPENS = 16  # files a program may open for writing inside its working directory
MAX_MKDIRS = 64  # directories a program may create (os.mkdir, makedirs, mkdtemp, Path.mkdir: all audit os.mkdir)
CLEANUP_BUDGET_S = 1.0  # removing a working directory before the answer; what is left is removed after it

# modules a program may import: loaded once by the server; any other import is an audit event the hook refuses
PRELOAD = (
    "math", "cmath", "fractions", "decimal", "itertools", "functools", "collections", "statistics", "random", "re",
    "string", "heapq", "bisect", "operator", "numbers", "datetime", "_strptime", "time", "json", "copy", "typing",
    "dataclasses", "enum", "array", "textwrap", "__future__", "encodings.ascii", "encodings.latin_1",
)  # fmt: skip
# loaded by the server or by the interpreter itself but hidden from programs (removed from sys.modules in the child)
HIDDEN = frozenset({
    "_signal", "signal", "resource", "select", "selectors", "subprocess", "_posixsubprocess", "socket", "_socket",
    "threading", "_thread", "concurrent", "atexit", "shutil", "tempfile",
})  # fmt: skip
DENIED_EVENTS = (
    "import", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.forkpty", "os.kill", "os.chdir",
    "os.fchdir", "os.link", "os.symlink", "os.chown", "os.lchown", "os.chroot", "os.putenv", "os.unsetenv",
    "os.setxattr", "os.removexattr", "subprocess.", "socket.", "ctypes.", "pty.", "fcntl.", "resource.", "signal.",
    "sqlite3.", "code.__new__", "marshal.", "gc.get_", "sys._current_frames", "_thread.", "mmap.", "sys._getframe",
    "sys.settrace", "sys.setprofile", "sys._current_exceptions",
)  # fmt: skip
UNAUDITED = ("mknod", "mkfifo")  # os functions that create paths without an audit event: removed in the child
PATH_EVENTS = ("os.", "shutil.", "glob.", "tempfile.", "pathlib.")  # every str/bytes argument must lie in the workdir
CODE_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})  # audited reads that hand out a frame
THREAD_STARTERS = ("start_new_thread", "start_new", "start_joinable_thread")  # _thread's; no audit event in 3.11
MODULE_LOADERS = ("create_builtin", "create_dynamic", "exec_builtin", "exec_dynamic")  # _imp's: a fresh _thread


class FramePermissionError(PermissionError, ValueError):
    """sys._getframe refused: also a ValueError, which the stdlib takes for "no frames on this platform" (namedtuple,
    typing.TypeVar, enum's functional API and logging fall back instead of failing)."""


# ----------------------------------------------------------------------------------------------------------------
# inside the sandbox server (stdlib only: this file runs as `python -I -S -B server.py`)


def make_audit_hook(workdir: str, done: list | None = None):
    """The child's audit hook: refuses the events above and any path outside `workdir` (which must be a real path).

    Everything it uses is bound as a default argument when it is made (rebinding `os.path` or builtins later does not
    change it, and rewriting `__defaults__` is refused); path-like objects other than exact str/bytes are refused so
    that a path cannot change between the check and its use. The working directory never changes (chdir refused).
    Its frame is in the traceback of everything it refuses, so its locals are immutable or counters that only count
    up. done: a one-element list that the child sets once the program has ended, so that the server may print the
    program's traceback (which reads tb_frame); unreachable for the program, which gets no frame.
    """

    prefix, scalars = workdir.rstrip("/") + "/", (int, float, bool, type(None))
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    done = [False] if done is None else done
    writes, dirs = count(1), count(1)  # opens for writing, mkdirs: they only count up

    def inside(p, _w=workdir, _wp=prefix, _type=type, _bytes=bytes) -> bool:
        """Whether the exact str/bytes path p (relative ones are relative to the workdir) lies inside the workdir."""
        if _type(p) is _bytes:
            p = p.decode("utf-8", "surrogateescape")
        parts = []
        for seg in (p if p.startswith("/") else _wp + p).split("/"):
            if seg == "..":
                if parts:
                    parts.pop()
            elif seg and seg != ".":
                parts.append(seg)
        p = "/" + "/".join(parts)
        return p == _w or p.startswith(_wp)

    def hook(event, args, _inside=inside, _type=type, _str=str, _bytes=bytes, _tuple=tuple, _all=all, _next=next,
             _scalars=scalars, _err=PermissionError, _frame_err=FramePermissionError, _deny=DENIED_EVENTS,
             _paths=PATH_EVENTS, _code=CODE_ATTRS, _frames=FRAME_ATTRS, _wflags=write_flags, _writes=writes,
             _max_writes=MAX_WRITE_OPENS, _dirs=dirs, _max_dirs=MAX_MKDIRS, _done=done):
        if event.startswith(_deny):
            what = event + " " + args[0] if event == "import" and _type(args[0]) is _str else event
            raise (_frame_err if event.startswith("sys._getframe") else _err)("sandbox: " + what + " is not allowed")
        if event == "open":
            path, mode, flags = args
            if _type(path) is not _str and _type(path) is not _bytes:
                if _type(path) in _scalars:  # an already open file descriptor
                    return
                raise _err("sandbox: open() takes a str or bytes path here")
            if not _inside(path):
                raise _err("sandbox: no access outside the working directory")
            writing = (flags & _wflags) if mode is None else not (_type(mode) is _str and mode.strip("rbt") == "")
            if writing and _next(_writes) > _max_writes:
                raise _err("sandbox: too many files opened for writing")
        elif event == "object.__setattr__":
            if _type(args[1]) is not _str or args[1] in _code:
                raise _err("sandbox: rewriting function code is not allowed")
        elif event == "object.__getattr__":
            if args[1] in _frames and not (_done[0] and args[1] == "tb_frame"):
                raise _err("sandbox: frames (" + args[1] + ") are not allowed")
        elif event.startswith(_paths):
            if event == "os.mkdir" and _next(_dirs) > _max_dirs:
                raise _err("sandbox: too many directories")
            for a in args:
                t = _type(a)
                if t is _str or t is _bytes:
                    if not _inside(a):
                        raise _err("sandbox: no access outside the working directory (" + event + ")")
                elif not (t in _scalars or (t is _tuple and _all([_type(x) in _scalars for x in a]))):
                    raise _err("sandbox: " + event + " takes str or bytes paths here")

    return hook


def _set_limits(timeout_s: float, memory_mb: int, max_output_bytes: int) -> None:
    cpu = math.ceil(timeout_s) + 1  # soft limit: SIGXCPU (catchable); hard limit one second later: SIGKILL
    for lim, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (memory_mb << 20,) * 2),
                       (resource.RLIMIT_FSIZE, (max_output_bytes,) * 2), (resource.RLIMIT_NOFILE, (32, 32)),
                       (resource.RLIMIT_CORE, (0, 0))):
        resource.setrlimit(lim, value)
    if os.geteuid() == 0:  # best effort: some containers map root to a user that may not change ids
        with contextlib.suppress(OSError):
            os.setgroups([])
        with contextlib.suppress(OSError):
            os.setgid(NOBODY)
            os.setuid(NOBODY)
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # enforced for non-root users only, hence the drop above


def _child(req: dict, workdir: str, out_w: int, err_w: int) -> None:
    """Forked child: contain itself, run the program as __main__, exit with its status. Never returns."""
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        for src, dst in ((null, 0), (out_w, 1), (err_w, 2)):
            os.dup2(src, dst)
        os.closerange(3, 1 << 16)
        os.chdir(workdir)
        os.environ.clear()
        os.environ.update(HOME=workdir, TMPDIR=workdir, LANG="C.UTF-8")
        _set_limits(req["timeout_s"], req["memory_mb"], req["max_output_bytes"])
        for name in [m for m in sys.modules if m.split(".")[0] in HIDDEN]:
            del sys.modules[name]
        for module, name in ((m, n) for m in (os, sys.modules["posix"]) for n in UNAUDITED):
            module.__dict__.pop(name, None)
        main = type(sys)("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        code = req["code"]
        linecache.cache["<program>"] = (len(code), None, code.splitlines(True), "<program>")
        done = [False]
        for namespace, name, refusal in _SEALS or _find_seals():
            namespace[name] = refusal
        sys.addaudithook(make_audit_hook(workdir, done))
    except BaseException:  # noqa: B036 - the program must not run half-contained
        os._exit(SETUP_FAILED)
    status = _execute(code, main.__dict__, done)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: B036
        status = status or 1
    os._exit(status)


def _refusal(message: str):
    """A function that raises PermissionError(message), made outside this module's globals."""
    namespace = {"__builtins__": builtins, "message": message}
    exec("def refused(*args, **kwargs):\n    raise PermissionError(message)", namespace)  # noqa: S102
    return namespace["refused"]


_SEALS: list[tuple[dict, str, object]] = []  # (namespace, name, refusal): found once per server (serve)


def _find_seals() -> list[tuple[dict, str, object]]:
    """Every module-level name under which a loaded module keeps a thread starter of _thread or a module loader of
    _imp (threading's _start_new_thread, importlib's uses go through the _imp module), with its refusal."""
    no_threads, no_loading = _refusal("sandbox: threads are not allowed"), _refusal("sandbox: loading modules is "
                                                                                    "not allowed")
    targets = {id(f): (f, no_threads) for n in THREAD_STARTERS if (f := getattr(sys.modules["_thread"], n, None))}
    targets |= {id(f): (f, no_loading) for n in MODULE_LOADERS if (f := getattr(sys.modules["_imp"], n, None))}
    seals = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if type(namespace) is dict:
            seals += [(namespace, k, targets[id(v)][1]) for k, v in list(namespace.items())
                      if id(v) in targets and targets[id(v)][0] is v]
    return seals


def _prune_globals() -> None:
    """In the server, once: drop from this module's globals the hidden modules it does not use and what comes from
    them (the client side, with threading, tempfile, atexit and locks, is pool.py). Its classes and functions stay
    reachable from a program without a frame (object.__subclasses__(), __globals__); what they lead to must be harmless:
    of the hidden
    modules only `select` and `resource` (whose functions that change anything are refused events) remain."""
    g = globals()
    for name, value in list(g.items()):
        module = value.__name__ if type(value) is type(sys) else getattr(value, "__module__", None)
        if type(module) is str and module.split(".")[0] in HIDDEN and module not in ("select", "resource"):
            del g[name]


def _execute(code: str, env: dict, done: list) -> int:
    """exec the program; its exit status: 0, the sys.exit code, or 1 after printing the traceback to stderr."""
    try:
        exec(compile(code, "<program>", "exec"), env)  # noqa: S102 - this is the sandbox
        return 0
    except SystemExit as e:
        try:
            if e.code is None or type(e.code) is int:
                return (e.code or 0) & 0xFF
            print(e.code, file=sys.stderr)
        except BaseException:  # noqa: B036
            pass
        return 1
    except BaseException as e:  # noqa: B036
        done[0] = True  # the traceback module reads tb_frame
        try:
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        except BaseException:  # noqa: B036
            pass
        return 1


def _supervise(pid: int, out_r: int, err_r: int, req: dict, t0: float) -> dict:
    """Collect stdout/stderr until the child exits, the deadline passes or the output cap is exceeded; reap it."""
    deadline, cap = t0 + req["timeout_s"], req["max_output_bytes"]
    bufs = {out_r: bytearray(), err_r: bytearray()}
    pidfd = os.pidfd_open(pid)
    pending, timed_out, exceeded, exited = [out_r, err_r], False, False, False
    try:
        while not (exited or exceeded):
            left = deadline - time.monotonic()
            ready = select.select([*pending, pidfd], [], [], max(left, 0))[0]
            if not ready and left <= 0:
                timed_out = True
                break
            for fd in ready:
                if fd == pidfd:
                    exited = True
                elif chunk := os.read(fd, 1 << 16):
                    bufs[fd] += chunk
                    exceeded = exceeded or len(bufs[fd]) > cap
                else:
                    pending.remove(fd)
        _killpg(pid)  # before reaping: the group id cannot be reused while the child is unreaped
        status = os.waitpid(pid, 0)[1]
        for fd in pending if not exceeded else ():
            while len(bufs[fd]) <= cap and (chunk := os.read(fd, 1 << 16)):
                bufs[fd] += chunk
    finally:
        os.close(pidfd)
    exceeded = exceeded or any(len(b) > cap for b in bufs.values())
    return {"stdout": bytes(bufs[out_r][:cap]).decode("utf-8", "replace"),
            "stderr": bytes(bufs[err_r][:cap]).decode("utf-8", "replace"),
            "exit_code": os.waitstatus_to_exitcode(status), "timed_out": timed_out, "output_exceeded": exceeded}


def _killpg(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, SIGKILL)


def _pid_namespace() -> str:
    """The inode number of this process's pid namespace ("" without /proc): working directories are named with it, so
    that a server removes leftovers only of servers whose pids it can check."""
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""
    ino = link.rpartition("[")[2].rstrip("]")
    return ino if ino.isascii() and ino.isdigit() else ""


_PIDNS = _pid_namespace()
_LEFTOVERS: list[str] = []  # working directories not removed within CLEANUP_BUDGET_S: removed after the answer


def _run_one(req: dict) -> dict:
    """Fork one contained child for req = {code, timeout_s, memory_mb, max_output_bytes, tmp}; its result dict."""
    name = f"dsmath-sbx-{_PIDNS or 0}-{os.getpid()}-{time.monotonic_ns()}"
    workdir = os.path.realpath(os.path.join(req["tmp"], name))
    os.mkdir(workdir, 0o700)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        if os.geteuid() == 0:
            os.chown(workdir, NOBODY, NOBODY)
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(req, workdir, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        out_w = err_w = -1
        return _supervise(pid, out_r, err_r, req, t0)
    finally:
        for fd in (out_r, out_w, err_r, err_w):
            if fd >= 0:
                os.close(fd)
        try:
            gone = _remove_tree(workdir, time.monotonic() + CLEANUP_BUDGET_S)
        except OSError:
            gone = False
        if not gone:
            _LEFTOVERS.append(workdir)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME_TAKEN = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR)


def _remove_tree(path: str, deadline: float | None = None) -> bool:
    """Remove the directory `path` and everything in it; whether it is gone (False: `deadline` passed first).

    Iterative, whatever the depth: each directory below `path` is emptied by moving its subdirectories up into `path`
    (a rename) and unlinking the rest, so at most two directories are open and no path grows. Tolerates entries that
    vanish meanwhile (another server sweeping) and a program that took its own directories' permissions away."""
    try:
        top = _open_dir(path)
    except FileNotFoundError:
        return True
    serial = 0
    try:
        while entries := _entries(top):
            for name, is_dir in entries:
                if deadline is not None and time.monotonic() > deadline:
                    return False
                if not is_dir:
                    _unlink(name, top)
                    continue
                try:
                    sub = _open_dir(name, top)
                except FileNotFoundError:
                    continue
                try:
                    for inner, inner_is_dir in _entries(sub):
                        if deadline is not None and time.monotonic() > deadline:
                            return False
                        if inner_is_dir:
                            serial = _hoist(inner, sub, top, serial)
                        else:
                            _unlink(inner, sub)
                finally:
                    os.close(sub)
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)
    return True


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:  # a program running as the server's own user made it unreadable
        os.chmod(name, 0o700, dir_fd=dir_fd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    if os.fstat(fd).st_mode & 0o700 != 0o700:  # made unwritable: its entries could not be unlinked or moved out
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o700)
    return fd


def _entries(fd: int) -> list[tuple[str, bool]]:
    with os.scandir(fd) as it:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]


def _unlink(name: str, dir_fd: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)


def _hoist(name: str, src: int, top: int, serial: int) -> int:
    """Move directory `name` out of directory `src` into `top` under an unused name; the serial that name took."""
    chmodded = False
    while True:
        serial += 1
        try:
            os.rename(name, f".dsmath-rm-{serial}", src_dir_fd=src, dst_dir_fd=top)
            return serial
        except FileNotFoundError:
            return serial
        except PermissionError:  # moving a directory writes its "..": it must be writable
            if chmodded:
                raise
            os.chmod(name, 0o700, dir_fd=src)
            chmodded = True
        except OSError as e:
            if e.errno not in _NAME_TAKEN:
                raise


def _sweep_leftovers(base: str) -> None:
    """Remove the working directories in `base` of sandbox servers of this pid namespace that are no longer running
    (killed while a program ran); names of other namespaces, other formats and other programs are left alone."""
    prefix = f"dsmath-sbx-{_PIDNS}-"
    if not _PIDNS:
        return
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        pid, _, serial = name[len(prefix):].partition("-") if name.startswith(prefix) else ("", "", "")
        if pid.isascii() and pid.isdigit() and serial.isascii() and serial.isdigit() and not _running(int(pid)):
            with contextlib.suppress(OSError):
                _remove_tree(os.path.join(base, name))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, ValueError):
        return False  # not a pid at all
    except OSError:
        return True  # EPERM: it exists
    return True


def serve() -> None:
    """Sandbox server main loop: one JSON request per stdin line, one JSON result per stdout line; exits on EOF."""
    del sys.path[0]  # this file's directory: programs must not import the package's modules
    for name in PRELOAD:
        __import__(name)
    _SEALS[:] = _find_seals()
    _prune_globals()
    inbox, outbox = sys.stdin.buffer, sys.stdout.buffer
    outbox.write(b'{"ready": true}\n')
    outbox.flush()
    swept = set()
    while line := inbox.readline():
        base = None
        try:
            req = json.loads(line)
            base = req["tmp"]
            result = _run_one(req)
        except Exception as e:  # noqa: BLE001 - the server must answer every request
            result = {"stdout": "", "stderr": f"sandbox server error: {e!r}", "exit_code": None,
                      "timed_out": False, "output_exceeded": False}
        outbox.write(json.dumps(result).encode() + b"\n")
        outbox.flush()
        while _LEFTOVERS:  # after the answer: its time does not count against the program's deadline
            with contextlib.suppress(OSError):
                _remove_tree(_LEFTOVERS.pop())
        if type(base) is str and base not in swept:
            swept.add(base)
            _sweep_leftovers(base)


if __name__ == "__main__":
    serve()
    sys.exit(0)
