"""A decoder block's calibration and propagation calls compiled (``jax.jit`` of the block's
``stateless_call`` on JAX, ``tf.function`` on TensorFlow), for the Keras calibration host
(:mod:`.oneshot`).

Run eagerly, a block's call is thousands of single operations dispatched from Python (JAX also
compiles each distinct operation and shape once). Compiled, it is one program per input shape:
the observed layers' inputs are the program's outputs, beside the block's output when the
pass propagates it, so that the observers (which run on NumPy arrays) get them after the call;
what only leads past the last observed input (a calibration pass's last product and what
follows it) is dropped by the compiler, as :class:`~recipe_spec.oneshot.host.ObservedCalls`
stops an eager call. Layers fed one tensor (q/k/v, gate/up) give one output between them,
so that their statistics still share its products.

Used where it is the same computation: JAX and TensorFlow, observers on Linear layers' inputs
only (no recorded calls or observed outputs, which the smoothing transforms run again and
scale), no expert bank (its routed rows are data-dependent), no ``keras.distribution``. A
block whose call cannot be traced (Python control flow on values) is run eagerly from then on.
Keras on torch runs eagerly (its eager calls are already the framework's own kernels).

Programs are kept per block structure (:func:`signature`: the blocks of a decoder share
one), pass (the observed layers, whether it propagates) and call structure (ranks, dtypes, the
non-tensor arguments). JAX compiles a program once per shape, so a call with a padding mask is
padded to one of a few lengths (:func:`bucket`, :func:`padded`); TensorFlow traces its function
again with the shapes relaxed.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import numpy as np

import keras
from recipe_spec.oneshot.host import Observer

from .oneshot_calls import next_call, observe_input, on_device, wrapped

__all__ = ["compiled_backend", "signature", "CompiledBlock", "run_compiled", "shared_cores", "NotTraceable",
           "bucket", "padded"]


def compiled_backend() -> str | None:
    """The Keras backend a block call can be compiled on (``"jax"``, ``"tensorflow"``), or None."""
    name = keras.backend.backend()
    if name not in ("jax", "tensorflow"):
        return None
    try:
        if keras.distribution.distribution() is not None:
            return None
    except AttributeError:  # pragma: no cover - a Keras without keras.distribution
        pass
    return name


def _is_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) or keras.ops.is_tensor(x)


def _flatten(x: Any, leaves: list[Any]) -> Any:
    """``x`` with each array replaced by its index in ``leaves`` (a hashable skeleton)."""
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_flatten(v, leaves) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _flatten(x[k], leaves)) for k in sorted(x)))
    if _is_array(x):
        leaves.append(x)
        return ("array", len(leaves) - 1)
    return ("value", x)


def _unflatten(skeleton: Any, leaves: Sequence[Any]) -> Any:
    kind, body = skeleton
    if kind == "array":
        return leaves[body]
    if kind == "value":
        return body
    if kind == "dict":
        return {k: _unflatten(v, leaves) for k, v in body}
    items = [_unflatten(v, leaves) for v in body]
    return tuple(items) if kind == "tuple" else items


class _Capture:
    """The observed layers' inputs of one traced call: ``keys`` in order of first call, each
    mapped to the index of its (distinct) tensor."""

    def __init__(self) -> None:
        self.tensors: list[Any] = []
        self.index: dict[Any, int] = {}

    def wrapper(self, key: Any) -> Callable[[Any], Any]:
        """The ``make`` of :func:`~.oneshot_calls.wrapped` recording the input under ``key``."""
        def make(original: Any) -> Any:
            def call(inputs: Any, *args: Any, **kwargs: Any) -> Any:
                if key not in self.index:
                    at = next((i for i, t in enumerate(self.tensors) if t is inputs), None)
                    if at is None:
                        self.tensors.append(inputs)
                        at = len(self.tensors) - 1
                    self.index[key] = at
                return original(inputs, *args, **kwargs)
            return call
        return make


_PLAIN = (bool, int, float, str, type(None))


def _setting(value: Any) -> Any:
    """A comparable form of an attribute: plain values as they are, functions and classes by
    their qualified names, tuples and lists of those; None for anything else."""
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (tuple, list)):
        items = tuple(_setting(v) for v in value)
        return items if all(i is not None or v is None for i, v in zip(items, value, strict=True)) else None
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return None


def _settings(layer: Any) -> tuple[Any, ...]:
    """A layer's configuration as built: its ``get_config()`` but the name, where it gives one,
    and its own attributes (not those every Keras layer has: :func:`_keras_internals`) that are
    plain values, functions or classes (a ``Dense``'s activation, an attention's equations)."""
    config: Any = None
    try:
        config = repr(sorted((k, v) for k, v in layer.get_config().items() if k != "name"))
    except Exception:  # noqa: BLE001 - a layer whose get_config fails (keras-hub 0.32's Llama block)
        config = None
    internal = _keras_internals()
    attributes = tuple(sorted((k, _setting(v)) for k, v in vars(layer).items()
                              if k not in internal and _setting(v) is not None))
    return config, attributes


@functools.cache
def _keras_internals() -> frozenset[str]:
    """The attributes every Keras layer has (its name, path, call bookkeeping): not settings."""
    return frozenset({"name", "path", *vars(keras.layers.Layer())})


def signature(block: Any) -> Any:
    """What makes two blocks one program: the classes and settings of the block and its
    sub-layers (:func:`_settings`; names aside), and their variables (path under the block,
    shape, dtype, trainable or not) in order."""
    prefix = str(getattr(block, "path", "") or block.name)
    layers = [block, *block._flatten_layers(include_self=False, recursive=True)]

    def variables(vs: Sequence[Any]) -> tuple[Any, ...]:
        return tuple((str(v.path).removeprefix(prefix), tuple(v.shape), str(v.dtype)) for v in vs)

    return (tuple((type(layer), _settings(layer)) for layer in layers),
            variables(block.trainable_variables), variables(block.non_trainable_variables))


@contextlib.contextmanager
def _as_written() -> Any:
    """TensorFlow's graph optimizer without its arithmetic rewrites, while a program is made: they
    regroup the block's float operations (a block's inputs then differ from the eager call's in
    the last bits, and a calibration's ties fall otherwise than PyTorch's); the other passes
    stay. The setting is restored after."""
    import tensorflow as tf

    before = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"arithmetic_optimization": before.get("arithmetic_optimization", True)})


class CompiledBlock:
    """The compiled calls of the blocks of one :func:`signature` (see the module docstring),
    traced on the first of them (``template``).

    ``layers``: ``{key: sub-layer of the template}`` whose first call argument is observed;
    ``propagate``: the block's output is returned too. :meth:`__call__` runs any block of the
    signature and returns ``(output or None, {key: input as a NumPy array})``, the same array
    for keys fed the same tensor.
    """

    def __init__(self, template: Any, layers: dict[Any, Any], propagate: bool) -> None:
        self.template, self.layers, self.propagate = template, layers, propagate
        self.backend = compiled_backend()
        self._programs: dict[Any, Any] = {}
        self._traced: set[Any] = set()
        #: JAX: calls padded to a few lengths (:func:`padded`); off once an observed input or the
        #: output does not keep the tokens second (:meth:`result` then repeats the call unpadded).
        self.buckets = True
        self._index: dict[Any, int] = {}
        #: A call could not be compiled: the blocks of this signature run eagerly.
        self.refused = False

    def order(self, key: Any) -> int:
        """The index of ``key``'s input among the call's distinct inputs (after a call)."""
        return self._index.get(key, 0)

    @contextlib.contextmanager
    def _capturing(self) -> Any:
        capture = _Capture()
        with contextlib.ExitStack() as stack:
            by_layer: dict[int, list[Any]] = {}
            for key, layer in self.layers.items():
                by_layer.setdefault(id(layer), [layer]).append(key)
            for layer, *keys in by_layer.values():
                stack.enter_context(wrapped(layer, capture.wrapper(tuple(keys))))
            yield capture

    def _outputs(self, result: Any, capture: _Capture) -> tuple[Any, tuple[Any, ...]]:
        called = {k for keys in capture.index for k in keys}
        if called != set(self.layers):
            raise NotTraceable(f"the block's call did not call {', '.join(sorted(map(str, set(self.layers) - called)))}")
        self._index = {k: at for keys, at in capture.index.items() for k in keys}
        hidden = result[0] if isinstance(result, (tuple, list)) else result
        return (hidden if self.propagate else None), tuple(capture.tensors)

    def _program(self, skeleton: Any) -> Any:
        def run(trainable: Any, non_trainable: Any, leaves: Any) -> Any:
            args, kwargs = _unflatten(skeleton, leaves)
            with self._capturing() as capture:
                result, _ = self.template.stateless_call(list(trainable), list(non_trainable), *args, **kwargs)
            return self._outputs(result, capture)
        if self.backend == "jax":
            import jax

            return jax.jit(run)
        import tensorflow as tf

        return tf.function(run, autograph=False, reduce_retracing=True)

    def __call__(self, block: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, dict[Any, np.ndarray]]:
        return self.result(self.launch(block, args, kwargs))

    def result(self, launched: Any) -> tuple[Any, dict[Any, np.ndarray]]:
        """A launched call's output and its observed inputs as NumPy arrays (waiting for it)."""
        started, length, block, args, kwargs = launched
        hidden, tensors = started.result() if isinstance(started, Future) else started
        arrays = [np.asarray(keras.ops.convert_to_numpy(t), dtype=np.float32) for t in tensors]
        if length is not None:  # a padded call (:func:`bucket`): its first `length` tokens
            size = bucket(length)
            outputs = arrays if hidden is None else [*arrays, hidden]
            if any(np.ndim(a) < 2 or np.shape(a)[1] != size for a in outputs):
                self.buckets = False  # an observed input without the token axis second: unpadded
                return self.result(self.launch(block, args, kwargs))
            arrays = [a[:, :length] for a in arrays]
            if hidden is not None:  # cut where it was padded
                hidden = (np.ascontiguousarray(np.asarray(keras.ops.convert_to_numpy(hidden))[:, :length])
                          if _host_arrays() else hidden[:, :length])
        return hidden, {k: arrays[at] for k, at in self._index.items()}

    def launch(self, block: Any, args: Sequence[Any], kwargs: dict[str, Any], worker: Executor | None = None) -> Any:
        """Start ``block``'s call: JAX returns before the call is done (its tokens padded to a
        :func:`bucket` length where the call has a padding mask: :func:`padded`); TensorFlow's
        runs on ``worker`` once its program is made (a call that makes one runs here, so that a
        call that cannot be traced is known at once). For :meth:`result`."""
        length, call = None, (args, kwargs)
        if self.backend == "jax" and self.buckets:
            found = padded(args, kwargs)
            if found is not None:
                length, *call = found
        return self._launch(block, *call, worker), length, block, args, kwargs

    def _launch(self, block: Any, args: Sequence[Any], kwargs: dict[str, Any], worker: Executor | None) -> Any:
        leaves: list[Any] = []
        skeleton = _flatten((tuple(args), dict(kwargs)), leaves)
        # one program per structure, dtypes and ranks: jax.jit keeps one compilation per shape
        # itself, and TensorFlow's function traces again with shapes relaxed to any length
        kinds = tuple((np.ndim(x), str(getattr(x, "dtype", ""))) for x in leaves)
        key = (skeleton, kinds)
        try:
            hash(key)
        except TypeError as e:  # an argument that is neither an array nor a plain value
            raise NotTraceable(str(e)) from e
        program = self._programs.get(key)
        shapes = (key, tuple(tuple(np.shape(x)) for x in leaves))
        made = shapes in self._traced  # a call of a new shape may trace: here, where its error is caught
        self._traced.add(shapes)
        if program is None:
            program = self._programs[key] = self._program(skeleton)
        if self.backend == "tensorflow":
            convert = keras.ops.convert_to_tensor
            values = (tuple(convert(v.value) for v in block.trainable_variables),
                      tuple(convert(v.value) for v in block.non_trainable_variables), tuple(convert(x) for x in leaves))
            if made and worker is not None:
                return worker.submit(program, *values)
        else:
            values = (tuple(v.value for v in block.trainable_variables),
                      tuple(v.value for v in block.non_trainable_variables), tuple(leaves))
        try:
            with _as_written() if self.backend == "tensorflow" else contextlib.nullcontext():
                return program(*values)
        except NotTraceable:
            raise
        except Exception as e:  # a call that cannot be traced: run it eagerly
            raise NotTraceable(f"{type(e).__name__}: {e}") from e


