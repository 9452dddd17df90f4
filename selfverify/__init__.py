"""selfverify: train self-verifying reasoning models (generator, verifier, meta-verifier)."""

__version__ = "0.1.0"
