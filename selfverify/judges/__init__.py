"""The verifier family behind one interface (DESIGN §1, §4, §5).

Every verifier maps (problem, steps) to a :class:`~selfverify.judges.base.Verdict`.
"""

from selfverify.judges.base import Verdict, Verifier, VerifyInput, earliest_error_from_scores

__all__ = ["Verdict", "Verifier", "VerifyInput", "earliest_error_from_scores"]
