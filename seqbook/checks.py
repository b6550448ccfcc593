"""Argument checks shared by every module: one place, one wording for every error.

Every public function and class of ``seqbook`` checks what it is given before it computes, and an
error names the argument, what was expected and what came in::

    ValueError: hidden_size must be an int >= 1, got 0
    ValueError: x must have shape (B, T, 8), got (2, 5, 7)
    TypeError: ids must be an integer tensor, got torch.float32

The checks are cheap: they read shapes, dtypes and Python numbers. A check that has to read tensor
*values* (``check_ids``, ``check_finite``) synchronises with a GPU once per call, which is why the
models call them on their inputs, not inside their time loops. Value checks are skipped where there
are no values to read (:func:`has_values`): on the ``meta`` device, which has shapes only, and while
``torch.compile`` traces a model, where reading a value would break the graph; shape and dtype
checks still run there.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import math
import numbers
import threading
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

__all__ = [
    "checked",
    "readers_code",
    "optional",
    "INTEGER_DTYPES",
    "check_lm_chunks",
    "check_logits",
    "check_positive_int",
    "check_even_size",
    "check_pairs",
    "check_count",
    "check_flag",
    "check_callable",
    "check_module",
    "check_generator",
    "check_module_input",
    "check_str",
    "check_same_dtype",
    "shape_of",
    "has_values",
    "autocast_enabled",
    "check_int",
    "check_number",
    "check_probability",
    "check_tensor",
    "check_float_tensor",
    "check_gates",
    "check_features",
    "check_vectors",
    "check_ids",
    "check_lengths",
    "check_forbid",
    "check_finite",
    "check_like",
    "check_bool_mask",
    "check_same_batch",
    "check_choice",
    "check_even",
    "check_token_ids",
    "check_targets",
    "check_padding_mask",
    "check_mask",
    "check_attn_mask",
    "check_sequence",
    "check_rotary",
    "ANGLE_TOLERANCE",
    "check_angles",
    "check_phasors",
    "check_broadcast",
    "check_symbol_pair",
    "check_score_mask",
    "check_symbol_attention",
    "check_set_dim",
    "check_layer_input",
    "check_symbols_and_codebook",
    "check_optional_str",
    "check_axes",
    "int_at_least",
    "number_at_least",
    "check_molecules",
]


# How many checked calls are running in this thread: a checked function called while another one
# runs was called by the package, whose arguments were checked at the door, so it does not check again.
_calls = threading.local()


def checked(validate: Callable | None = None, /, **specs: Callable) -> Callable:
    """Check a function's arguments before it runs, once, where the reader's call enters the
    package: the package's one way to keep argument checks out of the code the chapters print.

    An argument that is checked on its own is named with its check, a function of ``seqbook.checks``
    called as ``check(name, value)``; an argument checked against another one, or against the
    module's sizes, goes to ``validate``, a function right above the one it guards that names the
    parameters it checks (a subset of the function's, the same names, no defaults: it receives the
    values the call bound, defaults included). Both raise a clear error or return nothing, and never
    change the arguments. The decorated function is then the computation only, and
    :func:`seqbook.utils.show_source` prints it without the decorator line::

        def _check_forward(self, x):
            check_float_tensor("x", x, shape=(None, None, self.embed_dim))

        @checked(_check_forward, return_gates=check_flag)
        def forward(self, x, return_gates=False):
            return self.linear2(self.activation(self.linear1(x)))  # the math only

    The per-argument checks run first, in the order named, then ``validate``.

    **Once, at the door.** While a checked call runs, the checked calls it makes (a GPT's blocks,
    a block's attention) skip their checks: their arguments were built by the package from
    arguments already checked. :func:`readers_code` opens the door again around code the reader
    supplied (a model handed to a training loop, a callback).
    """
    own = inspect.signature(validate).parameters if validate is not None else {}

    def decorate(fn: Callable) -> Callable:
        signature = inspect.signature(fn)
        params = list(signature.parameters)
        names = [n for n in own if n in params]
        variadic = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in own.values())
        unknown = [n for n in own if n not in params and own[n].default is inspect.Parameter.empty
                   and not variadic] + [n for n in specs if n not in params]
        if unknown:
            name = validate.__qualname__ if validate is not None else "checked"
            raise TypeError(f"{name} names {unknown}, which {fn.__qualname__} does not take")
        same = validate is not None and names == params == list(own)  # no binding needed

        def check(args, kwargs) -> None:
            if not specs and (variadic or (same and not kwargs and len(args) == len(params))):
                validate(*args, **kwargs)
                return
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            for name, spec in specs.items():
                spec(name, bound.arguments[name])
            if validate is not None:
                if variadic:
                    validate(*args, **kwargs)
                else:
                    validate(**{n: bound.arguments[n] for n in names})

        @functools.wraps(fn)
        def run(*args, **kwargs):
            if getattr(_calls, "depth", 0):  # called by the package: checked at the door
                return fn(*args, **kwargs)
            check(args, kwargs)
            _calls.depth = 1
            try:
                return fn(*args, **kwargs)
            finally:
                _calls.depth = 0

        run.validate = validate
        run.specs = specs
        return run

    return decorate


def optional(check: Callable) -> Callable:
    """``check`` for an argument that may also be None: ``@checked(d_ff=optional(check_positive_int))``."""

    def check_optional(name: str, value) -> None:
        if value is not None:
            check(name, value)

    inner = check.func if isinstance(check, functools.partial) else check  # a partial has no name
    check_optional.__qualname__ = f"optional({inner.__qualname__})"
    check_optional.check = check  # what it runs on a value that is not None
    return check_optional


@contextlib.contextmanager
def readers_code():
    """Check the package's calls again inside this block: for code the reader supplied (a model
    passed to a training loop), whose calls into the package enter by the door."""
    depth = getattr(_calls, "depth", 0)
    _calls.depth = 0
    try:
        yield
    finally:
        _calls.depth = depth


def shape_of(x: torch.Tensor) -> tuple[int, ...]:
    """The shape of ``x`` as a plain tuple, e.g. ``(2, 5, 7)``, for error messages."""
    return tuple(x.shape)


def has_values(x: torch.Tensor) -> bool:
    """Whether a check may read the values of ``x``: not on the meta device, not inside torch.compile."""
    return x.device.type != "meta" and not torch.compiler.is_compiling()


def check_int(name: str, value, minimum: int | None = 1, maximum: int | None = None) -> int:
    """Check that ``value`` is an integer (Python or NumPy, not bool) in [minimum, maximum].

    Returns it as a Python ``int``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an int <= {maximum}, got {value}")
    return value


