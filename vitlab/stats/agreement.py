"""Do the measures agree? Rank correlations between measures, and the paper's Figs 1-2 read under each measure.

    agreement(report, a, b) -> AgreementResult   from a SimilarityReport (no model runs)

Every measure is first oriented so that larger means more alike (``measures.as_similarity``: Procrustes' angle θ
becomes cos θ; ranks are unchanged by any decreasing map, so Spearman's ρ does not depend on that choice).

The paper's claims, as statistics computed under each measure (A should be the ViT, B the ResNet):

- Fig 1, uniformity: the mean similarity between different layers of a model (off-diagonal mean of its
  within-model map, oriented). The claim holds when A's is higher than B's.
- Fig 2, cross-model structure: for each layer of B, the most similar layer of A; the claim ("the lower half of
  ViT layers is similar to a much larger part of the ResNet") holds when more than half of B's layers find their
  best match in A's lower half.

Words: ρ >= 0.8 "agree", 0.5 <= ρ < 0.8 "partly agree", ρ < 0.5 "disagree" (thresholds stated on the page).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import measures as ms
from ..errors import VitlabError

AGREE, PARTLY = 0.8, 0.5
VIEWS = {"A vs B": "ab", "within A": "aa", "within B": "bb"}


def verdict(rho: float) -> str:
    if not np.isfinite(rho):
        return "can't tell"
    return "agree" if rho >= AGREE else "partly agree" if rho >= PARTLY else "disagree"


def uniformity(values: np.ndarray) -> float:
    """Mean oriented similarity between different layers of one model (off-diagonal of its within-model map)."""
    v = np.asarray(values, dtype=np.float64)
    off = ~np.eye(v.shape[0], dtype=bool)
    return float(np.nanmean(v[off])) if off.any() else float("nan")


def lower_half_reach(cross: np.ndarray) -> float:
    """Share of B's layers (columns) whose most similar A layer (row) lies in A's lower half."""
    c = np.asarray(cross, dtype=np.float64)
    if not np.all(np.isfinite(c)):
        return float("nan")
    best = np.argmax(c, axis=0)
    return float(np.mean(best < c.shape[0] / 2))


@dataclass
class AgreementResult:
    """Every measure's maps for one pair of models, how the measures rank layer pairs alike, and the claims."""

    model_a: str
    model_b: str
    measures: list[str]
    maps: dict[tuple[str, str], object]  # (measure, view 'ab'|'aa'|'bb') -> tidy frame (SimilarityReport rows)
    correlations: dict[str, np.ndarray]  # view -> (M, M) Spearman ρ between measures over that view's layer pairs
    claims: list[dict] = field(default_factory=list)

    def correlation_frame(self, view: str = "ab"):
        import pandas as pd

        rho = self.correlations[view]
        return pd.DataFrame([{"view": view, "measure_1": m1, "measure_2": m2, "spearman": float(rho[i, j]),
                              "verdict": verdict(rho[i, j]) if i != j else "same"}
                             for i, m1 in enumerate(self.measures) for j, m2 in enumerate(self.measures)])

    def claims_frame(self):
        import pandas as pd

        return pd.DataFrame(self.claims)

    def to_frame(self):
        import pandas as pd

        return pd.concat([self.correlation_frame(v) for v in self.correlations], ignore_index=True)

    def summary(self, view: str = "ab") -> list[str]:
        """Sentences: which measures agree and disagree on the layer pairs, and whether each claim holds."""
        frame = self.correlation_frame(view)
        pairs = frame[frame["measure_1"] < frame["measure_2"]]
        lines = []
        for word in ("agree", "partly agree", "disagree"):
            part = pairs[pairs["verdict"] == word]
            if len(part):
                items = ", ".join(f"{r.measure_1} / {r.measure_2} (ρ = {r.spearman:.2f})" for r in part.itertuples())
                lines.append(f"They {word} on {len(part)} of {len(pairs)} pairs of measures: {items}.")
        for claim in dict.fromkeys(c["claim"] for c in self.claims):
            rows = [c for c in self.claims if c["claim"] == claim]
            held = [c["measure"] for c in rows if c["holds"] is True]
            failed = [c["measure"] for c in rows if c["holds"] is False]
            if failed:
                lines.append(f"{claim}: holds under {', '.join(held) or 'no measure'}; "
                             f"does not hold under {', '.join(failed)}.")
            else:
                lines.append(f"{claim}: holds under every measure ({len(held)}).")
        return lines


def _claims(report, measures: list[str], a: int, b: int) -> list[dict]:
    rows = []
    for m in measures:
        ua = uniformity(ms.as_similarity(m, report.maps[(m, a, a)]))
        ub = uniformity(ms.as_similarity(m, report.maps[(m, b, b)]))
        rows.append({"claim": "Fig 1: A is more uniform across layers than B", "measure": m, "value_a": ua,
                     "value_b": ub, "statistic": "mean similarity between different layers",
                     "holds": bool(ua > ub) if np.isfinite(ua) and np.isfinite(ub) else None})
        reach = lower_half_reach(ms.as_similarity(m, report.maps[(m, a, b)]))
        rows.append({"claim": "Fig 2: A's lower half is most similar to more than half of B's layers", "measure": m,
                     "value_a": reach, "value_b": 0.5, "statistic": "share of B's layers whose best A match is in "
                     "A's lower half (vs 0.5)", "holds": bool(reach > 0.5) if np.isfinite(reach) else None})
    return rows


def agreement(report, a: int = 0, b: int = 1) -> AgreementResult:
    """Spearman ρ between every two measures over the layer pairs of each view, and the Figs 1-2 checks."""
    measures = report.measures
    if len(measures) < 2:
        raise VitlabError(f"the agreement view needs at least two measures, not {measures}")
    k = len(report.labels)
    if not (0 <= a < k and 0 <= b < k) or a == b:
        raise VitlabError(f"choose two different models among {k}, not {a} and {b}")
    views = {"ab": (a, b), "aa": (a, a), "bb": (b, b)}
    maps, correlations = {}, {}
    for view, (i, j) in views.items():
        oriented = [ms.as_similarity(m, report.maps[(m, i, j)]) for m in measures]
        if i == j:  # a layer with itself is 1 under every measure: leave the diagonal out of the ranks
            off = ~np.eye(oriented[0].shape[0], dtype=bool)
            oriented = [o[off] for o in oriented]
        rho = np.array([[ms.rank_correlation(x, y) for y in oriented] for x in oriented])
        correlations[view] = rho
        for m in measures:
            maps[(m, view)] = report.pair_frame(m, i, j)
    return AgreementResult(report.labels[a], report.labels[b], measures, maps, correlations,
                           _claims(report, measures, a, b))
