"""Sandbox leaks: what a program may create is bounded and always removed (however deep), the answer comes within the
deadline; a program obtains no frame (so neither the server's globals nor the audit hook's state) and starts no
thread, whether or not the server could drop its privileges."""

import os
import pathlib
import subprocess
import sys
import tempfile
import time

import pytest

from dsmath.core.workers import WorkerPool
from dsmath.sandbox import pool as sandbox
from dsmath.sandbox import server
from dsmath.sandbox.pool import SandboxResult, run_python
from dsmath.sandbox.server import SETUP_FAILED

LIMITS = {"timeout_s": 1.0, "memory_mb": 256, "max_output_bytes": 4096}
DEAD_PID = 2**22 + 1  # above the largest pid_max Linux allows: never a live process


def run(code: str, **overrides) -> SandboxResult:
    return run_python(code, **{**LIMITS, **overrides})


def refused(res: SandboxResult, what: str = "") -> bool:
    return not res.ok and "PermissionError: sandbox" in res.error and what in res.error and res.exit_code == 1


def _forget(workdir: str) -> None:
    """Remove a working directory the sandbox left behind, so that a failing test does not litter /dev/shm."""
    if workdir.startswith(sandbox._workdir_base()) and os.path.isdir(workdir):
        subprocess.run(["rm", "-rf", workdir], check=False)


# ----------------------------------------------------------------------------------------------------------------
# directories: bounded, removed, and the answer in time


def test_nested_directories_are_capped_and_removed():
    code = "import os\nprint(os.getcwd(), flush=True)\np = 'd'\nwhile True:\n    os.mkdir(p)\n    p += '/d'"
    start = time.monotonic()
    res = run(code)
    elapsed = time.monotonic() - start
    workdir = res.stdout.partition("\n")[0]
    _forget(workdir)
    assert refused(res, "too many directories"), res
    assert workdir.startswith(sandbox._workdir_base()) and not os.path.exists(workdir)
    assert elapsed < LIMITS["timeout_s"] + 1.0


def test_makedirs_and_wide_directories_are_capped():
    deep = run("import os\nos.makedirs('/'.join(['d'] * 500))")
    assert refused(deep, "too many directories"), deep
    wide = run("import os\nprint(os.getcwd(), flush=True)\nmade = 0\nfor i in range(200_000):\n    try:\n"
               "        os.mkdir(f'd{i}')\n        made += 1\n    except PermissionError:\n        pass\nprint(made)")
    workdir, _, made = wide.stdout.partition("\n")
    _forget(workdir)
    assert wide.ok and made == f"{server.MAX_MKDIRS}\n", wide
    assert not os.path.exists(workdir)


def test_directory_loop_until_the_deadline_still_answers_in_time():
    code = ("import os\nprint(os.getcwd(), flush=True)\ni = 0\nwhile True:\n    try:\n        os.mkdir(f'd{i}')\n"
            "    except OSError:\n        pass\n    i += 1")
    start = time.monotonic()
    res = run(code)
    elapsed = time.monotonic() - start
    workdir = res.stdout.partition("\n")[0]
    _forget(workdir)
    assert res.timed_out and res.exit_code == -9 and "timed out" in res.error, res
    assert not os.path.exists(workdir)
    assert elapsed < LIMITS["timeout_s"] + 1.0  # ~2-3 s before: tens of thousands of directories to remove


@pytest.fixture
def shm_path():
    """A scratch directory where the sandbox makes working directories (tmpfs /dev/shm: fast)."""
    path = tempfile.mkdtemp(prefix="dsmath-test-", dir=sandbox._workdir_base())
    yield pathlib.Path(path)
    subprocess.run(["rm", "-rf", path], check=False)


