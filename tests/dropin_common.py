"""A tiny Llama checkpoint with a character-level tokenizer, built here (nothing downloaded),
for the llm-compressor drop-in tests (tests/test_oneshot_dropin*.py)."""

from __future__ import annotations

import pathlib
from typing import Any

#: Printable ASCII, one token each, after <unk> (0), <s> (1) and </s> (2).
CHARS = [chr(c) for c in range(32, 127)]
CHAT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


def char_id(c: str) -> int:
    """The id the tokenizer gives character ``c`` (independent of the tokenizer)."""
    return CHARS.index(c) + 3


def tokenizer(model_max_length: int = 64) -> Any:
    """A fast tokenizer: one token per character, ``<s>`` added in front, no pad token."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{c: char_id(c) for c in CHARS}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    out = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                               unk_token="<unk>", model_max_length=model_max_length)
    out.chat_template = CHAT_TEMPLATE
    return out


def llama(seed: int = 0, hidden: int = 128) -> Any:
    """A random two-layer Llama (vocabulary 128), float32, eval mode."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128, tie_word_embeddings=False)
    return transformers.LlamaForCausalLM(config).float().eval()


def checkpoint(folder: pathlib.Path, dtype: Any = None) -> pathlib.Path:
    """A checkpoint folder holding :func:`llama` (in ``dtype`` when given) and :func:`tokenizer`."""
    model = llama()
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(folder)
    tokenizer().save_pretrained(folder)
    return folder


TEXTS = [f"Sample {i}: the quick brown fox jumps over the lazy dog. " * (1 + i % 3) for i in range(8)]


class Table:
    """A stand-in for ``datasets.Dataset`` (not installed here) with what llm-compressor's
    examples and recipe-spec call on it: ``from_dict``, ``column_names``, ``len``, indexing,
    ``shuffle(seed=)``, ``select`` and ``map`` (per row: the returned keys update the row; batched:
    runs of 1000 rows as dicts of lists; ``remove_columns``)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    @classmethod
    def from_dict(cls, columns: dict[str, list[Any]]) -> Table:
        n = len(next(iter(columns.values())))
        return cls([{k: v[i] for k, v in columns.items()} for i in range(n)])

    @property
    def column_names(self) -> list[str]:
        return list(self.rows[0]) if self.rows else []

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return dict(self.rows[i])

    def select(self, indices: Any) -> Table:
        return Table([self.rows[i] for i in indices])

    def shuffle(self, seed: int = 0) -> Table:
        import random

        order = list(range(len(self.rows)))
        random.Random(seed).shuffle(order)
        return self.select(order)

    def map(self, fn: Any, batched: bool = False, remove_columns: Any = None, **_: Any) -> Table:
        drop = set(remove_columns or ())
        if not batched:
            return Table([{**{k: v for k, v in r.items() if k not in drop}, **dict(fn(dict(r)))} for r in self.rows])
        out: list[dict[str, Any]] = []
        for start in range(0, len(self.rows), 1000):
            run = self.rows[start:start + 1000]
            result = dict(fn({k: [r[k] for r in run] for k in run[0]}))
            n = len(next(iter(result.values()))) if result else 0
            out += [{k: v[i] for k, v in result.items()} for i in range(n)]
        return Table(out)
