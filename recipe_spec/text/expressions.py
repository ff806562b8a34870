"""Safe evaluation of ``eval(EXPR)`` values.

The grammar is deliberately tiny: numbers, variable names, ``+ - * / // % **``, unary ``+`` and
``-``, parentheses, and calls of ``abs min max round int float``. No attributes, subscripts,
strings, comparisons, lambdas or comprehensions, so evaluating a recipe can never run code.
Results must be finite numbers.

Evaluation is bounded by construction, not by a list of known bad inputs: every operand (a
literal, a variable's value, an intermediate result) is a finite float or an int of at most
:data:`MAX_INT_BITS` bits, and before each operation the size of its result is estimated from
the sizes of its operands (:func:`_estimate_bits`); an operation whose result would exceed the
bound is refused without being computed. With at most :data:`MAX_LENGTH` characters (so at most
that many operations) on numbers of at most ``2 * MAX_INT_BITS`` bits, any expression
evaluates in well under a millisecond per operation and a few kilobytes of memory.

>>> evaluate("num_epochs * 0.2", {"num_epochs": 10})
2.0
>>> evaluate("-start + max(1, 2) ** 2", {"start": 1})
3
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ExpressionError",
    "UnknownNameError",
    "NotANumberError",
    "eval_body",
    "referenced_names",
    "evaluate",
    "is_number",
]

#: Longest expression accepted, in characters.
MAX_LENGTH = 2000
#: Deepest expression tree accepted.
MAX_DEPTH = 50
#: Largest integer accepted, in bits (about 1,233 decimal digits): for a literal, a variable's
#: value and every intermediate result. Floats are always finite, so at most 1,024 bits.
MAX_INT_BITS = 4096
#: log10(2): decimal digits per bit.
_DIGITS_PER_BIT = math.log10(2)

Number = int | float


class ExpressionError(ValueError):
    """An expression is not allowed or has no finite value.

    ``offset`` is the 0-based position of the problem inside the expression text.
    ``kind`` is ``"syntax"`` (not allowed) or ``"value"`` (no finite number).
    """

    def __init__(self, message: str, offset: int = 0, hint: str = "", kind: str = "syntax"):
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.hint = hint
        self.kind = kind


class UnknownNameError(ExpressionError):
    """An expression uses a name that no variable defines."""

    def __init__(self, name: str, offset: int):
        super().__init__(f"unknown variable '{name}'", offset, kind="name")
        self.name = name


class NotANumberError(ExpressionError):
    """A variable used in arithmetic holds text, a list or a mapping."""

    def __init__(self, name: str, value: Any, offset: int):
        shown = short_repr(value)
        super().__init__(
            f"variable '{name}' is {shown}, not a number, so it cannot be used in arithmetic",
            offset,
            f"Write eval({name}) alone to use its value as it is.",
            kind="value",
        )
        self.name = name


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def short_repr(value: Any) -> str:
    """``repr(value)`` when it is short, else its type's name; never costlier than a few
    dozen characters whatever the size of ``value``."""
    shown = _REPR.repr(value)
    return shown if len(shown) < 60 and "..." not in shown else type(value).__name__


def is_number(value: Any) -> bool:
    """True for ints and floats (booleans count, as in Python and SparseML)."""
    return isinstance(value, (int, float))


def eval_body(value: Any) -> str | None:
    """The expression inside a value that is exactly ``eval(...)``, else None.

    >>> eval_body("eval(a + 1)"), eval_body("eval(a)+1"), eval_body(3)
    ('a + 1', None, None)
    """
    if not isinstance(value, str) or not value.startswith("eval(") or not value.endswith(")"):
        return None
    body = value[5:-1]
    # "eval(a)+eval(b)" ends with ")" but its parentheses do not enclose the whole text.
    depth = 0
    for ch in body:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return None
    return body if depth == 0 else None


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
    "int": int,
    "float": float,
}
_SYMBOL = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**",
}


def _offset(node: ast.AST, line_starts: list[int]) -> int:
    line = getattr(node, "lineno", 1)
    col = getattr(node, "col_offset", 0)
    return line_starts[line - 1] + col if line - 1 < len(line_starts) else col


@functools.lru_cache(maxsize=2048)  # recipes repeat their expressions (eval(num_epochs) ...)
def _parse(expr: str) -> tuple[ast.expr, list[int]]:
    """The checked syntax tree of ``expr`` and its line starts (shared: never modified)."""
    if len(expr) > MAX_LENGTH:
        raise ExpressionError(
            f"the expression is {len(expr)} characters long (the limit is {MAX_LENGTH})",
            0,
            "Split it into variables.",
        )
    if not expr.strip():
        raise ExpressionError("eval() is empty", 0, "Write an expression: eval(num_epochs * 0.5).")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        offset = (exc.offset or 1) - 1 + (len(expr) - len(expr.lstrip()))
        raise ExpressionError(
            f"invalid expression: {exc.msg}", max(offset, 0), "Check the brackets and operators."
        ) from None
    except (RecursionError, MemoryError, ValueError):
        raise ExpressionError("the expression is too deeply nested", 0) from None
    lead = len(expr) - len(expr.lstrip())
    starts = [0]
    for i, ch in enumerate(expr.strip()):
        if ch == "\n":
            starts.append(i + 1)
    starts = [s + lead for s in starts]
    _check(tree.body, starts, 0)
    return tree.body, starts


def _check(node: ast.AST, starts: list[int], depth: int) -> None:
    """Reject every construct outside the grammar, pointing at it."""
    if depth > MAX_DEPTH:
        raise ExpressionError("the expression is too deeply nested", _offset(node, starts))
    at = _offset(node, starts)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ExpressionError(
                f"{node.value!r} is not a number; expressions use numbers and variable names only",
                at,
                "To use text or a list, define a variable and write eval(name).",
            )
        return
    if isinstance(node, ast.Name):
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise ExpressionError(
                "this operator is not allowed", at, "Use + - * / // % ** and parentheses."
            )
        _check(node.left, starts, depth + 1)
        _check(node.right, starts, depth + 1)
        return
    if isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            raise ExpressionError("only unary + and - are allowed", at)
        _check(node.operand, starts, depth + 1)
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            raise ExpressionError(
                "only calls of abs, min, max, round, int and float are allowed",
                at,
                "Compute the value with arithmetic, or write the number.",
            )
        if any(k.arg not in ("ndigits",) or node.func.id != "round" for k in node.keywords):
            raise ExpressionError(
                f"{node.func.id}() takes positional arguments only", at
            )
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if isinstance(arg, ast.Starred):
                raise ExpressionError("*arguments are not allowed", _offset(arg, starts))
            _check(arg, starts, depth + 1)
        return
    name = type(node).__name__
    what = {
        "Attribute": "attribute access (a.b)",
        "Subscript": "indexing (a[0])",
        "Compare": "comparisons",
        "BoolOp": "and/or",
        "IfExp": "conditional expressions",
        "Lambda": "lambdas",
        "List": "lists",
        "Tuple": "tuples",
        "Dict": "mappings",
        "Set": "sets",
        "ListComp": "comprehensions",
        "GeneratorExp": "comprehensions",
        "JoinedStr": "strings",
    }.get(name, name)
    raise ExpressionError(
        f"{what} not allowed in eval()",
        at,
        "Expressions use numbers, variable names, + - * / // % **, parentheses and "
        "abs/min/max/round/int/float.",
    )


def referenced_names(expr: str) -> list[str]:
    """The variable names ``expr`` uses, in order of first use.

    Raises :class:`ExpressionError` when ``expr`` is outside the grammar.

    >>> referenced_names("a * b + min(a, 2)")
    ['a', 'b']
    """
    return list(_names(expr))


@functools.lru_cache(maxsize=2048)
def _names(expr: str) -> tuple[str, ...]:
    body, _ = _parse(expr)
    seen: dict[str, None] = {}
    for node in ast.walk(body):
        if isinstance(node, ast.Name) and not (
            isinstance(node.ctx, ast.Load) and node.id in _FUNCTIONS and _is_func(body, node)
        ):
            seen.setdefault(node.id, None)
    return tuple(seen)


def _is_func(body: ast.AST, name: ast.Name) -> bool:
    return any(isinstance(n, ast.Call) and n.func is name for n in ast.walk(body))


def _bits(value: Number) -> int:
    """The size of an int in bits; floats are fixed-size (0: no growth to estimate)."""
    return value.bit_length() if isinstance(value, int) else 0


def _finite(value: Any, node: ast.AST, starts: list[int], what: str = "the result") -> Number:
    """``value`` when it is an operand the evaluator accepts: a finite float or an int of at
    most :data:`MAX_INT_BITS` bits."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(
            f"{what} is not a finite number", _offset(node, starts), kind="value"
        )
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ExpressionError(
            f"{what} is too large (more than {MAX_INT_BITS} bits, about "
            f"{int(MAX_INT_BITS * _DIGITS_PER_BIT)} digits)",
            _offset(node, starts),
            "Use a float (write 1e30) or smaller numbers.",
            kind="value",
        )
    return value


