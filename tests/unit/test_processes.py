"""`common.processes`: a torch stage re-runs itself under torch.distributed.run with the same arguments (and only
then); the RL trainer's gradient average over ranks (one all-reduce after the backward) equals the mean of the
ranks' gradients, checked over 2 real gloo processes."""

from __future__ import annotations

import os
import socket
import sys

import pytest
import torch
import torch.multiprocessing as mp
import yaml

from dsmath.runtime import distributed
from dsmath.runtime.stage import run_stage


def _params(tmp_path, **common) -> str:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"common": common}))
    return str(path)


def test_multiprocess_stage_relaunches_itself_with_the_same_arguments(tmp_path, monkeypatch):
    calls, ran = [], []
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(distributed, "launch", lambda n, threads, argv: calls.append((n, threads, argv)) or 3)
    params = _params(tmp_path, processes=2, num_threads=1)
    with pytest.raises(SystemExit) as end:
        run_stage(lambda p, *a: ran.append(a), ["--params", params, "sft"], multiprocess=True)
    assert end.value.code == 3  # the launcher's exit code
    assert calls == [(2, 1, ["--params", params, "sft"])] and ran == []


@pytest.mark.parametrize("case", ["single-process stage", "one process", "inside a launcher"])
def test_stage_runs_in_place_when_it_must_not_relaunch(case, tmp_path, monkeypatch):
    monkeypatch.setattr(distributed, "launch", lambda *a: pytest.fail("must not relaunch"))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    if case == "inside a launcher":
        monkeypatch.setenv("WORLD_SIZE", "2")
    ran = []
    params = _params(tmp_path, processes=1 if case == "one process" else 2, num_threads=1)
    run_stage(lambda p, *a: ran.append((p.common.processes, a)), ["--params", params, "x"],
              multiprocess=case != "single-process stage")
    assert len(ran) == 1 and ran[0][1] == ("x",)


def test_launch_command_runs_the_module_under_torch_distributed_run(monkeypatch):
    seen = {}
    monkeypatch.setattr("subprocess.call", lambda cmd, env: seen.update(cmd=cmd, env=env) or 0)
    spec = type("Spec", (), {"name": "stages.evaluate"})()
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", spec, raising=False)
    assert distributed.launch(2, 1, ["--params", "p.yaml", "sft"]) == 0
    assert seen["cmd"][1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                               "-m", "stages.evaluate", "--params", "p.yaml", "sft"]
    assert seen["env"]["OMP_NUM_THREADS"] == "1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _average_on_rank(rank: int, port: int, out) -> None:
    import torch.distributed as dist

    os.environ |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
        x = torch.randn(5, 3) * (rank + 1)  # different data on each rank
        model(x).pow(2).sum().backward()
        if rank == 1:
            model[1].bias.grad = None  # a parameter without a gradient on one rank counts as zeros
        local = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
        distributed.average_gradients(distributed.World(rank, 2), model.parameters())
        out.put((rank, [g.tolist() for g in local], [p.grad.tolist() for p in model.parameters()]))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_average_gradients_is_the_mean_over_two_gloo_ranks():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_average_on_rank, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = {r: ([torch.tensor(g) for g in local], [torch.tensor(g) for g in avg])
           for r, local, avg in (queue.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    (l0, a0), (l1, a1) = got[0], got[1]
    for g0, g1, m0, m1 in zip(l0, l1, a0, a1, strict=True):
        torch.testing.assert_close(m0, (g0 + g1) / 2)
        assert torch.equal(m0, m1)  # the same gradient on every rank
    assert not torch.equal(l0[0], l1[0])  # the ranks did see different data


def test_average_gradients_is_a_no_op_in_one_process():
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 2.0)
    distributed.average_gradients(distributed.World(), [p])
    assert torch.equal(p.grad, torch.full((3,), 2.0))
