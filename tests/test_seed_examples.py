"""Every recipe example in the seed documents (``tests/data/seeds/``) validates with no error and
runs on both backends (issue 16, item 1).

What is extracted, from every file in the seeds folder:

- fenced ```` ```yaml ```` blocks (the fence may be indented by a space, as in the seed);
- YAML front matter (``---`` or ``+++`` lines opening a file), were a seed to have one;
- inline examples written as `` `- !Modifier {...}` `` in the prose.

Fragments: the seed presents one modifier per section as a list item (``- !GMPruningModifier``
followed by its arguments), the item that goes inside a recipe's ``modifiers:`` list. Such a
fragment (a block that is a YAML list, not a mapping) is wrapped in ``modifiers:`` exactly as
the seed's own sample recipe at the top of the document shows it; full recipes (a mapping, with
``version`` / ``modifiers`` / ``pruning_modifiers``) are used as they are.

A seed may also be a web rendering of another seed (``001_…`` is the docs-site copy of
``000_…``): its examples carry a line-number gutter (``1 - !EpochRangeModifier``) and lost
their indentation, so they cannot be parsed as YAML as they stand. Each such numbered block is
checked to be, with its gutter and white space removed, the same text as an example extracted
from a Markdown seed, which is the one validated and run.

Parameter names are not substituted: the models below carry exactly the names the examples
select (``sections.0.0.conv1.weight`` ...; ``blocks.1.conv``, which the seed gives as a full
parameter name, is a raw 4-d parameter ``conv`` of module ``blocks.1`` on PyTorch and a variable
``conv`` of layer ``blocks.1`` on Keras, whose portable alias is ``blocks.1.conv``).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
from testdata import SEEDS, missing

from recipe_spec import Severity, loads
from recipe_spec.validation import validate

#: steps per epoch for the runs: enough for the M-FAC example's gradient buffer (num_grads 256
#: at its first pruning step, epoch 1) so the recipe is accepted as written
STEPS_PER_EPOCH = 300
#: optimizer steps run per example and backend
STEPS = 4

_FENCE = re.compile(r"^ {0,3}```ya?ml[ \t]*\n(.*?)^ {0,3}```[ \t]*$", re.M | re.S)
_INLINE = re.compile(r"`(- !\w+Modifier \{[^`]*\})`")
_GUTTER = re.compile(r"^(\d+)(.*)$")


def _front_matter(text: str) -> str | None:
    lines = text.splitlines()
    if lines and lines[0].strip() in ("---", "+++"):
        for i in range(1, len(lines)):
            if lines[i].strip() == lines[0].strip():
                return "\n".join(lines[1:i]) + "\n"
    return None


def _wrap(block: str) -> str:
    """A fragment (a YAML list of modifiers) inside ``modifiers:``; a full recipe unchanged."""
    lines = [ln for ln in block.splitlines() if ln.strip()]
    if lines and lines[0].lstrip().startswith("- "):
        return "modifiers:\n" + block
    return block


def _markdown_examples(path: Path) -> list[tuple[str, str]]:
    """(id, recipe text) for every example in one seed file."""
    text = path.read_text(encoding="utf-8")
    found: list[tuple[str, str]] = []
    fm = _front_matter(text)
    if fm is not None:
        found.append((f"{path.name}:front-matter", fm))
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        indent = len(m.group(0)) - len(m.group(0).lstrip(" "))
        body = "".join(ln[indent:] if ln[:indent].strip() == "" else ln
                       for ln in m.group(1).splitlines(keepends=True))
        found.append((f"{path.name}:{line}", _wrap(body)))
    for m in _INLINE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        found.append((f"{path.name}:{line}:inline", _wrap(m.group(1) + "\n")))
    return found


def _numbered_blocks(text: str) -> list[str]:
    """Blocks of a rendered page whose lines carry a gutter 1, 2, 3..., gutter removed."""
    blocks: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        m = _GUTTER.match(line)
        if m and int(m.group(1)) == len(current) + 1 and m.group(2)[:1] in ("", " ", "v", "m"):
            current.append(m.group(2))
            continue
        if len(current) > 1:
            blocks.append("\n".join(current))
        current = []
        if m and m.group(1) == "1":
            current.append(m.group(2))
    if len(current) > 1:
        blocks.append("\n".join(current))
    return blocks


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _seed_files() -> list[Path]:
    if not SEEDS.is_dir():
        raise missing(SEEDS)
    return sorted(p for p in SEEDS.iterdir() if p.is_file())


def _all() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(examples to run, rendered blocks as (id, text)) over every seed file."""
    examples: list[tuple[str, str]] = []
    rendered: list[tuple[str, str]] = []
    for path in _seed_files():
        examples.extend(_markdown_examples(path))
        for i, block in enumerate(_numbered_blocks(path.read_text(encoding="utf-8"))):
            rendered.append((f"{path.name}:rendered-{i}", block))
    return examples, rendered


EXAMPLES, RENDERED = _all()
IDS = [i for i, _ in EXAMPLES]