def _estimate_bits(op: type, left: Number, right: Number) -> float:
    """A lower bound of the size in bits of ``left OP right``, from the operands' sizes only.

    Operands are bounded (:func:`_finite`), so only results that grow faster than their
    operands can be costly: ``+ -`` add one bit, ``*`` adds the sizes, ``**`` multiplies
    the base's size by the exponent. Division and ``%`` never grow; float results are
    fixed-size (their overflow is an OverflowError or an infinity, reported as such).
    """
    if not (isinstance(left, int) and isinstance(right, int)):
        return 0.0  # a float result: fixed-size, computed in constant time (C arithmetic)
    a, b = _bits(left), _bits(right)
    if op in (ast.Add, ast.Sub):
        return max(a, b)  # at most one bit more
    if op is ast.Mult:
        return 0.0 if left == 0 or right == 0 else a + b - 1
    if op is ast.Pow:
        if right <= 0 or abs(left) <= 1:
            return 1.0  # a float (negative exponent), 1, 0 or -1
        return _power_bits(left, right)
    return 0.0  # / // %: no larger than the operands


def _power_bits(base: Number, exp: Number) -> float:
    """The size in bits of ``base ** exp`` (``abs(base) > 1``, ``exp > 0``); ``inf`` when
    even that estimate is beyond a float (``3 ** 2 ** 1100``: an exponent of 1101 bits)."""
    try:
        return exp * math.log2(abs(base))
    except OverflowError:
        return math.inf