def check_number(
    name: str,
    value,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
) -> float:
    """Check that ``value`` is a real number (not bool, not NaN) in the interval given.

    ``low``/``high`` bound the interval, closed unless ``low_open``/``high_open``. Infinity is
    refused unless ``allow_inf``. Returns the value as a Python ``float``.
    """
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value}")
    return value


def check_probability(name: str, p, allow_one: bool = False) -> float:
    """Check a probability such as a dropout rate: in [0, 1), or [0, 1] with ``allow_one``."""
    return check_number(name, p, 0.0, 1.0, high_open=not allow_one)


def _shape_text(shape: Sequence) -> str:
    parts = ["*" if s is None else str(s) for s in shape]
    return "(" + ", ".join(parts) + (",)" if len(parts) == 1 else ")")


def check_tensor(
    name: str,
    x,
    ndim: int | Sequence[int] | None = None,
    shape: Sequence | None = None,
    names: str | None = None,
    nonempty: bool = True,
) -> torch.Tensor:
    """Check that ``x`` is a tensor of the expected rank and shape.

    Args:
        ndim: the allowed rank, or a sequence of allowed ranks.
        shape: the expected shape; ``None`` entries match any size. Implies ``ndim``.
        names: how to write the expected shape in the message, e.g. ``"(B, T, 8)"``.
        nonempty: refuse a tensor with a zero-sized dimension.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if shape is not None:
        expected = names or _shape_text(shape)
        wrong_size = x.dim() != len(shape) or any(
            s is not None and s != n for s, n in zip(shape, x.shape, strict=True))
        if wrong_size:
            raise ValueError(f"{name} must have shape {expected}, got {shape_of(x)}")
    elif ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.dim() not in allowed:
            what = names or " or ".join(f"{d}-D" for d in allowed)
            raise ValueError(f"{name} must be {what}, got shape {shape_of(x)}")
    if nonempty and x.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {shape_of(x)}")
    return x


def check_float_tensor(name: str, x, **kwargs) -> torch.Tensor:
    """``check_tensor`` plus: ``x`` has a floating-point dtype."""
    check_tensor(name, x, **kwargs)
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    return x


def check_gates(name: str, x, **kwargs) -> torch.Tensor:
    """``check_float_tensor`` plus: every value is a gate in [0, 1] (NaN refused). Reads the values
    (a GPU sync) where :func:`has_values`."""
    check_float_tensor(name, x, **kwargs)
    if has_values(x) and not bool(((x >= 0) & (x <= 1)).all()):  # also refuses NaN
        raise ValueError(f"{name} must hold gate values in [0, 1], found a value outside (or NaN)")
    return x


def check_vectors(name: str, x) -> torch.Tensor:
    """A float tensor of shape ``(..., d)``, any number of leading dims: vectors along the last one."""
    check_float_tensor(name, x, nonempty=False)
    if x.dim() == 0:
        raise ValueError(f"{name} must have shape (..., d), got a 0-D tensor")
    return x


def check_features(name: str, x, size: int) -> torch.Tensor:
    """A float tensor of any shape ``(..., size)``: what a per-token layer (LayerNorm, RMSNorm) takes."""
    check_float_tensor(name, x, nonempty=False)
    if x.dim() == 0 or x.shape[-1] != size:
        raise ValueError(f"{name} must have shape (..., {size}), got {tuple(x.shape)}")
    return x


# The integer dtypes a tensor of ids or lengths may have (what nn.Embedding and indexing accept).
INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def check_ids(name: str, ids, num_classes: int | None = None, ignore_index: int | None = None,
              **kwargs) -> torch.Tensor:
    """Check that ``ids`` is an integer tensor with every entry in [0, num_classes).

    Without ``num_classes`` (no table size known here) only the lower end is checked: an id is
    never negative. Entries equal to ``ignore_index`` are exempt from the range check. ``kwargs``
    go to :func:`check_tensor` (rank and shape). Reads the values, so it synchronises with a GPU.
    """
    check_tensor(name, ids, **kwargs)
    if ids.dtype not in INTEGER_DTYPES:
        raise TypeError(f"{name} must be an integer tensor (token ids), got {ids.dtype}")
    if ids.numel() and has_values(ids):
        valid = ids if ignore_index is None else ids[ids != ignore_index]
        if valid.numel():
            lo, hi = torch.stack(torch.aminmax(valid)).tolist()  # one read of the values
            if num_classes is None:
                if lo < 0:
                    raise ValueError(f"{name} must hold ids >= 0, found {lo}")
            elif lo < 0 or hi >= num_classes:
                bad = lo if lo < 0 else hi
                raise ValueError(f"{name} must hold ids in [0, {num_classes - 1}], found {bad}")
    return ids


def check_logits(name: str, logits) -> torch.Tensor:
    """Logits to draw a token from: a float tensor (..., V), not empty, no NaN or +inf (-inf is a
    removed token), a finite entry left in every row."""
    check_float_tensor(name, logits)
    if logits.dim() == 0:
        raise ValueError(f"{name} must have shape (..., V) with at least one dim, got shape "
                         f"{shape_of(logits)}")
    if not has_values(logits):  # meta device or torch.compile: shapes only
        return logits
    bad, dead = torch.stack([(torch.isnan(logits) | (logits == float("inf"))).any(),
                             torch.isneginf(logits).all(-1).any()]).tolist()  # one read of the values
    if bad:
        raise ValueError(f"{name} must not hold NaN or +inf (-inf is allowed: a removed token)")
    if dead:
        raise ValueError(f"{name} must keep a finite entry in every row, got a row of -inf only "
                         "(no token left to keep)")
    return logits


def check_lengths(name: str, lengths: torch.Tensor, size: int, minimum: int = 1, of: str = "the sequence"
                  ) -> torch.Tensor:
    """Check that every entry of the integer tensor ``lengths`` lies in [minimum, size]: no length
    beyond the sequence it measures, whose length is ``size`` (``of`` names it in the message).

    The message names the argument, the range, and the longest (or shortest) length found. Reads the
    values (a GPU sync); skipped where there are none (:func:`has_values`).
    """
    if lengths.numel() and has_values(lengths):
        lo, hi = torch.stack(torch.aminmax(lengths)).tolist()  # one read of the values
        if hi > size or lo < minimum:
            found = f"a longest length of {hi}" if hi > size else f"a shortest length of {lo}"
            raise ValueError(f"{name} must lie in [{minimum}, {size}] ({size} = the length of {of}), "
                             f"got {found}")
    return lengths


def check_forbid(name: str, forbid, vocab_size: int | None = None) -> tuple[int, ...]:
    """Check ids a sampler must never emit: a sequence (tuple, list, range) of ints in
    [0, vocab_size) that leaves at least one of the ``vocab_size`` ids. Without ``vocab_size`` (not
    known yet) only the form and the lower end are checked. Returns the ids as a tuple of ints."""
    if isinstance(forbid, (str, bytes)) or not isinstance(forbid, Sequence):
        raise TypeError(f"{name} must be a sequence (tuple or list) of int ids, got "
                        f"{type(forbid).__name__} {forbid!r}")
    if vocab_size is not None:
        vocab_size = check_int("vocab_size", vocab_size, minimum=1)
    top = None if vocab_size is None else vocab_size - 1
    ids = tuple(check_int(f"{name}[{i}]", x, minimum=0, maximum=top) for i, x in enumerate(forbid))
    if vocab_size is not None and len(set(ids)) >= vocab_size:
        raise ValueError(f"{name} must leave at least one id to emit, got all {vocab_size} ids")
    return ids


def check_finite(name: str, x: torch.Tensor) -> torch.Tensor:
    """Check that ``x`` holds no NaN or infinity. Reads the values (a GPU sync)."""
    if not has_values(x):  # meta device or torch.compile: no values to read
        return x
    if x.is_floating_point() and x.numel() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite, got a NaN or infinite entry")
    return x


def check_like(name: str, x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Check that ``x`` is a floating-point tensor on the device and (autocast aside) of the dtype of
    the module's parameter ``like``. Reads no values."""
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.device != like.device:
        raise ValueError(f"{name} must be on the module's device {like.device}, got {x.device}")
    autocast = autocast_enabled(x) and torch.float64 not in (x.dtype, like.dtype)
    if x.dtype != like.dtype and not autocast:  # autocast casts float32/16 inputs, never float64
        raise TypeError(f"{name} must have the module's dtype {like.dtype}, got {x.dtype} "
                        f"(convert one of them with .to(dtype))")
    return x


