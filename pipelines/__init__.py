"""End-to-end recipes built from the selfverify core: plain RL, self-verification rounds, studies."""
