"""DeepSeekMath-V2 rewards and the process/outcome mix, hand-computed."""

import pytest
import torch

from selfverify.config.schema import SELF_VERIFY_ALPHA, SELF_VERIFY_BETA, ModelSpec
from selfverify.judges.compact_judge import CompactFormat, parse_analysis, reference_analysis, true_score
from selfverify.judges.generative import MetaVerifier
from selfverify.judges.rewards import (
    meta_verifier_reward,
    mix_step_rewards,
    outcome_rewards,
    score_reward,
    self_verify_reward,
    shows_working,
    verifier_reward,
)
from selfverify.recipes.judge_data import Labelled
from selfverify.recipes.rewards import verifier_rewards
from selfverify.runtime.models import build_char_tokenizer, build_model
from selfverify.runtime.rollout import Rollout
from selfverify.runtime.workers import LMWorker
from selfverify.tasks import Problem, check_solution


def test_outcome_rewards() -> None:
    p = Problem(5, (("-", 7), ("-", 6)))  # answer -8
    checks = [check_solution(p, s) for s in ("5-7=-2\n-2-6=-8\nA:-8", "A:-8", "A:-9", "")]
    assert outcome_rewards(checks).tolist() == [1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("predicted", "label", "expected"),
    [(1.0, 1.0, 1.0), (0.5, 1.0, 0.5), (0.0, 1.0, 0.0), (1.0, 0.0, 0.0), (0.5, 0.0, 0.5), (0.5, 0.5, 1.0)],
)
def test_score_reward(predicted: float, label: float, expected: float) -> None:
    assert score_reward(predicted, label) == expected


def test_verifier_reward() -> None:
    assert verifier_reward(True, 0.5, 0.5, 1.0) == 1.0
    assert verifier_reward(True, 0.5, 1.0, 0.5) == 0.25  # (1 - 0.5) * 0.5
    assert verifier_reward(True, 0.0, 0.5, 1.0) == 0.5
    assert verifier_reward(True, 1.0, 1.0, 0.0) == 0.0  # the meta-verifier is not convinced
    assert verifier_reward(True, 1.0, 0.0, 1.0) == 0.0
    assert verifier_reward(False, 1.0, 1.0, 1.0) == 0.0  # unparsed


def test_meta_verifier_reward() -> None:
    assert meta_verifier_reward(True, 1.0, 1.0) == 1.0
    assert meta_verifier_reward(True, 1.0, 0.5) == 0.5
    assert meta_verifier_reward(True, 0.0, 1.0) == 0.0
    assert meta_verifier_reward(False, 0.5, 0.5) == 0.0


def test_self_verify_reward() -> None:
    assert (SELF_VERIFY_ALPHA, SELF_VERIFY_BETA) == (0.76, 0.24)
    # R = α·R_Y + β·R_score(s', R_Y)·R_meta
    assert self_verify_reward(True, 1.0, 1.0, 1.0) == pytest.approx(1.0)
    assert self_verify_reward(True, 0.5, 1.0, 0.5) == pytest.approx(0.76 * 0.5 + 0.24 * 0.5 * 0.5)  # 0.44
    assert self_verify_reward(True, 0.0, 0.0, 1.0) == pytest.approx(0.24)  # honest about a bad solution
    assert self_verify_reward(True, 0.0, 1.0, 1.0) == 0.0  # claims a bad solution is right
    assert self_verify_reward(True, 1.0, 0.0, 0.0) == pytest.approx(0.76)
    assert self_verify_reward(True, 1.0, 0.5, 1.0) == pytest.approx(0.76 + 0.24 * 0.5)  # 0.88
    assert self_verify_reward(False, 1.0, 1.0, 1.0) == 0.0
    assert self_verify_reward(False, 0.5, 0.5, 1.0) == 0.0
    assert self_verify_reward(True, 1.0, 0.5, 1.0, alpha=0.5, beta=0.5) == pytest.approx(0.75)


