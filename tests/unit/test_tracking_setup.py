"""tracking.setup marks the experiment as model training, so the MLflow UI opens its runs view, not GenAI traces."""

from __future__ import annotations

from types import SimpleNamespace

import mlflow

from dsmath.runtime import tracking


def test_experiment_is_marked_as_model_training(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = SimpleNamespace(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="dsmath-t",
                          artifacts=str(tmp_path / "mlartifacts"))
    exp_id = tracking.setup(cfg)
    key, value = tracking.EXPERIMENT_KIND
    assert mlflow.get_experiment(exp_id).tags[key] == value == "custom_model_development"
    old = mlflow.create_experiment("made-before-the-tag")  # an existing store's experiment gets the tag too
    assert key not in mlflow.get_experiment(old).tags
    assert tracking.setup(SimpleNamespace(**{**vars(cfg), "experiment": "made-before-the-tag"})) == old
    assert mlflow.get_experiment(old).tags[key] == value
