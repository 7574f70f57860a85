"""Tracking faults: a dead tracking server stops a stage within seconds with one line naming the URI (not minutes of
HTTP retries); a stage killed with SIGKILL does not leave its MLflow run RUNNING once the stage starts again."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import ROOT, smoke_params, subprocess_env, write_params

from dsmath.config import parse_params
from dsmath.runtime import tracking


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------------------------
# a dead tracking server


def test_stage_with_a_dead_tracking_server_fails_fast_naming_the_uri(tmp_path):
    uri = f"http://127.0.0.1:{_closed_port()}"
    write_params(tmp_path, smoke_params(tmp_path))
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, str(ROOT / "stages" / "corpus.py"), "--params", "params.yaml"],
                              cwd=tmp_path, env=subprocess_env() | {"MLFLOW_TRACKING_URI": uri},
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the stage was still retrying {uri} after 60 s")
    elapsed = time.perf_counter() - t0
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert uri in last and "MLFLOW_TRACKING_URI" in last and "not reachable" in last, done.stderr
    assert elapsed < 30
    assert not (tmp_path / "data").exists()  # nothing written before the store was found dead


def test_probe_is_quick_and_leaves_mlflow_retries_alone(monkeypatch):
    uri = f"http://user:secret@127.0.0.1:{_closed_port()}/mlflow"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    before = {k: os.environ.get(k) for k in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")}
    cfg = parse_params({}).common.tracking
    t0 = time.perf_counter()
    with pytest.raises(tracking.TrackingUnavailable) as err:
        tracking.setup(cfg)
    assert time.perf_counter() - t0 < 10
    assert "127.0.0.1" in str(err.value) and "secret" not in str(err.value)  # the password is not printed
    assert "\n" not in str(err.value)
    assert {k: os.environ.get(k) for k in before} == before


class _Answer404(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_probe_accepts_any_http_answer():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer404)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tracking.check_reachable(f"http://127.0.0.1:{server.server_address[1]}")  # a 404 is a live server
    finally:
        server.shutdown()
        server.server_close()
    tracking.check_reachable("sqlite:///nowhere/m.db")  # not http: nothing to probe


# ---------------------------------------------------------------------------------------------------------------
# a stage killed with SIGKILL


_HOLD = """
import sys, time
from dsmath.runtime import tracking
from dsmath.config import parse_params
params = parse_params({"common": {"tracking": {"experiment": "t", "uri": sys.argv[1], "artifacts": sys.argv[2]}}})
with tracking.stage_run("corpus", params) as run:
    print(run.run_id, flush=True)
    time.sleep(120)
"""


def _hold_stage_run(uri: str, art: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, uri, art], stdout=subprocess.PIPE, text=True,
                            env=subprocess_env(), start_new_session=True)
    return proc, proc.stdout.readline().strip()


def test_runs_of_a_killed_stage_are_marked_killed_on_its_next_start(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    uri, art = f"sqlite:///{tmp_path}/m.db", str(tmp_path / "art")
    params = parse_params({"common": {"tracking": {"experiment": "t", "uri": uri, "artifacts": art}}})
    tracking.setup(params.common.tracking)  # the store exists before the two processes race for it
    killed, killed_id = _hold_stage_run(uri, art)
    alive, alive_id = _hold_stage_run(uri, art)  # the same stage running concurrently (a study): left alone
    try:
        assert killed_id and alive_id
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        from mlflow.tracking import MlflowClient

        client = MlflowClient()
        exp_id = tracking.setup(params.common.tracking)
        me = json.loads(client.get_run(alive_id).data.tags[tracking.PROCESS_TAG])
        dead_pid = killed.pid

        def orphan(stage: str, **ident) -> str:
            tags = {"dsmath.stage": stage, tracking.PROCESS_TAG: json.dumps(me | {"pid": dead_pid} | ident)}
            return client.create_run(exp_id, tags=tags).info.run_id

        elsewhere = orphan("corpus", host="another-host")  # a process of another machine: can't tell, left alone
        other_ns = orphan("corpus", pidns="pid:[1]")  # another pid namespace (container): left alone
        other_stage = orphan("tokenizer")  # another stage: its own next start ends it
        untagged = client.create_run(exp_id, tags={"dsmath.stage": "corpus"}).info.run_id  # no process recorded
        with tracking.stage_run("corpus", params) as run:
            status = {name: client.get_run(rid).info.status for name, rid in
                      [("killed", killed_id), ("alive", alive_id), ("elsewhere", elsewhere),
                       ("other_ns", other_ns), ("other_stage", other_stage), ("untagged", untagged)]}
        assert status == {"killed": "KILLED", "alive": "RUNNING", "elsewhere": "RUNNING", "other_ns": "RUNNING",
                          "other_stage": "RUNNING", "untagged": "RUNNING"}
        assert client.get_run(run.run_id).info.status == "FINISHED"
        assert client.get_run(killed_id).info.end_time is not None
    finally:
        for p in (killed, alive):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
            p.stdout.close()
