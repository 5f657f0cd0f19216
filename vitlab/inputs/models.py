"""Model specs and loading.

A spec is ``NAME[@WEIGHTS]`` (or ``zoo:NAME[@random[:SEED]]``, a zoo model or its untrained twin):

- NAME: any timm model name, optionally with a pretrained tag (``vit_base_patch16_224.augreg_in21k``);
- WEIGHTS: ``pretrained`` (default: timm's hub loading and its local cache), ``random`` / ``random:SEED``
  (exactly ``torch.manual_seed(SEED)`` then ``timm.create_model(NAME, pretrained=False)``), or a path to a local
  ``.safetensors`` / ``.pth`` / ``.pt`` / ``.bin`` checkpoint (never unpickled).

The fingerprint changes whenever the weights or the eval transform change: it hashes the checkpoint file's
bytes, the seed, or the pretrained tag (hub weights are immutable per tag) plus the data config.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import VitlabError
from . import hub
from .hub import hub_reachable, set_offline_if_needed  # noqa: F401 - hub_reachable re-exported
from ..progress import Progress

CHECKPOINT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")

# Friendly names for the paper's models (Raghu et al. 2021 used JFT-300M weights, which are not public;
# ImageNet-21k weights are the nearest public stand-ins).
PAPER_MODELS: dict[str, str] = {
    "ViT-B/32": "vit_base_patch32_224.augreg_in21k",
    "ViT-B/16": "vit_base_patch16_224.augreg_in21k",
    "ViT-L/16": "vit_large_patch16_224.augreg_in21k",
    "ViT-H/14": "vit_huge_patch14_224.orig_in21k",
    "BiT R50x1": "resnetv2_50x1_bit.goog_in21k",
    "BiT R152x2": "resnetv2_152x2_bit.goog_in21k",
    "Mixer-B/16": "mixer_b16_224.goog_in21k",
}


@dataclass(frozen=True)
class ModelSpec:
    """What to load. ``weights`` is 'pretrained', 'random:SEED', 'zoo', 'zoo@random:SEED' or a checkpoint path."""

    name: str
    weights: str = "pretrained"
    img_size: int | None = None  # ViT/Mixer only: build at another input size (position embeddings resized)

    @property
    def label(self) -> str:
        if self.weights == "zoo":
            return f"zoo:{self.name}"
        if self.weights.startswith("zoo@"):
            return f"zoo:{self.name}@{self.weights[4:]}"
        if self.weights == "pretrained":
            return self.name
        if self.weights.startswith("random"):
            return f"{self.name}@{self.weights}"
        return f"{self.name}@{Path(self.weights).name}"


# torch.manual_seed takes 0 <= seed < 2**64 (a larger one: "ValueError: Overflow when unpacking long long")
SEED_LIMIT = 2**64
MAX_SPEC_CHARS = 4096  # a checkpoint path may be as long as the system's longest path (PATH_MAX)
# timm's names and pretrained tags hold only these (every name and tag of timm 1.0: [a-z0-9_]); a '/' or ':' would
# make timm read the name as a hub repository or a folder ('hf-hub:', 'local-dir:'), which vitlab never loads
TIMM_NAME = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")
ZOO_NAME = re.compile(r"[A-Za-z0-9_-]+")


def shown(text: str, limit: int = 80) -> str:
    """``text`` as a message shows it: at most ``limit`` characters, control characters escaped (a 1 MB name or a
    newline from a link never floods or splits an error line)."""
    text = str(text)
    cut = text[:limit] + ("…" if len(text) > limit else "")
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in cut)


def _check_name(text: str, name: str, zoo: bool) -> None:
    if not name:
        raise VitlabError(f"model spec '{shown(text)}': no model name before '@'; give a timm name, e.g. "
                          "vit_base_patch32_224.augreg_in21k")
    if zoo:
        if not ZOO_NAME.fullmatch(name):
            raise VitlabError(f"zoo model '{shown(name)}': a zoo name holds only letters, digits, '-' and '_'; "
                              "`vitlab zoo list` names them")
        return
    if TIMM_NAME.fullmatch(name):
        return
    if "/" in name or ":" in name or "\\" in name:
        raise VitlabError(f"model spec '{shown(text)}': '{shown(name)}' looks like a hub repository or a path, not a "
                          "timm name; vitlab loads timm names only (NAME or NAME.TAG of letters, digits and '_'); for "
                          "your own weights give a checkpoint file: NAME@/path/to/weights.safetensors")
    raise VitlabError(f"model spec '{shown(text)}': '{shown(name)}' is not a timm name; a timm name is NAME or "
                      "NAME.TAG of letters, digits and '_' (e.g. vit_base_patch16_224.augreg_in21k)")


def parse_spec(text: str) -> ModelSpec:
    """Parse ``NAME[@WEIGHTS]`` or ``zoo:NAME[@random[:SEED]]`` into a :class:`ModelSpec`.

    Everything that can be checked without timm is checked here (the name's characters, the seed's range, the
    checkpoint's suffix); :func:`size` and :func:`load` check the name and tag against timm."""
    if not isinstance(text, str):
        raise VitlabError(f"model spec {shown(repr(text))}: give the model as text, e.g. zoo:vit-cls")
    text = text.strip()
    if not text:
        raise VitlabError("empty model spec: give a timm model name, e.g. vit_base_patch32_224.augreg_in21k")
    if len(text) > MAX_SPEC_CHARS:
        raise VitlabError(f"model spec '{shown(text)}' is {len(text):,} characters long (at most {MAX_SPEC_CHARS:,}): "
                          "give a timm model name, e.g. vit_base_patch32_224.augreg_in21k")
    if text in PAPER_MODELS:
        return ModelSpec(PAPER_MODELS[text])
    zoo = text.startswith("zoo:")
    name, _, weights = (text[4:] if zoo else text).partition("@")
    _check_name(text, name, zoo)
    weights = weights or ("zoo" if zoo else "pretrained")
    if weights == "random":
        weights = "random:0"
    if weights.startswith("random:"):
        seed = weights[7:]
        if not re.fullmatch(r"[0-9]{1,20}", seed) or int(seed) >= SEED_LIMIT:
            raise VitlabError(f"model spec '{shown(text)}': the seed after 'random:' must be a whole number from 0 to "
                              f"{SEED_LIMIT - 1} (the range torch.manual_seed takes), e.g. {shown(name)}@random:0")
        weights = f"random:{int(seed)}"  # 'random:007' is 'random:7': one seed, one spec, one cache key
        if zoo:
            return ModelSpec(name, f"zoo@{weights}")
    if zoo:
        if weights != "zoo":
            raise VitlabError(f"model spec '{shown(text)}': a zoo model takes no weights but '@random[:SEED]' (its "
                              "untrained twin)")
        return ModelSpec(name, "zoo")
    if weights != "pretrained" and not weights.startswith("random:"):
        path = Path(weights).expanduser()
        if path.suffix.lower() not in CHECKPOINT_SUFFIXES:
            raise VitlabError(
                f"model spec '{shown(text)}': weights must be 'pretrained', 'random[:SEED]' or a checkpoint file "
                f"ending in {', '.join(CHECKPOINT_SUFFIXES)}"
            )
        weights = str(path)
    return ModelSpec(name, weights)


@dataclass
class LoadedModel:
    """A model ready for analysis: eval mode, on its device, with its eval transform and fingerprint."""

    spec: ModelSpec
    model: Any  # torch.nn.Module
    transform: Any  # PIL image -> (C, H, W) tensor
    data_config: dict
    fingerprint: str
    device: str
    display: str | None = None  # the name to show (e.g. as typed on the command line)
    # 'channels_last' for CNNs (see :func:`wants_channels_last`); the layout changes a forward's round-off, so it
    # is part of every cache key that holds forward results (``layout_key``)
    memory_format: str = "contiguous"

    @property
    def layout_key(self) -> tuple[str, ...]:
        """Cache-key parts for the memory layout: none for the default, so those keys are what they always were."""
        return () if self.memory_format == "contiguous" else (self.memory_format,)

    @property
    def label(self) -> str:
        return self.display or self.spec.label

    @property
    def in_chans(self) -> int:
        return int(self.data_config["input_size"][0])

    # what pages and engines need to know, so that none of them reaches into the nn.Module

    @property
    def family(self) -> str:
        """'vit', 'mixer', 'resnet' or 'resnetv2' (``vitlab.taps.family``)."""
        from . import taps

        return taps.family(self.model)

    @property
    def depth(self) -> int:
        """Number of blocks (ViT/Mixer blocks, CNN residual blocks)."""
        from . import taps

        if self.family in ("vit", "mixer"):
            return len(self.model.blocks)
        return len(taps.default_taps(self.model))

    @property
    def forward_macs(self) -> int:
        """Multiply-accumulates of one image's forward pass in its linear and convolution layers (the bulk of a
        ViT's, a ResNet's or a Mixer's cost; attention's own products are left out), counted once per loaded model
        from the layers' output sizes over one zero image. What orders work cheapest first, so that a page's first
        answer comes from the model that gives it soonest (ResNet-50 4.1 G, ViT-B/16 16.8 G)."""
        if "_macs" not in self.__dict__:
            import torch

            total, handles = [0], []

            def count(mod, args, out):
                if isinstance(mod, torch.nn.Linear):
                    total[0] += out.numel() * mod.in_features
                else:
                    total[0] += out.numel() * (mod.in_channels // mod.groups) * math.prod(mod.kernel_size)

            for mod in self.model.modules():
                if isinstance(mod, (torch.nn.Linear, torch.nn.Conv2d)):
                    handles.append(mod.register_forward_hook(count))
            try:
                with torch.no_grad():
                    self.model(torch.zeros((1, *self.data_config["input_size"]), device=self.device))
            finally:
                for h in handles:
                    h.remove()
            self.__dict__["_macs"] = int(total[0])
        return self.__dict__["_macs"]

    @property
    def heads(self) -> int:
        """Attention heads per block (0 for models without attention)."""
        return int(self.model.blocks[0].attn.num_heads) if self.family == "vit" else 0

    @property
    def grid(self) -> tuple[int, int] | None:
        """(rows, cols) of the patch grid of a token model; None for CNNs."""
        from . import taps

        return taps.grid_size(self.model)

    @property
    def prefix_tokens(self) -> int:
        """Tokens before the spatial ones (CLS, distillation, registers); 0 for Mixer and CNNs."""
        from . import taps

        return taps.num_prefix_tokens(self.model)

    @property
    def has_cls(self) -> bool:
        from . import taps

        return taps.has_cls_token(self.model)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read 1 MiB at a time (checkpoint fingerprints, the report's provenance)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


SAFE_TORCH_LOAD = (2, 6)  # torch.load(weights_only=True) could still execute code before torch 2.6 (CVE-2025-32434)


def _check_safe_torch_load(version: str) -> None:
    parts = [int(p) for p in re.findall(r"\d+", version.split("+")[0])[:2]]
    if tuple(parts) < SAFE_TORCH_LOAD:
        raise VitlabError(f"reading .pth/.bin checkpoints safely needs torch >= 2.6 (this is {version}): upgrade "
                          "torch, or convert the checkpoint to .safetensors")


def read_state_dict(path: str | Path) -> dict:
    """Read a checkpoint without unpickling arbitrary objects (safetensors, or ``torch.load(weights_only=True)``)."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise VitlabError(f"checkpoint '{path}' does not exist")
    try:
        if path.suffix.lower() == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path), device="cpu")
        else:
            _check_safe_torch_load(torch.__version__)
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except VitlabError:
        raise
    except Exception as e:  # corrupt file, pickled objects refused by weights_only, ...
        first_line = f"{type(e).__name__}: {e}".split("\n")[0]
        raise VitlabError(f"checkpoint '{path.name}' cannot be read safely: {first_line}") from e
    for key in ("state_dict", "model", "model_state_dict", "state_dict_ema"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
            break
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise VitlabError(f"checkpoint '{path.name}' holds no state dict of tensors")
    # DataParallel / DDP prefixes
    if state and all(k.startswith("module.") for k in state):
        state = {k[7:]: v for k, v in state.items()}
    return state


def check_timm_name(name: str) -> None:
    """A VitlabError unless timm knows ``name`` (``NAME`` or ``NAME.TAG``), with the nearest names or tags."""
    import timm

    base, _, tag = name.partition(".")
    if not timm.is_model(base):
        close = difflib.get_close_matches(base, timm.list_models(), n=5, cutoff=0.6)
        hint = (f" (similar: {', '.join(close)})" if close else
                "; python -c \"import timm; print(timm.list_models('*vit*'))\" lists them")
        raise VitlabError(f"unknown model '{shown(name)}': not a timm model name{hint}")
    if tag:
        tags = [n.partition(".")[2] for n in timm.list_models(base, include_tags=True)]
        if tag not in tags:
            close = difflib.get_close_matches(tag, tags, n=3, cutoff=0.5)
            known = (f"did you mean {' or '.join(f'{base}.{t}' for t in close)}?" if close else
                     f"its tags: {', '.join(tags[:8])}{', …' if len(tags) > 8 else ''}" if tags else
                     "it has none")
            raise VitlabError(f"model '{shown(name)}': timm knows no pretrained tag '{shown(tag)}' for {base} "
                              f"({known}): correct the tag, or leave it out ({base})")


def _timm_failure(spec: ModelSpec, e: Exception) -> VitlabError:
    """A timm exception raised while building ``spec``, in words (the spec, timm's first line, what to do)."""
    first = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    return VitlabError(f"timm cannot build '{shown(spec.label)}' ({first}); check the model name and tag "
                       "(timm.list_models() names them) or pick another model")


# timm's own failures while building a model from a name: a bad tag (RuntimeError), a name read as a hub repo or a
# folder (ValueError), a missing config key (KeyError), a keyword the architecture does not take (TypeError), ...
TIMM_ERRORS = (RuntimeError, ValueError, KeyError, TypeError, AssertionError, NotImplementedError, AttributeError,
               IndexError)


def _out_of_memory(e: BaseException) -> bool:
    text = str(e).lower()
    return isinstance(e, MemoryError) or "out of memory" in text or "can't allocate" in text


def _timm_build(spec: ModelSpec, pretrained: bool, **kwargs: Any):
    """``timm.create_model(spec.name, pretrained=...)`` with every failure of the spec as a VitlabError."""
    import timm

    if spec.img_size is not None:
        kwargs["img_size"] = spec.img_size
    try:
        return timm.create_model(spec.name, pretrained=pretrained, **kwargs)
    except VitlabError:
        raise
    except OSError:
        raise  # pretrained weights not found or not reachable: the caller says what to do
    except TypeError as e:  # e.g. img_size= on a ResNet
        if "img_size" in kwargs and "img_size" in str(e):
            raise VitlabError(f"cannot build '{shown(spec.name)}' at img_size={spec.img_size}: this architecture "
                              "takes no img_size (CNNs take any input size); leave it out") from e
        raise _timm_failure(spec, e) from e
    except TIMM_ERRORS as e:
        if _out_of_memory(e):
            raise  # the CLI and the app say "out of memory" in words
        if pretrained and "pretrained" in str(e).lower():
            raise VitlabError(f"'{shown(spec.name)}' has no pretrained weights in timm ({str(e).splitlines()[0]}): "
                              f"use {shown(spec.name)}@random for the untrained architecture, or a checkpoint file"
                              ) from e
        raise _timm_failure(spec, e) from e


def _offline_message(spec: ModelSpec) -> str:
    where = "torch" if hub.hub_file(spec.name) is None else "Hugging Face"
    return (f"pretrained weights for '{shown(spec.name)}' are not in the local {where} cache and this process is "
            "offline "
            f"({hub.offline_reason()}): nothing is downloaded. Fetch them once where the network is allowed (unset "
            f"HF_HUB_OFFLINE / VITLAB_OFFLINE), or pass a checkpoint file: {shown(spec.name)}@/path/to/weights."
            f"safetensors, or take the untrained architecture: {shown(spec.name)}@random")


def _create(spec: ModelSpec):
    import torch

    check_timm_name(spec.name)
    if spec.weights == "pretrained":
        if hub.offline() and needs_download(spec):  # no lookup at all, not even timm's first attempt
            raise VitlabError(_offline_message(spec))
        set_offline_if_needed()
        try:
            return _timm_build(spec, pretrained=True)
        except OSError as e:
            if hub.offline():
                raise VitlabError(_offline_message(spec)) from e
            raise VitlabError(
                f"pretrained weights for '{shown(spec.name)}' are not in the local Hugging Face cache and the hub "
                "cannot be reached. Go online once (the weights are then cached), or pass a checkpoint "
                f"file: --model {shown(spec.name)}@/path/to/weights.safetensors"
            ) from e
    if spec.weights.startswith("random:"):
        torch.manual_seed(int(spec.weights[7:]))
        return _timm_build(spec, pretrained=False)
    state = read_state_dict(spec.weights)
    model = _timm_build(spec, pretrained=False)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        if _out_of_memory(e):
            raise
        first = str(e).split("\n")
        raise VitlabError(
            f"checkpoint '{shown(Path(spec.weights).name)}' does not fit '{shown(spec.name)}': "
            f"{' '.join(first[:3])[:400]}"
        ) from e
    return model


# ---------------------------------------------------------------- size before you allocate (STYLE habit 15)


@dataclass(frozen=True)
class ModelSize:
    """A model's parameter count and the bytes its parameters and buffers hold (float32 for timm and the zoo)."""

    params: int
    bytes: int

    def __add__(self, other: ModelSize) -> ModelSize:
        return ModelSize(self.params + other.params, self.bytes + other.bytes)

    @property
    def words(self) -> str:
        """'6.7 B parameters (25.0 GiB in float32)'."""
        return f"{count_words(self.params)} parameters ({gib(self.bytes)} in float32)"


def count_words(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return str(n)


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:.1f} MiB"


def _meta_model(name: str, img_size: int | None, zoo: bool):
    """The architecture on the meta device: shapes and dtypes, no memory, no weights read."""
    import torch

    with torch.device("meta"):
        if zoo:
            from .. import zoo as zoo_models

            return zoo_models.create(zoo_models.recipe(name))
        check_timm_name(name)
        return _timm_build(ModelSpec(name, "pretrained", img_size), pretrained=False)  # label: the name


@functools.lru_cache(maxsize=512)
def _size(name: str, img_size: int | None, zoo: bool) -> ModelSize:
    """Per architecture: seeds, checkpoints and pretrained weights of one architecture share one count."""
    model = _meta_model(name, img_size, zoo)
    tensors = [*model.parameters(), *model.buffers()]
    return ModelSize(sum(p.numel() for p in model.parameters()),
                     sum(t.numel() * t.element_size() for t in tensors))


def size(spec: ModelSpec | str) -> ModelSize:
    """Parameters and bytes of ``spec``'s model, counted on the meta device before anything is built (timm builds
    vit_7b's 6.7 B parameters there in 0.16 s, FACTS.md); never reads weights or touches the network. Cached per
    architecture (30-200 ms the first time on a busy 2-core machine, microseconds after); a bad name or tag is a
    VitlabError, as for :func:`load`."""
    ms = parse_spec(spec) if isinstance(spec, str) else spec
    return _size(ms.name, ms.img_size, ms.weights == "zoo" or ms.weights.startswith("zoo@"))


# A model needs its weights once more while it loads or runs: a pretrained or checkpoint load holds the state dict
# read from the file beside the built model until it is copied in (safetensors / torch.load give a full second
# copy), and a forward's working memory is of the same order (ViT-B/16 at batch 64: ~6 MB per image, FACTS.md,
# about its 350 MB of weights). So free memory must hold the weights twice; the models budget counts what stays held,
# the weights once.
WORKING_FACTOR = 2.0


def check_fits(specs: ModelSpec | str | Sequence[ModelSpec | str], device: str | None = "cpu",
               loaded_bytes: int = 0) -> ModelSize:
    """Refuse, before anything is built, models that do not fit: a VitlabError unless this machine's free memory
    (and a CUDA device's) holds the weights of ``specs`` together plus the largest once more
    (:data:`WORKING_FACTOR`), and the models budget (``VITLAB_MODELS_GB``, vitlab.inputs.budget) holds them beside
    ``loaded_bytes`` (what the caller already holds: the app's model cache). Returns their size together."""
    from . import budget

    many = [specs] if isinstance(specs, (str, ModelSpec)) else list(specs)
    if not many:
        return ModelSize(0, 0)
    sizes = [size(s) for s in many]
    total = functools.reduce(ModelSize.__add__, sizes)
    need = total.bytes + (WORKING_FACTOR - 1) * max(s.bytes for s in sizes)
    limit = budget.models_budget_gb() * budget.GIB
    problems = []
    free = budget.free_bytes()
    if free is not None and need > free:
        problems.append(f"this machine has {gib(free)} free")
    gpu_free = budget.device_free_bytes(device) if device else None
    if gpu_free is not None and need > gpu_free:
        problems.append(f"{device} has {gib(gpu_free)} free")
    if loaded_bytes + total.bytes > limit:
        held = f" beside the {gib(loaded_bytes)} loaded models already hold" if loaded_bytes else ""
        problems.append(f"the models budget ({budget.budget_words()}) leaves {gib(max(0, limit - loaded_bytes))}"
                        f"{held}")
    if not problems:
        return total
    what = (shown(spec_label(many[0])) if len(many) == 1 else
            f"{len(many)} models together ({', '.join(shown(spec_label(s), 40) for s in many)})")
    todo = "pick a smaller model" + (", or raise VITLAB_MODELS_GB on a machine with the memory"
                                     if any(p.startswith("the models budget") for p in problems) else
                                     " or free memory on this machine")
    if loaded_bytes and any(p.startswith("the models budget") for p in problems):
        todo += " (or unload a model)"
    raise VitlabError(f"{what} {'has' if len(many) == 1 else 'have'} {total.words}; loading "
                      f"{'it' if len(many) == 1 else 'them'} needs {gib(need)} free (the weights, and as much again "
                      f"while a checkpoint is read or a forward runs), but {' and '.join(problems)}: {todo}")


def spec_label(spec: ModelSpec | str) -> str:
    return spec.strip() if isinstance(spec, str) else spec.label


def twin_spec(spec: ModelSpec | str, seed: int = 0) -> ModelSpec:
    """The untrained twin of ``spec``: the same architecture, randomly initialised with ``seed`` (the control for
    any claim that depends on training). A random spec is its own twin's architecture at ``seed``."""
    if isinstance(spec, str):
        spec = parse_spec(spec)
    if spec.weights == "zoo" or spec.weights.startswith("zoo@"):
        return ModelSpec(spec.name, f"zoo@random:{seed}", spec.img_size)
    return ModelSpec(spec.name, f"random:{seed}", spec.img_size)


def fingerprint_of(spec: ModelSpec, data_config: dict) -> str:
    """Stable id of (architecture, weights, eval transform)."""
    if spec.weights.startswith("random:") or spec.weights == "pretrained":
        weights_id = spec.weights
    elif spec.weights.startswith("zoo@"):
        from .. import zoo

        weights_id = [spec.weights, zoo.recipe(spec.name).kwargs, zoo.recipe(spec.name).noskip_block]
    elif spec.weights == "zoo":
        from .. import zoo

        weights_id = "zoo:" + sha256_file(zoo.checkpoint_path(spec.name))
    else:
        weights_id = "file:" + sha256_file(Path(spec.weights))
    cfg = {k: data_config[k] for k in sorted(data_config)}
    blob = json.dumps([spec.name, spec.img_size, weights_id, cfg], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def default_device() -> str:
    """The device for ``--device auto``: ``cuda:LOCAL_RANK`` under torchrun with CUDA, else ``cuda`` or ``cpu``."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    text = os.environ.get("LOCAL_RANK")
    if text is None:
        return "cuda"
    if not text.isdigit():
        raise VitlabError(f"LOCAL_RANK={text!r} must be a non-negative integer (torchrun sets it)")
    local, count = int(text), torch.cuda.device_count()
    if local >= count:
        raise VitlabError(f"LOCAL_RANK={local} but this machine has {count} GPU(s): lower torchrun's "
                          f"--nproc_per_node to {count} or less, or run on CPU with --device cpu")
    return f"cuda:{local}"


def resolve_device(device: str | None = None) -> str:
    """'auto'/None: CUDA when present, else CPU."""
    import torch

    if device in (None, "", "auto"):
        return default_device()
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise VitlabError(f"device '{device}' requested but CUDA is not available here; use --device cpu")
    if device not in ("cpu", "mps") and not device.startswith("cuda"):
        raise VitlabError(f"unknown device '{device}': use auto, cpu or cuda[:N]")
    return device


def load(spec: ModelSpec | str, device: str | None = None, loaded_bytes: int = 0) -> LoadedModel:
    """Build the model of ``spec`` in eval mode on ``device`` with timm's eval transform.

    The model is sized on the meta device first and refused (a VitlabError, nothing built) when it does not fit
    this machine's free memory or the models budget beside ``loaded_bytes`` (:func:`check_fits`)."""
    import timm.data

    given = spec  # messages name the model as it was given
    if isinstance(spec, str):
        spec = parse_spec(spec)
    device = resolve_device(device)
    check_fits(given, device, loaded_bytes)
    if spec.weights == "zoo":
        from .. import zoo

        model = zoo.build(spec.name)
    elif spec.weights.startswith("zoo@random:"):
        import torch

        from .. import zoo

        recipe = zoo.recipe(spec.name)  # an unknown name fails here, before any seeding
        torch.manual_seed(int(spec.weights.split(":")[1]))
        model = zoo.create(recipe)
    else:
        model = _create(spec)
    model.eval().requires_grad_(False).to(device)
    memory_format = "contiguous"
    if wants_channels_last(model, device):
        import torch

        model.to(memory_format=torch.channels_last)
        memory_format = "channels_last"
    data_config = timm.data.resolve_model_data_config(model)
    if spec.img_size is not None:  # timm 1.0 reports the default size even then
        data_config["input_size"] = (data_config["input_size"][0], spec.img_size, spec.img_size)
    transform = timm.data.create_transform(**data_config, is_training=False)
    return LoadedModel(spec, model, transform, dict(data_config), fingerprint_of(spec, data_config), device,
                       memory_format=memory_format)


def channels_last_wanted() -> bool:
    """``VITLAB_CHANNELS_LAST``: 1 (the default) runs CNNs channels-last, 0 keeps PyTorch's default layout."""
    from ..options import env_switch

    return env_switch("VITLAB_CHANNELS_LAST", True, "CNNs run channels-last, the default")


def wants_channels_last(model, device: str = "cpu") -> bool:
    """Whether ``model`` runs channels-last: ResNet and ResNetV2/BiT on the CPU or CUDA (other backends keep
    timm's layout: untested there), unless ``VITLAB_CHANNELS_LAST=0``.

    oneDNN's (CPU) and cuDNN's convolutions are fastest on NHWC: ResNet-50 at batch 32 on 2 CPU cores takes 2.1 s
    instead of 3.1 s (docs/throughput.md §5). ViTs and Mixers, whose only convolution is the patch embedding, keep
    the default layout. The numbers differ from the default layout's by float32 round-off (the convolutions sum
    in another order).
    """
    from . import taps

    try:
        family = taps.family(model)
    except VitlabError:
        return False
    return (family in ("resnet", "resnetv2") and str(device).split(":")[0] in ("cpu", "cuda")
            and channels_last_wanted())


# ---------------------------------------------------------------- pretrained weights from the hub, before loading


def needs_download(spec: ModelSpec | str) -> bool:
    """Whether loading ``spec`` would fetch weights over the network: pretrained weights that are in neither the
    local Hugging Face cache nor torch's (for timm's few weights outside the hub). Never opens a socket; an invalid
    spec needs no download (loading it fails in words)."""
    try:
        ms = parse_spec(spec) if isinstance(spec, str) else spec
    except VitlabError:
        return False
    if ms.weights != "pretrained":
        return False
    found = hub.hub_file(ms.name)
    if found is not None:
        return not hub.hub_cached(*found)
    url = hub.url_file(ms.name)
    return url is not None and not hub.url_cached(url)


def weights_status(spec: str) -> str:
    """Where a spec's weights come from, in words; 'download needed' when the hub must be asked (before loading).
    Offline (``HF_HUB_OFFLINE=1`` / ``VITLAB_OFFLINE=1``) uncached weights are 'not cached; offline (...): no
    download'. Never opens a socket."""
    try:
        ms = parse_spec(spec)
    except VitlabError as e:
        return f"invalid: {e}"
    if ms.weights == "zoo":
        from .. import zoo

        try:
            return "zoo checkpoint" if zoo.checkpoint_path(ms.name).is_file() else "zoo checkpoint missing"
        except VitlabError as e:
            return f"invalid: {e}"
    if ms.weights.startswith("random"):
        return "random weights"
    if ms.weights != "pretrained":
        return "local checkpoint"
    if needs_download(ms):
        return f"not cached; offline ({hub.offline_reason()}): no download" if hub.offline() else "download needed"
    if hub.hub_file(ms.name) is None:
        return ("in the local torch cache" if hub.url_file(ms.name) else
                "no pretrained weights in timm")
    return "in the local hub cache"


def download_weights(spec: str, progress: Progress | None = None) -> bool:
    """Fetch a pretrained spec's weights into the hub cache, reporting bytes as ``progress(done, total, text)``.

    Returns whether a file was fetched; offline, or for weights not on the hub, it returns False and loading
    then reports the case in words.
    """
    from huggingface_hub import hf_hub_download
    from tqdm.auto import tqdm

    repo, files = hub.hub_file(parse_spec(spec).name) or (None, [])
    if repo is None or hub.offline() or not hub.hub_reachable():
        return False

    class _Bar(tqdm):
        def update(self, n=1):
            super().update(n)
            if self.total and progress is not None:
                progress(self.n, self.total, f"downloading {spec}: {self.n / 2**20:.0f} of "
                                             f"{self.total / 2**20:.0f} MiB")

    repo_id, _, revision = repo.partition("@")
    for f in files:
        try:
            hf_hub_download(repo_id, f, revision=revision or None, tqdm_class=_Bar)
            return True
        except Exception:  # noqa: BLE001, S112 - try the next candidate file; loading reports a final failure
            continue
    return False
