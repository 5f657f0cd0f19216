"""Do the measures agree on which models are alike? Spearman ρ of each measure with linear CKA over the pairs of
different models, per depth, from `vitlab compare-models` outputs: quoted in docs/measures.md ("Nine zoo models").

    M="-m zoo:vit-cls -m zoo:vit-gap -m zoo:resnet -m zoo:mixer -m zoo:vit-cls-3pct -m zoo:vit-cls-10pct \\
       -m zoo:resnet-3pct -m zoo:vit-cls-noskip -m zoo:vit-cls-noskip0"
    for m in cka cka-rbf procrustes svcca pwcca-svd20 mutual-knn; do
        python -m vitlab compare-models $M -d fashion-mnist:test -n 512 --depth 0.25,0.5,0.75,1 --measure $m -o out/$m
    done                                  # ~1-3 min each on 2 busy cores once the Grams are cached
    PYTHONPATH=$PWD python bench/zoo_models_spearman.py out

Procrustes enters as cos θ (larger = more alike); PWCCA-SVD20, which is not symmetric, as the mean of its two
directions (as compare-models' map symmetrises it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from vitlab.stats import measures as ms

MEASURES = ("cka-rbf", "procrustes", "svcca", "pwcca-svd20", "mutual-knn")


def pair_values(frame: pd.DataFrame, measure: str, depth: float) -> pd.Series:
    """{(model a, model b), a < b: the measure, oriented as a similarity and symmetrised}."""
    part = frame[(frame["depth"] == depth) & (frame["model_a"] != frame["model_b"])]
    vals = ms.as_similarity(measure, part["value"].to_numpy())
    keys = [tuple(sorted(p)) for p in zip(part["model_a"], part["model_b"])]
    return pd.Series(vals, index=pd.MultiIndex.from_tuples(keys)).groupby(level=[0, 1]).mean()


def main(root: Path) -> None:
    cka = pd.read_csv(root / "cka" / "compare_models.csv")
    depths = sorted(cka["depth"].unique())
    print("| measure | " + " | ".join(f"depth {d:g}" for d in depths) + " |")
    print("|---|" + "---|" * len(depths))
    for m in MEASURES:
        frame = pd.read_csv(root / m / "compare_models.csv")
        rhos = []
        for d in depths:
            a, b = pair_values(cka, "cka", d), pair_values(frame, m, d)
            rhos.append(spearmanr(a.loc[b.index], b).statistic)
        print(f"| {m} | " + " | ".join(f"{r:.2f}" for r in rhos) + f" |  ({len(b)} pairs)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
