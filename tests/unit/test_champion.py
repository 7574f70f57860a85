"""The registry's champion alias: the decision (pure) and the real MLflow registry path (a SQLite store in tmp)."""

from __future__ import annotations

import math

import pytest

from dsmath.config import parse_params
from dsmath.runtime import tracking


@pytest.mark.parametrize(
    ("value", "champion", "metric", "wins"),
    [
        (0.5, None, "synthetic/tool/greedy", True),  # no champion yet: the first version takes the alias
        (0.4, 0.5, "synthetic/tool/greedy", False),
        (0.6, 0.5, "synthetic/tool/greedy", True),
        (0.5, 0.5, "synthetic/tool/greedy", False),  # a tie keeps the champion
        (0.9, 0.5, "synthetic/cot/pass@8", True),
        (None, 0.5, "synthetic/tool/greedy", False),  # the RL model was not evaluated on the metric
        (None, None, "synthetic/tool/greedy", False),
        (math.nan, None, "synthetic/tool/greedy", False),
        (math.nan, 0.5, "synthetic/tool/greedy", False),
        (0.1, math.nan, "synthetic/tool/greedy", True),  # a champion without a usable value is replaced
        (0.1, 0.2, "synthetic/tool/format_error_rate", True),  # fewer format errors is better
        (0.3, 0.2, "synthetic/tool/format_error_rate", False),
        (80.0, 95.0, "gsm8k_test/cot/mean_length", True),
    ],
)
def test_beats_champion(value, champion, metric, wins):
    assert tracking.beats_champion(value, champion, metric) is wins


def champion_trajectory(values: list[float | None], metric: str) -> list[int | None]:
    """The champion's version (1-based) after each promotion, by the pure rule alone."""
    champion, best, out = None, None, []
    for version, value in enumerate(values, start=1):
        if tracking.beats_champion(value, best, metric):
            champion, best = version, value
        out.append(champion)
    return out


def test_decision_sequence():
    assert champion_trajectory([0.5, 0.4, 0.6], "synthetic/tool/greedy") == [1, 1, 3]
    assert champion_trajectory([0.5, 0.4, 0.6], "synthetic/tool/format_error_rate") == [1, 2, 2]
    assert champion_trajectory([None, 0.3, 0.3], "synthetic/tool/greedy") == [None, 2, 2]


@pytest.fixture
def registry_params(tmp_path, monkeypatch):
    """Params whose MLflow store is a SQLite file in tmp_path; the process-wide tracking URI is restored after."""
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # anything MLflow writes relative to the cwd (./mlruns) stays in tmp_path
    previous = mlflow.get_tracking_uri()
    yield parse_params({"common": {"tracking": {"experiment": "champion-test", "uri": f"sqlite:///{tmp_path}/m.db",
                                                "artifacts": str(tmp_path / "art"), "registered_model": "m",
                                                "champion_alias": "champion"}},
                        "evaluate": {"primary_metric": "synthetic/cot/greedy"}})
    mlflow.set_tracking_uri(previous)


def _rl_run_with_model(params) -> str:
    """An `rl` stage run that logged a model: an MLmodel file under `model/` (all `register_model` reads) and the
    model-URI tag `latest_stage_run` looks for."""
    with tracking.stage_run("rl", params) as run:
        run.client.log_text(run.run_id, "flavors: {}\n", "model/MLmodel")
        run.set_tags({tracking.MODEL_URI_TAG: f"runs:/{run.run_id}/model"})
    return run.run_id


def test_promotions_move_the_alias_only_on_improvement(registry_params):
    from mlflow.tracking import MlflowClient

    t = registry_params.common.tracking
    client = MlflowClient(tracking.tracking_uri(t))  # this test's store, whatever the process-wide URI
    promoted, champions, run_ids = [], [], []
    for value in (0.5, 0.4, 0.6):
        run_ids.append(_rl_run_with_model(registry_params))
        promoted.append(tracking.promote_champion(registry_params, value))
        champions.append(client.get_model_version_by_alias(t.registered_model, t.champion_alias))
    assert promoted == [True, False, True]
    assert [int(c.version) for c in champions] == [1, 1, 3]
    assert [c.run_id for c in champions] == [run_ids[0], run_ids[0], run_ids[2]]  # the model of that very run
    versions = {int(v.version): v for v in client.search_model_versions(f"name = '{t.registered_model}'")}
    assert sorted(versions) == [1, 2, 3]  # every promotion registered a version, champion or not
    assert [versions[i].run_id for i in (1, 2, 3)] == run_ids
    assert [versions[i].tags["value"] for i in (1, 2, 3)] == ["0.5", "0.4", "0.6"]
    assert {v.tags["primary_metric"] for v in versions.values()} == {"synthetic/cot/greedy"}
    assert {v.tags["split"] for v in versions.values()} == {"validation"}  # compared on val, never on test
    # no metric for the RL model (not evaluated): nothing registered, the alias stays
    assert tracking.promote_champion(registry_params, None) is False
    assert int(client.get_model_version_by_alias(t.registered_model, t.champion_alias).version) == 3
    assert len(client.search_model_versions(f"name = '{t.registered_model}'")) == 3


def test_a_champion_without_a_validation_value_is_not_comparable(registry_params):
    """Versions registered before the champion was chosen on validation carry a test figure: any validation value
    beats them (they are not compared), and the seed and test value ride along as tags."""
    from mlflow.tracking import MlflowClient

    t = registry_params.common.tracking
    client = MlflowClient(tracking.tracking_uri(t))
    run_id = _rl_run_with_model(registry_params)
    client.create_registered_model(t.registered_model)
    old = client.create_model_version(t.registered_model, f"runs:/{run_id}/model", run_id=run_id,
                                      tags={"primary_metric": "synthetic/cot/greedy", "value": "0.99"})
    client.set_registered_model_alias(t.registered_model, t.champion_alias, old.version)
    _rl_run_with_model(registry_params)
    assert tracking.promote_champion(registry_params, 0.5, tags={"test_value": 0.48, "rl_seed": 7}) is True
    champion = client.get_model_version_by_alias(t.registered_model, t.champion_alias)
    assert champion.version != old.version
    assert champion.tags["split"] == "validation" and champion.tags["test_value"] == "0.48"
    assert champion.tags["rl_seed"] == "7"
