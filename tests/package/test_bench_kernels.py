"""The GPU programme's kernels step (``python -m benchmarks.gpu.kernels``), on the CPU.

The production kernels need a GPU; what a CPU can test is the script around them: every readable
form runs and is timed, a missing kernel is a skipped row with its reason, and the check that runs
before any timing accepts a computation of the same function and refuses its mutants (a wrong
layout, feature map, scale, gate or mask). Stand-ins for the kernels are written from seqbook's
other forms of each function, in the kernel's layout."""

import json

import pytest
import torch

from benchmarks.gpu import kernels
from seqbook import delta_rule, linear_attention, ssm

PAIRS = {"causal linear attention", "gated linear recurrence", "delta rule (DeltaNet)",
         "gated delta rule", "Mamba-2 scan (SSD)", "Mamba selective scan"}
CPU = torch.device("cpu")


def test_dry_run_times_every_readable_form_and_names_what_is_missing(tmp_path):
    out = tmp_path / "kernels.json"
    result = kernels.main(["--dry", "--quiet", "--json", str(out)])
    assert out.exists() and result["meta"]["commit"] and result["lengths"] == [64, 128]
    rows = result["rows"]
    assert {r["pair"] for r in rows} == PAIRS
    readable = [r for r in rows if r["kind"] == "readable"]
    assert len(readable) == 2 * 7 and all(r["status"] == "ok" for r in readable)
    assert all(r["forward_ms"] > 0 and r["forward_backward_ms"] > 0 for r in readable)
    production = [r for r in rows if r["kind"] == "production"]
    assert {r["name"] for r in production} == {
        "fla chunk_linear_attn", "fla chunk_hgrn", "fla fused_recurrent_hgrn",
        "fla chunk_delta_rule", "fla chunk_gated_delta_rule", "fla chunk_simple_gla",
        "mamba_ssm mamba_chunk_scan_combined", "mamba_ssm selective_scan_fn"}
    for r in production:  # on a CPU no kernel is timed, and each row says why
        assert r["status"].startswith("skipped: ") and len(r["status"]) > 30
    assert "selective_scan_cuda" in result["unavailable"]["mamba_ssm (selective scan)"]
    assert result["ratios"] == []


def _with_reference(pair_name: str, side_name: str, reference):
    """The pair, its production side's CPU reference replaced by ``reference``."""
    pairs, _ = kernels.build_pairs(dry=True)
    pair = next(p for p in pairs if p.name == pair_name)
    side = next(s for s in pair.sides if s.name == side_name)
    side.reference = reference
    return pair, side


def _check(pair_name, side_name, reference):
    pair, side = _with_reference(pair_name, side_name, reference)
    return kernels.check_pair(pair, CPU, [64, 37], tol=1e-4)[side.name]


bthd = kernels.bthd
phi = linear_attention.elu_feature_map


def la_stand_in(feature_map=phi, eps=1e-6, reverse=False):
    def run(q, k, v):  # fla's layout (B, T, H, D) in and out, the recurrent form inside
        q, k, v = (bthd(x) for x in (q, k, v))
        if reverse:
            q, k, v = (x.flip(2) for x in (q, k, v))
        out = linear_attention.linear_attention_recurrent(q, k, v, feature_map=feature_map,
                                                          eps=eps)[0]
        return bthd(out.flip(2) if reverse else out)
    return run


def test_check_accepts_linear_attention_written_differently():
    entry = _check("causal linear attention", "fla chunk_linear_attn", la_stand_in())
    assert entry["ok"] and entry["T"] == [64, 37] and max(entry["output_rel_err"]) < 1e-5


@pytest.mark.parametrize("mutant", [
    la_stand_in(feature_map=lambda x: x.exp()),           # another feature map
    la_stand_in(eps=1.0),                                 # another divisor
    la_stand_in(reverse=True),                            # anti-causal: the mask the wrong way
    lambda q, k, v: la_stand_in()(q, k, v).transpose(1, 2),   # layout not turned back
    lambda q, k, v: la_stand_in()(q.detach(), k, v),      # no gradient reaches q
])
def test_check_refuses_mutants_of_linear_attention(mutant):
    entry = _check("causal linear attention", "fla chunk_linear_attn", mutant)
    assert not entry["ok"]


def delta_stand_in(scale=1.0, gate=1.0, beta_power=1.0):
    def run(q, k, v, beta, g=None):
        q, k, v, beta = (bthd(x) for x in (q, k, v, beta))
        log_alpha = None if g is None else gate * bthd(g)
        return bthd(delta_rule.delta_rule_recurrent(scale * q, k, v, beta**beta_power,
                                                    log_alpha)[0])
    return run


@pytest.mark.parametrize("gated", [False, True])
def test_check_accepts_the_delta_rule_and_refuses_its_mutants(gated):
    pair = "gated delta rule" if gated else "delta rule (DeltaNet)"
    side = "fla chunk_gated_delta_rule" if gated else "fla chunk_delta_rule"
    assert _check(pair, side, delta_stand_in())["ok"]
    assert not _check(pair, side, delta_stand_in(scale=16**-0.5))["ok"]  # fla's default scale
    assert not _check(pair, side, delta_stand_in(beta_power=2.0))["ok"]
    if gated:
        assert not _check(pair, side, delta_stand_in(gate=1.01))["ok"]  # one per cent off


