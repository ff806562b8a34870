"""The calibration host: what a backend supplies to the one-shot pipeline.

The pipeline (:mod:`.pipeline`) decides everything: which modules are compressed, in which
order, which samples are run through which block, when statistics are gathered and freed.
A backend supplies the model operations behind this protocol (PyTorch:
``recipe_spec_torch.oneshot.TorchCalibrationHost``): listing modules, finding the repeated
block, running the model or one block with observers on some modules, reading and writing a
weight, recording a quantized one, and the array operations of :class:`recipe_spec.pruning.second_order.ops.FisherOps`.

Arrays, batches and cached block inputs are opaque to the core: it hands back what the host
gave it.

Two optional methods let the calibration data come in the model's own forms
(:mod:`.calibration_inputs`): ``input_keys()`` (``{model input name: sample key}``, e.g.
``{"token_ids": "input_ids"}``) and ``preprocess(texts)`` (text as samples, None without a
tokeniser); the Keras host has both.

A host with a capability beyond these supplies its methods: ``prune:experts`` (REAP,
:mod:`.reap.run`): ``expert_layers()``, a ``routes=`` observer mapping on ``run_block`` and
``run_model``, ``prune_experts(layer, kept)``; ``quantize:autoround`` (:mod:`.autoround`):
``check_tuning()`` and ``tune_block(block, calls, names, schemes, default, settings, carry)``;
``transform:rotations``: ``check_rotations`` and ``apply_rotations``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["ModuleInfo", "Observer", "CallRecorder", "CalibrationHost", "StopForward", "feed_until", "inside",
           "outermost", "ObservedCalls", "observed_call"]

#: Called with a module's input as a 2-D float32 array ``[tokens, in_features]`` and the
#: number of sequences (batch rows) those tokens came from.
Observer = Callable[[Any, int], None]
#: Called with one call of a module (its arguments, opaque to the core), to run it again later
#: with :meth:`CalibrationHost.run_module` (AWQ).
CallRecorder = Callable[[Any], None]


@dataclass(frozen=True)
class ModuleInfo:
    """One module of the model as the pipeline sees it.

    ``classes``: the class names of its type and bases (``("Linear", "Module")``);
    ``prunable``: a layer whose weight the one-shot modifiers compress (a ``Linear``);
    ``weight_shape``: its weight's canonical shape ``(out, in)``, () when it has none.
    """

    name: str
    classes: tuple[str, ...]
    prunable: bool
    weight_shape: tuple[int, ...] = ()


class CalibrationHost(Protocol):
    """A model held for one-shot compression (see the module docstring)."""

    #: Array operations (:class:`~recipe_spec.pruning.second_order.ops.FisherOps`).
    ops: Any
    #: Whether each module's Hessian factorisation may be made on a second thread while the
    #: module before it is solved (the pipeline's ``_in_order``): where ``ops``' results do not
    #: depend on the thread that computes them and a core is otherwise idle during the solves.
    solves_ahead: bool

    def modules(self) -> Sequence[ModuleInfo]:
        """Every module in ``named_modules`` order (the model itself has the name ``""``)."""

    def repeated_blocks(self, sequential_targets: Sequence[str] | None) -> list[str]:
        """The names of the blocks the sequential pipeline runs one after another: the modules
        an entry of ``sequential_targets`` names (its class, its name, or a ``re:`` pattern
        matching its name: :func:`~.matching.matches` with the module's own class), or by
        default the model's repeated block (a ModuleList of identical layers, e.g.
        ``LlamaDecoderLayer``); [] when none is found."""

    def lengths(self, samples: Sequence[Mapping[str, Any]]) -> list[int]:
        """The token count of each sample (its ``input_ids``)."""

    def order_longest_first(self, lengths: Sequence[int]) -> list[int]:
        """Indices of ``lengths`` longest first, as the framework's descending argsort gives
        them (ties included)."""

    def collate(self, samples: Sequence[Mapping[str, Any]], length: int) -> Any:
        """One batch: the samples' sequences cut to ``length`` tokens and stacked."""

    def capture(self, block: str, batches: Sequence[Any], offload: bool) -> list[Any]:
        """Run the model on each batch up to ``block`` and return, per batch, the block's
        inputs (positional and keyword arguments). ``offload``: keep them in host memory."""

    def run_block(self, block: str, inputs: Sequence[Any], observers: Mapping[str, Observer],
                  propagate: bool, outputs: Mapping[str, Observer] | None = None,
                  calls: Mapping[str, CallRecorder] | None = None, offload_calls: bool = False) -> list[Any]:
        """Run ``block`` on each cached input with ``observers`` on the named modules; with
        ``propagate``, return the inputs of the next block (its outputs in place of the
        hidden states), else [].

        For the smoothing transforms (capabilities ``transform:*``): ``outputs`` observe the
        named modules' outputs (the first element of a tuple) as ``[tokens, channels]``
        float32; ``calls`` record each call of the named modules (kept in host memory with
        ``offload_calls``)."""

    def run_model(self, batches: Sequence[Any], observers: Mapping[str, Observer],
                  outputs: Mapping[str, Observer] | None = None,
                  calls: Mapping[str, CallRecorder] | None = None, offload_calls: bool = False) -> None:
        """Run the whole model on each batch with ``observers`` on the named modules
        (``outputs``, ``calls``: as :meth:`run_block`)."""

    def run_module(self, name: str, calls: Sequence[Any]) -> list[Any]:
        """Run module ``name`` on each recorded call (``calls`` of :meth:`run_block`) with its
        current weights; each call's output (the first element of a tuple) as float32, in
        the module's output shape (capabilities ``transform:awq``)."""

    def weight(self, name: str) -> Any:
        """The weight of module ``name`` as a float32 ``(out, in)`` array (a copy)."""

    def observed(self, name: str) -> Any:
        """The weight of Linear module ``name`` as the model holds it, ``(out, in)``, in its own
        dtype where the backend's arrays have it (a copy): what a quantization observer reads,
        as compressed-tensors computes a bfloat16 checkpoint's scales in bfloat16."""

    def set_weight(self, name: str, value: Any) -> None:
        """Write ``value`` (``(out, in)``) into module ``name``'s weight, in its own dtype."""

    def bias(self, name: str) -> Any | None:
        """The bias of module ``name`` as a float32 vector (a copy), None when it has none
        (capabilities ``transform:*``; a norm's weight is read with :meth:`weight`)."""

    def set_bias(self, name: str, value: Any) -> None:
        """Write ``value`` into module ``name``'s bias, in its own dtype."""

    def attach_quantization(self, config: Mapping[str, Any]) -> None:
        """Mark the modules a resolved compressed-tensors ``QuantizationConfig`` (``config``, as
        :func:`recipe_spec.quantization.scheme.resolve_config` gives it) quantizes, as
        compressed-tensors' ``apply_quantization_config`` does: each gets its scheme and its
        (not yet filled) quantization parameters. Called for every quantization modifier before
        any weight changes; quantization stays off while the pipeline runs (activations are
        never fake-quantized during calibration). A host that cannot quantize, or has no
        quantized layer for a scheme, raises ``NotImplementedError`` saying so and naming the
        layer (``oneshot`` reports it located at the modifier's scheme)."""

    def set_quantized(self, name: str, weight: Any, qparams: Mapping[str, Any]) -> None:
        """Record module ``name`` as quantized: ``weight`` (``(out, in)``, the dequantized
        values on the grid; None keeps the float weight, as round-to-nearest does) and its
        quantization parameters under compressed-tensors' names (``weight_scale``,
        ``weight_zero_point``, ``input_scale``, ``input_zero_point``; ``weight_g_idx`` where
        given), in compressed-tensors' shapes, as float arrays; the host stores each in the
        parameter's own dtype (int8 or FP8 zero points)."""

    # Optional: ``save_problem(quantized) -> str | None``: why ``save`` could not write the
    # model once it is quantized, or None. With ``output_dir``, oneshot asks it before any
    # ``attach_quantization`` (PyTorch: compressed-tensors needs a Hugging Face model) and again
    # after each (Keras: weight-only int8 in a keras-hub model), and refuses the run, located,
    # before any weight changes. A host without it saves whatever it holds.

    def save(self, output_dir: str, recipe_text: str) -> list[str]:
        """Save the model (``save_pretrained`` when it has one; a quantized model compressed
        by compressed-tensors, its ``quantization_config`` in ``config.json``) and
        ``recipe.yaml`` under ``output_dir``; the paths written. ``oneshot`` gives a new empty
        folder, which takes the user's folder's name once everything is written
        (:func:`recipe_spec.atomic.writing`): a host writes plainly, and an error it
        raises leaves nothing behind."""