def check_bool_mask(name: str, mask, shape: Sequence | None = None, names: str | None = None
                    ) -> torch.Tensor:
    """Check that ``mask`` is a boolean tensor (True = real token / may attend) of ``shape``."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a bool torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (True = keep), got {mask.dtype}")
    if shape is not None:
        check_tensor(name, mask, shape=shape, names=names, nonempty=False)
    return mask


def check_same_batch(**tensors: torch.Tensor) -> int:
    """Check that every tensor given has the same first (batch) dimension; return it."""
    sizes = {k: v.shape[0] for k, v in tensors.items()}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{k}: {n}" for k, n in sizes.items())
        raise ValueError(f"batch sizes must agree, got {listed}")
    return next(iter(sizes.values()))


def autocast_enabled(x: torch.Tensor) -> bool:
    """Whether autocast is on for ``x``'s device type (False for a device type without autocast,
    such as ``meta``)."""
    try:
        return torch.is_autocast_enabled(x.device.type)
    except RuntimeError:
        return False


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    """A size: an int (Python or NumPy, not bool) >= minimum, as a Python int: the package's one
    size check (``check_int`` with a lower bound)."""
    return check_int(name, value, minimum)


def check_even_size(name: str, value) -> int:
    """A size whose dimensions turn in pairs (a rotary head): an int >= 2 and even."""
    value = check_int(name, value, 1)
    if value % 2:
        raise ValueError(f"{name} must be even (the dimensions turn in pairs), got {value}")
    return value


def check_pairs(name: str, x) -> torch.Tensor:
    """A floating-point tensor (..., D) whose last dimension D is even (it turns in pairs)."""
    check_float_tensor(name, x, ndim=range(1, 100), names="(..., D)", nonempty=False)
    if x.shape[-1] % 2:
        raise ValueError(f"{name} must have an even last dimension D (it turns in pairs), "
                         f"got {tuple(x.shape)}")
    return x


def check_count(name: str, value) -> int:
    """A count that may be zero (steps, new tokens, layers): an int >= 0, as a Python int."""
    return check_int(name, value, 0)


def check_flag(name: str, value) -> bool:
    """A flag: ``True`` or ``False`` (NumPy's bools too), not 0, 1, None or a string: the
    package's one flag check. Returns a Python bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_callable(name: str, value) -> None:
    """A function (anything callable) that the package will call, such as a forward pass."""
    if not callable(value) or isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a function, got {type(value).__name__}")


def check_module(name: str, value) -> None:
    """A ``torch.nn.Module``."""
    if not isinstance(value, nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(value).__name__}")


def check_generator(name: str, generator) -> None:
    """``generator`` is None or a ``torch.Generator``."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator or None, got {type(generator).__name__}")


def check_same_dtype(name: str, x: torch.Tensor, dtype: torch.dtype) -> None:
    """``x`` must have the dtype of the module's weights (autocast casts for itself)."""
    if x.dtype != dtype and not autocast_enabled(x):
        raise TypeError(f"{name} must have the dtype of the module's weights, {dtype}, got {x.dtype} "
                        f"(convert the module with .to({dtype}) or the input with .to(...))")


def check_lm_chunks(inputs: torch.Tensor, targets: torch.Tensor, model: nn.Module) -> None:
    """(num_chunks, B, T) integer ids, not empty; in range when the model states its vocab_size."""
    check_module("model", model)
    if next(model.parameters(), None) is None:
        raise ValueError(f"model must have parameters (they give the device), got {type(model).__name__}")
    check_tensor("inputs", inputs, nonempty=False)
    check_tensor("targets", targets, nonempty=False)
    if inputs.dim() != 3 or inputs.shape != targets.shape:
        raise ValueError("inputs and targets must both have shape (num_chunks, B, T), got "
                         f"{tuple(inputs.shape)} and {tuple(targets.shape)}")
    size = getattr(model, "vocab_size", None)
    size = size if isinstance(size, int) else None
    check_ids("inputs", inputs, size)
    check_ids("targets", targets, size)


def check_module_input(name: str, x, like: torch.Tensor, shape: str, min_dim: int = 1) -> None:
    """The input of a module: a real floating-point tensor of at least ``min_dim`` dims, on the
    device and (autocast aside) of the dtype of the module's tensor ``like``; no value is read."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.is_complex() or not x.is_floating_point():
        raise TypeError(f"{name} must be a real floating-point tensor, got {x.dtype}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
    check_like(name, x, like)


def check_str(name: str, value) -> str:
    """``value`` is a ``str``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------------------------
# Checks shared by several validators of the FHRR modules (vsa, vsa_models, molecules): symbols
# are real tensors (..., D) of pi-normalised angles, phasors complex tensors (..., D).
# ---------------------------------------------------------------------------------------------

ANGLE_TOLERANCE = 1e-5  # angles a hair outside [-1, 1] from float round-off are accepted


def _symbols_shape(min_dim: int) -> str:
    """How a set of symbols is written in a message: (..., D), (..., ?, D), ..."""
    return "(" + ", ".join(["..."] + ["?"] * (min_dim - 1) + ["D"]) + ")"


def check_angles(name: str, x, min_dim: int = 1, any_real: bool = False,
                 complex_view: bool = False) -> torch.Tensor:
    """Symbols: a real floating-point tensor (..., D) of pi-normalised angles.

    ``x`` has at least ``min_dim`` dims (2 for a set (..., K, D)) and, when ``min_dim >= 1``, a
    symbol dimension D >= 1. Its values lie in [-1, 1], or with ``any_real`` are any finite angles
    (read modulo 2). ``complex_view``: float32 or float64 only, the dtypes whose phasors torch
    supports. A phasor (a complex tensor) is a wrong dtype: ``TypeError``. Reads the values (a GPU
    sync) where :func:`has_values`.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():  # a complex tensor too: a phasor passed where an angle belongs
        raise TypeError(f"{name} must be a real floating-point tensor of pi-normalised angles, "
                        f"got dtype {x.dtype}")
    if x.dim() < min_dim:
        raise ValueError(f"{name} must have shape {_symbols_shape(min_dim)}, got {shape_of(x)}")
    if min_dim >= 1 and x.shape[-1] == 0:
        raise ValueError(f"{name} must have a symbol dimension D >= 1 (last dim), got {shape_of(x)}")
    if complex_view and x.dtype in (torch.float16, torch.bfloat16):
        raise TypeError(f"{name} must be float32 or float64 to make phasors (torch has no complex type "
                        f"with {x.dtype} parts that these operations support), got {x.dtype}")
    if not x.numel() or not has_values(x):
        return x
    if any_real:
        if not bool(torch.isfinite(x.detach()).all()):
            raise ValueError(f"{name} must be finite, got a NaN or infinite entry (shape {shape_of(x)})")
        return x
    lo, hi = (float(t) for t in torch.aminmax(x.detach()))  # one read of the values
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < -1 - ANGLE_TOLERANCE or hi > 1 + ANGLE_TOLERANCE:
        raise ValueError(f"{name} must hold pi-normalised angles in [-1, 1], got values in "
                         f"[{lo:.4g}, {hi:.4g}] (shape {shape_of(x)})")
    return x


def check_phasors(name: str, z, min_dim: int = 1) -> torch.Tensor:
    """Phasors: a complex64 or complex128 tensor (..., D), at least ``min_dim`` dims, D >= 1 when
    ``min_dim >= 1``. A real tensor (an angle passed where a phasor belongs) is a ``TypeError``.
    Reads no values."""
    if not isinstance(z, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(z).__name__}")
    if not z.is_complex():
        raise TypeError(f"{name} must be a complex tensor of phasors (see seqbook.vsa.to_phasor), "
                        f"got dtype {z.dtype}")
    if z.dtype not in (torch.complex64, torch.complex128):
        raise TypeError(f"{name} must be a complex64 or complex128 tensor of phasors, got {z.dtype}")
    if z.dim() < min_dim:
        raise ValueError(f"{name} must have shape {_symbols_shape(min_dim)}, got {shape_of(z)}")
    if min_dim >= 1 and z.shape[-1] == 0:
        raise ValueError(f"{name} must have a symbol dimension D >= 1 (last dim), got {shape_of(z)}")
    return z


def check_broadcast(what: str, **shapes) -> tuple[int, ...]:
    """The broadcast of the named ``shapes``, or a ``ValueError`` that lists them (``what`` says
    which shapes, e.g. ``"leading dims of a and b"``)."""
    try:
        return tuple(torch.broadcast_shapes(*shapes.values()))
    except RuntimeError:
        listed = ", ".join(f"{k} {tuple(s)}" for k, s in shapes.items())
        raise ValueError(f"the {what} must broadcast, got {listed}") from None


def check_symbol_pair(a_name: str, a, b_name: str, b, pairwise: bool = False,
                      phasors: bool = False) -> None:
    """Two sets of symbols compared or combined element by element (or, ``pairwise``, every one of
    ``a`` (..., M, D) with every one of ``b`` (..., N, D)): each checked by :func:`check_angles`
    (or :func:`check_phasors`), one symbol dimension D, one device, leading dims that broadcast,
    and for the matrix products of ``pairwise`` one dtype."""
    lead = 2 if pairwise else 1
    for name, x in ((a_name, a), (b_name, b)):
        check_phasors(name, x, lead) if phasors else check_angles(name, x, lead)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"{a_name} and {b_name} must have the same symbol dimension D (last dim), "
                         f"got {a_name} {shape_of(a)} and {b_name} {shape_of(b)}")
    if a.device != b.device:
        raise ValueError(f"{a_name} and {b_name} must be on the same device, got {a.device} and {b.device}")
    if pairwise and a.dtype != b.dtype:
        raise TypeError(f"{a_name} and {b_name} must have the same dtype, got {a.dtype} and {b.dtype}")
    check_broadcast(f"leading dims of {a_name} and {b_name}",
                    **{a_name: a.shape[:a.dim() - lead], b_name: b.shape[:b.dim() - lead]})


def check_score_mask(name: str, mask, target: Sequence[int], names: str) -> torch.Tensor:
    """A bool mask, True where a query may look at a key, that broadcasts to the attention scores
    of shape ``target`` (written ``names`` in the message, e.g. ``"(B, T, T)"``)."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a bool torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (True where a query may look at a key), "
                        f"got {mask.dtype}")
    try:
        fits = tuple(torch.broadcast_shapes(mask.shape, target)) == tuple(target)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{name} must broadcast to {names} = {tuple(target)}, got {shape_of(mask)}")
    return mask


