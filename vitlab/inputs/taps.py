"""Named representation points ("taps") of each model family, captured with forward hooks.

Axis letters used across vitlab: B batch, N tokens (prefix + spatial), D width, H heads, C channels,
h/w feature-map height/width, L layers (taps), n images in a Gram.

ViT family (timm VisionTransformer and relatives whose blocks have norm1/attn/ls1/norm2/mlp/ls2)::

    blocks.{i}.resid_pre    (B, N, D)     block input
    blocks.{i}.attn_out     (B, N, D)     attention branch = output of ls1
    blocks.{i}.resid_mid    (B, N, D)     resid_pre + attn_out = input of norm2
    blocks.{i}.mlp_out      (B, N, D)     MLP branch = output of ls2
    blocks.{i}.resid_post   (B, N, D)     resid_mid + mlp_out = block output
    blocks.{i}.attn_probs   (B, H, N, N)  softmax attention, taken without changing the forward where it can be
                                          (:func:`probs_route`: recomputed beside timm's fused attention)

MLP-Mixer (timm MlpMixer)::

    blocks.{i}.resid_pre / resid_mid / resid_post  (B, N, D)   as for ViT; resid_mid is after token mixing
    blocks.{i}.token_mix_out    (B, N, D)   token-mixing branch
    blocks.{i}.channel_mix_out  (B, N, D)   channel-mixing branch

ResNet (timm ResNet): ``layer{s}.{j}`` (B, C, h, w), each block's output (after the residual sum and ReLU).
ResNetV2 / BiT: ``stages.{s}.blocks.{j}`` (B, C, h, w), each pre-activation block's output.
Both CNN families also have, per block (for the skip analyses; not default CKA taps)::

    {block}.shortcut   (B, C, h, w)   the skip branch: block input, or the downsample projection's output
    {block}.sum        (B, C, h, w)   shortcut + residual branch, before any final activation
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import VitlabError

FAMILIES = ("vit", "mixer", "resnet", "resnetv2")
TOKEN_MODES = ("all", "cls", "gap")


@dataclass(frozen=True)
class TapPoint:
    """Where a tap lives: a submodule path, which tensor of it, and an optional fix-up."""

    module: str
    where: str  # "out": module output; "in": first input (pre-hook)
    shape: str  # documentation, e.g. "(B, N, D)"
    transpose: bool = False  # Mixer token-mixing MLP works on (B, D, N)
    clone: bool = False  # the tensor is modified in place later in the forward (an in-place ReLU)


def _is_vit_block(blk) -> bool:
    return all(hasattr(blk, a) for a in ("norm1", "attn", "norm2", "mlp", "ls1", "ls2"))


def family(model) -> str:
    """The tap family of ``model``; a clear error for anything else."""
    blocks = getattr(model, "blocks", None)
    if blocks is not None and len(blocks) and _is_vit_block(blocks[0]):
        return "vit"
    if blocks is not None and len(blocks) and hasattr(blocks[0], "mlp_tokens"):
        return "mixer"
    if all(hasattr(model, f"layer{s}") for s in (1, 2, 3, 4)):
        return "resnet"
    stages = getattr(model, "stages", None)
    if stages is not None and len(stages) and hasattr(stages[0], "blocks") and type(model).__name__ == "ResNetV2":
        return "resnetv2"
    raise VitlabError(
        f"model type {type(model).__name__} is not supported: vitlab taps ViT-family models "
        "(VisionTransformer, DeiT, relpos ViTs), MLP-Mixer, ResNet and ResNetV2/BiT"
    )


def tap_table(model) -> dict[str, TapPoint]:
    """Every tap of ``model`` in network order."""
    fam = family(model)
    table: dict[str, TapPoint] = {}
    if fam == "vit":
        for i in range(len(model.blocks)):
            b = f"blocks.{i}"
            table[f"{b}.resid_pre"] = TapPoint(b, "in", "(B, N, D)")
            table[f"{b}.attn_probs"] = TapPoint(f"{b}.attn.attn_drop", "in", "(B, H, N, N)")
            table[f"{b}.attn_out"] = TapPoint(f"{b}.ls1", "out", "(B, N, D)")
            table[f"{b}.resid_mid"] = TapPoint(f"{b}.norm2", "in", "(B, N, D)")
            table[f"{b}.mlp_out"] = TapPoint(f"{b}.ls2", "out", "(B, N, D)")
            table[f"{b}.resid_post"] = TapPoint(b, "out", "(B, N, D)")
    elif fam == "mixer":
        for i in range(len(model.blocks)):
            b = f"blocks.{i}"
            table[f"{b}.resid_pre"] = TapPoint(b, "in", "(B, N, D)")
            table[f"{b}.token_mix_out"] = TapPoint(f"{b}.mlp_tokens", "out", "(B, N, D)", transpose=True)
            table[f"{b}.resid_mid"] = TapPoint(f"{b}.norm2", "in", "(B, N, D)")
            table[f"{b}.channel_mix_out"] = TapPoint(f"{b}.mlp_channels", "out", "(B, N, D)")
            table[f"{b}.resid_post"] = TapPoint(b, "out", "(B, N, D)")
    elif fam == "resnet":
        for s in (1, 2, 3, 4):
            for j, blk in enumerate(getattr(model, f"layer{s}")):
                table.update(_cnn_skip_taps(f"layer{s}.{j}", blk))
                table[f"layer{s}.{j}"] = TapPoint(f"layer{s}.{j}", "out", "(B, C, h, w)")
    else:
        for s, stage in enumerate(model.stages):
            for j, blk in enumerate(stage.blocks):
                table.update(_cnn_skip_taps(f"stages.{s}.blocks.{j}", blk))
                table[f"stages.{s}.blocks.{j}"] = TapPoint(f"stages.{s}.blocks.{j}", "out", "(B, C, h, w)")
    return table


CNN_SKIP_SUFFIXES = (".shortcut", ".sum")


def _cnn_skip_taps(b: str, blk) -> dict[str, TapPoint]:
    """The skip branch and the pre-activation sum of a residual CNN block (timm ResNet / ResNetV2 blocks)."""
    down = getattr(blk, "downsample", None)
    if down is not None:
        shortcut = TapPoint(f"{b}.downsample", "out", "(B, C, h, w)")
    else:
        shortcut = TapPoint(b, "in", "(B, C, h, w)")
    if type(blk).__name__.startswith("PreAct"):  # ResNetV2 pre-activation blocks return `x + shortcut`
        total = TapPoint(b, "out", "(B, C, h, w)")
    else:  # other blocks end in `x += shortcut; x = act(x)` with an in-place ReLU: the act's input is the sum
        total = TapPoint(f"{b}.{'act3' if hasattr(blk, 'conv3') else 'act2'}", "in", "(B, C, h, w)", clone=True)
    return {f"{b}.shortcut": shortcut, f"{b}.sum": total}


def default_taps(model) -> list[str]:
    """Default CKA taps: ViT/Mixer resid_mid and resid_post of every block; CNNs every block output."""
    fam = family(model)
    names = list(tap_table(model))
    if fam in ("vit", "mixer"):
        return [n for n in names if n.endswith((".resid_mid", ".resid_post"))]
    return [n for n in names if not n.endswith(CNN_SKIP_SUFFIXES)]


def num_prefix_tokens(model) -> int:
    """Prefix tokens (CLS, distillation, registers) before the spatial tokens; 0 for Mixer and CNNs."""
    if family(model) == "vit":
        return int(getattr(model, "num_prefix_tokens", 0 if getattr(model, "cls_token", None) is None else 1))
    return 0


def has_cls_token(model) -> bool:
    return family(model) == "vit" and getattr(model, "cls_token", None) is not None


def grid_size(model) -> tuple[int, int] | None:
    """(rows, cols) of the patch grid for token models; None for CNNs."""
    fam = family(model)
    if fam == "vit":
        return tuple(model.patch_embed.grid_size)
    if fam == "mixer":
        return tuple(model.stem.grid_size)
    return None


def patch_size(model) -> tuple[int, int] | None:
    fam = family(model)
    if fam == "vit":
        return tuple(model.patch_embed.patch_size)
    if fam == "mixer":
        return tuple(model.stem.patch_size)
    return None


def check_taps(model, taps: Sequence[str]) -> None:
    table = tap_table(model)
    bad = [t for t in taps if t not in table]
    if bad:
        sample = ", ".join(list(table)[:6])
        raise VitlabError(f"unknown tap(s) {', '.join(bad)} for {type(model).__name__}; taps look like: {sample}, ...")


_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def model_lock(model) -> threading.RLock:
    """One lock per model object: hooks and surgery are global state on a module shared across sessions."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.RLock()
        return lock