class StopForward(Exception):
    """Raised by a host's capture hook once a block's inputs are taken: the rest of the
    model need not run (:func:`feed_until`)."""


class ObservedCalls:
    """The observed layers' calls in one block's calibration pass, for a host that leaves each
    call as soon as nothing more is needed: the pass only observes the layers' inputs, so once
    each has had its input the rest of the block (the last layer's own product, what follows
    it) need not run. The first call runs whole and tells the order of the layers; when each
    was called once, a later call stops (:class:`StopForward`, raised by :meth:`called`) right
    after the last of them has had its input. A call whose layers are not all called once
    (experts a router skips, a layer called twice) runs whole, and from then on every call does.
    The host calls :meth:`start` before each call, :meth:`called` after each observed input,
    :meth:`finish` after a call that ran whole.

    >>> seen = ObservedCalls(["a", "b"])
    >>> seen.start(); seen.called("a"); seen.called("b"); seen.finish()
    >>> seen.start(); seen.called("a")
    >>> try:
    ...     seen.called("b")
    ... except StopForward:
    ...     print("stopped after b")
    stopped after b
    """

    @staticmethod
    def apply(propagate: bool, observers: Any, outputs: Any, calls: Any) -> bool:
        """Whether a block pass may stop its calls early: it observes layers' inputs only (no
        propagation, no outputs observed, no calls recorded)."""
        return not propagate and bool(observers) and not outputs and not calls

    def __init__(self, names: Sequence[str]) -> None:
        self._names = set(names)
        self._counts: dict[str, int] = {}
        self._last: str | None = None
        self._first = True
        self._safe = False

    def start(self) -> None:
        """A call begins."""
        self._counts = {}

    def called(self, name: str) -> None:
        """Layer ``name`` had its input; raises :class:`StopForward` when the call may stop."""
        self._counts[name] = self._counts.get(name, 0) + 1
        if self._safe and name == self._last and len(self._counts) == len(self._names) \
                and all(c == 1 for c in self._counts.values()):
            raise StopForward
        if self._first:
            self._last = name

    def finish(self) -> None:
        """A call ran whole: the first tells whether the later ones may stop."""
        whole = set(self._counts) == self._names and all(c == 1 for c in self._counts.values())
        self._safe = self._first and whole
        self._first = False


