"""The claims' words: the paper's claim, the statistic in words, the control and why it matters, per check key.

Only what the paper says goes into :data:`CLAIMS` (issue 33): the app's own controls (untrained twins, nulls, the
other-seed model) are named on their own line, :data:`CONTROL_NOTES`, never inside the paper's words.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    figure: str
    title: str
    claim: str


# Only what the paper says (issue 33): the app's own controls (untrained twins, nulls, the other-seed model) are
# named on their own line, Check.control_note, never inside the paper's words.
CLAIMS: dict[str, Claim] = {
    "cka": Claim("Figs 1-2", "Representation structure",
                 "ViTs have a more uniform representation structure than ResNets: their layers are more similar "
                 "to each other, while ResNet similarity falls off in stages."),
    "distance": Claim("Figs 3-4", "Local and global attention",
                      "Lower ViT layers have both local and global heads; higher layers attend globally."),
    "heads": Claim("Fig 5", "Local heads resemble convolutions",
                   "The more local a lower-layer ViT head, the more similar it is to the ResNet's lower layers."),
    "receptive": Claim("Fig 6", "Receptive fields",
                       "ViT receptive fields are larger than ResNet ones from the lowest layers on: attention "
                       "widens the field more than a convolutional block does."),
    "skips": Claim("Fig 7", "Strong skip connections",
                   "ViT skip connections are much more influential than ResNet ones: the norm of the skip "
                   "dominates the norm of the branch."),
    "removal": Claim("Fig 8", "Skip removal",
                     "A ViT trained without one block's skip connection has dissimilar representations before and "
                     "after that block."),
    "localization": Claim("Fig 9", "Spatial localization",
                          "ViT tokens in higher layers keep their own position's information better than ResNet "
                          "positions."),
    "gap": Claim("Fig 10", "CLS vs GAP localization",
                 "Training with global average pooling instead of a CLS token weakens localization."),
    "probes": Claim("Fig 11", "Linear probes",
                    "In a CLS-trained ViT the CLS token becomes a good representation only in the higher layers, "
                    "while the mean of the spatial tokens is better in the lower ones."),
    "scale": Claim("Fig 12", "Data scale",
                   "With less training data, the higher layers' representations differ most from the full-data "
                   "model's."),
}

# The statistic of each check in words (Check.statistic_label), one level of parentheses at most.
STATISTICS: dict[str, str] = {
    "cka": "ViT minus ResNet mean CKA between different layers of the same model",
    "distance": "locality of the most local first-block head: 1 − its mean attention distance / uniform attention's",
    "heads": "−Spearman ρ between a lower-layer head's attention distance and its CKA with the ResNet's lower layers",
    "receptive": "growth of the 50 % receptive-field radius across the ViT's first attention sublayer and its "
                 "residual, as a fraction of the input side",
    "skips": "median ratio ‖z‖ / ‖f(z)‖ of skip to branch norm in the ViT, over sublayers and tokens",
    "removal": "mean CKA between the layers before and after the block retrained without its skips",
    "localization": "chance-corrected localization of the ViT's last layer: (rate − chance) / (1 − chance), the rate "
                    "being the share of tokens best matched at their own position and chance 1 / positions",
    "gap": "chance-corrected localization of the CLS-trained ViT's last layer",
    "probes": "probe margin: the smaller of GAP minus CLS accuracy at the first layer and the CLS token's gain from "
              "the first to the last layer",
    "scale": "how much more the less-data model's CKA with the full-data model falls from the lower to the upper "
             "half of the layers than another seed's does",
}

# What each check's control is and why it matters (Check.control_note), when the measurement adds no numbers.
CONTROL_NOTES: dict[str, str] = {
    "cka": "Control, the app's own and not the paper's: the untrained twins. Untrained layers can look alike, so "
           "the learned answer asks whether the trained gap exceeds the untrained twins' gap.",
    "distance": "Control: uniform attention in the same distance convention; the app's own control, the untrained "
                "twin, says whether local heads come from training or from the patch geometry alone.",
    "heads": "Control: a head-label permutation null, what ρ reaches when distances and similarities are unrelated; "
             "the app's own control, the untrained twins, says whether the link is learned.",
    "receptive": "Control: the CNN's first block, the convolutional growth the paper compares with; the app's own "
                 "control, the untrained twins, separates training from architecture.",
    "skips": "Control: the CNN's ratio, as in the paper; the app's own control, the untrained twins, says whether "
             "the dominance is learned or present at initialisation.",
    "removal": "Control: the same recipe trained with its skips. Both models are trained, so untrained twins do not "
               "apply.",
    "localization": "Control: the CNN, and chance at 1 / positions; the app's own control, the untrained twins, says "
                    "whether localization is learned or inherited from the patch embedding.",
    "gap": "Control: the same ViT trained with global average pooling. Both are trained, so untrained twins do not "
           "apply.",
    "probes": "Control: no margin, 0; the app's own control, the untrained twin, says whether the CLS and GAP "
              "pattern is learned.",
    "scale": "Control, the app's own and not the paper's: the same recipe on the same data with another seed. Any two "
             "separately trained ViTs drift apart in their upper layers, so less data must differ more than "
             "another seed does.",
}

# timm's global_pool="avg" also moves the final LayerNorm after pooling (norm=Identity, fc_norm=LayerNorm): stated
# wherever the CLS-vs-GAP comparison is shown (timm 1.0's VisionTransformer; the zoo models are not retrained for it).
GAP_CAVEAT = ("the GAP model also differs in where its final LayerNorm sits (timm's global_pool='avg': norm=Identity, "
              "fc_norm=LayerNorm after pooling), not in pooling alone")


LEARNED = ("yes", "no", "can't tell", "n.a.")
# Claims whose comparison is between two trained models (a retrained control, another pooling, another data scale):
# an untrained twin does not answer whether training made the difference, so "learned" does not apply.
NOT_LEARNED = {
    "removal": "n.a.: both models are trained; the control is the same recipe retrained with the skip",
    "gap": "n.a.: both models are trained; the question is the pooling they were trained with",
    "scale": "n.a.: every model is trained; the question is how much data it was trained on",
}