def check_symbol_attention(q, k, v, mask=None, phasors: bool = False) -> tuple[int, ...]:
    """The arguments of VSA attention: queries q (..., Tq, D), keys k (..., Tk, D) and values
    v (..., Tk, Dv), symbols (or ``phasors``) of one dtype and device whose leading dims broadcast,
    and an optional bool ``mask`` that broadcasts to the scores (..., Tq, Tk). Returns the scores'
    shape."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_phasors(name, x, 2) if phasors else check_angles(name, x, 2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same symbol dimension D (last dim), got q {shape_of(q)} "
                         f"and k {shape_of(k)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must hold the same number of symbols Tk, got k {shape_of(k)} "
                         f"and v {shape_of(v)}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must have the same dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k and v must be on the same device, got {q.device}, {k.device} and {v.device}")
    check_broadcast("leading dims of q, k and v", q=q.shape[:-2], k=k.shape[:-2], v=v.shape[:-2])
    scores = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])) + (q.shape[-2], k.shape[-2])
    if mask is not None:
        check_score_mask("mask", mask, scores, "(..., Tq, Tk)")
    return scores


def check_set_dim(name: str, dim, set_name: str, x: torch.Tensor) -> int:
    """``dim``: an int that names a dimension of the set ``x`` (any but the last, the symbol
    dimension D) along which ``x`` is not empty. Returns it as a Python int."""
    dim = check_int(name, dim, minimum=None)
    nd = x.dim()
    if not -nd <= dim < nd or dim % nd == nd - 1:
        raise ValueError(f"{name} must name a set dimension of {set_name} {shape_of(x)} "
                         f"(any but the last, the symbol dimension D), got {name}={dim}")
    if x.shape[dim] == 0:
        raise ValueError(f"cannot bundle an empty set: {set_name} has shape {shape_of(x)} "
                         f"with size 0 along {name}={dim}")
    return dim


def check_layer_input(name: str, x, like: torch.Tensor, shape: Sequence,
                      names: str | None = None) -> torch.Tensor:
    """The input of a layer: a real floating-point tensor of ``shape`` (``None`` matches any size,
    a leading ``...`` any number of leading dims; ``names`` writes it in the message), on the
    device and (autocast aside) of the dtype of the layer's tensor ``like``. Reads no values; an
    empty batch is legal."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():  # complex too
        raise TypeError(f"{name} must be a real floating-point tensor, got {x.dtype}")
    shape = tuple(shape)
    lead = shape[:1] == (...,)
    fixed = shape[1:] if lead else shape
    rank_ok = x.dim() >= len(fixed) if lead else x.dim() == len(fixed)
    if not rank_ok or any(s is not None and s != n
                          for s, n in zip(fixed, x.shape[x.dim() - len(fixed):], strict=True)):
        written = names or "(" + ", ".join("..." if s is ... else "*" if s is None else str(s)
                                           for s in shape) + ")"
        raise ValueError(f"{name} must have shape {written}, got {shape_of(x)}")
    return check_like(name, x, like)


