"""Run the Prefect study flow once under `prefect_test_harness` in the current directory (the study file is argv[1])
and print, as the last line, JSON with the flow state, its task run names and the artifact keys. Used by
test_study_smoke.py in a subprocess, inside the temporary project copy."""

import asyncio
import json
import sys

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.testing.utilities import prefect_test_harness

from flows.study import dsmath_study


async def _runs_and_artifacts(flow_run_id):
    async with get_client() as client:
        runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        artifacts = await client.read_artifacts()
    return sorted(r.name for r in runs), [a.key for a in artifacts]


def main() -> None:
    with prefect_test_harness():
        state = dsmath_study(sys.argv[1], return_state=True)
        runs, artifacts = asyncio.run(_runs_and_artifacts(state.state_details.flow_run_id))
    print(json.dumps({"state": state.type.value, "runs": runs, "artifacts": artifacts}))


if __name__ == "__main__":
    main()
