"""The runtime: models, rollout and training engines, workers and where they live, checkpoints."""