def test_remove_tree_is_iterative_and_bounded(shm_path):
    root = shm_path / "w"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    for _ in range(1500):  # deeper than the recursion limit, and a path longer than PATH_MAX
        os.mkdir("dd", dir_fd=fd)
        sub = os.open("dd", os.O_RDONLY, dir_fd=fd)
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=sub))
        os.close(fd)
        fd = sub
    os.close(fd)
    for i in range(100):
        (root / f"w{i}").mkdir()
        (root / f"w{i}" / "x").write_text("x")
    (root / "w7").chmod(0)  # a program that took its own permissions away
    assert server._remove_tree(str(root), deadline=time.monotonic() - 1) is False  # budget spent: stops early
    assert root.exists()
    start = time.monotonic()
    assert server._remove_tree(str(root)) is True
    assert not root.exists() and time.monotonic() - start < 5
    assert server._remove_tree(str(root)) is True  # already gone


def test_sweep_removes_only_dead_servers_directories(tmp_path):
    ns = server._PIDNS
    assert ns, "no pid namespace id (no /proc?)"
    dead, alive = tmp_path / f"dsmath-sbx-{ns}-{DEAD_PID}-1", tmp_path / f"dsmath-sbx-{ns}-1-2"
    (dead / "a" / "b").mkdir(parents=True)
    (dead / "a" / "b" / "f").write_text("x")
    keep = [alive, tmp_path / f"dsmath-sbx-1{ns}-{DEAD_PID}-3", tmp_path / f"dsmath-sbx-{DEAD_PID}-4",
            tmp_path / "other"]  # live server; another pid namespace; the old name format; not ours
    for p in keep:
        p.mkdir()
    server._sweep_leftovers(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in keep)


def test_next_server_removes_what_a_killed_server_left():
    pool = WorkerPool(sandbox.SERVER_ARGV, 1, env={"PATH": os.defpath, "LANG": "C.UTF-8"})
    try:
        assert _on(pool, "print(1)").ok
        pid, base = pool._idle[0]._proc.pid, sandbox._workdir_base()
        req = {"code": "import time\ntime.sleep(0.5)", "timeout_s": 5.0, "memory_mb": 256, "max_output_bytes": 64,
               "tmp": base}
        assert pool.call(req, 0.1) is None  # the client gives up: kills the server while the program runs
        left = [n for n in os.listdir(base) if n.startswith(f"dsmath-sbx-{server._PIDNS}-{pid}-")]
        assert len(left) == 1
        assert _on(pool, "print(2)").stdout == "2\n"  # a new server; it sweeps after its first answer
        assert _on(pool, "print(3)").stdout == "3\n"
        assert not os.path.exists(os.path.join(base, left[0]))
    finally:
        pool.close()


# ----------------------------------------------------------------------------------------------------------------
# frames: none for the program


FRAMES = {
    "getframe_globals": "import sys\nprint(sys._getframe(1).f_globals['threading'])",
    "getframe_back": "import sys\nprint(sys._getframe(0).f_back.f_globals['threading'])",
    "traceback_frame": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
                       "    print(e.__traceback__.tb_frame.f_back.f_globals['threading'])",
    "generator_frame": "def g():\n    yield\nx = g()\nnext(x)\nprint(x.gi_frame)",
    "settrace": "import sys\nsys.settrace(lambda *a: None)",
    "setprofile": "import sys\nsys.setprofile(lambda *a: None)",
    "inspect_stack": "import inspect\nprint(inspect.stack()[1])",
    "hook_state_in_traceback": (  # the audit hook's own frame is in the traceback of what it refused
        "try:\n    open('/etc/hostname')\nexcept PermissionError as e:\n    tb = e.__traceback__\n"
        "    while tb.tb_next:\n        tb = tb.tb_next\n    print(tb.tb_frame.f_locals)"
    ),
}


@pytest.mark.parametrize("name", sorted(FRAMES))
def test_program_gets_no_frame(name):
    res = run(FRAMES[name])
    assert refused(res), res
    assert "module 'threading'" not in res.stdout and "_writes" not in res.stdout


