"""The embedded world's ground-truth step checker behind the verifier interface."""

from __future__ import annotations

from collections.abc import Sequence

from selfverify.judges.base import Verdict, VerifyInput
from selfverify.tasks import Problem, check_solution, parse_problem, split_steps


class EmbeddedRuleVerifier:
    """Exact step labels for embedded arithmetic problems (``Q:12+7*3-4``); see selfverify.tasks."""

    name = "embedded-rule"

    def verify_batch(self, items: Sequence[VerifyInput]) -> list[Verdict]:
        return [self.verify(item) for item in items]

    def validate(self, item: VerifyInput) -> None:
        """Raise ``ValueError`` for an input this checker cannot judge: a problem that is not ``Q:...``
        (:func:`~selfverify.tasks.parse_problem`), or a step that is blank or spans lines (the checker
        labels lines, so its labels would not line up with the steps). The scoring CLI calls it per
        record, so such a record is reported with its line instead of stopping the run."""
        self._problem(item)

    def _problem(self, item: VerifyInput) -> Problem:
        """The parsed problem of a valid input (see :meth:`validate`)."""
        problem = parse_problem(item.problem)
        for i, step in enumerate(item.steps):
            if len(split_steps(step)) != 1:
                raise ValueError(f"step {i + 1} must be one non-empty line for the embedded checker")
        return problem

    def verify(self, item: VerifyInput) -> Verdict:
        problem = self._problem(item)
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