def observed_call(seen: ObservedCalls | None, fn: Callable[..., Any], *args: Any,
                  **kwargs: Any) -> tuple[bool, Any]:
    """``fn(*args, **kwargs)`` as one call of ``seen``'s pass (None: plainly): ``(True, its
    result)``, or ``(False, None)`` when ``seen`` stopped it."""
    if seen is None:
        return True, fn(*args, **kwargs)
    seen.start()
    try:
        result = fn(*args, **kwargs)
    except StopForward:
        return False, None
    seen.finish()
    return True, result


def feed_until(forward: Callable[[Any], Any], batches: Sequence[Any], block: str) -> None:
    """Run ``forward`` on each batch until the capture hook of ``block`` stops it with
    :class:`StopForward`; a batch the model runs through without calling ``block`` is an
    error naming it."""
    for batch in batches:
        try:
            forward(batch)
        except StopForward:
            continue
        raise RuntimeError(f"the model ran without calling {block!r}: choose sequential_targets "
                           "among the blocks its forward pass runs")


def inside(name: str, root: str) -> bool:
    """Whether module ``name`` is ``root`` or one of its descendants (``""``: the whole model)."""
    return root == "" or name == root or name.startswith(root + ".")


def outermost(blocks: Sequence[str]) -> list[str]:
    """``blocks`` without those nested in an earlier one."""
    out: list[str] = []
    for b in blocks:
        if not any(inside(b, o) for o in out):
            out.append(b)
    return out
