"""The jobs built from the core: the RL-only job, the self-verification loop, and their phases."""