def bucket(length: int) -> int:
    """The length a call of ``length`` tokens is padded to on JAX, so that calls of many lengths
    share a few compiled programs: the next of 4, 5, 6, 7 or 8 x 2^k (at most a quarter more
    tokens; 16 and fewer as they are)."""
    if length <= 16:
        return length
    k = length.bit_length() - 3
    return next(m << k for m in (4, 5, 6, 7, 8) if m << k >= length)


def padded(args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[int, tuple[Any, ...], dict[str, Any]] | None:
    """A call whose tokens can be padded: its hidden states ``args[0]`` are ``[batch, tokens,
    ...]`` and it has a padding mask (a ``[batch, tokens]`` bool or integer array); no other
    array has the token axis. ``(tokens, args, kwargs)`` padded to :func:`bucket` of the tokens
    (hidden states with zeros, masks with 0: the padded tokens are masked out as keys, and a
    decoder's causal mask keeps them from every real token), or None."""
    hidden = args[0] if args else None
    if hidden is None or not _is_array(hidden) or np.ndim(hidden) < 3:
        return None
    tokens = int(np.shape(hidden)[1])
    length = bucket(tokens)
    if length == tokens:
        return None
    leaves: list[Any] = []
    skeleton = _flatten((tuple(args[1:]), dict(kwargs)), leaves)
    masks = []
    for i, x in enumerate(leaves):
        shape = tuple(np.shape(x))
        if tokens not in shape[1:]:
            continue
        kind = np.dtype(x.dtype)  # NumPy's or JAX's (padding is done on JAX only)
        if len(shape) != 2 or shape[1] != tokens or not (kind == np.bool_ or np.issubdtype(kind, np.integer)):
            return None  # the token axis elsewhere (an attention mask, positions): as it is
        masks.append(i)
    if not masks:
        return None

    def pad(x: Any) -> Any:
        widths = [(0, 0), (0, length - tokens)] + [(0, 0)] * (np.ndim(x) - 2)
        if not _host_arrays():  # on an accelerator: padded there (a small program per length)
            import jax.numpy as jnp

            return jnp.pad(x, widths)
        return np.pad(np.asarray(keras.ops.convert_to_numpy(x)), widths)  # no program per length

    leaves = [pad(x) if i in masks else x for i, x in enumerate(leaves)]
    rest, kw = _unflatten(skeleton, leaves)
    return tokens, (pad(hidden), *rest), kw


def _host_arrays() -> bool:
    """Whether the backend's arrays live in host memory (JAX on its CPU backend; padding is
    only done on JAX)."""
    if keras.backend.backend() != "jax":
        return True
    import jax

    return jax.default_backend() == "cpu"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - no affinity on this platform
        return os.cpu_count() or 1


@contextlib.contextmanager
def shared_cores() -> Iterator[None]:
    """NumPy's BLAS on half of this process's cores (at least one) for the ``with`` block, where
    a block's calls are compiled: the next call's forward then runs on the framework's pool
    while the solves and statistics run on NumPy's, instead of both pools asking for every core
    (on two cores: GPTQ W4A16 on the speed anchor 9.0 s -> 7.3 s on JAX). Restored on exit;
    nothing changes where threadpoolctl is not installed or nothing is compiled."""
    if compiled_backend() is None:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - the keras extra installs it
        yield
        return
    with contextlib.suppress(ImportError):  # the solves' LAPACK (NumPy ops): loaded now, so that it is limited too
        import scipy.linalg.lapack  # noqa: F401
    with threadpool_limits(limits=max(1, _cores() // 2), user_api="blas"):
        yield


class NotTraceable(Exception):
    """The block's call could not be compiled; the host runs it eagerly."""


def run_compiled(program: CompiledBlock, block: Any, keys: Mapping[str, Any], inputs: Sequence[Any],
                 observers: Mapping[str, Observer], linear: Mapping[str, Any], out: list[Any]) -> int:
    """Run ``block`` (of ``program``'s signature) on each cached call of ``inputs``, hand each
    observer its layer's input (``keys``: observer name -> ``program``'s key)
    (as the eager observers do: a Linear layer's ``[tokens, in]`` rows) and append each next
    call to ``out`` when the block propagates. Returns how many calls ran: fewer than
    ``len(inputs)`` when a call could not be compiled (the rest are the host's to run eagerly).
    """
    def observe(call: Any, args: Sequence[Any], kwargs: dict[str, Any], launched: Any) -> None:
        hidden, arrays = program.result(launched)
        rows: dict[Any, Any] = {}
        for name in sorted(observers, key=lambda n: program.order(keys[n])):
            observe_input(linear.get(name), observers[name], arrays[keys[name]], rows)
        if program.propagate:
            out.append(next_call(call, args, kwargs, hidden))

    # each call is launched before the one before it is observed: the next call's forward runs
    # (JAX: dispatched; TensorFlow: on a worker thread) while NumPy adds this one's statistics
    pending: tuple[Any, ...] | None = None
    with ThreadPoolExecutor(1, thread_name_prefix="recipe-spec-block") as worker:
        for done, call in enumerate(inputs):
            args, kwargs = on_device(call)
            try:
                launched = program.launch(block, args, kwargs, worker)
            except NotTraceable:
                program.refused = True  # no block of its signature tries it again
                if pending is not None:
                    observe(*pending)
                return done
            if pending is not None:
                observe(*pending)
            pending = (call, args, kwargs, launched)
        if pending is not None:
            observe(*pending)
    return len(inputs)
