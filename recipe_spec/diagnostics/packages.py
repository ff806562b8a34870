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
import re
import sys
from collections.abc import Sequence

__all__ = ["EXTRAS", "MODULE_EXTRA", "install_command", "installed", "MissingPackageError", "require"]

# The two tables are message text, written as text: the core names no backend in its code
# (tests/test_backend_contract.py); the backends and the commands pass the names in.
#
# Each extra, its requirements (pyproject.toml's, with the extras it includes written out,
# except keras-hub's Keras: keras-hub is installed with --no-deps beside it) and its pip option;
# "!cpu" marks a distribution whose default build on Linux is the CUDA one (several GB).
_EXTRAS = """
torch         torch>=2.1!cpu
keras         keras>=3.0 tensorflow-cpu>=2.16 threadpoolctl>=3.1
keras-jax     keras>=3.0 tensorflow-cpu>=2.16 threadpoolctl>=3.1 jax[cpu]>=0.4.30
keras-hub     keras-hub>=0.32 sentencepiece>=0.2                                           --no-deps
plot          matplotlib>=3.7
transformers  transformers>=4.40 accelerate>=0.26
oneshot       torch>=2.1!cpu transformers>=4.40 accelerate>=0.26 compressed-tensors>=0.19,<0.20 datasets>=2.19
lightning     lightning>=2.0
"""
# A module a message is about: its distribution and the extra that installs it (- none).
_MODULES = """
torch               torch               torch
keras               keras               keras
tensorflow          tensorflow-cpu      keras
jax                 jax                 keras-jax
keras_hub           keras-hub           keras-hub
matplotlib          matplotlib          plot
transformers        transformers        transformers
compressed_tensors  compressed-tensors  oneshot
lightning           lightning           lightning
datasets            datasets            oneshot
"""


_CPU_MARK = "!cpu"


def _extras() -> tuple[dict[str, tuple[tuple[str, ...], str]], set[str]]:
    out, cuda = {}, set()
    for line in _EXTRAS.strip().splitlines():
        name, *words = line.split()
        options = " ".join(w for w in words if w.startswith("--"))
        requirements = tuple(w.removesuffix(_CPU_MARK) for w in words if not w.startswith("--"))
        cuda |= {_name(w) for w in words if w.endswith(_CPU_MARK)}
        out[name] = (requirements, options)
    return out, cuda


def _name(requirement: str) -> str:
    """The distribution a requirement names (``jax[cpu]>=0.4.30`` -> ``jax``)."""
    return re.split(r"[<>=!\[ ;]", requirement, maxsplit=1)[0]


#: Each extra -> (its requirements, the ``pip`` options it needs).
EXTRAS: dict[str, tuple[tuple[str, ...], str]]
EXTRAS, _CUDA_DEFAULT = _extras()
#: A module -> (its distribution's name, the extra that installs it, "" for none).
MODULE_EXTRA: dict[str, tuple[str, str]] = {
    module: (distribution, "" if extra == "-" else extra)
    for module, distribution, extra in (line.split() for line in _MODULES.strip().splitlines())}
#: torch's CPU build (pip's default torch on Linux is the CUDA one, several GB).
TORCH_CPU = "--index-url https://download.pytorch.org/whl/cpu"


def _format(requirements: Sequence[str], options: str, extra: str) -> str:
    words = ["pip install", *([options] if options else []), *(f'"{r}"' for r in requirements)]
    cuda = [_name(r) for r in requirements if _name(r) in _CUDA_DEFAULT]
    if cuda:
        words.append(f"(a machine without a GPU: its CPU build first, pip install {cuda[0]} {TORCH_CPU})")
    clone = f'pip install -c constraints.txt -e ".[{extra}]"'
    if options:
        clone = f"pip install -c constraints.txt {options} {' '.join(_name(r) for r in requirements)}"
    return f"{' '.join(words)} (from a clone of recipe-spec: {clone})"


def install_command(extra: str) -> str:
    """The command that installs extra ``extra``'s packages, then the way from a clone."""
    if extra not in EXTRAS:
        raise KeyError(f"unknown extra {extra!r}; the extras are {', '.join(EXTRAS)}")
    requirements, options = EXTRAS[extra]
    return _format(requirements, options, extra)


def _command(module: str) -> str:
    """The command that installs ``module``'s distribution (the version its extra asks for)."""
    distribution, extra = MODULE_EXTRA.get(module, (module.replace("_", "-"), ""))
    if not extra:
        return f"pip install {distribution}"
    requirements, options = EXTRAS[extra]
    if not options:  # an extra installed with its requirements: the module's own version
        requirements = tuple(r for r in requirements if _name(r) == distribution) or (distribution,)
    return _format(requirements, options, extra)


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
