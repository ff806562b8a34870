"""Model introspection: PyTorch and Keras 3 models, state_dicts, safetensors and ``.keras``
files become neutral ParamRecords (SPEC, "Parameter targeting"), and model specs fail with
messages that say what to fix. Frameworks are imported inside the tests only."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from recipe_spec.params import ParamRecord, resolve
from recipe_spec.params.headers import ModelSpecError, read_safetensors_header
from recipe_spec.params.model_spec import load_param_records

REPO = Path(__file__).resolve().parent.parent


def R(name, shape, layer_type, prunable, alias=None):  # noqa: N802 - reads like a table row
    return ParamRecord(name=name, shape=tuple(shape), layer_type=layer_type, prunable=prunable, alias=alias)


# --------------------------------------------------------------------------- PyTorch


def _torch_net():
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3)
            self.bn1 = nn.BatchNorm2d(8)
            self.emb = nn.Embedding(10, 4)
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 10)

        def forward(self, x):
            x = self.bn1(self.conv1(x)).mean((2, 3))
            return self.fc2(self.fc1(x))

    return Net()


TORCH_NET = [
    R("conv1.weight", (8, 3, 3, 3), "Conv2d", True),
    R("conv1.bias", (8,), "Conv2d", False),
    R("bn1.weight", (8,), "BatchNorm2d", False),
    R("bn1.bias", (8,), "BatchNorm2d", False),
    R("emb.weight", (10, 4), "Embedding", True),
    R("fc1.weight", (16, 8), "Linear", True),
    R("fc1.bias", (16,), "Linear", False),
    R("fc2.weight", (10, 16), "Linear", True),
    R("fc2.bias", (10,), "Linear", False),
]


def test_torch_records_names_shapes_types_prunable():
    from recipe_spec_torch.params import param_records

    assert param_records(_torch_net()) == TORCH_NET


def test_torch_backend_object_delegates():
    import recipe_spec

    assert recipe_spec.get_backend("torch").param_records(_torch_net()) == TORCH_NET


def test_torch_wrappers_never_add_module_prefix():
    import torch
    import torch.nn as nn
    from recipe_spec_torch.params import param_records, unwrap

    class DistributedDataParallel(nn.Module):  # same class name as torch's DDP
        def __init__(self, module):
            super().__init__()
            self.module = module

    net = _torch_net()
    dp = nn.DataParallel(net)
    assert [n for n, _ in dp.named_parameters()][0] == "module.conv1.weight"  # what torch gives
    assert param_records(dp) == TORCH_NET
    assert param_records(DistributedDataParallel(net)) == TORCH_NET
    # wrapped twice, and torch.compile's OptimizedModule (not compiled until called)
    assert param_records(DistributedDataParallel(nn.DataParallel(net))) == TORCH_NET
    assert param_records(torch.compile(net)) == TORCH_NET
    assert unwrap(DistributedDataParallel(net)) is net


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_torch_qat_modules_stay_prunable():
    from collections import OrderedDict

    import torch
    import torch.nn as nn
    from recipe_spec_torch.params import param_records

    m = nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(1, 2, 3), bn=nn.BatchNorm2d(2), relu=nn.ReLU(), flat=nn.Flatten(),
            fc=nn.Linear(8, 3), relu2=nn.ReLU(), out=nn.Linear(3, 2),
        )
    ).train()
    m.qconfig = torch.ao.quantization.get_default_qat_qconfig("fbgemm")
    fused = torch.ao.quantization.fuse_modules_qat(m, [["conv", "bn", "relu"], ["fc", "relu2"]])
    qat = torch.ao.quantization.prepare_qat(fused)
    assert type(qat.out).__module__.startswith("torch.ao.nn.qat")
    assert param_records(qat) == [
        R("conv.weight", (2, 1, 3, 3), "ConvBnReLU2d", True),
        R("conv.bias", (2,), "ConvBnReLU2d", False),
        R("conv.bn.weight", (2,), "BatchNorm2d", False),
        R("conv.bn.bias", (2,), "BatchNorm2d", False),
        R("fc.weight", (3, 8), "LinearReLU", True),
        R("fc.bias", (3,), "LinearReLU", False),
        R("out.weight", (2, 3), "Linear", True),
        R("out.bias", (2,), "Linear", False),
    ]


def test_torch_other_layers_and_reparametrised_weights():
    import torch
    import torch.nn as nn
    from recipe_spec_torch.params import param_records
    from torch.nn.utils import parametrize, prune

    class Half(nn.Module):
        def forward(self, w):
            return w * 0.5

    m = nn.Sequential(nn.ConvTranspose1d(2, 3, 2), nn.Conv3d(1, 1, 1), nn.LayerNorm(4), nn.Linear(4, 4), nn.Linear(4, 4))
    m.register_parameter("scale", nn.Parameter(torch.ones(4, 4)))
    prune.l1_unstructured(m[3], "weight", amount=0.5)
    parametrize.register_parametrization(m[4], "weight", Half())
    got = {r.name: (r.layer_type, r.prunable) for r in param_records(m)}
    assert got == {
        "scale": ("Sequential", False),
        "0.weight": ("ConvTranspose1d", True),
        "0.bias": ("ConvTranspose1d", False),
        "1.weight": ("Conv3d", True),
        "1.bias": ("Conv3d", False),
        "2.weight": ("LayerNorm", False),
        "2.bias": ("LayerNorm", False),
        "3.bias": ("Linear", False),
        "3.weight_orig": ("Linear", True),
        "4.bias": ("Linear", False),
        "4.parametrizations.weight.original": ("Linear", True),
    }


@pytest.fixture(scope="module")
def bert():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=100
    )
    return transformers.BertForMaskedLM(config)


def test_transformers_bert(bert):
    from recipe_spec_torch.params import param_records

    records = {r.name: r for r in param_records(bert)}
    assert len(records) == len(list(bert.named_parameters()))
    q = records["bert.encoder.layer.0.attention.self.query.weight"]
    assert (q.shape, q.layer_type, q.prunable, q.alias) == ((32, 32), "Linear", True, None)
    assert records["bert.encoder.layer.1.intermediate.dense.weight"].shape == (37, 32)
    assert records["bert.encoder.layer.1.intermediate.dense.weight"].prunable
    assert not records["bert.encoder.layer.0.attention.self.query.bias"].prunable
    ln = records["bert.encoder.layer.0.output.LayerNorm.weight"]
    assert (ln.layer_type, ln.prunable) == ("LayerNorm", False)
    emb = records["bert.embeddings.word_embeddings.weight"]
    assert (emb.shape, emb.layer_type, emb.prunable) == ((100, 32), "Embedding", True)
    assert records["bert.embeddings.position_embeddings.weight"].prunable
    # a recipe's usual BERT selectors
    sel = resolve([r"re:bert.encoder.layer.*.attention.self.(query|key|value).weight"], list(records.values()))
    assert len(sel.matched) == 6
    prunable = resolve("__ALL_PRUNABLE__", list(records.values())).names
    assert not any("LayerNorm" in n or n.endswith(".bias") for n in prunable)


def test_transformers_gpt2_conv1d_is_prunable_by_class_name():
    transformers = pytest.importorskip("transformers")
    from recipe_spec_torch.params import param_records

    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=16, bos_token_id=0, eos_token_id=0))
    records = {r.name: r for r in param_records(model)}
    attn = records["h.0.attn.c_attn.weight"]
    assert (attn.layer_type, attn.prunable) == ("Conv1D", True)
    assert records["h.0.mlp.c_fc.weight"].prunable
    assert not records["h.0.ln_1.weight"].prunable
    assert records["wte.weight"].prunable


# --------------------------------------------------------------------------- weights-only files


def test_pt_state_dict(tmp_path):
    import torch
    import torch.nn as nn

    net = _torch_net()
    plain, ckpt, wrapped = tmp_path / "plain.pt", tmp_path / "ckpt.pth", tmp_path / "model.pt"
    torch.save(net.state_dict(), plain)
    torch.save({"epoch": 3, "state_dict": nn.DataParallel(net).state_dict(), "optimizer": {"lr": 0.1}}, ckpt)
    torch.save({"model": net.state_dict()}, wrapped)
    expected = [(r.name, r.shape, r.prunable) for r in TORCH_NET]  # the heuristic agrees here
    for path in (plain, ckpt, wrapped):
        framework, records = load_param_records(str(path))
        assert framework == "torch"
        assert [(r.name, r.shape, r.prunable) for r in records] == expected  # no running_mean etc.
        assert all(r.layer_type == "" and r.alias is None for r in records)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torchscript_archive_is_described_exactly(tmp_path):
    import torch

    path = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(_torch_net()), str(path))
    framework, records = load_param_records(path)
    assert (framework, records) == ("torch", TORCH_NET)


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]], metadata=None) -> None:
    """The safetensors format by hand: u64 header length, JSON header, data."""
    sizes = {"F32": 4, "F16": 2, "I64": 8}
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_safetensors_written_by_the_library(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    net = _torch_net()
    path = tmp_path / "model.safetensors"
    st.save_file(dict(net.state_dict()), str(path))
    framework, records = load_param_records(path)
    assert framework == "torch"
    # the header is sorted by name; names, shapes and the heuristic match the model
    assert sorted((r.name, r.shape, r.prunable) for r in records) == sorted((r.name, r.shape, r.prunable) for r in TORCH_NET)


def test_safetensors_by_hand_and_corrupt(tmp_path):
    good = tmp_path / "hand.safetensors"
    _write_safetensors(
        good,
        {
            "module.enc.weight": ("F16", (4, 3)),
            "module.enc.bias": ("F32", (4,)),
            "module.norm.weight": ("F32", (4,)),
            "module.norm.running_var": ("F32", (4,)),
            "module.norm.num_batches_tracked": ("I64", ()),
        },
    )
    assert load_param_records(good)[1] == [
        R("enc.weight", (4, 3), "", True),
        R("enc.bias", (4,), "", False),
        R("norm.weight", (4,), "", False),
    ]
    assert list(read_safetensors_header(good)) == [
        "module.enc.weight", "module.enc.bias", "module.norm.weight", "module.norm.running_var", "module.norm.num_batches_tracked",
    ]
    raw = good.read_bytes()
    cases = {
        "short.safetensors": (raw[:5], "shorter than the 8-byte header length"),
        "huge.safetensors": (struct.pack("<Q", 10**9) + raw[8:], "the header length says 1000000000 bytes"),
        "notjson.safetensors": (struct.pack("<Q", 4) + b"{{{{", "the header is not JSON"),
        "list.safetensors": (struct.pack("<Q", 2) + b"[]", "the header is not a JSON object"),
        "truncated.safetensors": (raw[:-8], "lies outside the file's"),
        "noshape.safetensors": (struct.pack("<Q", 23) + b'{"a": {"dtype": "F32"}}', "lacks a valid dtype, shape or data_offsets"),
    }
    hdr = json.dumps({"w.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
    cases["size.safetensors"] = (struct.pack("<Q", len(hdr)) + hdr + b"\0" * 8, "has 8 bytes but its F32 shape [2, 2] needs 16")
    for name, (data, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ModelSpecError, match="not a valid safetensors file") as err:
            load_param_records(path)
        assert message in str(err.value), (name, str(err.value))


def test_bad_torch_files(tmp_path):
    import torch

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a pickle at all")
    with pytest.raises(ModelSpecError, match=r"garbage.pt: not a PyTorch state_dict that can be loaded safely .*torch.save\(model.state_dict\(\), path\)"):
        load_param_records(garbage)
    whole = tmp_path / "whole.pt"
    torch.save(torch.nn.Linear(2, 2), whole)  # a pickled module: refused, never executed
    with pytest.raises(ModelSpecError, match="weights_only=True failed"):
        load_param_records(whole)
    nodict = tmp_path / "list.pth"
    torch.save([1, 2, 3], nodict)
    with pytest.raises(ModelSpecError, match=r"list.pth: holds no state_dict \(found: list\)"):
        load_param_records(nodict)
    other = tmp_path / "other.pt"
    torch.save({"epoch": 1, "lr": 0.1}, other)
    with pytest.raises(ModelSpecError, match=r"holds no state_dict \(found: epoch, lr\).*'state_dict' or 'model' entry"):
        load_param_records(other)


# --------------------------------------------------------------------------- Keras 3


def _keras():
    os.environ["KERAS_BACKEND"] = "tensorflow"  # before keras is first imported
    return pytest.importorskip("keras")


def _keras_twin(keras):
    L = keras.layers
    inp = keras.Input((8, 8, 3), name="x")
    x = L.Conv2D(8, 3, name="conv1")(inp)
    x = L.BatchNormalization(name="bn1")(x)
    x = L.GlobalAveragePooling2D(name="pool")(x)
    x = L.Dense(16, name="fc1")(x)
    x = L.Dense(10, name="fc2")(x)
    return keras.Model(inp, x, name="twin")


KERAS_TWIN = [
    R("conv1/kernel", (3, 3, 3, 8), "Conv2D", True, "conv1.weight"),
    R("conv1/bias", (8,), "Conv2D", False, "conv1.bias"),
    R("bn1/gamma", (8,), "BatchNormalization", False, "bn1.weight"),
    R("bn1/beta", (8,), "BatchNormalization", False, "bn1.bias"),
    R("bn1/moving_mean", (8,), "BatchNormalization", False, "bn1.running_mean"),
    R("bn1/moving_variance", (8,), "BatchNormalization", False, "bn1.running_var"),
    R("fc1/kernel", (8, 16), "Dense", True, "fc1.weight"),
    R("fc1/bias", (16,), "Dense", False, "fc1.bias"),
    R("fc2/kernel", (16, 10), "Dense", True, "fc2.weight"),
    R("fc2/bias", (10,), "Dense", False, "fc2.bias"),
]


def _keras_paths(model) -> list[str]:
    """Keras' own ``variable.path`` minus the model's name prefix."""
    prefix = model.name + "/"
    return [v.path[len(prefix):] if v.path.startswith(prefix) else v.path for v in model.weights]


def test_keras_functional_twin():
    keras = _keras()
    import recipe_spec

    model = _keras_twin(keras)
    records = recipe_spec.get_backend("keras").param_records(model)
    assert records == KERAS_TWIN
    assert [r.name for r in records] == _keras_paths(model) == [v.path for v in model.weights]
    # a recipe written with PyTorch names selects the same parameters on the twin
    torch_names = {r.name for r in TORCH_NET if not r.name.startswith("emb")}
    assert torch_names <= {r.alias for r in records}
    sel = resolve(["conv1.weight", "fc1/kernel", "re:fc2\\.w.*"], records)
    assert sel.names == ("conv1/kernel", "fc1/kernel", "fc2/kernel") and not sel.unmatched
    assert resolve("__ALL_PRUNABLE__", records).names == ("conv1/kernel", "fc1/kernel", "fc2/kernel")


def test_keras_sequential_strips_the_model_name():
    keras = _keras()
    from recipe_spec_keras.params import param_records

    L = keras.layers
    model = keras.Sequential(
        [keras.Input((4,), dtype="int32"), L.Embedding(20, 6, name="emb"), L.Conv1D(5, 2, name="c1"),
         L.Conv1DTranspose(3, 2, name="ct"), L.DepthwiseConv1D(2, name="dw"), L.Flatten(), L.Dense(2, name="out")],
        name="seq",
    )
    assert [v.path for v in model.weights][0] == "seq/emb/embeddings"  # Keras prefixes the model name
    records = param_records(model)
    assert [(r.name, r.alias, r.layer_type, r.prunable) for r in records] == [
        ("emb/embeddings", "emb.weight", "Embedding", True),
        ("c1/kernel", "c1.weight", "Conv1D", True),
        ("c1/bias", "c1.bias", "Conv1D", False),
        ("ct/kernel", "ct.weight", "Conv1DTranspose", True),
        ("ct/bias", "ct.bias", "Conv1DTranspose", False),
        ("dw/kernel", "dw.weight", "DepthwiseConv1D", False),  # not in the SPEC's list
        ("dw/bias", "dw.bias", "DepthwiseConv1D", False),
        ("out/kernel", "out.weight", "Dense", True),
        ("out/bias", "out.bias", "Dense", False),
    ]
    assert [r.name for r in records] == _keras_paths(model)
    assert param_records(model) == records  # stable


def _subclassed(keras, block_2_name="block_2"):
    L = keras.layers

    class Block(L.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.dense = L.Dense(4, name="dense")
            self.bn = L.BatchNormalization(name="bn")

        def call(self, x):
            return self.bn(self.dense(x))

    class Sub(keras.Model):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.block_1 = Block(name="block_1")
            self.block_2 = Block(name=block_2_name)
            self.head = L.Dense(2, name="head")

        def call(self, x):
            return self.head(self.block_2(self.block_1(x)))

    model = Sub(name="sub")
    model(keras.ops.zeros((1, 4)))
    return model


def test_keras_subclassed_paths_are_unique_and_stable():
    keras = _keras()
    from recipe_spec_keras.params import param_records

    model = _subclassed(keras)
    records = param_records(model)
    names = [r.name for r in records]
    assert names[:6] == [
        "block_1/dense/kernel", "block_1/dense/bias", "block_1/bn/gamma", "block_1/bn/beta",
        "block_1/bn/moving_mean", "block_1/bn/moving_variance",
    ]
    assert names[6] == "block_2/dense/kernel" and names[-2:] == ["head/kernel", "head/bias"]
    assert names == _keras_paths(model)  # Keras: sub/block_1/dense/kernel ...
    assert len(set(names)) == len(names) == 14
    assert records[2].alias == "block_1.bn.weight" and records[5].alias == "block_1.bn.running_var"
    assert [r.prunable for r in records].count(True) == 3
    assert param_records(model) == records

    # two sibling layers with one name: Keras gives both the same path; ours stay unique
    clash = _subclassed(keras, block_2_name="block_1")
    assert len(set(_keras_paths(clash))) == 8
    names = [r.name for r in param_records(clash)]
    assert len(set(names)) == 14 and names[6] == "block_1_1/dense/kernel"


def test_keras_nested_model_paths_come_from_the_structure():
    keras = _keras()
    from recipe_spec_keras.params import param_records

    L = keras.layers
    i = keras.Input((5,))
    inner = keras.Model(i, L.Dense(3, name="d")(i), name="inner")
    pre = L.Dense(5, name="pre")
    pre.build((None, 5))  # built before the model exists: Keras' path lacks any model name
    j = keras.Input((5,))
    outer = keras.Model(j, inner(L.Dense(5, name="d")(pre(j))), name="outer")
    assert _keras_paths(outer).count("d/kernel") == 2  # Keras' own paths collide here
    assert [r.name for r in param_records(outer)] == [
        "pre/kernel", "pre/bias", "d/kernel", "d/bias", "inner/d/kernel", "inner/d/bias",
    ]


def test_keras_file_round_trip(tmp_path):
    keras = _keras()
    from recipe_spec_keras.params import param_records

    model = _keras_twin(keras)
    path = tmp_path / "twin.keras"
    model.save(path)
    assert load_param_records(str(path)) == ("keras", param_records(model)) == ("keras", KERAS_TWIN)
    seq = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="a")], name="s")
    seq.save(tmp_path / "seq.keras")
    assert load_param_records(tmp_path / "seq.keras")[1] == param_records(seq)


def test_keras_file_errors(tmp_path):
    keras = _keras()
    bad = tmp_path / "bad.keras"
    bad.write_bytes(b"PK\x03\x04 this is not a zip")
    with pytest.raises(ModelSpecError, match=r"bad.keras: Keras cannot load this model .*model.save\(\) with Keras 3"):
        load_param_records(bad)
    model = _subclassed(keras)  # its classes are not registered as serializable
    model.save(tmp_path / "sub.keras")
    with pytest.raises(ModelSpecError, match="register_keras_serializable"):
        load_param_records(tmp_path / "sub.keras")


# --------------------------------------------------------------------------- callable specs

MODULE = """
import os
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

