"""A corrupt checkpoint never wedges a stage: it is moved aside with a warning naming the file and the run falls back to
the previous good checkpoint or a fresh start, ending at the weights of an uninterrupted run (nothing half-loaded)."""

from __future__ import annotations

import pytest
import torch

from dsmath.train import checkpoint
from dsmath.train.checkpoint import CorruptCheckpointError, CorruptCheckpointWarning
from tests.unit.test_train_loop import flat, run


def _truncate(path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.fixture(scope="module")
def reference():
    return flat(run(steps=20)[0])


def _checkpointed(tmp_path, keep: int = 1):
    """A run killed in step 13 with checkpoints every 5 steps: step-000010 (and step-000005 when keep=2)."""
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, steps=20, ckpt_every=5, fail_at_call=13, keep=keep)


def test_half_written_model_falls_back_to_the_previous_checkpoint(tmp_path, reference):
    _checkpointed(tmp_path, keep=2)
    assert [p.name for p in checkpoint.step_dirs(tmp_path)] == ["step-000005", "step-000010"]
    bad = tmp_path / "step-000010" / "model.safetensors"
    _truncate(bad)
    with pytest.warns(CorruptCheckpointWarning, match=r"step-000010/model\.safetensors"):
        model, state = run(tmp_path, steps=20, ckpt_every=5, keep=2)
    assert state.resumed_from == 5 and state.step == 20
    assert torch.equal(flat(model), reference)
    assert (tmp_path / "corrupt-step-000010" / "model.safetensors").exists()  # kept as evidence, out of the way
    assert [p.name for p in checkpoint.step_dirs(tmp_path)] == ["step-000015", "step-000020"]


def test_zero_byte_optimizer_state_starts_afresh_without_half_loaded_weights(tmp_path, reference):
    """accelerate loads the model before the optimizer: loading step-000010 as is would leave its weights in the
    model when optimizer.bin fails; the fallback (no other checkpoint: a fresh start) must not train on from them."""
    _checkpointed(tmp_path)
    (tmp_path / "step-000010" / "optimizer.bin").write_bytes(b"")
    with pytest.warns(CorruptCheckpointWarning, match=r"step-000010/optimizer\.bin"):
        model, state = run(tmp_path, steps=20, ckpt_every=5)
    assert state.resumed_from == 0 and state.step == 20
    assert torch.equal(flat(model), reference)


def test_a_checkpoint_that_reads_back_but_does_not_load_stops_once_then_a_rerun_starts_afresh(tmp_path, reference):
    """A missing file is found only by load_state, after the model was loaded: no fallback from a half-loaded model in
    this process, but a clear error, and the checkpoint is out of the way for the rerun."""
    _checkpointed(tmp_path)
    (tmp_path / "step-000010" / "optimizer.bin").unlink()
    with pytest.warns(CorruptCheckpointWarning), pytest.raises(CorruptCheckpointError, match="step-000010"):
        run(tmp_path, steps=20, ckpt_every=5)
    assert checkpoint.step_dirs(tmp_path) == [] and (tmp_path / "corrupt-step-000010").is_dir()
    model, state = run(tmp_path, steps=20, ckpt_every=5)
    assert state.resumed_from == 0 and torch.equal(flat(model), reference)


def test_moved_aside_checkpoints_stay_bounded(tmp_path):
    _checkpointed(tmp_path)
    for round_ in range(3):  # corrupt the newest checkpoint, rerun (killed again), several times
        newest = checkpoint.step_dirs(tmp_path)[-1]
        (newest / "random_states_0.pkl").write_bytes(b"garbage")
        with pytest.warns(CorruptCheckpointWarning), pytest.raises(KeyboardInterrupt):
            run(tmp_path, steps=20, ckpt_every=5, fail_at_call=7 + round_)
    corrupt = [p.name for p in tmp_path.iterdir() if p.name.startswith("corrupt-")]
    assert corrupt == ["corrupt-step-000005"]  # only the latest resume's evidence is kept
    checkpoint.clear_stale(tmp_path, "x:world=1")  # leaves the evidence alone and trips on nothing
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("corrupt-")] == corrupt


# ------------------------------------------------------------------------------------------------------- RL


@pytest.mark.parametrize("content", [b"", b"\x80\x04garbled", "truncated"])
def test_corrupt_rl_state_is_moved_aside_and_the_run_starts_afresh(tmp_path, content):
    from dsmath.rl.run import _load_checkpoint

    path = tmp_path / "state.pt"
    if content == "truncated":
        torch.save({"trainer": {"w": torch.zeros(1000)}, "history": [], "fingerprint": "fp"}, path)
        _truncate(path)
    else:
        path.write_bytes(content)
    with pytest.warns(CorruptCheckpointWarning, match=r"state\.pt"):
        assert _load_checkpoint(path, "fp", torch.device("cpu")) is None
    assert not path.exists() and (tmp_path / "state.pt.corrupt").exists()


def test_good_rl_state_still_loads(tmp_path):
    from dsmath.rl.run import _load_checkpoint

    path = tmp_path / "state.pt"
    torch.save({"trainer": {"w": torch.ones(3)}, "history": [{"step": 1}], "fingerprint": "fp"}, path)
    state = _load_checkpoint(path, "fp", torch.device("cpu"))
    assert state is not None and state["history"] == [{"step": 1}]
    assert _load_checkpoint(path, "other", torch.device("cpu")) is None and path.exists()
