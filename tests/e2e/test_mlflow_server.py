"""The tracking module works unchanged against a real `mlflow server` (started here on loopback)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dsmath.config import parse_params
from dsmath.orchestration import pipeline
from dsmath.runtime import tracking


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = _free_port()
    mlflow_bin = str(Path(sys.executable).with_name("mlflow"))
    proc = subprocess.Popen(
        [mlflow_bin, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path}/server.db", "--default-artifact-root", str(tmp_path / "art")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                if urllib.request.urlopen(f"{url}/health", timeout=2).status == 200:
                    break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("mlflow server did not start") from None
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=30)


def test_parent_child_runs_metrics_and_artifacts_on_a_server(mlflow_server, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    params = parse_params({"common": {"tracking": {"experiment": "server-test"}}})
    note = tmp_path / "note.txt"
    note.write_text("hello")
    with pipeline.pipeline_run(params) as parent:
        with tracking.stage_run("corpus", params, {"a": 1}) as run:
            for step in range(50):
                run.log_metrics({"corpus/x": step * 0.5}, step=step)
            run.log_artifact(note)
    children = pipeline.child_runs(parent)
    assert list(children) == ["corpus"]
    child = children["corpus"]
    assert child.data.metrics["corpus/x"] == 24.5
    client = tracking.StageRun(child.info.run_id).client
    assert [a.path for a in client.list_artifacts(child.info.run_id)] == ["note.txt"]
    assert client.get_run(parent).info.status == "FINISHED"