WAIT_POLL_S = 0.5  # how often a run waiting for a model says so (and can be cancelled through its progress)


@contextmanager
def holding(model, progress=None, what: str = "the model") -> Iterator[None]:
    """Hold ``model``'s lock; while another run (another browser tab) holds it, report the wait through
    ``progress(0, 0, text)`` every WAIT_POLL_S seconds: the app's Cancel stops the wait at such a report."""
    lock = model_lock(model)
    if not lock.acquire(blocking=False):
        t0 = time.monotonic()
        while not lock.acquire(timeout=WAIT_POLL_S):
            if progress is not None:
                progress(0, 0, f"waiting for {what}: another run (another tab?) is using it "
                               f"({time.monotonic() - t0:.0f} s)")
    try:
        yield
    finally:
        lock.release()


PROBS_ROUTES = ("recompute", "drop-input", "unfuse")


def _is_plain_attention(attn) -> bool:
    import timm.layers

    # exactly timm's class: a subclass may compute its scores otherwise (a bias, another scale)
    return type(attn) is timm.layers.Attention and attn.q_norm is not attn.k_norm


def probs_route(model, tap: str, detach: bool = True) -> str:
    """How :func:`capture` takes the probabilities of ``tap`` (``blocks.{i}.attn_probs``); one of PROBS_ROUTES.

    - ``recompute``: timm's plain ``Attention`` running fused (timm's default). The forward is left alone: hooks on
      its ``q_norm`` and ``k_norm`` (``nn.Identity`` without qk-norm) receive the very q and k that go into
      ``scaled_dot_product_attention`` and form softmax(q·scale kᵀ) beside it with the ops of timm's unfused branch
      (:func:`softmax_qk`). Every other tap and the logits are the fused forward's, bit for bit, whatever else is
      captured; the probabilities are what the unfused branch would form from the same q and k, bit for bit.
      Cost: the (B, H, N, N) scores and softmax once more per block, as the unfused branch paid them instead.
    - ``drop-input``: the attention already runs unfused (``fused_attn`` off): the softmax is read where the
      forward passes it to ``attn_drop``; nothing is changed either.
    - ``unfuse``: any other attention class running fused (relative-position bias: its scores are not q kᵀ alone),
      or gradients asked for (``detach=False``: a gradient with respect to the probabilities needs them on the
      output's path). Fused attention is switched off for the capture and the softmax read at ``attn_drop``; that
      forward differs from the fused one by float32 round-off (~1e-6 of the activations' scale), and so does
      every statistic formed in it.
    """
    attn = dict(model.named_modules())[tap.rsplit(".", 1)[0] + ".attn"]
    if not getattr(attn, "fused_attn", False):
        return "drop-input"
    return "recompute" if detach and _is_plain_attention(attn) else "unfuse"


