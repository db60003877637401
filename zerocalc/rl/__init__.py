"""RL post-training plans (GRPO, PPO, DPO, reward-model training): a sequence of phases with different residents
(rollout engine, reference, reward model, critic, the policy's training step), each phase's peak per GPU class,
the rollout engine's KV capacity, solvers and the RL frameworks' configs read as data.

The training side of every model is today's per-rank report (parallel/ranks.py layout_report), called once per
model: the plan never re-derives training bytes. The engines' rules are rows of tables (rl/engines.py)."""
