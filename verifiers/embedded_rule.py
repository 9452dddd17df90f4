"""The embedded world's ground-truth step checker behind the verifier interface."""

from __future__ import annotations

from collections.abc import Sequence

from selfverify.tasks import check_solution, parse_problem
from verifiers.base import Verdict, VerifyInput


class EmbeddedRuleVerifier:
    """Exact step labels for embedded arithmetic problems (``Q:12+7*3-4``); see selfverify.tasks."""

    name = "embedded-rule"

    def verify_batch(self, items: Sequence[VerifyInput]) -> list[Verdict]:
        return [self.verify(item) for item in items]

    def verify(self, item: VerifyInput) -> Verdict:
        problem = parse_problem(item.problem)
        check = check_solution(problem, "\n".join(item.steps))
        wrong = [i for i, ok in enumerate(check.step_correct) if not ok]
        ok = check.correct and check.all_steps_valid
        analysis = (
            "All steps are correct." if ok else f"Step {check.earliest_error + 1} is the first wrong step."
        )
        return Verdict(
            step_scores=[float(x) for x in check.step_correct],
            earliest_error=check.earliest_error,
            score=1.0 if ok else 0.0,
            analysis=analysis,
            extra={"wrong_steps": wrong, "answer_correct": check.correct},
        )