def _power(base: Number, exp: Number, node: ast.AST, starts: list[int]) -> Number:
    if isinstance(base, (int, float)) and abs(base) > 1 and exp > 0:
        # Floats too: refused rather than overflowing to an unhelpful message.
        bits = _power_bits(base, exp)
        if bits > MAX_INT_BITS:
            raise ExpressionError(
                f"{base} ** {exp} is too large to compute",
                _offset(node, starts),
                kind="value",
            )
    if base == 0 and exp < 0:
        raise ExpressionError("0 cannot be raised to a negative power", _offset(node, starts), kind="value")
    result = base ** exp
    if isinstance(result, complex):
        raise ExpressionError(
            "a negative number raised to a fractional power has no real value",
            _offset(node, starts),
            kind="value",
        )
    return result


def _round(args: list[Number], kwargs: dict[str, Number]) -> Number:
    """``round`` without its one unbounded case: an int rounded to ``-n`` digits computes
    ``10 ** n`` first. When ``10 ** n`` exceeds twice the number, the result is 0, known
    without computing it; otherwise ``n`` is at most the number's digit count + 2."""
    digits = kwargs.get("ndigits", args[1] if len(args) > 1 else None)
    if (
        len(args) + len(kwargs) == 2
        and isinstance(args[0], int)
        and isinstance(digits, int)
        and digits < 0
        and -digits > _bits(args[0]) * _DIGITS_PER_BIT + 2
    ):
        return 0
    return round(*args, **kwargs)  # type: ignore[call-overload,no-any-return]


def evaluate(expr: str, variables: Mapping[str, Any]) -> Number:
    """The value of ``expr`` with ``variables`` bound.

    Raises :class:`UnknownNameError` for an undefined name, :class:`NotANumberError` for a
    variable that is not a number, and :class:`ExpressionError` for anything else.
    """
    body, starts = _parse(expr)

    def ev(node: ast.AST) -> Number:
        if isinstance(node, ast.Constant):
            return _finite(node.value, node, starts, "this number")
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise UnknownNameError(node.id, _offset(node, starts))
            value = variables[node.id]
            if not is_number(value):
                raise NotANumberError(node.id, value, _offset(node, starts))
            return _finite(value, node, starts, f"variable '{node.id}'")
        if isinstance(node, ast.UnaryOp):
            return _finite(_UNARY[type(node.op)](ev(node.operand)), node, starts)
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left), ev(node.right)
            if _estimate_bits(type(node.op), left, right) > MAX_INT_BITS:
                raise ExpressionError(
                    f"the result of '{_SYMBOL[type(node.op)]}' would be too large (more than "
                    f"{MAX_INT_BITS} bits)",
                    _offset(node, starts),
                    "Use a float (write 1e30) or smaller numbers.",
                    kind="value",
                )
            try:
                if isinstance(node.op, ast.Pow):
                    return _finite(_power(left, right, node, starts), node, starts)
                return _finite(_BINARY[type(node.op)](left, right), node, starts)
            except ZeroDivisionError:
                raise ExpressionError(
                    f"division by zero in '{_SYMBOL[type(node.op)]}'",
                    _offset(node, starts),
                    kind="value",
                ) from None
            except OverflowError:
                raise ExpressionError(
                    "the result is too large", _offset(node, starts), kind="value"
                ) from None
        if isinstance(node, ast.Call):
            name = node.func.id  # type: ignore[attr-defined]
            args = [ev(a) for a in node.args]
            kwargs = {k.arg: ev(k.value) for k in node.keywords if k.arg}
            try:
                if name == "round":
                    return _finite(_round(args, kwargs), node, starts)
                return _finite(_FUNCTIONS[name](*args, **kwargs), node, starts)
            except (TypeError, ValueError, OverflowError) as exc:
                raise ExpressionError(
                    f"{name}() failed: {exc}", _offset(node, starts), kind="value"
                ) from None
        raise ExpressionError("not allowed", _offset(node, starts))  # pragma: no cover

    return ev(body)