def test_server_globals_hold_no_hidden_module():
    """The client side (its pools, locks and classes) is pool.py, which the server never loads: no class of it is
    reachable without a frame, so no function of it leads to globals holding threading, tempfile or atexit."""
    res = run("print([c.__name__ for c in object.__subclasses__() if c.__name__ in ('ResultCache', 'SandboxResult')])")
    assert res.stdout == "[]\n", res


def test_stdlib_that_asks_for_frames_still_works():
    res = run("import collections, enum, logging, typing\nP = collections.namedtuple('P', 'x y')\n"
              "T = typing.TypeVar('T')\nE = enum.Enum('E', 'A B')\nlogging.getLogger('x').warning('w')\n"
              "print(P(1, 2), E.A, T)")
    assert res.stdout == "P(x=1, y=2) E.A ~T\n" and res.ok, res


def test_traceback_still_shows_the_source_line():
    res = run("def f(x):\n    return 1 / x\n\nf(0)")
    assert '<program>", line 4, in <module>\n    f(0)\n' in res.error and "    return 1 / x\n" in res.error, res
    assert res.error.endswith("ZeroDivisionError: division by zero") and "server.py" not in res.error


# ----------------------------------------------------------------------------------------------------------------
# threads: none, by any route


THREADS = {
    "logging_threading": "import logging\nt = logging.threading.Thread(target=print, args=('ran',))\nt.start()",
    "queue_threading": "import queue\nt = queue.threading.Thread(target=print, args=('ran',))\nt.start()",
    "subclass_thread": (
        "T = [c for c in object.__subclasses__() if c.__name__ == 'Thread'][0]\n"
        "t = T(target=print, args=('ran',))\nt.start()\nt.join()"
    ),
    "reprlib_thread_module": (
        "import reprlib, time\nreprlib.get_ident.__self__.start_new_thread(print, ('ran',))\ntime.sleep(0.2)"
    ),
    "dataclasses_thread_module": (
        "import dataclasses, time\ndataclasses._thread.start_new_thread(print, ('ran',))\ntime.sleep(0.2)"
    ),
    "fresh_thread_module": (
        "import _imp, time\nclass S:\n    name = '_thread'\n"
        "_imp.create_builtin(S()).start_new_thread(print, ('ran',))\ntime.sleep(0.2)"
    ),
    "builtin_importer": (
        "import time\nclass S:\n    name = '_thread'\n"
        "__builtins__.__loader__.create_module(S()).start_new_thread(print, ('ran',))\ntime.sleep(0.2)"
    ),
}


@pytest.fixture(scope="module")
def undropped_pool():
    """A sandbox server as in a container whose root may not change ids: programs run as root, and root is exempt
    from RLIMIT_NPROC (the only thing that stopped threads before)."""
    src = ("import os\nos.setuid = os.setgid = os.setgroups = lambda *a: None\n"
           f"__file__ = {server.__file__!r}\nexec(compile(open(__file__).read(), __file__, 'exec'))")
    pool = WorkerPool([sys.executable, "-I", "-S", "-B", "-c", src], 1, env={"PATH": os.defpath, "LANG": "C.UTF-8"})
    yield pool
    pool.close()


def _on(pool, code: str) -> SandboxResult:
    return sandbox._run_on(pool, code, LIMITS["timeout_s"], LIMITS["memory_mb"], LIMITS["max_output_bytes"])


@pytest.mark.parametrize("name", sorted(THREADS))
@pytest.mark.parametrize("server", ["default", "undropped"])
def test_program_starts_no_thread(name, server, request):
    code = THREADS[name]
    res = run(code) if server == "default" else _on(request.getfixturevalue("undropped_pool"), code)
    assert refused(res), res
    assert "ran" not in res.stdout and res.exit_code != SETUP_FAILED


def test_undropped_server_really_runs_programs_as_its_own_user(undropped_pool):
    assert _on(undropped_pool, "import os\nprint(os.getuid())").stdout == f"{os.geteuid()}\n"
