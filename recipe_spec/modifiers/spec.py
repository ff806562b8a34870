"""What a modifier *is*, declared once: :class:`ModifierSpec` and its parts.

Every fact about a modifier lives in its declaration (one module per family in this package):

- its arguments (:class:`Arg`), from which its JSON Schema is generated
  (:mod:`recipe_spec.modifiers.schema`; ``schemas/modifiers/*.schema.json`` are that output);
- what it does to the schedule: the kind of track it compiles to (``schedule``, a name in
  :data:`recipe_spec.schedule.tracks.TRACKS`) and the event targets that track emits
  (``emits``);
- its validation rules beyond the schema (``rules``);
- how reports name and draw it (:class:`Look`);
- which backend capabilities running it needs (``needs``): a backend runs a modifier exactly
  when it declares every one of them (:mod:`recipe_spec.backend_api`), so no backend can
  claim a modifier it does not run.

Capabilities (the words a backend declares; each is a promise about what it really does):

===================  ============================================================================
``masks``            hold bool masks on parameters and enforce them on every step
``scores:magnitude`` rank weights by ``|w|`` for a ``sparsity`` event (every mask type)
``scores:mfac``      rank and update weights by the M-FAC inverse-Fisher (WoodFisher)
``scores:obs``       rank and update weights by the OBS inverse-Fisher (oBERT)
``gradients``        see the masked gradients before each optimizer step
``lr``               set the learning rate of (some) param groups
``weight_decay``     set the weight decay of (some) param groups
``trainable``        freeze and unfreeze parameters
``layers``           remove and restore whole layers
``quantization``     fake-quantize (QAT) with observer and BN-statistics switches
``loss``             adjust the training loss (distillation)
``teacher``          run a teacher model beside the student
``acdc``             alternate compressed and dense phases (AC/DC), optimizer state reset
``oneshot``          host the one-shot calibration pipeline (:mod:`recipe_spec.oneshot`):
                     observe layer inputs, cache and re-run one block at a time, write weights
``scores:sparsegpt`` SparseGPT: prune and update weights from each layer's input Hessian
``scores:wanda``     Wanda: prune by ``|w|`` times each input column's activation norm
``scores:gptq``      GPTQ: quantize weights with error feedback from each layer's input Hessian
``oneshot:quantize`` record quantized weights and activation qparams on the model's layers
                     (compressed-tensors' names) and save them in the compressed-tensors format
``transform:smoothquant``
                     SmoothQuant: observe a layer's output range per channel and move it into
                     the next layers' weights (:mod:`recipe_spec.oneshot.shared.smoothing`)
``transform:awq``    AWQ: record a module's calls and run it again with trial weights to search
                     the scales of the layers it holds
``transform:rotations``
                     QuIP, SpinQuant: rotations fused into the weights (norms fused and
                     embeddings centred first), built by compressed-tensors
``transform:online-rotations``
                     a rotation of the activations while the model runs (QuIP's inputs and
                     outputs, SpinQuant's R4): a layer that applies it, saved as a transform
``checkpoint:huggingface``
                     load a Hugging Face checkpoint folder as a model (``load_checkpoint``;
                     ``recipe-spec oneshot --model DIR``) and build an architecture on the meta
                     device (``module_classes``, for ``lint``)
``integration:transformers`` / ``integration:lightning``
                     run a recipe inside that trainer's own loop (``integration(name)``: the
                     module holding ``RecipeCallback``; :mod:`recipe_spec.integrations`)
===================  ============================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..recipe.findings import Finding
    from ..recipe.model import Modifier

__all__ = ["Arg", "Look", "ModifierSpec", "CAPABILITIES", "EVENT_TARGETS"]

#: Every capability a modifier may need (see the module docstring).
CAPABILITIES = frozenset({
    "masks", "scores:magnitude", "scores:mfac", "scores:obs", "scores:movement", "gradients",
    "lr", "weight_decay", "trainable", "layers", "quantization", "loss", "teacher", "acdc",
    "oneshot", "scores:sparsegpt", "scores:wanda", "checkpoint:huggingface", "scores:gptq",
    "oneshot:quantize", "transform:smoothquant", "transform:awq", "transform:rotations",
    "transform:online-rotations", "prune:experts", "quantize:autoround", "integration:transformers",
    "integration:lightning",
})

#: Every event target a schedule track may emit; a runtime handles target ``t`` in ``_on_t``.
EVENT_TARGETS = frozenset({
    "sparsity", "masks", "lr", "weight_decay", "trainable", "layers", "quantization",
    "observers", "bn_stats", "distillation", "momentum",
})


#: What :func:`recipe_spec.oneshot` does with an argument (:attr:`Arg.oneshot`): ``runs``: read
#: and honoured (absent: its schema's ``default``); ``inert``: accepted, with no effect on the
#: result (where a layer is solved, a deprecated switch); ``default``: honoured only at its
#: ``default`` (another value is refused, located).
ONESHOT_USES = ("runs", "inert", "default")


@dataclass(frozen=True)
class Arg:
    """One argument of a modifier.

    ``schema`` is the argument's JSON-Schema fragment exactly as it appears under the
    modifier schema's ``properties`` (description first). ``needs``: capabilities a backend
    must have to honour the argument when a recipe gives it a value other than its default
    (a backend without them refuses the recipe rather than ignore the argument). ``tools``:
    the tool versions in which the argument exists, e.g. ``{"sparseml": "<1.6"}`` (empty: all
    versions of every tool that has the modifier). ``names``: what the argument's strings name
    in the model, for lint: ``"layers"`` (layer names) or ``"layers_or_types"`` (layer names or
    layer class names); None for anything else (parameter selectors are ``params``).
    ``oneshot``: for a stage/group modifier :func:`recipe_spec.oneshot` runs, what the run does
    with the argument (:data:`ONESHOT_USES`); ``""``: it refuses the argument (located B001).
    """

    name: str
    schema: Mapping[str, Any]
    needs: frozenset[str] = frozenset()
    tools: Mapping[str, str] = field(default_factory=dict)
    names: str | None = None
    oneshot: str = ""

    @property
    def description(self) -> str:
        return str(self.schema.get("description", ""))

    @property
    def deprecated(self) -> bool:
        return bool(self.schema.get("deprecated", False))

    @property
    def default(self) -> Any:
        return self.schema.get("default")


@dataclass(frozen=True)
class Look:
    """How schedule reports name and draw a modifier.

    ``label``: the short name on plots and markers (``"GMP"``); ``phase``: when set, the
    modifier is drawn as a shaded span with this caption while it runs; ``colour``: a
    Matplotlib colour for that span.
    """

    label: str
    phase: str | None = None
    colour: str | None = None


@dataclass(frozen=True)
class ModifierSpec:
    """The one declaration of a modifier (see the module docstring for each part).

    ``prunes``: it decides which weights are zero (gradual, constant and AC/DC pruning; not
    layer removal), so the pruning rules (E005, P rules) apply to its ``params``.
    ``scores``: for modifiers that emit ``sparsity`` events, how weights are ranked
    (``"magnitude"``, ``"mfac"``, ``"obs"``, ``"movement"``). ``global_sparsity``: ranking
    across all selected parameters by default. ``runtime``: False for modifiers that are only
    validated (one-shot modifiers of other dialects); they compile to no track and need
    nothing.
    """

    name: str
    description: str
    category: str
    args: tuple[Arg, ...]
    example: Mapping[str, Any]
    look: Look
    schedule: str | None = None
    emits: frozenset[str] = frozenset()
    needs: frozenset[str] = frozenset()
    schema_extra: Mapping[str, Any] = field(default_factory=dict)
    prunes: bool = False
    scores: str | None = None
    global_sparsity: bool = False
    runtime: bool = True
    rules: tuple[Callable[[Modifier], Iterable[Finding]], ...] = ()

    def arg(self, name: str) -> Arg | None:
        """The argument called ``name``, or None."""
        for a in self.args:
            if a.name == name:
                return a
        return None

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)