def check_symbols_and_codebook(x, codebook) -> None:
    """x (B, n) and a codebook (C, n) of class symbols: finite floating-point tensors (angles,
    read modulo 2), C, n >= 1. Reads the values (a GPU sync)."""
    for name, t in (("x", x), ("codebook", codebook)):
        check_tensor(name, t, nonempty=False)
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor of angles, got {t.dtype}")
    if codebook.dim() != 2 or 0 in codebook.shape:
        raise ValueError(f"codebook must have shape (C, n) with C, n >= 1, got {shape_of(codebook)}")
    n = codebook.shape[1]
    if x.dim() != 2 or x.shape[1] != n:
        raise ValueError(f"x must have shape (B, n) = (B, {n}) to match codebook {shape_of(codebook)}, "
                         f"got {shape_of(x)}")
    check_finite("x", x)
    check_finite("codebook", codebook)


# ---------------------------------------------------------------------------------------------
# Figures (seqbook.plot) and command lines (seqbook.vsa_train, seqbook.gpt_train).
# ---------------------------------------------------------------------------------------------


def check_optional_str(name: str, value) -> str | None:
    """``value`` is a ``str`` or None (a label or a title that may be left out)."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, got {type(value).__name__}")
    return value


def check_axes(name: str, ax):
    """``ax`` is None (the current axes) or a matplotlib ``Axes``."""
    if ax is None:
        return ax
    from matplotlib.axes import Axes  # imported here: only the figures need matplotlib

    if not isinstance(ax, Axes):
        raise TypeError(f"{name} must be a matplotlib Axes or None, got {type(ax).__name__}")
    return ax


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An ``argparse`` type: the text of an int >= ``minimum`` (argparse names the flag in its
    error, e.g. ``argument --dim: invalid int >= 1 value: '0'``)."""
    def parse(text: str) -> int:
        value = int(text)  # a ValueError here: argparse reports "invalid ... value"
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an int >= {minimum}, got {value}")
        return value

    parse.__name__ = f"int >= {minimum}"
    return parse


