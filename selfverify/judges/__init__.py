"""The verifier family behind one interface (docs/guides/architecture.md, 'Seams', 'Rewards' and
'Scoring').

Every verifier maps (problem, steps) to a :class:`~selfverify.judges.base.Verdict`.
"""

from selfverify.judges.base import Verdict, Verifier, VerifyInput, earliest_error_from_scores

__all__ = ["Verdict", "Verifier", "VerifyInput", "earliest_error_from_scores"]
