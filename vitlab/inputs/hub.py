"""The Hugging Face hub, seen from a machine that may be offline: reachability (checked once), offline mode set
before timm tries to download, and which pretrained weights are already in the local cache.

Offline (``HF_HUB_OFFLINE=1`` or ``VITLAB_OFFLINE=1``, :func:`offline`) means no lookup at all: nothing here opens
a socket, :func:`hub_reachable` answers False at once, and loading an uncached pretrained model or a data set that
is not on disk says so in words instead of asking the network.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TRUE = ("1", "true", "yes", "on")  # huggingface_hub's own reading of HF_HUB_OFFLINE (case-insensitive)


def offline() -> bool:
    """Whether the user asked for no network at all: ``HF_HUB_OFFLINE`` or ``VITLAB_OFFLINE`` set to 1/true/yes/on.

    Read at every call (the app and tests may set it at run time). It wins over ``VITLAB_ONLINE=1``."""
    return any(os.environ.get(k, "").strip().lower() in TRUE for k in ("HF_HUB_OFFLINE", "VITLAB_OFFLINE"))


def offline_reason() -> str:
    """Which setting made this process offline, for messages ('HF_HUB_OFFLINE=1')."""
    for k in ("HF_HUB_OFFLINE", "VITLAB_OFFLINE"):
        if os.environ.get(k, "").strip().lower() in TRUE:
            return f"{k}={os.environ[k].strip()}"
    return "the hub cannot be reached"


def set_offline_if_needed() -> None:
    """Fail in a tenth of a second rather than after ~48 s of retries when the hub cannot be reached.

    ``HF_HUB_OFFLINE`` / ``VITLAB_OFFLINE`` are honoured without any lookup; ``VITLAB_ONLINE=1`` skips the
    reachability check (and is overruled by them).
    """
    if not offline() and os.environ.get("VITLAB_ONLINE") == "1":
        return
    if offline() or not hub_reachable():
        with contextlib.suppress(ImportError):  # timm installs huggingface_hub; without it there is no hub
            import huggingface_hub.constants as hc

            hc.HF_HUB_OFFLINE = True


_REACHABLE: bool | None = None


def hub_reachable(timeout: float = 1.5) -> bool:
    """Whether huggingface.co answers on port 443 (checked once per process); False at once, with no socket opened,
    when :func:`offline`."""
    global _REACHABLE
    if offline():
        return False
    if _REACHABLE is None:
        import socket

        try:
            with socket.create_connection(("huggingface.co", 443), timeout=timeout):
                _REACHABLE = True
        except OSError:
            _REACHABLE = False
    return _REACHABLE


def hub_file(name: str) -> tuple[str, list[str]] | None:
    """(repo id, candidate file names) of a timm model's pretrained weights on the Hugging Face hub."""
    import timm.models

    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except Exception:  # noqa: BLE001 - unknown name: loading reports it, with suggestions
        return None
    if cfg is None or not getattr(cfg, "hf_hub_id", None):
        return None
    named = getattr(cfg, "hf_hub_filename", None)
    return cfg.hf_hub_id, [named] if named else ["model.safetensors", "pytorch_model.bin"]


def hub_cached(repo: str, files: list[str]) -> bool:
    """Whether one of ``files`` of ``repo`` (``id[@revision]``) is in the local hub cache."""
    from huggingface_hub import try_to_load_from_cache

    repo_id, _, revision = repo.partition("@")
    return any(isinstance(try_to_load_from_cache(repo_id, f, revision=revision or None), str) for f in files)



def url_file(name: str) -> str | None:
    """The download address of a timm model's pretrained weights that are not on the Hugging Face hub (19 of
    timm 1.0's tags, e.g. gcvit_*.in1k); None for hub weights and unknown names."""
    import timm.models

    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except Exception:  # noqa: BLE001 - unknown name: loading reports it, with suggestions
        return None
    if cfg is None or getattr(cfg, "hf_hub_id", None):
        return None
    url = getattr(cfg, "url", None)
    return url if isinstance(url, str) and url else None


def url_cached(url: str) -> bool:
    """Whether torch's hub cache holds the file of ``url`` (where timm's ``load_state_dict_from_url`` keeps it)."""
    import torch.hub
    from urllib.parse import urlparse

    return (Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(url).path)).is_file()
