"""The verifier family behind one interface (DESIGN §1, §4, §5).

Every verifier maps (problem, steps) to a :class:`~verifiers.base.Verdict`.
"""

from verifiers.base import Verdict, Verifier, VerifyInput, earliest_error_from_scores

__all__ = ["Verdict", "Verifier", "VerifyInput", "earliest_error_from_scores"]
