"""Reinforcement learning: advantages, policy losses, rollouts and the GRPO/PPO/RFT trainers (start at trainer.py;
the choices are registries in registry.py, and docs/extending.md shows how to add one)."""
