"""Generation: what RL, evaluation and the SFT probe share to decode from a causal LM.

engines.py   the decoding engines (a fast Llama KV-cache decoder, the generic HF one) and the row-keyed sampler
shared_prefix.py  the fast decoder's cascade attention: a prompt shared by a group of rows read once per group
rollout.py   `sample` (batched, per-token log-probs, tool-integrated mode), `Rollout`, `decode_completions`
logprobs.py  scoring given completions: `sequence_logprobs`, its length-bucketed and shared-prompt forms
tools.py     the tool a tool-integrated rollout calls: programs run in the sandbox

rl, evaluation and train import this package; it imports none of them. Nothing here talks to other processes: a
caller that splits rows over ranks gives each row its global index as its noise key (`sample(row_keys=...)`).
"""
