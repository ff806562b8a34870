"""What every one-shot algorithm is: :class:`Algorithm`, the interface each folder of
:mod:`recipe_spec.oneshot` (``sparsegpt/``, ``wanda/``, ``magnitude/``, ``gptq/``, ``rtn/``,
``smoothquant/``, ``awq/``, ``reap/``, ...) implements once, and :class:`OneShotModifier`, one recipe entry as
an algorithm runs it. The registry (:mod:`.algorithms`) keys the algorithms by modifier name;
the pipeline, the estimate and the checks dispatch through it, never by comparing names.

An algorithm says:

- ``modifiers``: the recipe modifiers it runs (``SparseGPTModifier``);
- :meth:`~Algorithm.read`: the settings of one recipe entry (the arguments as the catalogue
  declares them, :mod:`recipe_spec.oneshot.settings`), or located errors;
- :meth:`~Algorithm.needs_data`: whether it calibrates on data;
- :meth:`~Algorithm.new_stats` / :meth:`~Algorithm.solve`: the statistic it gathers from one
  module's inputs, and the solve that writes the module's new weight;
- :meth:`~Algorithm.stats_bytes` / :meth:`~Algorithm.flops` / :meth:`~Algorithm.solve_parts`:
  its memory and work per module, for ``lint``'s estimate.

A smoothing algorithm (``role == "transform"``) runs its own pass over mappings
(:mod:`.shared.smoothing`) instead of per-module solves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..recipe.model import Modifier

__all__ = ["Algorithm", "OneShotModifier", "LayerReport", "Prepared", "Solved", "register", "registered", "algorithm_named"]

#: Every algorithm by name, filled by :func:`register` as each folder is imported (the
#: folders import this module, never the other way round); :mod:`.algorithms` imports them all.
_BY_NAME: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` to the registry (each folder calls it once, for its instance)."""
    if algorithm.name in _BY_NAME:
        raise RuntimeError(f"one-shot algorithm {algorithm.name!r} is registered twice")
    _BY_NAME[algorithm.name] = algorithm
    return algorithm


def registered() -> dict[str, Algorithm]:
    """Every registered algorithm by name, in the order registered."""
    return dict(_BY_NAME)


