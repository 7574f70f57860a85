"""The tool of tool-integrated decoding (docs/formats.md, ``tool``): a batch of programs run in the sandbox."""

from __future__ import annotations

from collections.abc import Callable


def sandbox_tool(sandbox_cfg) -> Callable[[list[str]], list[str]]:
    """tool_fn for tool-integrated rollouts: run the programs in the sandbox; stdout, else the last error line.
    A program run before in this process (the G samples of a question often write the same one) is answered from
    its first run (:class:`dsmath.sandbox.pool.ResultCache`)."""
    from dsmath.sandbox.pool import RESULTS, run_python_batch

    def run(codes: list[str]) -> list[str]:
        results = run_python_batch(codes, sandbox_cfg.timeout_s, sandbox_cfg.memory_mb,
                                   sandbox_cfg.max_output_bytes, sandbox_cfg.workers, RESULTS)
        return [r.stdout if r.ok else (r.error.strip().splitlines() or ["error"])[-1] for r in results]

    return run