def number_at_least(minimum: float) -> Callable[[str], float]:
    """An ``argparse`` type: the text of a number >= ``minimum`` (not NaN)."""
    def parse(text: str) -> float:
        value = float(text)
        if not value >= minimum:
            raise argparse.ArgumentTypeError(f"must be a number >= {minimum}, got {value}")
        return value

    parse.__name__ = f"number >= {minimum}"
    return parse


# ---------------------------------------------------------------------------------------------
# The transformer models (attention, transformer, gpt, llama): token ids and targets, the masks
# of PyTorch's twins, RoPE's angles, and named choices.
# ---------------------------------------------------------------------------------------------


def check_choice(name: str, value, choices) -> str:
    """``value`` is one of the names in ``choices`` (a str; ``choices`` may be a dict of them)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {sorted(choices)}, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def check_even(name: str, value) -> int:
    """A width whose dimensions go in pairs (sines and cosines, RoPE's rotations): an even int
    >= 2. Returns it as a Python int."""
    value = check_int(name, value, minimum=None)
    if value < 2 or value % 2:
        raise ValueError(f"{name} must be a positive even integer, got {value}")
    return value


def check_token_ids(name: str, ids, vocab_size: int, max_len: int | None = None,
                    max_name: str = "max_len") -> torch.Tensor:
    """Token ids for an embedding table: an int64 or int32 tensor (what ``nn.Embedding`` takes)
    of shape (B, T) with B, T >= 1, every id in [0, vocab_size) (:func:`check_ids`), and, when
    ``max_len`` is given, T <= max_len (``max_name`` names that limit in the message, e.g.
    ``block_size``). Reads the values (a GPU sync)."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be an int64 or int32 tensor of shape (B, T), got {type(ids).__name__}")
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an int64 or int32 tensor of shape (B, T), got {ids.dtype}")
    check_tensor(name, ids, shape=(None, None), names="(B, T)")
    if max_len is not None and ids.shape[1] > max_len:
        raise ValueError(f"{name} has length {ids.shape[1]} > {max_name}={max_len}")
    return check_ids(name, ids, vocab_size)


