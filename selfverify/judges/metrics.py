"""Verification metrics, pure functions reused by the score CLI and verifier evaluation
(docs/guides/architecture.md, 'Scoring')."""

from __future__ import annotations

from collections.abc import Sequence


def processbench_metrics(preds: Sequence[int], labels: Sequence[int]) -> dict[str, float | int | None]:
    """ProcessBench metrics (Zheng et al. 2024, "ProcessBench: Identifying Process Errors in
    Mathematical Reasoning", arXiv 2412.06559) for predicted vs labelled earliest wrong steps.

    ``labels[i]`` is the index of the earliest wrong step of sample i, -1 when every step is right;
    ``preds[i]`` is the verifier's prediction in the same convention.

    - ``acc_err``: exact-match accuracy on the samples with an error (label != -1);
    - ``acc_corr``: accuracy on the error-free samples (label == -1), i.e. the share predicted -1;
    - ``f1``: their harmonic mean, 2·acc_err·acc_corr / (acc_err + acc_corr) (0 when both are 0).

    Accuracies are fractions in [0, 1] (the paper prints percentages). A metric over an empty subset
    is None, and so is ``f1`` then. Counts come along so results over shards can be pooled:
    ``n``, ``n_err``, ``n_corr``, ``n_err_correct``, ``n_corr_correct``.
    """
    if len(preds) != len(labels):
        raise ValueError(f"{len(preds)} predictions for {len(labels)} labels")
    if any(label < -1 for label in labels):
        raise ValueError("labels must be -1 (no error) or a step index >= 0")
    err = [(p, y) for p, y in zip(preds, labels, strict=True) if y != -1]
    corr = [p for p, y in zip(preds, labels, strict=True) if y == -1]
    n_err_correct = sum(p == y for p, y in err)
    n_corr_correct = sum(p == -1 for p in corr)
    acc_err = n_err_correct / len(err) if err else None
    acc_corr = n_corr_correct / len(corr) if corr else None
    f1: float | None = None
    if acc_err is not None and acc_corr is not None:
        total = acc_err + acc_corr
        f1 = 2 * acc_err * acc_corr / total if total > 0 else 0.0
    return {
        "acc_err": acc_err,
        "acc_corr": acc_corr,
        "f1": f1,
        "n": len(labels),
        "n_err": len(err),
        "n_corr": len(corr),
        "n_err_correct": n_err_correct,
        "n_corr_correct": n_corr_correct,
    }