def algorithm_named(name: str) -> Algorithm:
    """The registered algorithm called ``name`` (a KeyError names the known ones)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no one-shot algorithm {name!r}; known: {', '.join(sorted(_BY_NAME))}") from None


@dataclass(frozen=True)
class OneShotModifier:
    """One modifier as the pipeline runs it.

    ``kind``: the name of the algorithm that runs it (:data:`.algorithms.ALGORITHMS`);
    ``entry``: the recipe entry (for located messages). ``prune_n``/``prune_m``: prune N of
    every M weights (llm-compressor's ``mask_structure``; 0 = unstructured); ``mask_type``: the
    magnitude mask type (:func:`recipe_spec.masks.algorithms.compute_mask`). ``sparsities``: a
    ``sparsity`` list, one value per target match; ``owl``: ``(owl_m, owl_lmbda)`` of the OWL
    profile; ``levels``: the sparsity of each module that has its own, filled in by the
    pipeline (:func:`.owl.profile.layer_sparsities`)."""

    type: str
    kind: str
    entry: Modifier
    targets: tuple[str, ...]
    ignore: tuple[str, ...] = ()
    sparsity: float = 0.0
    prune_n: int = 0
    prune_m: int = 0
    mask_type: str = "unstructured"
    block_size: int = 128
    dampening_frac: float = 0.01
    preserve_mask: bool = False
    sparsities: tuple[float, ...] = ()
    owl: tuple[int, float] | None = None
    levels: Mapping[str, float] = field(default_factory=dict)
    #: A smoothing modifier's plan (:class:`~.shared.smoothing_args.SmoothingPlan`); None otherwise.
    transform: Any = None
    #: A quantization modifier's plan (:class:`~.shared.quant_plan.QuantPlan`); None otherwise.
    quant: Any = None
    #: A rotation modifier's work (:class:`~.shared.rotation.Rotation`: QuIP, SpinQuant); None otherwise.
    rotation: Any = None
    #: An expert-pruning modifier's work (:class:`~.reap.ExpertPruning`: REAP); None otherwise.
    experts: Any = None
    #: A block-tuning quantizer's settings (:class:`~.autoround.Tuning`: AutoRound); None otherwise.
    tuning: Any = None
    #: What the run does otherwise than the recipe's words say (AWQ's combined form, split)
    note: str = ""
    #: NVFP4's global weight scale of each module compressed so far, shared by fused layers
    #: (:func:`~.shared.global_scales.fused_global_scale` fills it during the run)
    global_scales: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_data(self) -> bool:
        """Whether it needs calibration data (its algorithm says: SparseGPT, Wanda, GPTQ,
        SmoothQuant, AWQ, and round to nearest with static input activations)."""
        return algorithm_named(self.kind).needs_data(self)

    @property
    def pipeline(self) -> str:
        """The pipeline ``independent`` gives it: ``sequential`` with data, else ``datafree``."""
        return "sequential" if self.needs_data else "datafree"

    @property
    def where(self) -> str:
        """``file:line`` of its recipe entry."""
        return f"{self.entry.file or '<string>'}:{self.entry.span.line}"


@dataclass(frozen=True)
class LayerReport:
    """What one modifier did to one module: the zero fraction reached, the solver's loss
    (SparseGPT, GPTQ), the number of calibration sequences seen, and a note when the solve
    fell back (e.g. a Hessian that is not positive definite)."""

    module: str
    modifier: str
    sparsity: float
    loss: float | None = None
    samples: int = 0
    note: str = ""
    #: A quantized module's grid, e.g. ``W int4 group 32 asym, A int8 static`` ("" when not quantized).
    grid: str = ""


#: What :meth:`Algorithm.prepare` made ahead for one module, read by calling it.
Prepared = Callable[[], Any]


@dataclass(frozen=True)
class Solved:
    """What a solve did to one module: its weight after (written to the host by the solve),
    the solver's loss, a note when it fell back, and a quantized module's grid in words."""

    weight: Any
    loss: float | None = None
    note: str = ""
    grid: str = ""


class Algorithm:
    """One one-shot algorithm (see the module docstring). Subclasses set the class
    attributes and override what differs from "prune from the weight alone"."""

    #: The registry key, also :attr:`OneShotModifier.kind`.
    name: ClassVar[str] = ""
    #: The recipe modifiers it runs.
    modifiers: ClassVar[tuple[str, ...]] = ()
    #: ``prune``, ``quantize``, ``transform`` (a smoothing pass over mappings, a rotation) or
    #: ``experts`` (whole experts removed: :mod:`.reap`).
    role: ClassVar[str] = "prune"
    #: Targets may also be parameter selectors and ``__ALL_PRUNABLE__`` (the training-time
    #: modifiers' forms, read one-shot).
    takes_tokens: ClassVar[bool] = False
    #: The statistic one module keeps while its block is calibrated, in words, and its size
    #: rule (for the estimate); ``""``: none.
    statistic: ClassVar[tuple[str, str]] = ("", "")
    #: ``oneshot(preserve_masks=True)`` makes it keep the zeros there are (GPTQ).
    keeps_masks: ClassVar[bool] = False
    #: What a transform does, in words (for the estimate).
    describe: ClassVar[str] = ""

    def read(self, recipe: Any, m: Modifier, errors: list[Any], version: Any) -> list[OneShotModifier]:
        """The entries ``m`` runs as (most algorithms: one; [] with located errors appended to
        ``errors``). ``version``: the llm-compressor release whose reading the run follows (a
        tuple such as ``(0, 10)``; None: the newest)."""
        raise NotImplementedError

    def needs_data(self, mod: OneShotModifier) -> bool:
        """Whether ``mod`` calibrates on data."""
        return False

    def argument_needs(self, mod: OneShotModifier) -> list[tuple[str, str, str, str]]:
        """Capabilities ``mod`` needs beyond its modifier's declared ``oneshot_needs`` for the
        values its arguments have: ``(capability, argument, what needs it, what to write
        instead)``; a backend without one refuses ``mod`` located at that argument (``validate
        --backend`` and ``oneshot`` alike: :func:`~.modifiers.resolve`)."""
        return []

    def new_stats(self, ops: Any, mod: OneShotModifier, group: Any, columns: int, like: Any) -> Any:
        """A fresh accumulator of one module's inputs (``add(x, sequences)``), None when it
        gathers none. ``group``: the module's quantization config group (quantizers)."""
        return None

    def prepare(self, solver: Any, mod: OneShotModifier, stats: Any, group: Any) -> Any:
        """The part of one module's solve that reads its statistic alone (SparseGPT's and
        GPTQ's Hessian factor: :func:`~.shared.obs.factor_hessian`), or None when there is
        none; made on ``solver`` (a :class:`~.shared.solver.Solver`: the statistic goes over
        with its ``put``). A host that asks for it (``solves_ahead``) has it made on a second thread while
        the module before is solved; :meth:`solve` then gets it as ``prepared``."""
        return None

    def solve(self, host: Any, mod: OneShotModifier, name: str, stats: Any, group: Any,
              prepared: Prepared | None = None) -> Solved:
        """Compress module ``name`` of ``host`` (write its weight back) from ``stats``;
        ``prepared``: what :meth:`prepare` made ahead, read by calling it (it raises what
        :meth:`prepare` raised), None when nothing was."""
        raise NotImplementedError

    def stats_bytes(self, columns: int) -> int:
        """Bytes of one module's statistic (``columns``: its input features)."""
        return 0

    def grid_passes(self, mod: OneShotModifier) -> int:
        """Forward passes of each mapping's balance layers a transform's search makes (AWQ:
        ``n_grid``)."""
        return 0

    def flops(self, rows: int, columns: int, tokens: int) -> tuple[float, float]:
        """``(statistics, solve)`` operations for one ``rows x columns`` module and ``tokens``
        calibration tokens."""
        return 0.0, 2.0 * rows * columns

    def solve_parts(self, rows: int, columns: int) -> tuple[float, float, int]:
        """One module's solve as the estimate times it (:mod:`.rates`): ``(factorisation
        FLOPs, other FLOPs, columns of an OBS column loop)``; by default all of
        :meth:`flops`' solve is plain arithmetic, with no factorisation and no column loop."""
        return 0.0, self.flops(rows, columns, 0)[1], 0