def check_targets(name: str, targets, idx: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Next-token targets of a language model: an integer tensor of the shape of ``idx``, every
    entry an id in [0, vocab_size) or -100 (ignored, as ``F.cross_entropy``'s ``ignore_index``),
    and at least one that is not ignored (the mean loss over no token is undefined)."""
    check_tensor(name, targets, nonempty=False)
    if targets.shape != idx.shape:
        raise ValueError(f"{name} must have shape {tuple(idx.shape)} (that of idx), got {shape_of(targets)}")
    check_ids(name, targets, vocab_size, ignore_index=-100)
    if has_values(targets) and not bool((targets != -100).any()):
        raise ValueError(f"{name} must hold at least one id that is not -100 (ignored): the mean "
                         f"loss over no token is undefined")
    return targets


def check_padding_mask(name: str, mask, B: int, S: int) -> torch.Tensor:
    """PyTorch's ``key_padding_mask``: a bool tensor (B, S), True at padding. A float mask is
    refused: a float copy of a bool mask would be added to the scores (1.0 at padding), not
    block them; an additive mask belongs in ``attn_mask``."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a bool torch.Tensor of shape ({B}, {S}) (True at padding), "
                        f"got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (True at padding), got {mask.dtype}")
    if shape_of(mask) != (B, S):
        raise ValueError(f"{name} must have shape ({B}, {S}), got {shape_of(mask)}")
    return mask


def check_mask(name: str, mask) -> torch.Tensor:
    """An attention mask: a bool tensor (which positions may attend) or a floating-point one (added
    to the scores, ``-inf`` blocks)."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a bool or floating-point torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"{name} must be a bool or floating-point tensor, got dtype {mask.dtype}")
    return mask


def check_attn_mask(name: str, mask, B: int, H: int, L: int, S: int) -> torch.Tensor:
    """PyTorch's ``attn_mask`` of multi-head attention over (B, H, L, S) scores: bool (True =
    blocked) or floating point (added to the scores), of shape (L, S), (B * H, L, S) or
    (B or 1, H or 1, L, S)."""
    check_mask(name, mask)
    shape = shape_of(mask)
    four_d = mask.dim() == 4 and shape[2:] == (L, S) and shape[0] in (1, B) and shape[1] in (1, H)
    if shape not in ((L, S), (B * H, L, S)) and not four_d:
        raise ValueError(f"{name} must have shape ({L}, {S}), ({B * H}, {L}, {S}) or ({B}, {H}, {L}, {S}), "
                         f"got {shape}")
    return mask


def check_sequence(name: str, x, width: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A batch of sequences of vectors: a floating-point tensor (B, T, width) with B, T >= 1, of
    ``dtype`` when given (the module's weights'; autocast aside). Reads no values."""
    check_float_tensor(name, x, shape=(None, None, width), names=f"(B, T, {width})")
    if dtype is not None:
        check_same_dtype(name, x, dtype)
    return x


