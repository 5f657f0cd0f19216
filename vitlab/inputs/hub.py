"""The Hugging Face hub, seen from a machine that may be offline: reachability (checked once), offline mode set
before timm tries to download, and which pretrained weights are already in the local cache."""

from __future__ import annotations

import contextlib
import os



def set_offline_if_needed() -> None:
    """Fail in a tenth of a second rather than after ~48 s of retries when the hub cannot be reached.

    ``HF_HUB_OFFLINE`` is honoured when the user set it; ``VITLAB_ONLINE=1`` forces online mode.
    """
    if os.environ.get("VITLAB_ONLINE") == "1":
        return
    if os.environ.get("HF_HUB_OFFLINE") in ("1", "true", "True") or not hub_reachable():
        with contextlib.suppress(ImportError):  # timm installs huggingface_hub; without it there is no hub
            import huggingface_hub.constants as hc

            hc.HF_HUB_OFFLINE = True


_REACHABLE: bool | None = None


def hub_reachable(timeout: float = 1.5) -> bool:
    """Whether huggingface.co answers on port 443 (checked once per process)."""
    global _REACHABLE
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

