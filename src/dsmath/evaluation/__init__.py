"""Evaluation: pass@k / maj@k metrics and the per-model evaluation over benchmarks and modes."""