def softmax_qk(attn, q, k, attn_mask=None, is_causal: bool = False):
    """(B, H, N, Dh) q and k after q_norm/k_norm -> (B, H, N, N) probabilities, as timm ``Attention``'s unfused
    branch forms them (same ops in the same order, so the same float32 values)."""
    a = (q * attn.scale) @ k.transpose(-2, -1)
    if attn_mask is not None or is_causal:
        try:
            from timm.layers.attention import maybe_add_mask, resolve_self_attn_mask
        except ImportError:  # an older timm 1.0.x: no mask helpers to form the scores as its forward does
            raise VitlabError(f"attention probabilities under an attention mask need a newer timm than "
                              f"{_timm_version()} (one with timm.layers.attention.resolve_self_attn_mask)") from None
        a = maybe_add_mask(a, resolve_self_attn_mask(a.shape[-1], a, attn_mask, is_causal))
    return a.softmax(dim=-1)


def _timm_version() -> str:
    import timm

    return timm.__version__


def _recompute_hooks(attn, on_probs: Callable, mine: Callable[[], bool]) -> list:
    """Hooks that call ``on_probs(probs)`` with the (B, H, N, N) softmax of each forward of ``attn`` (route
    ``recompute``), leaving the forward's values alone."""
    import torch

    state: dict = {}

    def pre(m, args, kwargs):
        if mine():
            state["mask"] = kwargs.get("attn_mask", args[1] if len(args) > 1 else None)
            state["causal"] = kwargs.get("is_causal", args[2] if len(args) > 2 else False)

    def got_q(m, args, q):
        if mine():
            state["q"] = q

    def got_k(m, args, k):
        if mine() and "q" in state:
            q = state.pop("q")
            with torch.no_grad():
                on_probs(softmax_qk(attn, q.detach(), k.detach(), state.pop("mask", None), state.pop("causal", False)))

    return [attn.register_forward_pre_hook(pre, with_kwargs=True), attn.q_norm.register_forward_hook(got_q),
            attn.k_norm.register_forward_hook(got_k)]


