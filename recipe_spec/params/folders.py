"""What to tell a person whose ``--model`` is not a Hugging Face checkpoint folder (``recipe-spec
oneshot`` and ``lint`` take one): a file inside one names its folder; a hub id (``owner/name``)
is not downloaded by recipe-spec, and the message says how to download it.

>>> not_a_checkpoint_folder("meta-llama/Llama-3.2-1B")  # doctest: +ELLIPSIS
'no such folder (give a Hugging Face checkpoint folder: ...) and pass --model Llama-3.2-1B'
"""

from __future__ import annotations

import os
import re

__all__ = ["hub_hint", "not_a_checkpoint_folder"]

#: What a Hugging Face hub id looks like.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_hint(given: str) -> str:
    """For a ``--model`` that looks like a hub id and names no path on disk: how to download it,
    a sentence to add to a message ('' otherwise)."""
    if not _HUB_ID.match(given) or os.path.exists(os.path.dirname(given)):
        return ""
    local = given.rsplit("/", 1)[-1]
    return (f". If {given} is a Hugging Face hub id: recipe-spec does not download models; download it "
            f"first (huggingface-cli download {given} --local-dir {local}; `hf download` in newer "
            f"huggingface_hub) and pass --model {local}")


def not_a_checkpoint_folder(given: str) -> str:
    """Why ``given`` (not a folder) is not what ``--model`` takes, and what to pass instead."""
    if os.path.isfile(given):
        folder = os.path.dirname(given) or "."
        if os.path.isfile(os.path.join(folder, "config.json")):
            return (f"this is a file; give the Hugging Face checkpoint folder that holds it and its "
                    f"config.json (--model {folder})")
        return "this is a file; give a Hugging Face checkpoint folder (config.json beside *.safetensors)"
    return f"no such folder (give a Hugging Face checkpoint folder: config.json beside *.safetensors){hub_hint(given)}"
