"""The sandbox for model-written Python: hostile programs are contained, the test process is unharmed, nothing
outside the program's working directory changes; plus the audit hook as a pure function and batch execution."""

import os
import time

import pytest

from dsmath.sandbox.pool import RESULTS, ResultCache, SandboxResult, run_python, run_python_batch
from dsmath.sandbox.server import SETUP_FAILED, make_audit_hook

LIMITS = {"timeout_s": 1.0, "memory_mb": 256, "max_output_bytes": 4096}


@pytest.fixture
def outside(tmp_path):
    """A directory outside the sandbox with a secret file; checked unchanged after every hostile program."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-42")
    yield tmp_path
    assert secret.read_text() == "TOP-SECRET-42"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.txt"]
    assert run_python("print(6 * 7)", **LIMITS).stdout == "42\n"  # the sandbox (and this process) still work


def run(code: str, **overrides) -> SandboxResult:
    return run_python(code, **{**LIMITS, **overrides})


def blocked(res: SandboxResult, what: str = "") -> bool:
    return not res.ok and "PermissionError: sandbox" in res.error and what in res.error


HOSTILE = {
    # name: (program, predicate on the result); {out} is the outside directory, {secret} the secret file
    "fork_bomb": ("import os\nwhile True:\n    os.fork()", lambda r: blocked(r, "os.fork")),
    "subprocess": ("import subprocess\nsubprocess.run(['touch', '{out}/pwned'])", lambda r: blocked(r, "import ")),
    "os_system": ("import os\nos.system('touch {out}/pwned')", lambda r: blocked(r, "os.system")),
    "exec_process": ("import os\nos.execv('/bin/sh', ['sh', '-c', 'touch {out}/pwned'])", lambda r: blocked(r)),
    "posix_spawn": ("import os\nos.posix_spawn('/bin/touch', ['touch', '{out}/pwned'], {{}})", lambda r: blocked(r)),
    "memory_bomb": ("x = bytearray(8 * 2**30)", lambda r: not r.ok and "MemoryError" in r.error),
    "memory_growth": ("a = []\nwhile True:\n    a.append(bytearray(10**7))", lambda r: "MemoryError" in r.error),
    "infinite_loop": ("while True:\n    pass", lambda r: r.timed_out and not r.ok),
    "sleep_forever": ("import time\ntime.sleep(1000)", lambda r: r.timed_out),
    "deep_recursion": ("def f(n):\n    return f(n + 1)\nf(0)", lambda r: "RecursionError" in r.error),
    "stack_overflow": (
        "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)",
        lambda r: not r.ok and r.exit_code != SETUP_FAILED,
    ),
    "output_100mb": ("print('x' * 100_000_000)", lambda r: r.output_exceeded and len(r.stdout) == 4096),
    "output_loop": ("while True:\n    print('y' * 1000)", lambda r: r.output_exceeded and not r.timed_out),
    "stderr_flood": ("import sys\nwhile True:\n    sys.stderr.write('z' * 1000)", lambda r: r.output_exceeded),
    "kill_parent": ("import os\nos.kill(os.getppid(), 9)", lambda r: blocked(r, "os.kill")),
    "kill_group": ("import os\nos.killpg(0, 9)", lambda r: blocked(r, "os.kill")),
    "write_outside": ("open('{out}/pwned', 'w').write('x')", lambda r: blocked(r, "outside")),
    "delete_outside": ("import os\nos.remove('{secret}')", lambda r: blocked(r, "outside")),
    "rename_outside": ("import os\nos.rename('{secret}', 'stolen.txt')", lambda r: blocked(r, "outside")),
    "rmtree_outside": ("import shutil\nshutil.rmtree('{out}')", lambda r: blocked(r)),
    "read_outside": ("print(open('{secret}').read())", lambda r: blocked(r, "outside") and "TOP" not in r.stdout),
    "read_etc": ("print(open('/etc/passwd').read())", lambda r: blocked(r, "outside") and "root" not in r.stdout),
    "relative_escape": ("print(open('../../../../etc/hostname').read())", lambda r: blocked(r, "outside")),
    "bytes_path": ("print(open(b'/etc/hostname', 'rb').read())", lambda r: blocked(r, "outside")),
    "pathlike_path": (
        "class P:\n    def __fspath__(self):\n        return '/etc/hostname'\nopen(P())",
        lambda r: blocked(r, "outside"),
    ),  # open() resolves the path once, then audits it
    "listdir_root": ("import os\nprint(os.listdir('/'))", lambda r: blocked(r, "outside") and "etc" not in r.stdout),
    "chdir_escape": ("import os\nos.chdir('/')\nprint(open('etc/hostname').read())", lambda r: blocked(r, "os.chdir")),
    "mknod_outside": ("import os\nos.mknod('{out}/pwned')", lambda r: "AttributeError" in r.error),  # unaudited
    "mkfifo_outside": ("import os\nos.mkfifo('{out}/pwned')", lambda r: "AttributeError" in r.error),
    "importlib_bypass": ("import importlib\nimportlib.import_module('_posixsubprocess')", lambda r: not r.ok),
    "frame_globals": ("import sys\ng = sys._getframe(1).f_globals\ng['shutil'].rmtree('{out}')", lambda r: blocked(r)),
    "symlink_escape": ("import os\nos.symlink('/etc', 'e')\nprint(os.listdir('e'))", lambda r: blocked(r)),
    "network_socket": ("import socket\ns = socket.socket()\ns.connect(('1.1.1.1', 80))", lambda r: blocked(r)),
    "raw_socket_module": ("import _socket\n_socket.socket()", lambda r: blocked(r, "import ")),
    "ctypes_system": ("import ctypes\nctypes.CDLL(None).system(b'touch {out}/pwned')", lambda r: blocked(r)),
    "ctypes_raw": ("import _ctypes", lambda r: blocked(r, "import ")),
    "proc_mem": ("open('/proc/self/mem', 'wb')", lambda r: blocked(r, "outside")),
    "sys_exit_code": ("import sys\nsys.exit(3)", lambda r: r.exit_code == 3 and not r.ok),
    "sys_exit_message": ("raise SystemExit('bye')", lambda r: r.exit_code == 1 and "bye" in r.error),
    "signal_tampering": (
        "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass",
        lambda r: blocked(r, "import "),
    ),
    "signal_ignored_then_spin": (
        "try:\n    import signal\n    signal.signal(15, signal.SIG_IGN)\nexcept Exception:\n"
        "    pass\nwhile True:\n    pass",
        lambda r: r.timed_out,
    ),
    "rewrite_function_code": ("f = lambda: 1\nf.__code__ = (lambda: 2).__code__", lambda r: blocked(r, "code")),
    "gc_walk": ("import gc\ngc.get_objects()", lambda r: blocked(r, "import gc")),
    "threads": ("import threading\nthreading.Thread(target=print).start()", lambda r: blocked(r, "import ")),
    "too_many_files": ("for i in range(100):\n    open(f'f{{i}}', 'w').close()", lambda r: blocked(r, "too many")),
    "big_file": ("open('big', 'w').write('x' * 100_000)", lambda r: not r.ok),  # RLIMIT_FSIZE = max_output_bytes
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained(name, outside):
    code, check = HOSTILE[name]
    start = time.monotonic()
    res = run(code.format(out=outside, secret=outside / "secret.txt"))
    assert check(res), res
    assert time.monotonic() - start < LIMITS["timeout_s"] + 3.0
    assert res.exit_code != SETUP_FAILED


def test_at_least_20_hostile_cases():
    assert len(HOSTILE) >= 20


def test_clean_program_and_stdlib_imports():
    code = "import math, fractions, itertools, collections, statistics, decimal\nprint(math.comb(10, 3))"
    assert run(code) == SandboxResult("120\n", "", False, 0, False)


def test_errors_reach_the_result_not_the_caller():
    res = run("x = 1 / 0")
    assert (res.ok, res.exit_code, res.timed_out) == (False, 1, False)
    assert "ZeroDivisionError" in res.error and '<program>", line 1' in res.error
    syntax = run("def (:")
    assert "SyntaxError" in syntax.error and not syntax.ok
    assert run(None).error.startswith("program is NoneType")  # type: ignore[arg-type]


def test_empty_stdin_cwd_and_cleanup():
    res = run(
        "import os\nprint(os.getcwd())\nprint(os.listdir('.'))\nopen('a.txt', 'w').write('hi')\n"
        "print(open('a.txt').read())\ntry:\n    input()\nexcept EOFError:\n    print('eof')"
    )
    workdir, listing, content, eof = res.stdout.splitlines()
    assert (listing, content, eof) == ("[]", "hi", "eof")
    assert not os.path.exists(workdir)  # removed after the run


@pytest.mark.skipif(os.geteuid() != 0, reason="privileges are only dropped when the server runs as root")
def test_root_server_runs_programs_as_nobody():
    assert run("import os\nprint(os.getuid(), os.getgid())").stdout == "65534 65534\n"


def test_cpu_limit_backs_up_wall_clock():
    res = run("while True:\n    pass", timeout_s=0.5)
    assert res.timed_out and res.exit_code == -9


def test_invalid_limits_raise():
    with pytest.raises(ValueError, match="timeout_s"):
        run_python("print(1)", timeout_s=0, memory_mb=256)


def test_batch_keeps_order_and_runs_in_parallel():
    codes = [f"print({i} * {i})" for i in range(64)]
    start = time.monotonic()
    results = run_python_batch(codes, workers=2, **LIMITS)
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(64)]
    assert time.monotonic() - start < 20  # ~0.3 s measured; generous for a loaded machine
    sleepers = run_python_batch(["import time\ntime.sleep(0.5)\nprint(1)"] * 4, workers=4, **LIMITS)
    assert all(r.ok for r in sleepers)


def test_batch_mixes_hostile_and_clean_programs():
    codes = ["print(1)", "while True:\n    pass", "import os\nos.fork()", "print(2)"]
    results = run_python_batch(codes, workers=2, timeout_s=1.0, memory_mb=256, max_output_bytes=1024)
    assert [r.stdout for r in results] == ["1\n", "", "", "2\n"]
    assert results[1].timed_out and blocked(results[2], "os.fork")
    assert run_python_batch([], workers=2, **LIMITS) == []


def test_cache_runs_each_program_once_and_answers_repeats():
    cache = ResultCache(1 << 20)
    runs: list[list[str]] = []

    def execute(todo):  # counts what reaches the sandbox
        runs.append(list(todo))
        return run_python_batch(todo, workers=2, **LIMITS)

    codes = ["print(1)", "print(2)", "print(1)", "while True:\n    pass", "print(1)"]
    first = cache.run(codes, tuple(LIMITS.values()), execute)
    assert [r.stdout for r in first] == ["1\n", "2\n", "1\n", "", "1\n"] and first[3].timed_out
    assert runs == [["print(1)", "print(2)", "while True:\n    pass"]]  # repeats inside a batch run once
    again = cache.run(["print(2)", "while True:\n    pass", "print(3)"], tuple(LIMITS.values()), execute)
    assert runs[1] == ["while True:\n    pass", "print(3)"]  # a timeout is load, not the program: run again
    assert again[0] is first[1] and [r.stdout for r in again] == ["2\n", "", "3\n"]
    assert (cache.hits, cache.misses) == (3, 5)
    other_limits = cache.run(["print(2)"], (2.0, 256, 4096), execute)  # other limits: another key
    assert runs[2] == ["print(2)"] and other_limits[0].stdout == "2\n"


def test_cache_drops_least_recently_used_beyond_its_size():
    ok = lambda out: SandboxResult(out, "", False, 0)  # noqa: E731
    cache = ResultCache(3 * (8 + 2 + 64))  # room for three results of an 8-character program printing 1 char
    cache.run(["print(1)", "print(2)", "print(3)"], (), lambda todo: [ok(c[-2] + "\n") for c in todo])
    cache.run(["print(1)"], (), lambda todo: pytest.fail("print(1) is cached"))  # print(1) now most recent
    cache.run(["print(4)"], (), lambda todo: [ok("4\n")])  # evicts print(2), the least recently used
    assert len(cache._items) == 3 and cache.size <= cache.max_bytes
    rerun = []
    cache.run(["print(1)", "print(2)", "print(3)", "print(4)"], (), lambda todo: rerun.extend(todo) or
              [ok(c[-2] + "\n") for c in todo])
    assert rerun == ["print(2)"]


def test_batch_with_cache_equals_batch_without():
    codes = [f"print({i % 5} ** 3)" for i in range(20)] + ["print(undefined)", "x = 1"]
    cache = ResultCache(1 << 20)
    plain = run_python_batch(codes, workers=2, **LIMITS)
    cached = run_python_batch(codes, workers=2, cache=cache, **LIMITS)
    assert cached == plain and run_python_batch(codes, workers=2, cache=cache, **LIMITS) == plain
    assert cache.hits == 22 + 15 and RESULTS.max_bytes == 64 * 2**20


# ----------------------------------------------------------------------------------------------------------------
# the audit hook as a pure function


@pytest.fixture
def hook():
    return make_audit_hook("/sbx/work")


@pytest.mark.parametrize(
    ("event", "args"),
    [
        ("os.fork", ()),
        ("os.system", (b"ls",)),
        ("os.kill", (1, 9)),
        ("import", ("ctypes", None, [], [], [])),
        ("socket.connect", (None, ("1.1.1.1", 80))),
        ("open", ("/etc/passwd", "r", 0)),
        ("open", ("../x", "r", 0)),
        ("open", ("/sbx/work/../x", "w", 0)),
        ("open", ("/sbx/workx/a", "r", 0)),
        ("open", (b"/etc", "rb", 0)),
        ("os.remove", ("/sbx/other", None)),
        ("os.rename", ("a", "/tmp/b", None, None)),
        ("os.listdir", ("/",)),
        ("os.chdir", ("sub",)),
        ("object.__setattr__", (print, "__code__", None)),
        ("open", (object(), "r", 0)),
        ("os.utime", ("a", ("x",), None, None)),
    ],
)
def test_hook_refuses(hook, event, args):
    with pytest.raises(PermissionError, match="sandbox"):
        hook(event, args)


@pytest.mark.parametrize(
    ("event", "args"),
    [
        ("open", ("/sbx/work/a.txt", "w", 0)),
        ("open", ("a/b/../c.txt", "r", 0)),
        ("open", (1, "w", 0)),
        ("open", (b"a.txt", "rb", 0)),
        ("os.listdir", (".",)),
        ("os.remove", ("a.txt", None)),
        ("compile", (b"", "x")),
        ("object.__setattr__", (int, "x", 1)),
        ("os.utime", ("a", (1, 2), None, None)),
        ("exec", (None,)),
    ],
)
def test_hook_allows(hook, event, args):
    assert hook(event, args) is None


def test_hook_limits_files_opened_for_writing(hook):
    for i in range(16):
        hook("open", (f"f{i}", "w", 0))
    hook("open", ("f0", "r", 0))  # reading does not count
    with pytest.raises(PermissionError, match="too many"):
        hook("open", ("f16", None, os.O_WRONLY | os.O_CREAT))  # os.open with write flags counts too
