"""Reinforcement learning: advantages, policy losses, rollouts and the GRPO/PPO/RFT trainers."""
