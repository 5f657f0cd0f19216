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
    "skips": "median over the ViT's sublayers of the skip-to-branch norm ratio Σ‖z‖ / Σ‖f(z)‖ over images and tokens",
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


# ---------------------------------------------------------------- a student's words (issue 47)
# Written for someone who has not read the paper, shown on the Lecture page and in its summary beside the paper's
# words above (never instead of them). No tap names, config internals or model specs: models are named in words by
# vitlab.tour.glossary. A sentence a claim's three pattern answers each mean, for these models.
STUDENT_MEANING: dict[str, dict[str, str]] = {
    "cka": {
        "shown": "The ViT's layers are more alike to one another than the ResNet's, as the paper found.",
        "not shown": "On these models the ViT's layers are not more alike than the ResNet's, so they do not repeat "
                     "the paper's finding.",
        "can't tell": "These images cannot settle whether the ViT's layers are more alike than the ResNet's.",
    },
    "distance": {
        "shown": "The ViT's first block has heads that look close by as well as heads that look far, as the paper "
                 "found.",
        "not shown": "Even the most local head of the ViT's first block looks nearly as far as uniform attention, so "
                     "these models have no clearly local head.",
        "can't tell": "These images cannot settle whether the ViT's first block has a clearly local head.",
    },
    "heads": {
        "shown": "The heads that look close by are the ones most like the ResNet's lower layers, as the paper found.",
        "not shown": "Here the heads that look close by are not the ones most like the ResNet's lower layers.",
        "can't tell": "These images cannot settle whether the heads that look close by are the most ResNet-like.",
    },
    "receptive": {
        "shown": "The ViT's first attention block widens what each position sees more than the ResNet's first "
                 "block does, as the paper found.",
        "not shown": "Here the ResNet's first block widens what each position sees at least as much as the ViT's "
                     "attention does.",
        "can't tell": "These images cannot settle which first block widens the receptive field more.",
    },
    "skips": {
        "shown": "In the ViT the skip outweighs the branch by more than in the ResNet, as the paper found.",
        "not shown": "Here the skip does not outweigh the branch by more in the ViT than in the ResNet.",
        "can't tell": "These images cannot settle in which model the skip outweighs the branch by more.",
    },
    "removal": {
        "shown": "Without its skip, the ViT's layers before and after that block are less alike, as the paper found.",
        "not shown": "Here the ViT trained without the skip keeps its layers as alike across that block as with it.",
        "can't tell": "These images cannot settle whether removing the skip makes the layers around that block less "
                      "alike.",
    },
    "localization": {
        "shown": "The ViT's last-layer tokens keep their own position's information better than the ResNet's, as "
                 "the paper found.",
        "not shown": "Here the ViT's last-layer tokens keep their positions no better than the ResNet's.",
        "can't tell": "These images cannot settle which model's last layer keeps positions better.",
    },
    "gap": {
        "shown": "The ViT trained with average pooling keeps its tokens' positions less well than the one trained "
                 "with a CLS token, as the paper found.",
        "not shown": "Here average pooling does not weaken how well the tokens keep their positions.",
        "can't tell": "These images cannot settle whether average pooling weakens how well the tokens keep their "
                      "positions.",
    },
    "probes": {
        "shown": "Low down the mean of the patch tokens tells the classes apart better, and the CLS token catches "
                 "up only higher up, as the paper found.",
        "not shown": "Here the mean of the patch tokens is not better low down, or the CLS token gains too little "
                     "going up, so the paper's pattern does not hold.",
        "can't tell": "These draws cannot settle whether the mean of the patch tokens beats the CLS token low down.",
    },
    "scale": {
        "shown": "The ViT trained on less data differs from the full-data one most in its higher layers, more than "
                 "training again with another seed does, as the paper found.",
        "not shown": "Here less data makes the higher layers differ no more than training again with another seed "
                     "does.",
        "can't tell": "These images cannot settle whether less data makes the higher layers differ more than another "
                      "seed does.",
    },
}

# What the pattern's number is compared with, in words: "{c}" is the reference's value (with its interval when it is
# measured), "{margin}" Figs 3-4's locality threshold; "above" or "below" is where the paper's answer needs it.
STUDENT_CONTROL: dict[str, tuple[str, str]] = {
    "cka": ("no difference between the two models would be {c}", "above"),
    "distance": ("uniform attention scores {c} and a clearly local head at least {margin}", "above"),
    "heads": ("heads with shuffled labels reach at most {c}", "above"),
    "receptive": ("the ResNet's first block grows it by {c}", "above"),
    "skips": ("the ResNet's ratio is {c}", "above"),
    "removal": ("the same ViT trained with its skips scores {c}", "below"),
    "localization": ("the ResNet's last layer scores {c}", "above"),
    "gap": ("the ViT trained with average pooling scores {c}", "above"),
    "probes": ("no margin would be {c}", "above"),
    "scale": ("no more change than another seed makes would be {c}", "above"),
}

# What the learned answer compares, trained against untrained (Fig 6 and 7: a difference, not the pattern's value).
STUDENT_LEARNED_WHAT: dict[str, str] = {
    "cka": "the ViT's lead over the ResNet in how alike its layers are",
    "distance": "how local the most local first-block head is",
    "heads": "how strongly closeness goes with ResNet-likeness",
    "receptive": "the ViT's growth minus the ResNet's growth, a different number from the pattern's",
    "skips": "the ViT's ratio minus the ResNet's ratio, a different number from the pattern's",
    "localization": "the ViT's localization minus the ResNet's",
    "probes": "the probe margin",
}

# Why "learned" does not apply, in words (the claims of NOT_LEARNED).
STUDENT_NOT_LEARNED: dict[str, str] = {
    "removal": "Does not apply: both models are trained, and the question is the missing skip, not training.",
    "gap": "Does not apply: both models are trained, and the question is how they pool, not training.",
    "scale": "Does not apply: every model is trained, and the question is how much data each one saw.",
}

# Why each step's reference and control matter, for a student: one plain sentence each, no numbers (the numbers are
# on the line before it in "How we know") and no model spec. The lecturer's detail keeps CONTROL_NOTES and the
# measured notes as they are.
STUDENT_CONTROL_WHY: dict[str, str] = {
    "cka": "Layers can look alike even with random weights, so training counts only where the trained ViT's lead is "
           "larger than its untrained twin's lead.",
    "distance": "Uniform attention, every patch weighted alike, is as far as a head can look on average; the untrained "
                "twin shows how local the heads are before any training.",
    "heads": "Shuffling which head is which shows how strong a link chance alone gives; the untrained twins show "
             "whether the link comes from training.",
    "receptive": "The ResNet's first block is the convolutional growth the paper compares with; the untrained twins "
                 "show how much of each growth the architecture gives before training.",
    "skips": "The ResNet's ratio is what the paper compares with; the untrained twins show whether the skip "
             "outweighs the branch before any training.",
    "removal": "The same ViT recipe trained with its skips is the comparison; both models are trained, so untrained "
               "twins do not apply.",
    "localization": "The ResNet is what the paper compares with, and 0 is chance; the untrained twins show whether "
                    "the tokens keep their positions because of training.",
    "gap": "The same ViT trained with average pooling is the comparison; both models are trained, so untrained twins "
           "do not apply.",
    "probes": "A margin of 0 would mean neither part of the paper's pattern; the untrained twin shows whether the "
              "pattern comes from training.",
    "scale": "Two ViTs trained alike from another random start also drift apart in their higher layers, so less data "
             "counts only where it differs more than that.",
}