@contextmanager
def capture(model, taps: Sequence[str], detach: bool = True,
            reduce: Mapping[str, Callable] | None = None) -> Iterator[dict]:
    """Hook ``taps`` of ``model``; inside the block every forward on this thread fills the yielded dict
    ``{tap: tensor}``. The model's lock is held throughout, so no other run captures, or changes the model, at the
    same time; a forward another thread makes meanwhile without a capture leaves the dict alone (issue 39).

    Observing does not change the forward: ``attn_probs`` of timm's plain attention are recomputed beside the fused
    forward (:func:`probs_route`), so a tap's value does not depend on what else is captured with it. Only other
    attention classes, and attention probabilities captured for gradients, switch fused attention off.
    Hooks (and any switch-off of fused attention) are undone in ``finally``, even when the forward raises.
    ``detach=False`` keeps the graph (for gradients, e.g. receptive fields).
    ``reduce={tap: fn}``: the hook stores ``fn(tensor)`` instead of the tensor, called the moment the tap exists,
    so the activation is not held past its use in the forward (memory does not grow with the number of taps).
    ``fn`` must return new memory, never a view of its argument (a clone-tap's tensor is changed in place later).
    """
    check_taps(model, taps)
    table = tap_table(model)
    modules = dict(model.named_modules())
    out: dict = {}
    handles = []
    fused_restore = []

    reduce = reduce or {}
    owner = threading.get_ident()

    def mine() -> bool:
        # hooks are on the shared module: a forward on another thread (a run that needs no taps, or calls a block's
        # submodules outside its own capture) fires them too; only this run's thread writes this run's taps
        return threading.get_ident() == owner

    def keep(name, tensor, transpose, clone):
        if not mine():
            return
        t = tensor.transpose(1, 2) if transpose else tensor
        t = t.detach() if detach else t
        if name in reduce:
            out[name] = reduce[name](t)
            return
        out[name] = t.clone() if clone else t

    with model_lock(model):
        try:
            for name in taps:
                p = table[name]
                mod = modules[p.module]
                route = probs_route(model, name, detach) if name.endswith(".attn_probs") else None
                if route == "recompute":
                    handles += _recompute_hooks(modules[p.module.rsplit(".", 1)[0]],
                                                lambda probs, n=name: keep(n, probs, False, False), mine)
                elif p.where == "in":
                    handles.append(mod.register_forward_pre_hook(
                        lambda m, args, n=name, tr=p.transpose, c=p.clone: keep(n, args[0], tr, c)))
                else:
                    handles.append(mod.register_forward_hook(
                        lambda m, args, o, n=name, tr=p.transpose, c=p.clone: keep(n, o, tr, c)))
                if route == "unfuse":
                    attn = modules[p.module.rsplit(".", 1)[0]]
                    fused_restore.append(attn)
                    attn.fused_attn = False
            yield out
        finally:
            for h in handles:
                h.remove()
            for attn in fused_restore:
                attn.fused_attn = True


def features(x, model, tokens: str = "all", any_order: bool = False):
    """Flatten one tap's activations to (B, F) for a Gram.

    tokens: 'all' (every token / position, flattened), 'cls' (token 0 of a CLS model), 'gap' (mean over spatial
    tokens, prefix tokens excluded; mean over h, w for CNNs).
    ``any_order``: the caller does not depend on the order of the features (a Gram does not), so a channels-last
    (B, C, h, w) map is flattened in its memory order (h, w, C), a view, instead of copied into (C, h, w) order.
    """
    import torch

    if tokens not in TOKEN_MODES:
        raise VitlabError(f"tokens must be one of {', '.join(TOKEN_MODES)}, not '{tokens}'")
    if x.dim() == 4:  # (B, C, h, w)
        if tokens == "cls":
            raise VitlabError(f"{type(model).__name__} is a CNN and has no CLS token: use --tokens gap or all")
        if tokens == "gap":
            return x.mean(dim=(2, 3))
        if any_order and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
            return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)
        return x.reshape(x.shape[0], -1)
    if x.dim() != 3:
        raise VitlabError(f"cannot make features from a tensor of shape {tuple(x.shape)}")
    if tokens == "all":
        return x.reshape(x.shape[0], -1)
    prefix = num_prefix_tokens(model)
    if tokens == "cls":
        if not has_cls_token(model):
            raise VitlabError(f"{type(model).__name__} has no CLS token (it pools its tokens): use --tokens gap or all")
        return x[:, 0]
    return x[:, prefix:].mean(dim=1)
