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
