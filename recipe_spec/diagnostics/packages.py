"""The optional packages recipe-spec uses, and the command that installs each: the one place a
message names it.

recipe-spec is installed from a clone (``pip install -c constraints.txt -e ".[extra]"``), so a
message never says ``pip install 'recipe-spec[extra]'``: it names the packages of the extra
themselves (the requirements of ``[project.optional-dependencies]`` in pyproject.toml, which
``tests/test_oneshot_messages.py`` compares with this table) and the extra for a clone.

>>> install_command("plot")
'pip install "matplotlib>=3.7" (from a clone of recipe-spec: pip install -c constraints.txt -e ".[plot]")'
>>> str(MissingPackageError("compressed_tensors", "quantizing on PyTorch"))  # doctest: +ELLIPSIS
'quantizing on PyTorch needs compressed-tensors, which is not installed: pip install "compressed-tensors>=0.19,<0.20" (...)'
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["EXTRAS", "MODULE_EXTRA", "install_command", "installed", "MissingPackageError", "require"]

#: Each extra's own requirements (pyproject.toml without the ``recipe-spec[...]`` it includes),
#: and the ``pip`` options it needs (keras-hub: ``--no-deps``, see pyproject.toml).
EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "torch": (("torch>=2.1",), ""),
    "keras": (("keras>=3.0", "tensorflow-cpu>=2.16"), ""),
    "keras-jax": (("jax[cpu]>=0.4.30",), ""),
    "keras-hub": (("keras-hub>=0.32", "sentencepiece>=0.2"), "--no-deps"),
    "plot": (("matplotlib>=3.7",), ""),
    "transformers": (("transformers>=4.40", "accelerate>=0.26"), ""),
    "oneshot": (("compressed-tensors>=0.19,<0.20",), ""),
    "lightning": (("lightning>=2.0",), ""),
}
#: The module a message is about -> (its distribution's name, the extra that installs it).
MODULE_EXTRA: dict[str, tuple[str, str]] = {
    "torch": ("torch", "torch"),
    "keras": ("keras", "keras"),
    "tensorflow": ("tensorflow-cpu", "keras"),
    "jax": ("jax", "keras-jax"),
    "keras_hub": ("keras-hub", "keras-hub"),
    "matplotlib": ("matplotlib", "plot"),
    "transformers": ("transformers", "transformers"),
    "compressed_tensors": ("compressed-tensors", "oneshot"),
    "lightning": ("lightning", "lightning"),
    "datasets": ("datasets", ""),
}
#: torch's CPU build (pip's default torch on Linux is the CUDA one, several GB).
TORCH_CPU = "--index-url https://download.pytorch.org/whl/cpu"


def install_command(extra: str) -> str:
    """The command that installs extra ``extra``'s packages, then the way from a clone."""
    if extra not in EXTRAS:
        raise KeyError(f"unknown extra {extra!r}; the extras are {', '.join(EXTRAS)}")
    requirements, options = EXTRAS[extra]
    words = ["pip install", *([options] if options else []), *(f'"{r}"' for r in requirements)]
    if extra == "torch":
        words.append(f"(a machine without a GPU: add {TORCH_CPU} for the CPU build)")
    clone = f'pip install -c constraints.txt -e ".[{extra}]"'
    if options:
        clone = f"pip install -c constraints.txt {options} {' '.join(requirements)}"
    return f"{' '.join(words)} (from a clone of recipe-spec: {clone})"


def _command(module: str) -> str:
    distribution, extra = MODULE_EXTRA.get(module, (module.replace("_", "-"), ""))
    return install_command(extra) if extra else f"pip install {distribution}"


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (asked without importing it; a module set to None
    in ``sys.modules`` counts as missing)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class MissingPackageError(ImportError):
    """An optional package a path needs is not installed: the message names what needs it, the
    package, and the command that installs it. ``package``: the module's name."""

    def __init__(self, module: str, needed_for: str):
        self.package = module
        self.needed_for = needed_for
        distribution = MODULE_EXTRA.get(module, (module.replace("_", "-"), ""))[0]
        super().__init__(f"{needed_for} needs {distribution}, which is not installed: {_command(module)}",
                         name=module)


def require(module: str, needed_for: str) -> None:
    """Raise :class:`MissingPackageError` when ``module`` cannot be imported (checked without
    importing it)."""
    if not installed(module):
        raise MissingPackageError(module, needed_for)
