"""Run the Prefect flow once under `prefect_test_harness` (a throwaway Prefect database) in the current directory and
print, as the last line, JSON with the flow state, its task runs (name, start time, state) and artifact keys.
Used by test_pipeline_smoke.py in a subprocess, inside the temporary project copy."""

import asyncio
import json

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.testing.utilities import prefect_test_harness

from flows.pipeline import dsmath_pipeline


async def _runs_and_artifacts(flow_run_id):
    async with get_client() as client:
        runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        artifacts = await client.read_artifacts()
    return [(r.name, r.start_time.isoformat(), r.state_type.value) for r in runs], [a.key for a in artifacts]


def main() -> None:
    with prefect_test_harness():
        state = dsmath_pipeline(return_state=True)
        runs, artifacts = asyncio.run(_runs_and_artifacts(state.state_details.flow_run_id))
    print(json.dumps({"state": state.type.value, "runs": runs, "artifacts": artifacts}))


if __name__ == "__main__":
    main()
