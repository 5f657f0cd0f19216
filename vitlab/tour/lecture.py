"""Lecture mode (issue 41): the paper's claims as a guided path that asks before it tells.

One step per claim of :data:`vitlab.tour.CLAIMS`, in the paper's order. Before the answer the student picks what they
expect from a :class:`Question`'s options (worded so as not to give the answer away; the option that matches the
paper's claim is marked); then the step shows the figure, the tour's :class:`~vitlab.tour.Check` for these models
(pattern and learned, with its numbers and interval) and its control. This module is the pure table and its words:
which option the paper takes, and what a prediction met (:func:`outcome`); nothing here measures. The tour itself is
prepared once ahead of class (``vitlab lecture --prepare``, :mod:`vitlab.tour.classroom`) and read back from the
disk cache, so that nothing computes in front of a class.

    q = QUESTIONS["cka"]; q.options[q.paper]      # the paper's answer
    outcome("cka", 2, check)                      # a student's choice beside the paper and these models
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from ..errors import VitlabError
from .checks import CLAIMS


@dataclass(frozen=True)
class Question:
    """What a step asks before its answer: ``topic`` (a neutral heading: the claim's own title can give the answer
    away, e.g. "Strong skip connections"), ``ask`` (the question), ``options`` (what one may expect), ``paper`` (the
    index of the option the paper's claim takes), ``setup`` (what is compared, in one sentence)."""

    topic: str
    ask: str
    setup: str
    options: tuple[str, ...]
    paper: int

    @property
    def paper_option(self) -> str:
        return self.options[self.paper]


# The paper's option sits at different places, so that its position gives nothing away, and the three options of a
# question are alike in length (within 1.5x), hedging ("some", "only", "both") and detail (issue 47: in Figs 3-4 the
# paper's option was the only hedged one, in Fig 11 the only long, specific one; tests/test_lecture.py reads them). Each `ask` and `setup` only
# names what is compared; the claim's words (CLAIMS) are shown after the reveal.
QUESTIONS: dict[str, Question] = {
    "cka": Question(
        "Similarity across depth",
        "Compare every layer of a model with every other layer of the same model. In which model are the layers "
        "more alike across depth?",
        "CKA between every pair of layers of the ViT, and of the ResNet.",
        ("The ResNet's layers are more alike", "The ViT's layers are more alike", "About the same in both models"), 1),
    "distance": Question(
        "How far the first heads look",
        "In the ViT's first block, how far do the attention heads look?",
        "The mean distance each head attends over, against uniform attention (every patch alike).",
        ("Only far: every head spreads over the image", "Only close: every head looks at nearby patches",
         "Both: some heads look close, others far"), 2),
    "heads": Question(
        "Attention heads and convolutions",
        "Among the ViT's lower-layer heads, which ones are most like the ResNet's lower layers?",
        "Each lower-layer head's attention distance beside its CKA with the ResNet's lower layers.",
        ("The heads that look close by", "The heads that look far away", "Neither: closeness does not matter"), 0),
    "receptive": Question(
        "How far the first block sees",
        "Which first block widens the receptive field more: the ViT's attention or the ResNet's convolutional "
        "block?",
        "The growth of the 50 % receptive-field radius across each model's first block, as a fraction of the image.",
        ("The ResNet's convolutional block", "Both widen it about the same", "The ViT's attention block"), 2),
    "skips": Question(
        "Skip connections",
        "In which model does the skip connection outweigh the residual branch by more?",
        "The ratio of the norm of the skip to the norm of the branch, ‖z‖ / ‖f(z)‖, in each model.",
        ("In the ViT", "In the ResNet", "Equally in both"), 0),
    "removal": Question(
        "Training without one skip",
        "A ViT is trained without the skip connection of one block. How alike are its representations just before "
        "and just after that block?",
        "CKA between the layers around that block, against the same recipe trained with its skips.",
        ("As alike as with the skip", "Less alike than with the skip", "More alike than with the skip"), 1),
    "localization": Question(
        "Where a token's information stays",
        "In the last layer, which model keeps each position's own information at that position better?",
        "For each token, whether its representation best matches its own position's input, corrected for chance.",
        ("Neither: both only at chance", "The ResNet keeps them better", "The ViT keeps them better"), 2),
    "gap": Question(
        "CLS token or average pooling",
        "Train the same ViT with global average pooling instead of a CLS token. What happens to how well its "
        "tokens keep their positions?",
        "The chance-corrected localization of the CLS-trained and the GAP-trained ViT's last layers.",
        ("It gets stronger", "It gets weaker", "It stays the same"), 1),
    "probes": Question(
        "Where the class appears",
        "In a ViT trained with a CLS token, which representation tells the classes apart better in the lower "
        "layers, judged by a linear probe?",
        "Few-shot linear probes on the CLS token and on the mean of the spatial tokens, layer by layer.",
        ("The CLS token, from the first layer up", "The token mean; the CLS token catches up higher",
         "Neither: both tell the classes apart alike"), 1),
    "scale": Question(
        "Less training data",
        "A ViT trained on less data is compared, layer by layer, with the same ViT trained on all of it. Where do "
        "the two differ most?",
        "CKA of each block with the full-data model's same block, against a model trained with another seed.",
        ("In the higher layers", "In the lower layers", "Evenly across depth"), 0),
}

# What the pattern answer of a Check says about the paper's option, for these models (the tour's own verdict:
# shown only when the statistic's interval clears the claim's null, vitlab.stats.evidence.verdict).
MODELS_SAY = {
    "shown": "these models show the paper's answer",
    "not shown": "these models do not go the paper's way",
    "can't tell": "these models cannot tell: the intervals overlap or could not be formed",
}


def question(key: str) -> Question:
    """The question of claim ``key`` (a VitlabError naming the claims when it has none)."""
    if key not in QUESTIONS:
        raise VitlabError(f"no lecture question for claim '{key}': choose from {', '.join(QUESTIONS)}")
    return QUESTIONS[key]


def path(keys: list[str] | tuple[str, ...] | None = None) -> list[str]:
    """The lecture's steps: ``keys`` (default: every claim) in the paper's order (:data:`CLAIMS`' order)."""
    chosen = list(CLAIMS) if not keys else list(keys)
    bad = [k for k in chosen if k not in CLAIMS]
    if bad:
        raise VitlabError(f"unknown claim(s) {', '.join(bad)}: choose from {', '.join(CLAIMS)}")
    return [k for k in CLAIMS if k in chosen]


def key_of(figure: str) -> str:
    """The claim key of a tour row's ``figure`` ('Figs 1-2' -> 'cka')."""
    for k, c in CLAIMS.items():
        if c.figure == figure:
            return k
    raise VitlabError(f"no claim has the figure '{figure}'")


def outcome(key: str, choice: int | None, check) -> dict[str, str | bool | None]:
    """A student's ``choice`` (an index into the question's options, or None) beside the paper's option and the
    tour's ``check`` for these models, in words: ``prediction``, ``paper``, ``matches_paper`` (None without a
    choice), ``pattern`` (the check's answer), ``models`` (what that answer says of the paper's option)."""
    q = question(key)
    if choice is not None and not 0 <= choice < len(q.options):
        raise VitlabError(f"claim '{key}': choice {choice} is not one of its {len(q.options)} options")
    return {
        "prediction": q.options[choice] if choice is not None else "no prediction",
        "paper": q.paper_option,
        "matches_paper": None if choice is None else choice == q.paper,
        "pattern": check.pattern,
        "models": MODELS_SAY.get(check.pattern, MODELS_SAY["can't tell"]),
    }


def score(choices: dict[str, int | None], checks: list) -> dict[str, int]:
    """Counts over a lecture: ``steps``, ``predicted``, ``matched`` (predictions that took the paper's option) and
    ``shown`` (steps whose models show the paper's pattern)."""
    rows = [(key_of(c.figure), c) for c in checks]
    return {"steps": len(rows),
            "predicted": sum(choices.get(k) is not None for k, _ in rows),
            "matched": sum(choices.get(k) == QUESTIONS[k].paper for k, _ in rows),
            "shown": sum(c.pattern == "shown" for _, c in rows)}


# ------------------------------------------------------------------ a student's place on the path, in a link

PLACE_KEYS = ("lecture", "step", "said", "shown", "sig")  # the URL query of the Lecture page (none is a sidebar's)
NO_CHOICE = "-"


@dataclass(frozen=True)
class Place:
    """Where a student is: ``step`` (0-based; ``len(steps)`` is the summary), ``choices`` (claim key -> option index,
    for the revealed steps and the one open), ``revealed`` (how many steps are revealed: always the path's first ones,
    since a step opens only after the one before is revealed)."""

    step: int
    choices: tuple[tuple[str, int], ...]
    revealed: int


class PlaceRefused(VitlabError):
    """A link's place that this server did not write for this lecture, or that does not hold together: said in words,
    and the path starts at step 1."""


def _signature(secret: bytes, lecture_key: str, step: str, said: str, shown: str) -> str:
    text = f"{lecture_key}\n{step}\n{said}\n{shown}".encode()
    return hmac.new(secret, text, hashlib.sha256).hexdigest()[:20]


def place_query(place: Place, steps: list[str], lecture_key: str, secret: bytes) -> dict[str, str]:
    """``place`` as the URL query (:data:`PLACE_KEYS`): the lecture's id, the step (1-based), the predictions as one
    digit per step ('-': none), how many steps are revealed, and a signature with this server's ``secret`` (HMAC-SHA256):
    a reload or a reopened link on this server finds the student where they were; an edited link is refused."""
    chosen = dict(place.choices)
    said = "".join(str(chosen[k]) if k in chosen else NO_CHOICE for k in steps).rstrip(NO_CHOICE)
    step, shown = str(place.step + 1), str(place.revealed)
    return {"lecture": lecture_key[:12], "step": step, "said": said, "shown": shown,
            "sig": _signature(secret, lecture_key, step, said, shown)}


def read_place(params: dict[str, str], steps: list[str], lecture_key: str, secret: bytes) -> Place | None:
    """The place a link's ``params`` hold (None when it holds none), checked as untrusted input: written by this server
    for this lecture (its signature), every prediction one of its step's options, every revealed step predicted, the
    step never past the first unrevealed one (a jump ahead is refused, never trusted to skip "asks before it tells").
    :class:`PlaceRefused` says what is wrong."""
    if not any(k in params for k in PLACE_KEYS):
        return None
    lec, step, said, shown, sig = (str(params.get(k, "")) for k in PLACE_KEYS)
    if lec != lecture_key[:12]:
        raise PlaceRefused("the link's place is in another lecture, or in this one before it was prepared again")
    if not hmac.compare_digest(sig.encode(), _signature(secret, lecture_key, step, said, shown).encode()):
        raise PlaceRefused("the link's place was not written by this lab (edited, or written by a server on another "
                           "cache)")
    if not (step.isdigit() and shown.isdigit() and len(step) <= 3 and len(shown) <= 3 and len(said) <= len(steps)):
        raise PlaceRefused("the link's place is not a step of this lecture")
    choices = []
    for key, c in zip(steps, said):
        if c == NO_CHOICE:
            continue
        if not (c.isdigit() and int(c) < len(QUESTIONS[key].options)):
            raise PlaceRefused(f"the link's prediction '{c}' is not an option of step {steps.index(key) + 1}")
        choices.append((key, int(c)))
    revealed, k = int(shown), int(step) - 1
    predicted = {key for key, _ in choices}
    if revealed > len(steps) or any(key not in predicted for key in steps[:revealed]):
        raise PlaceRefused("the link reveals a step without a prediction")
    if any(steps.index(key) > revealed for key in predicted):
        raise PlaceRefused("the link predicts a step past the first one not yet revealed")
    if not 0 <= k <= revealed:
        raise PlaceRefused("the link's step is past the first one not yet revealed")
    return Place(k, tuple(choices), revealed)
