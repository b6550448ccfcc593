"""Readable against production: chapter 10's linear-time layers beside the kernels a reader would use.

Each computation gets the same inputs in the book's readable form and in the production kernels
that compute the same function. Before anything is timed, every kernel's output and the gradients
of the inputs are compared with the readable form's on the device itself (float32, at two lengths,
one of them not a multiple of any chunk size); a kernel that differs is recorded and not timed.
Then forward and forward+backward time and peak memory against T = 1k ... 16k, one sequence of
GPT-2-small's shape (12 heads of 64 dimensions; width 1536 for the element-wise recurrence and
Mamba's inner width):

    computation               readable (seqbook)                 production kernels
    causal linear attention   linear_attention_chunked           fla chunk_linear_attn
    gated linear recurrence   parallel_scan, log_space_scan      fla chunk_hgrn, fused_recurrent_hgrn
    delta rule (DeltaNet)     delta_rule_chunked                 fla chunk_delta_rule
    gated delta rule          delta_rule_chunked (log_alpha)     fla chunk_gated_delta_rule
    Mamba-2's scan (SSD)      ssd_attention_form                 fla chunk_simple_gla,
                                                                 mamba_ssm mamba_chunk_scan_combined
    Mamba's selective scan    selective_scan_parallel            mamba_ssm selective_scan_fn

fla is flash-linear-attention's kernel package (``fla-core``, Triton). The calls pass what the book's
functions mean: fla's layout (B, T, H, D), ``scale=1.0`` (the book scales nothing) and, for linear
attention, the book's feature map elu + 1 applied to q and k and ``normalize=True`` (its divisor).
mamba_ssm's selective scan is a compiled CUDA extension; its Mamba-2 kernels are Triton and need no
compilation, so they load from the package's source (``.gpu_src/``, packed by ``prepare.sh``)
without the package's ``__init__``, which imports that extension. A kernel that cannot be loaded is
recorded with the reason.

Without a CUDA device the kernels cannot run (``--dry``: toy sizes on the CPU); each is then checked
against its library's own PyTorch reference with the same arguments (fla's ``naive`` functions,
mamba_ssm's ``ssd_minimal_discrete``) when the library imports: that checks the layouts, scales and
gates the adapters pass, and the device check repeats it for the kernels themselves. Run it from
the root of the repository::

    python -m benchmarks.gpu.kernels --device cuda --json perf/kernels.json
    python -m benchmarks.gpu.kernels --dry          # toy sizes on the CPU: checks the script
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# Triton's float32 matrix products default to TF32 (a 10-bit mantissa); the check below compares
# in float32 and needs full precision. Set before Triton compiles anything; bf16 timings unchanged.
os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.report import finish
from benchmarks.timing import time_row
from seqbook import delta_rule, linear_attention, scan, ssm
from seqbook.utils import code_commit

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Side:
    """One way to compute a pair's function.

    ``prepare`` turns the common inputs (the book's layout) into this side's arguments, ``call``
    is what is timed, ``back`` turns its output into the book's layout. ``reference``, for a
    kernel, is its library's PyTorch code with the same arguments (the check on a CPU);
    ``unavailable`` says why the kernel cannot run here."""

    name: str
    kind: str  # "readable" or "production"
    prepare: Callable[[dict], tuple]
    call: Callable[..., torch.Tensor]
    back: Callable[[torch.Tensor], torch.Tensor] = lambda y: y
    reference: Callable[..., torch.Tensor] | None = None
    unavailable: str | None = None


@dataclass
class Pair:
    name: str
    dtype: torch.dtype  # of the timings (the check runs in float32)
    make: Callable[[int, dict, torch.device, torch.dtype, torch.Generator], dict]
    sizes: dict
    sides: list[Side] = field(default_factory=list)


# --- the libraries -----------------------------------------------------------------------------


def load_fla() -> tuple[types.SimpleNamespace | None, str | None]:
    """fla's kernels and their PyTorch references, or the reason they cannot be imported."""
    try:
        ops = {name: importlib.import_module(f"fla.ops.{name}")
               for name in ("linear_attn", "hgrn", "delta_rule", "gated_delta_rule", "simple_gla")}
        naive = {name: importlib.import_module(f"fla.ops.{name}.naive")
                 for name in ("linear_attn", "hgrn", "gated_delta_rule", "simple_gla")}
        return types.SimpleNamespace(
            chunk_linear_attn=ops["linear_attn"].chunk_linear_attn,
            chunk_hgrn=ops["hgrn"].chunk_hgrn,
            fused_recurrent_hgrn=ops["hgrn"].fused_recurrent_hgrn,
            chunk_delta_rule=ops["delta_rule"].chunk_delta_rule,
            chunk_gated_delta_rule=ops["gated_delta_rule"].chunk_gated_delta_rule,
            chunk_simple_gla=ops["simple_gla"].chunk_simple_gla,
            naive_recurrent_linear_attn=naive["linear_attn"].naive_recurrent_linear_attn,
            naive_recurrent_hgrn=naive["hgrn"].naive_recurrent_hgrn,
            naive_recurrent_gated_delta_rule=naive["gated_delta_rule"]
            .naive_recurrent_gated_delta_rule,
            naive_recurrent_simple_gla=naive["simple_gla"].naive_recurrent_simple_gla,
        ), None
    except Exception as exc:  # noqa: BLE001 - ImportError, or Triton failing to set up
        return None, f"flash-linear-attention (fla) cannot be imported: {type(exc).__name__}: {exc}"


def load_mamba_ssd() -> tuple[types.SimpleNamespace | None, str | None]:
    """mamba_ssm's Triton kernel for Mamba-2's scan and its PyTorch reference.

    An installed build first; else the package's source in ``.gpu_src/``, loaded without its
    ``__init__`` (which imports the compiled selective scan that the Triton kernels do not use)."""
    try:
        return _mamba_ssd_modules(), None
    except Exception as exc:  # noqa: BLE001
        first = f"{type(exc).__name__}: {exc}"
    src = ROOT / ".gpu_src" / "mamba_ssm"
    if not src.is_dir():
        return None, f"mamba_ssm cannot be imported ({first}) and {src.relative_to(ROOT)} is absent"
    saved = {k: v for k, v in sys.modules.items() if k == "mamba_ssm" or k.startswith("mamba_ssm.")}
    package = types.ModuleType("mamba_ssm")
    package.__path__ = [str(src)]
    sys.modules["mamba_ssm"] = package
    try:
        return _mamba_ssd_modules(), None
    except Exception as exc:  # noqa: BLE001
        for k in [k for k in sys.modules if k == "mamba_ssm" or k.startswith("mamba_ssm.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        return None, f"mamba_ssm's Triton kernels cannot be loaded: {type(exc).__name__}: {exc}"


def _mamba_ssd_modules() -> types.SimpleNamespace:
    combined = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
    minimal = importlib.import_module("mamba_ssm.modules.ssd_minimal")
    return types.SimpleNamespace(mamba_chunk_scan_combined=combined.mamba_chunk_scan_combined,
                                 ssd_minimal_discrete=minimal.ssd_minimal_discrete)


def load_selective_scan() -> tuple[Callable | None, str | None]:
    """mamba_ssm's selective scan (Mamba-1), a compiled CUDA extension, or why it is absent."""
    try:
        import selective_scan_cuda  # noqa: F401 - the extension the function below calls
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except Exception as exc:  # noqa: BLE001
        return None, ("mamba_ssm's selective scan needs its compiled CUDA extension "
                      f"(selective_scan_cuda), not installed here: {type(exc).__name__}: {exc}. "
                      "The package index has mamba_ssm only as source, which compiles the extension "
                      "with nvcc against the installed torch; a GPU machine without network and "
                      "with minutes of device time cannot build it")
    return selective_scan_fn, None


# --- the pairs ---------------------------------------------------------------------------------


def bthd(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) <-> (B, T, H, D) (and (B, H, T) <-> (B, T, H)): the book's layout and fla's."""
    return x.transpose(1, 2).contiguous()


def _randn(shape, device, dtype, g):
    return torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)


def _rand(shape, device, dtype, g):
    return torch.rand(shape, generator=g, device=device, dtype=torch.float32).to(dtype)


def make_qkv(T, s, device, dtype, g):
    shape = (1, s["H"], T, s["D"])
    return {"q": _randn(shape, device, dtype, g), "k": _randn(shape, device, dtype, g),
            "v": _randn(shape, device, dtype, g)}


def make_gates(T, s, device, dtype, g):
    shape = (1, T, s["W"])  # gates in (0.5, 1), as after a sigmoid of a gated layer
    return {"a": _rand(shape, device, dtype, g) * 0.5 + 0.5, "b": _randn(shape, device, dtype, g)}


def make_delta(T, s, device, dtype, g, gated=False):
    shape = (1, s["H"], T, s["D"])
    k = F.normalize(_randn(shape, device, torch.float32, g), dim=-1)  # DeltaNet's unit keys
    beta = torch.sigmoid(_randn(shape[:3], device, torch.float32, g))
    out = {"q": _randn(shape, device, dtype, g), "k": k.to(dtype),
           "v": _randn(shape, device, dtype, g), "beta": beta.to(dtype)}
    if gated:  # log alpha in (-0.1, 0): a memory that fades over tens of steps
        out["log_alpha"] = (-0.1 * _rand(shape[:3], device, torch.float32, g)).to(dtype)
    return out


def make_ssd(T, s, device, dtype, g):
    """Mamba-2's parameters: x (1, H, T, P), step sizes dt > 0, one A < 0 per head, B and C."""
    H = s["H"]
    dt = F.softplus(_randn((1, H, T), device, torch.float32, g) - 3.0)  # about 0.05
    A = -torch.linspace(0.5, 4.0, H, device=device)                    # not trained: no gradient
    return {"x": _randn((1, H, T, s["P"]), device, dtype, g), "dt": dt,
            "A": A, "B": _randn((1, H, T, s["N"]), device, dtype, g),
            "C": _randn((1, H, T, s["N"]), device, dtype, g)}


def make_selective(T, s, device, dtype, g):
    E, N = s["E"], s["N"]
    A = -torch.arange(1, N + 1, device=device, dtype=torch.float32).repeat(E, 1)  # Mamba's S4D-real
    return {"x": _randn((1, T, E), device, dtype, g),
            "delta": F.softplus(_randn((1, T, E), device, torch.float32, g) - 3.0).to(dtype),
            "A": A.to(dtype), "B": _randn((1, T, N), device, dtype, g),
            "C": _randn((1, T, N), device, dtype, g), "D": torch.ones(E, device=device, dtype=dtype)}


NO_GRAD = {"A", "D"}  # parameters, not inputs: their gradients are not compared


def build_pairs(dry: bool) -> tuple[list[Pair], dict]:
    """Every pair, with its kernels' availability (and the reasons for what is missing)."""
    fla, fla_reason = load_fla()
    mamba, mamba_reason = load_mamba_ssd()
    selective_scan_fn, selective_reason = load_selective_scan()
    phi = linear_attention.elu_feature_map
    if dry:
        heads = {"H": 2, "D": 16}
        sizes = {"la": heads, "scan": {"W": 32}, "delta": heads,
                 "ssd": {"H": 2, "P": 8, "N": 8}, "mamba": {"E": 16, "N": 4}}
    else:
        heads = {"H": 12, "D": 64}
        sizes = {"la": heads, "scan": {"W": 1536}, "delta": heads,
                 "ssd": {"H": 12, "P": 64, "N": 64}, "mamba": {"E": 1536, "N": 16}}

    def fla_side(name, prepare, kernel, reference, back=bthd):
        return Side(name, "production", prepare, kernel(fla) if fla else None, back,
                    reference=reference(fla) if fla else None, unavailable=fla_reason)

    pairs = []

    # 1. causal linear attention: phi = elu + 1, divided by phi(q)^T z (fla: normalize=True)
    la = Pair("causal linear attention", torch.bfloat16, make_qkv, sizes["la"])
    la.sides.append(Side("linear_attention_chunked (ch. 10)", "readable",
                         lambda i: (i["q"], i["k"], i["v"]),
                         lambda q, k, v: linear_attention.linear_attention_chunked(q, k, v)))
    la.sides.append(fla_side(
        "fla chunk_linear_attn", lambda i: (bthd(i["q"]), bthd(i["k"]), bthd(i["v"])),
        lambda m: lambda q, k, v: m.chunk_linear_attn(phi(q), phi(k), v, scale=1.0,
                                                      normalize=True)[0],
        lambda m: lambda q, k, v: m.naive_recurrent_linear_attn(phi(q), phi(k), v, scale=1.0,
                                                                normalize=True)[0]))
    pairs.append(la)

    # 2. the gated linear recurrence h_t = a_t h_{t-1} + b_t (fla's HGRN: g = log a, x = b)
    rec = Pair("gated linear recurrence", torch.float32, make_gates, sizes["scan"])
    rec.sides.append(Side("parallel_scan (ch. 10)", "readable", lambda i: (i["a"], i["b"]),
                          scan.parallel_scan))
    rec.sides.append(Side("log_space_scan (ch. 10)", "readable", lambda i: (i["a"].log(), i["b"]),
                          scan.log_space_scan))
    for name in ("chunk_hgrn", "fused_recurrent_hgrn"):
        rec.sides.append(fla_side(
            f"fla {name}", lambda i: (i["b"], i["a"].log()),
            lambda m, name=name: lambda b, log_a: getattr(m, name)(b, log_a)[0],
            lambda m: lambda b, log_a: m.naive_recurrent_hgrn(b, log_a)[0], back=lambda y: y))
    pairs.append(rec)

    # 3. and 4. the delta rule, without and with a decay gate (scale 1: the book reads S^T q)
    for gated in (False, True):
        name = "gated delta rule" if gated else "delta rule (DeltaNet)"
        pair = Pair(name, torch.bfloat16,
                    lambda T, s, d, t, g, gated=gated: make_delta(T, s, d, t, g, gated),
                    sizes["delta"])
        keys = ("q", "k", "v", "beta") + (("log_alpha",) if gated else ())
        pair.sides.append(Side(
            "delta_rule_chunked (ch. 10)", "readable", lambda i, keys=keys: tuple(i[k] for k in keys),
            lambda *a: delta_rule.delta_rule_chunked(*a)[0]))
        if gated:
            kernel = lambda m: lambda q, k, v, beta, g: m.chunk_gated_delta_rule(  # noqa: E731
                q, k, v, g, beta, scale=1.0)[0]
            reference = lambda m: lambda q, k, v, beta, g: m.naive_recurrent_gated_delta_rule(  # noqa: E731
                q, k, v, beta=beta, g=g, scale=1.0)[0]
        else:
            kernel = lambda m: lambda q, k, v, beta: m.chunk_delta_rule(  # noqa: E731
                q, k, v, beta, scale=1.0)[0]
            reference = lambda m: lambda q, k, v, beta: m.naive_recurrent_gated_delta_rule(  # noqa: E731
                q, k, v, beta=beta, g=torch.zeros_like(beta), scale=1.0)[0]
        pair.sides.append(fla_side(
            "fla chunk_gated_delta_rule" if gated else "fla chunk_delta_rule",
            lambda i, keys=keys: tuple(bthd(i[k]) for k in keys), kernel, reference))
        pairs.append(pair)

    # 5. Mamba-2's scan: h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T, y_t = h_t^T C_t (per head)
    ssd = Pair("Mamba-2 scan (SSD)", torch.bfloat16, make_ssd, sizes["ssd"])

    def ssd_readable(i):  # the book's parameters: x dt and log a = dt A, in x's dtype
        dt = i["dt"].to(i["x"].dtype)
        return (i["x"] * dt[..., None], dt * i["A"][:, None].to(dt.dtype), i["B"], i["C"])

    ssd.sides.append(Side("ssd_attention_form (ch. 10)", "readable", ssd_readable,
                          ssm.ssd_attention_form))
    ssd.sides.append(fla_side(  # queries C, keys B, values x dt, log gates dt A (float32)
        "fla chunk_simple_gla",
        lambda i: (bthd(i["C"]), bthd(i["B"]), bthd(i["x"] * i["dt"][..., None].to(i["x"].dtype)),
                   bthd(i["dt"] * i["A"][:, None])),
        lambda m: lambda C, B, xdt, g: m.chunk_simple_gla(C, B, xdt, g=g, scale=1.0)[0],
        lambda m: lambda C, B, xdt, g: m.naive_recurrent_simple_gla(C, B, xdt, g, scale=1.0)[0]))
    chunk = 16 if dry else 256  # mamba_ssm's reference needs T a multiple of its block

    def ssd_minimal(x, dt, A, B, C):
        T = x.shape[1]
        pad = (-T) % chunk  # zero steps at the end change nothing before them
        x, dt, B, C = (F.pad(t, (0, 0) * (t.ndim - 2) + (0, pad)) for t in (x, dt, B, C))
        dtype = torch.float32
        y = mamba.ssd_minimal_discrete((x * dt[..., None]).to(dtype), (dt * A).to(dtype),
                                       B.to(dtype), C.to(dtype), chunk)[0]
        return y[:, :T]

    ssd.sides.append(Side(
        "mamba_ssm mamba_chunk_scan_combined", "production",
        lambda i: (bthd(i["x"]), bthd(i["dt"]), i["A"], bthd(i["B"]), bthd(i["C"])),
        (lambda x, dt, A, B, C: mamba.mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=256))
        if mamba else None, bthd, reference=ssd_minimal if mamba else None,
        unavailable=mamba_reason))
    pairs.append(ssd)

    # 6. Mamba's selective scan (Mamba-1): per channel, h_t = exp(delta_t A) h_{t-1} + delta_t B_t x_t
    sel = Pair("Mamba selective scan", torch.float32, make_selective, sizes["mamba"])
    keys = ("x", "delta", "A", "B", "C", "D")
    sel.sides.append(Side("selective_scan_parallel (ch. 10)", "readable",
                          lambda i: tuple(i[k] for k in keys), ssm.selective_scan_parallel))
    sel.sides.append(Side(  # mamba_ssm's layout: channels before time
        "mamba_ssm selective_scan_fn", "production",
        lambda i: (i["x"].mT, i["delta"].mT, i["A"], i["B"].mT, i["C"].mT, i["D"]),
        (lambda u, delta, A, B, C, D: selective_scan_fn(u, delta, A, B, C, D))
        if selective_scan_fn else None, lambda y: y.mT, unavailable=selective_reason))
    pairs.append(sel)
    missing = {"fla": fla_reason, "mamba_ssm (Triton)": mamba_reason,
               "mamba_ssm (selective scan)": selective_reason}
    return pairs, {k: v for k, v in missing.items() if v}


# --- the check ---------------------------------------------------------------------------------


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| / max |ref|: one number per tensor, blind to where the error sits."""
    return float((x.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30))


def evaluate(side: Side, fn: Callable, inputs: dict, upstream: torch.Tensor) -> tuple:
    """The output in the book's layout and the gradients of the inputs, through ``fn``."""
    leaves = {k: v.detach().clone().requires_grad_(k not in NO_GRAD) for k, v in inputs.items()}
    y = side.back(fn(*side.prepare(leaves)))
    (y.float() * upstream).sum().backward()
    return y.detach(), {k: v.grad for k, v in leaves.items() if v.grad is not None}


def check_pair(pair: Pair, device: torch.device, lengths: list[int], tol: float) -> dict:
    """Every production side against the first readable side, in float32: output and gradients.

    On a CUDA device the kernel itself runs; elsewhere its library's PyTorch reference. Returns
    ``{side name: {"ok", "against", "T", "output_rel_err", "grad_rel_err"}}``."""
    readable = next(s for s in pair.sides if s.kind == "readable")
    cuda = device.type == "cuda"
    checked = [s for s in pair.sides if s.kind == "production" and (s.call if cuda else s.reference)]
    report = {s.name: {"against": "kernel" if cuda else "its library's PyTorch reference",
                       "T": lengths, "output_rel_err": [], "grad_rel_err": [], "seconds": [],
                       "ok": True}
              for s in checked}
    for T in lengths:
        g = torch.Generator(device=device).manual_seed(T)
        inputs = pair.make(T, pair.sizes, device, torch.float32, g)
        with torch.no_grad():
            shape = readable.back(readable.call(*readable.prepare(inputs))).shape
        upstream = _randn(shape, device, torch.float32, g)
        ref_y, ref_grads = evaluate(readable, readable.call, inputs, upstream)
        for side in checked:
            entry = report[side.name]
            if "error" in entry:
                continue
            t0 = time.perf_counter()  # a kernel's first call compiles it (and autotunes it)
            try:
                y, grads = evaluate(side, side.call if cuda else side.reference, inputs, upstream)
                if y.shape != ref_y.shape or grads.keys() != ref_grads.keys():
                    raise ValueError(f"output {tuple(y.shape)} with gradients of {sorted(grads)}, "
                                     f"expected {tuple(ref_y.shape)} with {sorted(ref_grads)}")
            except Exception as exc:  # noqa: BLE001 - a kernel that fails is reported, not timed
                entry.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
                continue
            entry["seconds"].append(round(time.perf_counter() - t0, 2))
            out_err = rel_err(y, ref_y)
            grad_err = max(rel_err(grads[k], ref_grads[k]) for k in ref_grads)
            entry["output_rel_err"].append(round(out_err, 8))
            entry["grad_rel_err"].append(round(grad_err, 8))
            entry["ok"] = entry["ok"] and max(out_err, grad_err) <= tol
    return report


# --- the timings -------------------------------------------------------------------------------


def time_side(pair: Pair, side: Side, T: int, device, repeats: int) -> dict:
    row = {"pair": pair.name, "name": side.name, "kind": side.kind, "T": T,
           "dtype": str(pair.dtype).replace("torch.", ""), "forward_ms": None,
           "forward_backward_ms": None, "status": "ok"}

    def build():
        g = torch.Generator(device=device).manual_seed(T)
        inputs = pair.make(T, pair.sizes, device, pair.dtype, g)
        # this side's arguments, made once, each a leaf (the layout change is not timed); the
        # parameters A and D, passed as they are, get no gradient
        params = [inputs[k] for k in NO_GRAD if k in inputs]
        args = [a.detach().contiguous().requires_grad_(not any(a is p for p in params))
                for a in side.prepare(inputs)]
        return (lambda: side.call(*args)), [a for a in args if a.requires_grad]

    return time_row(row, build, device, repeats)


def ratios(result: dict) -> list[dict]:
    """For each pair, length and kernel: the readable form's time and peak memory over the
    kernel's (forward+backward), against the fastest readable side at that length."""
    ok = [r for r in result["rows"] if r["status"] == "ok" and r.get("check_ok", True)]
    out = []
    for r in ok:
        if r["kind"] != "production":
            continue
        readable = [x for x in ok if x["pair"] == r["pair"] and x["kind"] == "readable"
                    and x["T"] == r["T"]]
        if not readable:
            continue
        best = min(readable, key=lambda x: x["forward_backward_ms"])
        entry = {"pair": r["pair"], "kernel": r["name"], "readable": best["name"], "T": r["T"],
                 "time_ratio": round(best["forward_backward_ms"] / r["forward_backward_ms"], 2)}
        if "max_memory_gib" in r and "max_memory_gib" in best:
            entry["memory_ratio"] = round(best["max_memory_gib"] / r["max_memory_gib"], 2)
        out.append(entry)
    return out


def finished(path: Path | None, pairs: list[Pair], lengths: list[int], device) -> dict:
    """``{pair name: (check, rows)}`` for the pairs that the result file at ``path`` holds whole
    (a check and a row for every side and length), if it was written by this commit's code on a
    device of this kind; else ``{}``. A GPU slot can then go on where the last one stopped."""
    if path is None or not path.exists():
        return {}
    old = json.loads(path.read_text())
    meta = old.get("meta", {})
    if (meta.get("commit") != code_commit() or meta.get("device") != device.type
            or old.get("lengths") != lengths):
        return {}
    out = {}
    for pair in pairs:
        rows = [r for r in old["rows"] if r["pair"] == pair.name]
        whole = {(r["name"], r["T"]) for r in rows} == {(s.name, T) for s in pair.sides
                                                         for T in lengths}
        if pair.name in old["checks"] and whole:
            out[pair.name] = (old["checks"][pair.name], rows)
    return out


def versions() -> dict:
    out = {}
    for name in ("fla", "triton", "mamba_ssm", "einops"):
        module = sys.modules.get(name)
        if module is None:
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001
                module = None
        out[name] = getattr(module, "__version__", "loaded" if module else None)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dry", action="store_true", help="toy sizes on the CPU, to test the script")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--resume", action="store_true",
                   help="keep the computations that --json already holds complete, if measured "
                        "by this commit on this kind of device, and run only the others")
    args = p.parse_args(argv)
    if args.dry:
        args.device, args.repeats = "cpu", 1
        lengths, check_lengths = [64, 128], [64, 37]
    else:
        lengths, check_lengths = [1024, 2048, 4096, 8192, 16384], [1024, 1000]
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 is float32 on the readable side
    # The check runs in float32, with Triton's float32 products in full precision (they use TF32
    # unless told otherwise, see the top of the file): a right kernel differs from the readable
    # form by rounding (1e-6 against fla's references on a CPU); a gate one per cent off moved
    # the output by 4e-3 and the gradients by 9e-3 at the dry run's sizes.
    tol = 1e-3 if device.type == "cuda" else 1e-4
    t0 = time.perf_counter()
    pairs, missing = build_pairs(args.dry)
    result = {"lengths": lengths, "tolerance": tol, "unavailable": missing, "checks": {},
              "rows": []}
    kept = finished(args.json, pairs, lengths, device) if args.resume else {}
    for done, pair in enumerate(pairs):
        if pair.name in kept:  # measured by this commit in an earlier, interrupted run
            result["checks"][pair.name], rows = kept[pair.name]
            result["rows"] += rows
            continue
        if args.json and done:  # what is measured so far survives a time limit
            finish(dict(result, ratios=ratios(result), partial=f"{done} of {len(pairs)} computations"),
                   device, t0, "benchmarks.gpu.kernels", argv, args.json, versions=versions())
        result["checks"][pair.name] = check = check_pair(pair, device, check_lengths, tol)
        if not args.quiet:
            print(f"{time.perf_counter() - t0:.0f} s", json.dumps({pair.name: check}), flush=True)
        for side in pair.sides:
            if side.call is None:
                skip = side.unavailable
            elif side.kind == "production" and device.type != "cuda":
                skip = "a GPU kernel, and the device is " + device.type
            elif side.kind == "production" and "error" in check[side.name]:
                skip = "failed in the check: " + check[side.name]["error"]
            else:
                skip = None
            for T in lengths:
                if skip:
                    row = {"pair": pair.name, "name": side.name, "kind": side.kind, "T": T,
                           "status": f"skipped: {skip}"}
                else:  # a kernel that ran is timed, and its row says whether it passed the check
                    row = time_side(pair, side, T, device, args.repeats)
                    if side.kind == "production":
                        row["check_ok"] = check[side.name]["ok"]
                result["rows"].append(row)
                if not args.quiet:
                    print(f"{time.perf_counter() - t0:.0f} s", json.dumps(row), flush=True)
    result["ratios"] = ratios(result)
    return finish(result, device, t0, "benchmarks.gpu.kernels", argv, args.json,
                  versions=versions())


if __name__ == "__main__":
    main()