def ssd_stand_in(log_gates=True, swap=False):
    def run(C, B, xdt, g):  # fla's simple GLA: queries C, keys B, values x dt, log gates g
        C, B, xdt, g = (bthd(t) for t in (C, B, xdt, g))
        if swap:
            B, C = C, B
        return bthd(ssm.ssd_recurrent(xdt, g if log_gates else g.exp(), B, C))
    return run


def test_check_accepts_the_ssd_scan_and_refuses_its_mutants():
    assert _check("Mamba-2 scan (SSD)", "fla chunk_simple_gla", ssd_stand_in())["ok"]
    assert not _check("Mamba-2 scan (SSD)", "fla chunk_simple_gla",
                      ssd_stand_in(log_gates=False))["ok"]
    assert not _check("Mamba-2 scan (SSD)", "fla chunk_simple_gla", ssd_stand_in(swap=True))["ok"]


def test_a_kernel_that_fails_is_reported_not_timed():
    def broken(*args):
        raise RuntimeError("no kernel image is available for execution on the device")

    entry = _check("gated linear recurrence", "fla chunk_hgrn", broken)
    assert not entry["ok"] and "no kernel image" in entry["error"]


def test_ratios_compare_each_checked_kernel_with_the_fastest_readable_form():
    def row(name, kind, ms, gib, **extra):
        return {"pair": "p", "name": name, "kind": kind, "T": 1024, "status": "ok",
                "forward_backward_ms": ms, "max_memory_gib": gib, **extra}

    result = {"rows": [row("slow", "readable", 40.0, 8.0), row("fast", "readable", 20.0, 4.0),
                       row("kernel", "production", 5.0, 1.0, check_ok=True),
                       row("wrong", "production", 1.0, 1.0, check_ok=False)]}
    assert kernels.ratios(result) == [{"pair": "p", "kernel": "kernel", "readable": "fast",
                                       "T": 1024, "time_ratio": 4.0, "memory_ratio": 4.0}]


def test_a_kernel_is_timed_on_its_own_leaves_and_parameters_get_no_gradient():
    pairs, _ = kernels.build_pairs(dry=True)
    ssd = next(p for p in pairs if p.name == "Mamba-2 scan (SSD)")
    side = next(s for s in ssd.sides if s.name == "mamba_ssm mamba_chunk_scan_combined")
    seen = {}

    def stand_in(x, dt, A, B, C):  # mamba_ssm's arguments: A is a parameter, the rest inputs
        seen.update(A=A.requires_grad, x=x.requires_grad and x.is_leaf, dt=dt.requires_grad)
        x, dt, A, B, C = (t.float() for t in (x, dt, A, B, C))  # bf16 timings, gates float32
        y = ssm.ssd_recurrent(bthd(x * dt[..., None]), bthd(dt * A), bthd(B), bthd(C))
        return bthd(y)

    side.call = stand_in
    row = kernels.time_side(ssd, side, 64, CPU, repeats=1)
    assert row["status"] == "ok" and row["forward_backward_ms"] > 0
    assert seen == {"A": False, "x": True, "dt": True}


def test_resume_keeps_what_this_commit_finished_and_runs_the_rest(tmp_path, monkeypatch):
    """A GPU slot goes on where the last one stopped: whole computations of the same commit are
    kept, an unfinished one (and anything of another commit) is run again."""
    out = tmp_path / "kernels.json"
    first = kernels.main(["--dry", "--quiet", "--json", str(out)])
    # as if the run had stopped inside the third computation: its rows and check are cut
    stopped = json.loads(out.read_text())
    names = list(stopped["checks"])
    third = [r for r in stopped["rows"] if r["pair"] == names[2]]
    stopped["rows"] = [r for r in stopped["rows"] if r["pair"] in names[:2]] + third[:1]
    stopped["checks"] = {n: stopped["checks"][n] for n in names[:3]}
    out.write_text(json.dumps(stopped))
    timed = []
    time_side = kernels.time_side
    monkeypatch.setattr(kernels, "time_side", lambda pair, *a: timed.append(pair.name)
                        or time_side(pair, *a))
    again = kernels.main(["--dry", "--quiet", "--resume", "--json", str(out)])
    assert set(timed) == set(names[2:])  # the first two kept, the third run again
    assert [(r["pair"], r["name"], r["T"]) for r in again["rows"]] == [
        (r["pair"], r["name"], r["T"]) for r in first["rows"]]
    assert again["rows"][0] == first["rows"][0] and "partial" not in again
    timed.clear()
    monkeypatch.setattr(kernels, "code_commit", lambda: "another commit")
    kernels.main(["--dry", "--quiet", "--resume", "--json", str(out)])
    assert set(timed) == set(names)  # another commit's results are never kept