def check_rotary(name: str, rotary, T: int, head_dim: int) -> None:
    """RoPE's angles for T positions: the pair ``(cos, sin)`` of :func:`seqbook.rope.rope_angles`,
    each a float tensor (T, head_dim)."""
    if not isinstance(rotary, (tuple, list)) or len(rotary) != 2:
        raise TypeError(f"{name} must be the (cos, sin) pair of rope_angles, got {type(rotary).__name__}")
    for i, t in enumerate(rotary):
        check_float_tensor(f"{name}[{i}]", t, shape=(T, head_dim), names=f"({T}, {head_dim}) (T, head_dim)",
                           nonempty=False)


MOLECULE_FIELDS = ("atoms", "bonds", "bond_features", "labels", "smiles")


def check_molecules(name: str, value, minimum: int = 2) -> None:
    """Molecules to split (a :class:`seqbook.data.Molecules`): one entry per molecule in each of
    its fields, at least ``minimum`` molecules."""
    if not all(hasattr(value, f) for f in MOLECULE_FIELDS) or isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a seqbook.data.Molecules, got {type(value).__name__}")
    sizes = {f: len(getattr(value, f)) for f in MOLECULE_FIELDS}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"{name} must have one entry per molecule in every field, got {sizes}")
    if sizes["labels"] < minimum:
        raise ValueError(f"{name} must hold at least {minimum} molecules to split, got {sizes['labels']}")
