"""The DeepSeekMath study: declared variants run as DVC experiments, tracked in MLflow, summed up in a report.

`spec` reads a study file, `runner` runs its variants x seeds (resumably), `report` writes reports/study.md.
"""