VALUE = 3

def build_torch():
    import torch.nn as nn
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))

def build_keras():
    import keras
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc1")], name="m")

def build_unbuilt():
    import keras
    return keras.Sequential([keras.layers.Dense(3, name="fc1")])

def build_with_args(width):
    raise AssertionError("never called with an argument")

def boom():
    raise RuntimeError("kaput: no GPU here")

def not_a_model():
    return {"fc1.weight": [1, 2]}

class Factory:
    def make(self):
        return build_torch()

factory = Factory()

def needs_keras():
    import keras  # noqa
    return build_keras()
"""


@pytest.fixture
def zoo(tmp_path, monkeypatch):
    pkg = tmp_path / "rs_zoo_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(textwrap.dedent(MODULE))
    (pkg / "broken.py").write_text("import this_dependency_does_not_exist\n")
    (pkg / "raising.py").write_text("raise ValueError('bad config at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "rs_zoo_pkg"
    for name in [m for m in sys.modules if m.startswith("rs_zoo_pkg")]:
        del sys.modules[name]


def test_callable_spec_torch_and_keras(zoo):
    _keras()
    framework, records = load_param_records(f"{zoo}.nets:build_torch")
    assert framework == "torch"
    assert [(r.name, r.shape, r.layer_type, r.prunable) for r in records] == [
        ("0.weight", (3, 4), "Linear", True), ("0.bias", (3,), "Linear", False),
        ("2.weight", (2, 3), "Linear", True), ("2.bias", (2,), "Linear", False),
    ]
    assert load_param_records(f"{zoo}.nets:factory.make") == (framework, records)  # dotted attribute
    framework, records = load_param_records(f"{zoo}.nets:build_keras")
    assert framework == "keras"
    assert [(r.name, r.alias, r.prunable) for r in records] == [("fc1/kernel", "fc1.weight", True), ("fc1/bias", "fc1.bias", False)]


def test_callable_spec_from_a_file_and_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "rs_cwd_models.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = list(sys.path)
    try:
        assert load_param_records("rs_cwd_models:build_torch")[0] == "torch"
        assert sys.path == before  # the current directory was on sys.path only while importing
        assert load_param_records(str(tmp_path / "rs_cwd_models.py") + ":build_torch")[1][0].name == "0.weight"
        assert load_param_records("rs_cwd_models.py:build_torch")[0] == "torch"
    finally:
        sys.modules.pop("rs_cwd_models", None)


def test_model_instance_and_class_specs(zoo, tmp_path):
    (tmp_path / zoo / "inst.py").write_text(
        "import torch.nn as nn\nmodel = nn.Linear(2, 3)\nclass Net(nn.Linear):\n    def __init__(self):\n        super().__init__(4, 5)\n"
    )
    assert [r.shape for r in load_param_records(f"{zoo}.inst:model")[1]] == [(3, 2), (3,)]  # used as it is
    assert [r.shape for r in load_param_records(f"{zoo}.inst:Net")[1]] == [(5, 4), (5,)]  # a class is called


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rs_no_such_pkg.models:build", r"model spec 'rs_no_such_pkg.models:build': no module named 'rs_no_such_pkg'\. Check the spelling, run from the directory that holds it, or add that directory to PYTHONPATH"),
        ("{zoo}.missing:build", r"no module named 'rs_zoo_pkg.missing'"),
        ("{zoo}.broken:build", r"importing rs_zoo_pkg.broken failed \(ModuleNotFoundError: No module named 'this_dependency_does_not_exist'\); install what it needs"),
        ("{zoo}.raising:build", r"importing rs_zoo_pkg.raising raised ValueError: bad config at import"),
        ("{zoo}.nets:build_torhc", r"rs_zoo_pkg.nets has no attribute 'build_torhc'\. Did you mean build_torch"),
        ("{zoo}.nets:factory.build", r"rs_zoo_pkg.nets.factory has no attribute 'build'"),
        ("{zoo}.nets:VALUE", r"VALUE is a int, not a callable\. Point the spec at a function \(or class\) that builds and returns the model with no arguments"),
        ("{zoo}.nets:boom", r"calling boom\(\) raised RuntimeError: kaput: no GPU here"),
        ("{zoo}.nets:build_with_args", r"calling build_with_args\(\) raised TypeError: .*width.* \(it is called with no arguments\)"),
        ("{zoo}.nets:not_a_model", r"not_a_model\(\) returned a builtins.dict, which is not a model of any backend \(keras: a Keras 3 model or layer; torch: a torch.nn.Module\)\. Return the model itself"),
        ("{zoo}.nets:build_unbuilt", r"gave a Keras model that is not built yet, so it has no variables: give it a keras.Input"),
        ("missing_dir/nothing.py:build", r"no such file 'missing_dir/nothing.py'"),
    ],
)
def test_callable_spec_errors(zoo, spec, message):
    if "unbuilt" in spec:
        _keras()
    with pytest.raises(ModelSpecError, match=message):
        load_param_records(spec.format(zoo=zoo))


def test_missing_framework_messages(zoo, tmp_path, monkeypatch):
    import recipe_spec.params.model_spec as ms

    monkeypatch.setattr(ms, "_installed", lambda module: False)
    (tmp_path / "w.keras").write_bytes(b"x")
    (tmp_path / "w.pt").write_bytes(b"x")
    with pytest.raises(ModelSpecError, match=r'this model needs keras, which is not installed: pip install "keras>=3\.0" "tensorflow-cpu>=2\.16" "threadpoolctl>=3\.1" \(from a clone of recipe-spec: pip install -c constraints\.txt -e "\.\[keras\]"\)'):
        load_param_records(tmp_path / "w.keras")
    with pytest.raises(ModelSpecError, match=r'needs torch, which is not installed: pip install "torch>=2\.1" \(a machine without a GPU: its CPU build first, pip install torch --index-url https://download\.pytorch\.org/whl/cpu'):
        load_param_records(tmp_path / "w.pt")
    with pytest.raises(ModelSpecError, match=r'needs torch, which is not installed: pip install "torch>=2\.1" \(a machine without a GPU: its CPU build first, pip install torch --index-url https://download\.pytorch\.org/whl/cpu'):
        load_param_records(f"{zoo}.nets:build_torch")
    monkeypatch.setitem(sys.modules, "keras", None)  # `import keras` now fails as if not installed
    with pytest.raises(ModelSpecError, match=r'importing rs_zoo_pkg.kzoo needs keras, which is not installed: pip install "keras>=3\.0" "tensorflow-cpu>=2\.16" "threadpoolctl>=3\.1" \(from a clone of recipe-spec: pip install -c constraints\.txt -e "\.\[keras\]"\)'):
        (tmp_path / zoo / "kzoo.py").write_text("import keras\n")
        load_param_records(f"{zoo}.kzoo:build")


def test_file_spec_errors(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"x")
    (tmp_path / "dir.pt").mkdir()
    cases = [
        (tmp_path / "model.onnx", r"model.onnx: unknown model file suffix \.onnx; expected one of \.keras, \.h5, \.pt, \.pth, \.bin, \.ckpt, \.safetensors, \.json"),
        (tmp_path / "absent.pt", r"absent.pt: no such file"),
        (tmp_path / "absent.safetensors", r"absent.safetensors: no such file"),
        (tmp_path / "dir.pt", r"dir.pt: is a directory"),
        ("resnet50", r"'resnet50' is not a model spec and no such file exists; a model spec is package.module:callable"),
        ("", r"the model spec is empty"),
        ("pkg.mod:", r"not a model spec"),
    ]
    for spec, message in cases:
        with pytest.raises(ModelSpecError, match=message):
            load_param_records(spec)
    assert issubclass(ModelSpecError, ValueError)


def test_load_model_gives_the_model_itself(zoo, tmp_path):
    import torch

    from recipe_spec.params.model_spec import load_model

    framework, model = load_model(f"{zoo}.nets:build_torch")
    assert framework == "torch" and isinstance(model, torch.nn.Sequential)
    torch.save(model.state_dict(), tmp_path / "w.pt")
    with pytest.raises(ModelSpecError, match="holds weights .* but no model to run"):
        load_model(tmp_path / "w.pt")
    keras = _keras()
    _keras_twin(keras).save(tmp_path / "twin.keras")
    framework, model = load_model(tmp_path / "twin.keras")
    assert framework == "keras" and model.get_layer("fc1").units == 16


def test_manifest_spec(tmp_path):
    from recipe_spec.params import write_manifest

    path = tmp_path / "params.json"
    write_manifest(path, KERAS_TWIN, "keras", "twin")
    assert load_param_records(path) == ("keras", KERAS_TWIN)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ModelSpecError, match="not a parameter manifest"):
        load_param_records(tmp_path / "bad.json")


def test_core_imports_no_framework(tmp_path):
    st = tmp_path / "w.safetensors"
    _write_safetensors(st, {"fc.weight": ("F32", (2, 3)), "fc.bias": ("F32", (2,))})
    code = (
        "import sys\n"
        "import recipe_spec.params.model_spec as ms, recipe_spec_torch.params, recipe_spec_keras.params\n"
        f"fw, recs = ms.load_param_records({str(st)!r})\n"
        "print(fw, [r.name for r in recs], '|' + ','.join(m for m in ('torch', 'tensorflow', 'keras', 'safetensors') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "torch ['fc.weight', 'fc.bias'] |"