def _self_verify_reward_of(problem: Problem, steps: list[str]) -> float:
    """The loop's self-verification reward of a solution whose own analysis Z is the faithful one
    (the compact judge's reference, parsed as the loop parses it), with a perfect verifier and a
    meta-verifier that finds Z faithful."""
    own = parse_analysis(reference_analysis(problem, steps), len(steps))
    assert own.parsed
    score = true_score(problem, check_solution(problem, "\n".join(steps)))
    return self_verify_reward(shows_working(steps) and own.parsed, score, own.score, 1.0)


def test_the_bare_answer_exploit_earns_nothing() -> None:
    """A bare answer honestly self-scored 0 earned β = 0.24 (R_format read as Z's format alone), as
    much as an honest wrong solution with its working, and generators collapsed onto bare answers."""
    p = Problem(5, (("-", 7), ("-", 6), ("+", 3)))
    assert _self_verify_reward_of(p, ["A:-5"]) == 0.0  # the right answer, bare
    assert _self_verify_reward_of(p, ["A:4"]) == 0.0  # a wrong one, bare
    assert not shows_working([]) and not shows_working(["A:-5"])
    # With its working, honesty about a wrong solution still pays β, and a right one pays 1.
    assert _self_verify_reward_of(p, ["5-7=-2", "-2-6=-9", "-9+3=-6", "A:-6"]) == pytest.approx(0.24)
    assert _self_verify_reward_of(p, p.reference_solution().splitlines()) == pytest.approx(1.0)


def test_mix_step_rewards() -> None:
    out = mix_step_rewards([[1.0, 0.0, 1.0], [], [0.5], [1.0, 1.0]], [1.0, 1.0, 0.0, 0.0], 0.5, 0.25)
    assert out == [[0.5, 0.0, 0.75], [0.25], [0.25], [0.5, 0.5]]
    # A response without steps gets one step holding the outcome part only.
    assert mix_step_rewards([[]], [0.0], 0.3, 0.7) == [[0.0]]
    assert mix_step_rewards([[]], [1.0], 0.3, 0.7) == [[0.7]]
    assert mix_step_rewards([], [], 0.5, 0.5) == []
    with pytest.raises(ValueError):
        mix_step_rewards([[1.0]], [1.0, 0.0], 0.5, 0.5)


def test_mix_step_rewards_does_not_modify_its_input() -> None:
    scores = [[1.0, 0.0]]
    mix_step_rewards(scores, [1.0], 1.0, 1.0)
    assert scores == [[1.0, 0.0]]


def test_the_verifier_reward_without_r_meta_does_not_ask_the_meta_verifier() -> None:
    """loop.verifier_meta_reward=false, the R_meta ablation: R_format·R_score alone. With R_meta, an
    auditor that confirms nothing (an untrained model: its verdicts do not parse) gives nothing."""
    fmt = CompactFormat()
    p = Problem(5, (("-", 7), ("-", 6), ("+", 3)))
    solutions = [p.reference_solution().splitlines(), ["5-7=-2", "-2-6=-9", "-9+3=-6", "A:-6"]]
    items = []
    for steps in solutions:
        score = true_score(p, check_solution(p, "\n".join(steps)))
        prompt = fmt.verifier_prompt(p.text, steps)
        items.append(Labelled(p, tuple(steps), reference_analysis(p, steps), score, prompt))
    texts = [it.analysis for it in items] + [reference_analysis(p, solutions[0])]  # the last: a missed error
    items.append(items[1])
    # The reward reads the rollout's texts alone.
    rollout = Rollout(
        torch.zeros(3, 1), torch.ones(3, 1), torch.ones(3, 1), 0, texts, torch.zeros(3, dtype=bool)
    )
    assert verifier_rewards(fmt, None)(items, rollout).rewards.tolist() == [1.0, 1.0, 0.0]
    tok = build_char_tokenizer()
    spec = ModelSpec(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32)
    untrained = MetaVerifier(LMWorker(build_model(spec, tok, 0), tok), max_new_tokens=4)
    assert verifier_rewards(fmt, untrained)(items, rollout).rewards.tolist() == [0.0, 0.0, 0.0]
