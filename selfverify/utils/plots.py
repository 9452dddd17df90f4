"""Figures: learning curves from ``metrics.jsonl``; test-time scaling from solve summaries."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers
import matplotlib.pyplot as plt  # noqa: E402


def plot_curves(records: list[dict], path: Path) -> None:
    """SFT loss, RL training reward, RL response length, and held-out greedy accuracy across the run."""
    sft = [r for r in records if r["phase"] == "sft"]
    rl = [r for r in records if r["phase"] == "rl"]
    ev = [r for r in records if r["phase"] == "eval"]
    rounds = [r for r in records if r["phase"] == "round"]
    fig, axes = plt.subplots(1, 5 if rounds else 4, figsize=(22.5 if rounds else 18, 3.8))
    axes[0].plot([r["step"] for r in sft], [r["loss"] for r in sft], color="tab:gray")
    axes[0].set(title="Cold start: SFT loss", xlabel="SFT step", ylabel="NLL / token")
    axes[1].plot(
        [r["step"] for r in rl], [r["reward"] for r in rl], color="tab:blue", alpha=0.35, label="batch"
    )
    if len(rl) >= 5:
        k = 5
        smooth = [
            sum(r["reward"] for r in rl[max(0, i - k + 1) : i + 1]) / min(k, i + 1) for i in range(len(rl))
        ]
        axes[1].plot([r["step"] for r in rl], smooth, color="tab:blue", label=f"mean of {k}")
    # Outcome rewards lie in [0, 1]; process rewards sum the step scores, so let those scale.
    top = max([1.0] + [r["reward"] for r in rl])
    axes[1].set(title="RL: training reward", xlabel="RL step", ylabel="mean reward", ylim=(-0.02, top * 1.02))
    axes[1].legend(loc="lower right")
    axes[2].plot([r["step"] for r in rl], [r["response_length"] for r in rl], color="tab:purple")
    axes[2].set(title="RL: mean response length", xlabel="RL step", ylabel="tokens")
    axes[3].plot(
        [r["step"] for r in ev], [r["accuracy"] for r in ev], "o-", color="tab:green", label="accuracy"
    )
    if ev and "valid_solution_rate" in ev[0]:
        axes[3].plot(
            [r["step"] for r in ev],
            [r["valid_solution_rate"] for r in ev],
            "s--",
            color="tab:olive",
            label="all steps valid",
        )
    axes[3].set(title="Held-out greedy accuracy", xlabel="RL step", ylim=(-0.02, 1.02))
    axes[3].legend(loc="lower right")
    if rounds:
        plot_rounds(axes[4], rounds)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


ROUND_SERIES = {
    "generator_accuracy": "generator accuracy",
    "verifier_f1": "verifier F1",
    # The meta-verifier as an auditor: its overall accuracy mostly counts the verifier's faithful analyses.
    "meta_balanced_accuracy": "meta-verifier balanced accuracy",
    "meta_accuracy_unfaithful": "meta-verifier on unfaithful analyses",
    "auto_label_agreement": "auto-label agreement",
    "auto_label_discard_rate": "auto-label discard rate",
    "reward_hacking_gap": "verifier score − truth",
}


def plot_rounds(ax: plt.Axes, rounds: list[dict]) -> None:
    """The self-verification loop's per-round figures, all measured against ground truth."""
    x = [r["step"] for r in rounds]
    for key, label in ROUND_SERIES.items():
        ax.plot(
            x, [r.get(key) if r.get(key) is not None else float("nan") for r in rounds], "o-", label=label
        )
    ax.axhline(0, color="black", lw=0.5)
    ax.set(title="Self-verification rounds (vs ground truth)", xlabel="round", ylim=(-0.52, 1.02))
    ax.set_xticks(x)
    ax.legend(fontsize=7, loc="lower left")


def plot_scaling(rows: list[dict], path: Path, title: str) -> None:
    """Test-time scaling: accuracy (95% intervals) against tokens generated per problem, a line per
    method through its N, and the oracle pass@N against its sampling tokens."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        x = [r["tokens_per_problem"]["total"] for r in mine]
        y = [100 * r["accuracy"] for r in mine]
        err = [
            [100 * (r["accuracy"] - r["accuracy_ci95"][0]) for r in mine],
            [100 * (r["accuracy_ci95"][1] - r["accuracy"]) for r in mine],
        ]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=method)
        for r, xi, yi in zip(mine, x, y, strict=True):
            ax.annotate(f"N={r['n']}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7)
    oracle_rows = [r for r in rows if r.get("oracle") is not None]
    if oracle_rows:
        ax.plot(
            [r["tokens_per_problem"]["generator"] for r in oracle_rows],
            [100 * r["oracle"] for r in oracle_rows],
            ls="--",
            color="grey",
            label="oracle pass@N (sampling tokens)",
        )
    ax.set_xscale("log")
    ax.set_xlabel("tokens generated per problem (log)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
