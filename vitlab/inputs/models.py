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

import hashlib
import json
import os
import re
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


def parse_spec(text: str) -> ModelSpec:
    """Parse ``NAME[@WEIGHTS]`` or ``zoo:NAME[@random[:SEED]]`` into a :class:`ModelSpec`."""
    text = text.strip()
    if not text:
        raise VitlabError("empty model spec: give a timm model name, e.g. vit_base_patch32_224.augreg_in21k")
    if text in PAPER_MODELS:
        return ModelSpec(PAPER_MODELS[text])
    zoo = text.startswith("zoo:")
    name, _, weights = (text[4:] if zoo else text).partition("@")
    weights = weights or ("zoo" if zoo else "pretrained")
    if weights == "random":
        weights = "random:0"
    if weights.startswith("random:"):
        seed = weights[7:]
        if not seed.isdigit():
            raise VitlabError(f"model spec '{text}': the seed after 'random:' must be a non-negative integer")
        if zoo:
            return ModelSpec(name, f"zoo@{weights}")
    if zoo:
        if weights != "zoo":
            raise VitlabError(f"model spec '{text}': a zoo model takes no weights but '@random[:SEED]' (its untrained "
                              "twin)")
        return ModelSpec(name, "zoo")
    if weights != "pretrained" and not weights.startswith("random:"):
        path = Path(weights).expanduser()
        if path.suffix.lower() not in CHECKPOINT_SUFFIXES:
            raise VitlabError(
                f"model spec '{text}': weights must be 'pretrained', 'random[:SEED]' or a checkpoint file "
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


def _sha256_file(path: Path) -> str:
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


def _create(spec: ModelSpec):
    import timm
    import torch

    kwargs: dict[str, Any] = {}
    if spec.img_size is not None:
        kwargs["img_size"] = spec.img_size
    base = spec.name.split(".")[0]
    if not timm.is_model(base):
        close = timm.list_models(f"*{base.split('_')[0]}*")[:5]
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise VitlabError(f"unknown model '{spec.name}': not a timm model name{hint}")
    try:
        if spec.weights == "pretrained":
            set_offline_if_needed()
            try:
                return timm.create_model(spec.name, pretrained=True, **kwargs)
            except OSError as e:
                raise VitlabError(
                    f"pretrained weights for '{spec.name}' are not in the local Hugging Face cache and the hub "
                    "cannot be reached. Go online once (the weights are then cached), or pass a checkpoint "
                    f"file: --model {spec.name}@/path/to/weights.safetensors"
                ) from e
            except RuntimeError as e:
                if "No pretrained weights" in str(e) or "pretrained" in str(e).lower():
                    raise VitlabError(f"'{spec.name}' has no pretrained weights in timm: {e}") from e
                raise
        if spec.weights.startswith("random:"):
            torch.manual_seed(int(spec.weights[7:]))
            return timm.create_model(spec.name, pretrained=False, **kwargs)
        model = timm.create_model(spec.name, pretrained=False, **kwargs)
        state = read_state_dict(spec.weights)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as e:
            first = str(e).split("\n")
            raise VitlabError(
                f"checkpoint '{Path(spec.weights).name}' does not fit '{spec.name}': {' '.join(first[:3])[:400]}"
            ) from e
        return model
    except TypeError as e:  # e.g. img_size= on a ResNet
        raise VitlabError(f"cannot build '{spec.name}' with {kwargs}: {e}") from e


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

        weights_id = "zoo:" + _sha256_file(zoo.checkpoint_path(spec.name))
    else:
        weights_id = "file:" + _sha256_file(Path(spec.weights))
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


def load(spec: ModelSpec | str, device: str | None = None) -> LoadedModel:
    """Build the model of ``spec`` in eval mode on ``device`` with timm's eval transform."""
    import timm.data

    if isinstance(spec, str):
        spec = parse_spec(spec)
    device = resolve_device(device)
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


def weights_status(spec: str) -> str:
    """Where a spec's weights come from, in words; 'download needed' when the hub must be asked (before loading)."""
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
    found = hub.hub_file(ms.name)
    if found is None:
        return "timm download (not from the Hugging Face hub)"
    return "in the local hub cache" if hub.hub_cached(*found) else "download needed"


def download_weights(spec: str, progress: Progress | None = None) -> bool:
    """Fetch a pretrained spec's weights into the hub cache, reporting bytes as ``progress(done, total, text)``.

    Returns whether a file was fetched; offline, or for weights not on the hub, it returns False and loading
    then reports the case in words.
    """
    from huggingface_hub import hf_hub_download
    from tqdm.auto import tqdm

    repo, files = hub.hub_file(parse_spec(spec).name) or (None, [])
    if repo is None or not hub.hub_reachable():
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
