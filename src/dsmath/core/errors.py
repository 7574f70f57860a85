"""The errors a stage reports as one line instead of a traceback (stdlib only, so every layer can raise them).

:func:`dsmath.runtime.stage.run_stage` prints ``error: <message>`` and exits with the error's `exit_code`: 2 for a
refused input (the stage never started its work: bad data, an unreachable service), 1 for a run that failed on its way
(divergence, a checkpoint that cannot be loaded). Each message names its cause: the file and line, the URI, the
step and the likely setting.
"""

from __future__ import annotations


class StageError(Exception):
    """Base of the one-line stage failures."""

    exit_code = 1


class RefusedInput(StageError):
    """An input the stage cannot use (bad data, an unreachable service): nothing was computed."""

    exit_code = 2
