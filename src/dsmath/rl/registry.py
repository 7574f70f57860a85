"""The RL choices: one registry per params key, whose names are that key's allowed values.

- ``ALGORITHMS`` (``rl.algorithm``): an :class:`~dsmath.rl.algorithms.Algorithm`, a data source, an advantage
  estimator and loss settings (the unified paradigm, sec. 5.2.1);
- ``ADVANTAGES`` (``rl.advantage``): GRPO's advantage estimators, ``(Signals, rl section) -> ((N, T) advantages,
  extras)`` (:mod:`dsmath.rl.advantages`);
- ``LOSSES`` (``rl.importance_ratio``): the loss variants, ``(logprobs, old_logprobs, advantages, mask, *, clip_low,
  clip_high) -> ((N, T) per-token loss, (N, T) ratio)`` (:mod:`dsmath.rl.losses`);
- ``KL_ESTIMATORS`` (``rl.kl``): ``(logprobs, ref_logprobs) -> (N, T)`` estimates of KL(pi_theta || pi_ref);
- ``AGGREGATIONS`` (``rl.aggregation``): ``(values, mask, *, rows, tokens, max_tokens) -> scalar``.

Adding a variant is its function plus one line here (``docs/extending.md``). An entry is written
``"module:attribute"`` and imported when first looked up, so this module imports nothing of dsmath and no torch:
the params (:class:`dsmath.config.Rl`) read the names from here, lazily, without importing the RL code. A test or a
notebook can also :meth:`Registry.register` an object at run time (and :meth:`Registry.unregister` it).
A target module must be one the ``rl`` stage imports (a test checks), so that it is in the stage's code deps.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any


class UnknownChoice(KeyError, ValueError):
    """A name no entry has: a KeyError to the mapping, a ValueError (a bad setting) to its caller."""

    def __str__(self) -> str:
        return str(self.args[0])


class Registry(Mapping[str, Any]):
    """Name -> implementation for the params key ``rl.<key>``, in the order the names are listed."""

    def __init__(self, key: str, entries: dict[str, Any]):
        self.key = key
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> Any:
        if name not in self._entries:
            raise UnknownChoice(f"unknown rl.{self.key} {name!r}; valid: {', '.join(self._entries)}")
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            return getattr(importlib.import_module(module), attribute)
        return entry

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def register(self, name: str, entry: Any = None) -> Any:
        """Add `entry` under `name` (returns it); without `entry`, a decorator that registers what it decorates."""
        if entry is None:
            return lambda obj: self.register(name, obj)
        if name in self._entries:
            raise ValueError(f"rl.{self.key} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        del self._entries[name]


ALGORITHMS = Registry("algorithm", {
    "grpo": "dsmath.rl.algorithms:GRPO",
    "ppo": "dsmath.rl.algorithms:PPO",
    "online_rft": "dsmath.rl.algorithms:ONLINE_RFT",
    "rft": "dsmath.rl.algorithms:RFT",
})
ADVANTAGES = Registry("advantage", {
    "outcome": "dsmath.rl.advantages:outcome",  # group-normalised outcome reward (sec. 4.1.2)
    "process": "dsmath.rl.advantages:process",  # group-normalised step rewards, summed from each token on (4.1.3)
    "rloo": "dsmath.rl.advantages:rloo",  # the reward minus the mean of the group's other outputs
})
LOSSES = Registry("importance_ratio", {
    "token": "dsmath.rl.losses:token_clip",  # PPO / GRPO (eq. 3): a clipped ratio per token
    "sequence": "dsmath.rl.losses:sequence_clip",  # GSPO: one length-normalised ratio per output
})
KL_ESTIMATORS = Registry("kl", {
    "k1": "dsmath.rl.losses:kl_k1",
    "k2": "dsmath.rl.losses:kl_k2",
    "k3": "dsmath.rl.losses:kl_k3",  # DeepSeekMath eq. 4
})
AGGREGATIONS = Registry("aggregation", {
    "seq-mean-token-mean": "dsmath.rl.losses:seq_mean_token_mean",  # DeepSeekMath / GRPO
    "token-mean": "dsmath.rl.losses:token_mean",  # DAPO
    "seq-mean-token-sum-norm": "dsmath.rl.losses:seq_mean_token_sum_norm",  # Dr. GRPO
})

REGISTRIES: dict[str, Registry] = {r.key: r for r in (ALGORITHMS, ADVANTAGES, LOSSES, KL_ESTIMATORS, AGGREGATIONS)}
"""Every registry by its params key (``rl.<key>``): what :class:`dsmath.config.Rl` validates the choices against."""