def test_examples_found() -> None:
    # 000: the sample recipe and one example per documented modifier (9); 003: the M-FAC recipe
    assert len(EXAMPLES) >= 10, IDS
    names = {m for _, t in EXAMPLES for m in re.findall(r"!(\w+Modifier)", t)}
    assert {"TrainableParamsModifier", "MFACPruningModifier", "SetWeightDecayModifier",
            "QuantizationModifier", "ConstantPruningModifier"} <= names


def test_rendered_copies_are_examples_that_run() -> None:
    assert RENDERED, "expected the docs-site rendering with numbered example lines"
    known = {_squash(t.removeprefix("modifiers:\n")) for _, t in EXAMPLES}
    for ident, block in RENDERED:
        assert _squash(block) in known, f"{ident}: no Markdown example matches\n{block}"


@pytest.mark.parametrize("text", [t for _, t in EXAMPLES], ids=IDS)
def test_example_validates_without_error(text: str) -> None:
    errors = [d for d in validate(text) if d.severity is Severity.ERROR]
    assert errors == [], "\n".join(str(d) for d in errors)
    for backend in ("torch", "keras"):
        errors = [d for d in validate(text, backend=backend) if d.severity is Severity.ERROR]
        assert errors == [], f"{backend}: " + "\n".join(str(d) for d in errors)


# --- the models ------------------------------------------------------------------------------


def _torch_model():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Parameter(torch.randn(4, 4, 3, 3) * 0.2)

    class Section(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
            self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
            self.conv3 = nn.Conv2d(4, 4, 3, padding=1)

    class SeedNet(nn.Module):
        """sections.0.0.conv1..3 (the sample recipe), blocks.1.conv (the GMP example), fc."""

        def __init__(self) -> None:
            super().__init__()
            self.sections = nn.ModuleList([nn.ModuleList([Section()])])
            self.blocks = nn.ModuleList([nn.Module(), Block()])
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            s = self.sections[0][0]
            x = torch.relu(s.conv3(torch.relu(s.conv2(torch.relu(s.conv1(x))))))
            x = torch.relu(nn.functional.conv2d(x, self.blocks[1].conv, padding=1))
            return self.fc(x.mean(dim=(2, 3)))

    torch.manual_seed(0)
    return SeedNet()


def _keras_model():
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    class RawConv(keras.layers.Layer):
        """A layer whose only variable is called ``conv`` (portable alias ``blocks.1.conv``)."""

        def build(self, input_shape):
            self.conv = self.add_weight(name="conv", shape=(3, 3, 4, 4), initializer="glorot_uniform")

        def call(self, x):
            return keras.ops.relu(keras.ops.conv(x, self.conv, padding="same"))

    keras.utils.set_random_seed(0)
    inputs = keras.Input((6, 6, 3))
    x = inputs
    for k in (1, 2, 3):
        x = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name=f"sections.0.0.conv{k}")(x)
    x = RawConv(name="blocks.1")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(2, name="fc")(x))


@pytest.mark.parametrize("text", [t for _, t in EXAMPLES], ids=IDS)
def test_example_runs_on_torch(text: str) -> None:
    torch = pytest.importorskip("torch")
    model = _torch_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    manager = loads(text).compile("torch")
    optimizer = manager.modify(model, optimizer, STEPS_PER_EPOCH)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 6, 6, generator=g), torch.randn(4, 2, generator=g)
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        assert math.isfinite(float(loss.detach()))
    manager.finalize(model)


@pytest.mark.parametrize("text", [t for _, t in EXAMPLES], ids=IDS)
def test_example_runs_on_keras(text: str) -> None:
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    import numpy as np

    model = _keras_model()
    manager = loads(text).compile("keras")
    model, optimizer, callbacks = manager.modify(model, keras.optimizers.SGD(0.01, momentum=0.9), STEPS_PER_EPOCH)
    model.compile(optimizer=optimizer, loss="mse")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4 * STEPS, 6, 6, 3)).astype("float32")
    y = rng.normal(size=(4 * STEPS, 2)).astype("float32")
    history = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    assert all(math.isfinite(v) for v in history.history["loss"])


def test_trainable_defaults_to_true_with_m013() -> None:
    """The seed's TrainableParamsModifier example omits ``trainable`` (SparseML required it):
    it means ``trainable: true``, with warning M013 at the modifier (docs/recipe-format.md)."""
    torch = pytest.importorskip("torch")
    text = "modifiers:\n    - !TrainableParamsModifier\n      params: __ALL__\n"
    found = [(d.code, d.severity, d.line) for d in validate(text)]
    assert found == [("M013", Severity.WARNING, 2)]
    assert validate(text.replace("__ALL__\n", "__ALL__\n      trainable: true\n")) == []
    model = _torch_model()
    for p in model.parameters():
        p.requires_grad_(False)
    manager = loads(text).compile("torch")
    optimizer = manager.modify(model, torch.optim.SGD(model.parameters(), lr=0.01), STEPS_PER_EPOCH)
    optimizer.zero_grad()
    optimizer.step()
    assert all(p.requires_grad for p in model.parameters())
