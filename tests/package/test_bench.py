"""The benchmark harness (``python -m benchmarks``): it runs (smoke mode) and writes valid results;
every pair it times compares two computations of the same function; and the fast paths equal the
readable paths in values and gradients where the modules' own tests do not check it (gradients with
respect to the inputs and initial states, long sequences, float masks, whole transformer layers with
masks). The fast-path tests run in float64, the proof that both paths compute the same function, and
in float32, the dtype that is timed, with the tolerances of tests/tolerance.py."""

import json
import math
import os
import sys

import pytest
import torch
from tolerance import assert_close, assert_same_math

from benchmarks import layers, notebooks, report, timing
from benchmarks.__main__ import main as bench_main
from seqbook import attention, hopfield
from seqbook.attention import MultiHeadAttention
from seqbook.rnn import GRU, LSTM, RNN
from seqbook.transformer import DecoderLayer, EncoderLayer
from seqbook.utils import set_fast

# ---------------------------------------------------------------------------------------------
# The harness.
# ---------------------------------------------------------------------------------------------


def test_smoke_run_writes_valid_json_and_table(tmp_path):
    threads = torch.get_num_threads()
    result = bench_main(["--smoke", "--scaling", "--out", str(tmp_path), "--quiet"])
    assert torch.get_num_threads() == threads  # the caller's setting is restored
    data = json.loads((tmp_path / "cpu-smoke.json").read_text())
    assert data["rows"] == json.loads(json.dumps(result["rows"]))
    meta = data["meta"]
    for key in ("cpu", "logical_cpus", "torch_threads", "torch", "date", "command", "clock"):
        assert meta[key] not in (None, ""), key
    assert meta["torch_threads"] == 1 and meta["sizes"] == ["smoke"]
    rows = data["rows"]
    assert {r["group"] for r in rows} == set(layers.GROUPS)
    assert {r["pass"] for r in rows} == {"forward", "forward+backward"}
    assert all(r["status"] in ("ok", "skipped") for r in rows), [r["note"] for r in rows]
    for r in rows:
        if r["status"] == "ok":
            assert r["ours_ms"] > 0 and r["ref_ms"] > 0
            assert r["ratio"] == pytest.approx(r["ours_ms"] / r["ref_ms"])
        else:
            assert r["ratio"] is None and r["note"]
    for group in ("attention", "recurrent"):
        scaling = data["scaling"][group]
        assert scaling["lengths"] == [4, 8]
        assert all(len(ms) == 2 and min(ms) > 0 for ms in scaling["series"].values())
    table = (tmp_path / "cpu-smoke.txt").read_text()
    assert "ratio" in table and "LSTM fast=True" in table and "scaling, recurrent" in table


def test_results_record_the_commit_of_the_measured_code(monkeypatch):
    from seqbook import utils

    monkeypatch.delenv("SEQBOOK_COMMIT", raising=False)
    commit = utils.code_commit()
    assert commit is not None and len(commit.split("+")[0]) == 40  # this checkout is a git repository
    assert report.machine_info("cpu")["commit"] == commit
    # a copy sent elsewhere names the commit it came from, whatever .git it carries
    monkeypatch.setenv("SEQBOOK_COMMIT", "0" * 40)
    assert report.machine_info("cpu")["commit"] == "0" * 40
    monkeypatch.delenv("SEQBOOK_COMMIT")
    monkeypatch.setattr(utils.subprocess, "run", _no_git)  # no git at all: unknown, not invented
    assert utils.code_commit() is None


def _no_git(*args, **kwargs):
    raise OSError("no git here")


def test_gpt_throughput_measures_the_fused_path_and_a_peer():
    from benchmarks.gpu import gpt_throughput

    result = gpt_throughput.main(["--dry", "--peer", "hf"] if _has_transformers() else ["--dry"])
    assert result["attention_layers"] == 2 and result["readable_attention_calls"] == 0
    assert result["attention"].startswith("F.scaled_dot_product_attention")
    assert result["meta"]["commit"] and result["tokens_per_s"] > 0
    if "peer" in result:
        assert result["peer"]["name"] == "transformers.GPT2LMHeadModel"
        assert result["peer"]["attention"] == "sdpa"
        ratio = result["tokens_per_s"] / result["peer"]["tokens_per_s"]
        assert result["ratio_to_peer"] == pytest.approx(ratio, rel=1e-2, abs=1e-3)
        # the same FLOPs per token: the same sizes, one count for both
        assert result["peer"]["flops_per_token"] == pytest.approx(result["flops_per_token"], rel=0.05)


def test_gpt_throughput_measures_its_variants_in_the_same_run():
    from benchmarks.gpu import gpt_throughput

    result = gpt_throughput.main(["--dry", "--variants", "native,no-clip,chunked-ce,loss-only"])
    variants = result["variants"]
    assert set(variants) == {"native", "no-clip", "chunked-ce", "loss-only"}
    assert all(v["what"] and "error" not in v for v in variants.values())
    assert variants["native"]["parameters"] == result["parameters"]  # the same function's size
    assert variants["no-clip"]["clip_grad_norm"] is False and result["clip_grad_norm"] is True
    assert all(v["tokens_per_s"] > 0 for v in variants.values())
    # every model starts from GPT-2's initialisation: after 4 steps on random tokens the loss is
    # still near ln V (the native model at PyTorch's default one ended an H200 run at 21.5)
    for r in (result, *variants.values()):
        assert abs(r["final_loss"] - math.log(256)) < 0.5, r
        assert "attention_kernels" in r  # recorded on a GPU (None on the CPU)
    with pytest.raises(SystemExit, match="unknown"):
        gpt_throughput.main(["--dry", "--variants", "fastest"])


def test_gpt_throughput_refuses_a_model_on_the_readable_path(monkeypatch):
    from benchmarks.gpu import gpt_throughput
    from seqbook.gpt import GPT

    config = gpt_throughput.gpt_config(dry=True)
    idx = torch.zeros(1, config.block_size, dtype=torch.long)
    assert gpt_throughput.readable_attention_calls(GPT(config), idx) == config.n_layer
    monkeypatch.setattr(gpt_throughput, "set_fast", lambda model, fast: model)  # the old regression
    with pytest.raises(RuntimeError, match="fused path only"):
        gpt_throughput.seqbook_gpt(config, torch.device("cpu"))


def test_long_context_run_times_generation_with_and_without_the_cache():
    from benchmarks.gpu import long_context

    result = long_context.main(["--dry", "--generation"])
    rows = result["generation"]["rows"]
    assert [r["context"] for r in rows] == [16, 64] and result["meta"]["commit"]
    for r in rows:  # the memory formula 2 * n_layer * B * T * D numbers holds (asserted inside too)
        assert r["cache_bytes_used"] == 2 * 2 * 1 * r["context"] * 16 * 4
        assert r["ms_per_token_with_cache"] > 0 and r["ms_per_token_without_cache"] > 0


def test_long_context_run_times_generation_against_key_value_heads():
    from benchmarks.gpu import long_context

    result = long_context.main(["--dry", "--gqa"])
    rows = result["gqa"]["rows"]
    assert [(r["n_kv_head"], r["context"]) for r in rows] == [(1, 16), (1, 64), (2, 16), (2, 64),
                                                               (4, 16), (4, 64)]
    for r in rows:  # 2 * n_layer * T * n_kv_head * D_h float32 numbers read per token
        assert r["cache_bytes_read"] == 2 * 2 * r["context"] * r["n_kv_head"] * 8 * 4
        assert r["ms_per_token"] > 0


def test_gpt_cpu_step_times_three_models_of_one_function(tmp_path):
    pytest.importorskip("transformers")
    from benchmarks import gpt_cpu_step

    threads = torch.get_num_threads()
    out = tmp_path / "gpt_cpu.json"
    result = gpt_cpu_step.main(["--size", "tiny", "--steps", "3", "--warmup", "1", "--quiet",
                                "--threads", "1", "--json", str(out)])
    assert torch.get_num_threads() == threads  # the caller's setting is restored
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["meta"]["commit"] and result["meta"]["torch_threads"] == result["threads"] == 1
    assert result["meta"]["clock"] == "wall" and result["meta"]["load_average_end"]
    assert set(result["models"]) == {"seqbook", "native", "hf"} and result["steps"] == 3
    assert result["models"]["hf"]["attention"] == "sdpa"
    losses = result["initial_loss"]  # the three compute one function: equal losses before timing
    assert losses["seqbook"] == pytest.approx(losses["native"], rel=1e-5) == losses["hf"]
    assert len({m["parameters"] for m in result["models"].values()}) == 1  # tied in all three
    ms = {name: m["ms_per_step"] for name, m in result["models"].items()}
    assert min(ms.values()) > 0
    assert result["ratio"]["seqbook/native"] == pytest.approx(ms["seqbook"] / ms["native"], abs=2e-3)
    assert result["ratio"]["seqbook/hf"] == pytest.approx(ms["seqbook"] / ms["hf"], abs=2e-3)


def test_gpt_cpu_step_refuses_models_that_differ():
    pytest.importorskip("transformers")
    from benchmarks import gpt_cpu_step

    size = gpt_cpu_step.SIZES["tiny"]
    models, _ = gpt_cpu_step.build(size)
    x = torch.randint(size["vocab_size"], (2, size["block_size"]))
    gpt_cpu_step.check_equal_losses(models, x, x)
    norms = {}  # the gradients agree too (their norm over all the weights)
    for name, m in models.items():
        m.zero_grad()
        gpt_cpu_step.LOSSES[name](m, x, x).backward()
        norms[name] = torch.stack([p.grad.square().sum() for p in m.parameters()]).sum().sqrt()
    assert_close(norms["native"], norms["seqbook"])
    assert_close(norms["hf"], norms["seqbook"])
    with torch.no_grad():
        models["native"].h[1].fc.bias.add_(0.1)  # one wrong weight: no longer one function
    with pytest.raises(AssertionError, match="one function"):
        gpt_cpu_step.check_equal_losses(models, x, x)
    switch = next(m for m in models["seqbook"].modules() if isinstance(getattr(m, "fast", None), bool))
    switch.fast = False  # a readable part is not what is timed
    with pytest.raises(RuntimeError, match="fused path"):
        gpt_cpu_step.check_fused(models["seqbook"])


def test_committed_gpt_cpu_step_names_its_commit_and_three_models():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "perf" / "gpt_cpu.json"
    if not path.exists():
        pytest.skip("perf/gpt_cpu.json is not committed yet (run on a quiet machine: "
                    "python -m benchmarks.gpt_cpu_step --json perf/gpt_cpu.json)")
    data = json.loads(path.read_text())
    commit = data["meta"]["commit"]
    assert isinstance(commit, str) and len(commit) >= 40 and not commit.endswith("+dirty")
    assert set(data["models"]) == {"seqbook", "native", "hf"} and data["size"] == "default"
    assert data["steps"] >= 8 and data["meta"]["torch_threads"] == data["threads"]
    ms = {name: m["ms_per_step"] for name, m in data["models"].items()}
    assert data["ratio"]["seqbook/native"] == pytest.approx(ms["seqbook"] / ms["native"], abs=2e-3)
    assert data["ratio"]["seqbook/hf"] == pytest.approx(ms["seqbook"] / ms["hf"], abs=2e-3)


def _has_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def test_missing_torchhd_gives_skipped_rows(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchhd", None)  # import torchhd -> ImportError
    rows = layers.run_pairs(("smoke",), "cpu", ("vsa",), repeats=1, warmup=0, budget_s=0.0)
    assert rows and all(r["status"] == "skipped" and r["ours_ms"] is None for r in rows)
    assert {r["group"] for r in rows} == {"vsa"}
    assert all("torch-hd" in r["note"] for r in rows)
    table = report.format_table({"meta": {**report.machine_info(), "command": "test"}, "rows": rows})
    assert "skipped" in table and "MISS" not in table


def test_measure_interleaves_and_takes_medians():
    calls = []
    fns = [lambda: calls.append("a"), lambda: calls.append("b")]
    out = timing.measure(fns, repeats=5, warmup=1, min_sample_s=0.0, budget_s=10.0)
    assert [o["samples"] for o in out] == [5, 5] and all(o["number"] == 1 for o in out)
    assert calls.count("a") == calls.count("b") == 1 + 1 + 5  # warm-up, calibration, samples
    assert calls[4:8] == ["a", "b", "b", "a"]  # the order alternates between rounds
    assert all(0 <= o["min_ms"] <= o["ms"] for o in out)


def test_failing_pair_is_an_error_row(monkeypatch):
    def broken(s, device):
        yield layers.Pair("attention", "broken", "nothing", "-", ours=lambda: 1 / 0, ref=lambda: None)

    monkeypatch.setitem(layers._BUILDERS, "attention", ("attn", broken))
    rows = layers.run_pairs(("smoke",), "cpu", ("attention",), repeats=1, warmup=0, budget_s=0.0)
    assert [r["status"] for r in rows] == ["error", "error"]
    assert "ZeroDivisionError" in rows[0]["note"]


def test_time_notebooks_records_wall_time(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    code = "import os\nassert os.environ['TQDM_DISABLE'] == '1'\nx = sum(range(10))\nassert x == 45"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    env = dict(os.environ)
    (row,) = notebooks.time_notebooks([path], timeout=120)
    assert row["notebook"] == "tiny.ipynb" and row["status"] == "ok" and row["cells"] == 1
    assert row["wall_s"] >= 0
    (cell,) = row["slowest_cells"]  # the one code cell, by the times nbclient recorded
    assert cell["cell"] == 0 and cell["id"] == nb.cells[0].id and 0 <= cell["s"] <= row["wall_s"]
    assert dict(os.environ) == env  # the kernel got TQDM_DISABLE=1; this process's environment is unchanged


def test_a_kernel_that_never_started_is_started_once_more(tmp_path, monkeypatch):
    import nbclient
    import nbformat

    path = tmp_path / "a.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)
    starts = []

    class Client:  # the first kernel never answers, as when another kernel took its port
        def __init__(self, nb, **kwargs):
            pass

        def execute(self, **kwargs):
            starts.append(1)
            if len(starts) == 1:
                raise RuntimeError("Kernel didn't respond in 60 seconds")

    monkeypatch.setattr(nbclient, "NotebookClient", Client)
    row = notebooks.time_notebook(path)
    assert len(starts) == 2 and row["status"] == "ok" and row["note"] == ""

    def dies(self, **kwargs):  # a kernel that dies while running a notebook: a row, not a retry
        starts.append(1)
        raise RuntimeError("Kernel died")

    starts.clear()
    monkeypatch.setattr(Client, "execute", dies)
    row = notebooks.time_notebook(path)
    assert len(starts) == 1 and row["status"] == "error" and "Kernel died" in row["note"]


def test_time_notebooks_two_at_a_time_keeps_the_order_and_one_thread(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    paths = []
    for name, code in [("a.ipynb", "import os\nassert os.environ['OMP_NUM_THREADS'] == '1'"),
                       ("b.ipynb", "x = 1"), ("c.ipynb", "raise ValueError('c failed')"),
                       ("d.ipynb", "import os\nos._exit(1)")]:  # the kernel dies
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, tmp_path / name)
        paths.append(tmp_path / name)
    rows = notebooks.time_notebooks(paths, timeout=120, jobs=2, expected_s={"c.ipynb": 9.0})
    assert [r["notebook"] for r in rows] == ["a.ipynb", "b.ipynb", "c.ipynb", "d.ipynb"]
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "error"]
    assert rows[2]["note"].startswith("ValueError") and "c failed" in rows[2]["note"]  # no colours
    assert "DeadKernelError" in rows[3]["note"]  # a row, and the other rows are kept
    with pytest.raises(ValueError, match="jobs must be an int >= 1, got 0"):
        notebooks.time_notebooks(paths, jobs=0)


def test_reference_workload_times_both_parts_on_one_thread():
    from benchmarks.reference import reference_workload

    threads = torch.get_num_threads()
    ref = reference_workload(repeats=1, steps={"gru": 2, "gpt": 2})
    assert torch.get_num_threads() == threads  # the caller's setting is restored
    assert ref["steps"] == {"gru": 2, "gpt": 2} and ref["repeats"] == 1
    assert ref["gru"] > 0 and ref["gpt"] > 0
    assert math.isclose(ref["total"], ref["gru"] + ref["gpt"], abs_tol=1e-3)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="repeats must be an int >= 1"):
            reference_workload(repeats=bad)


def test_notebooks_run_records_the_reference_and_reference_compares_with_it(
        tmp_path, monkeypatch, capsys):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    import benchmarks.__main__ as bench

    fixed = {"gru": 1.0, "gpt": 2.0, "total": 3.0, "steps": {"gru": 150, "gpt": 50}, "repeats": 5}
    monkeypatch.setattr(bench, "reference_workload", lambda: dict(fixed))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    bench_main(["--notebooks", str(path), "--out", str(tmp_path), "--quiet"])
    meta = json.loads((tmp_path / "notebooks.json").read_text())["meta"]
    assert meta["reference_s"] == fixed
    # a host that takes 1.5 times as long
    monkeypatch.setattr(bench, "reference_workload", lambda: {**fixed, "total": 4.5})
    out = bench_main(["--reference", "--out", str(tmp_path)])
    assert out["recorded"] == fixed
    assert "takes 1.50 times as long" in capsys.readouterr().out
    # nothing recorded to compare with
    out = bench_main(["--reference", "--out", str(tmp_path / "none")])
    assert out["recorded"] is None and "records no reference" in capsys.readouterr().out


def test_chapters_are_found_beside_the_harness():
    found = notebooks.chapter_notebooks()
    assert found and found[0].name.startswith("01_") and all(p.parent.name == "chapters" for p in found)


# ---------------------------------------------------------------------------------------------
# Every pair times two computations of the same function.
# ---------------------------------------------------------------------------------------------


def _first(out):
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def test_every_pair_compares_the_same_function(device):
    checked = set()
    for pair in layers.pairs("smoke", device):
        if pair.skip or pair.reference == "torch-hd":  # torch-hd's own representation: checked below
            continue
        ours, ref = _first(pair.ours()), _first(pair.ref())
        assert ours.shape == ref.shape, pair.name
        if pair.group == "vsa" and pair.name != "FHRR similarity pairwise":  # angles: equal modulo 2
            ours, ref = torch.polar(torch.ones_like(ours), math.pi * ours), torch.polar(torch.ones_like(ref),
                                                                                        math.pi * ref)
        # float32, as timed. The longest chain at smoke size is a transformer layer (E = 8, FF 32, T = 6):
        # about 80 terms; the recurrent pairs sum T * (D + H) = 35.
        assert_close(ours, ref, n=128, msg=lambda m, p=pair: f"{p.name} vs {p.reference}: {m}")
        checked.add(pair.group)
    assert {"attention", "transformer", "recurrent"} <= checked


def test_fhrr_ops_equal_torchhd(device):
    torchhd = pytest.importorskip("torchhd")
    from seqbook import vsa

    g = torch.Generator().manual_seed(0)
    a, b, c = (vsa.random_symbols(12, 16, generator=g).view(3, 4, 16).double().to(device) for _ in range(3))

    def phasors(x):
        return torch.polar(torch.ones_like(x), math.pi * x).as_subclass(torchhd.FHRRTensor)

    def angles(z):
        return torch.angle(z.as_subclass(torch.Tensor)) / math.pi

    def same_angles(x, y):
        assert_same_math(torch.polar(torch.ones_like(x), math.pi * x),
                         torch.polar(torch.ones_like(y), math.pi * y), n=2 * 16)

    same_angles(vsa.bind(a, b), angles(torchhd.bind(phasors(a), phasors(b))))
    same_angles(vsa.bundle(a), angles(torchhd.multibundle(phasors(a))))
    assert_same_math(vsa.similarity(a, b, pairwise=True),
                     torchhd.dot_similarity(phasors(a), phasors(b)).as_subclass(torch.Tensor) / 16, n=16)
    scores = torchhd.dot_similarity(phasors(a), phasors(b)).as_subclass(torch.Tensor) / 16
    same_angles(vsa.vsa_attention(a, b, c)[0], angles(scores.to(torch.complex128) @ phasors(c)))


# ---------------------------------------------------------------------------------------------
# Fast paths equal readable paths: the recurrent layers.
# (tests/models/test_rnn.py checks outputs and parameter gradients in float64 on short sequences.)
# ---------------------------------------------------------------------------------------------

# (cls, num_layers, bidirectional, T)
RNN_CONFIGS = [(RNN, 1, False, 40), (GRU, 2, True, 25), (LSTM, 2, False, 40), (LSTM, 1, True, 25),
               (GRU, 1, False, 1)]


def _rnn_inputs(cls, layers, bi, T, device, dtype, B=3, D=6, H=5):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(B, T, D, generator=g, dtype=dtype).to(device).requires_grad_()
    shape = (layers * (2 if bi else 1), B, H)
    h0 = torch.randn(shape, generator=g, dtype=dtype).to(device).requires_grad_()
    if cls is LSTM:
        h0 = (h0, torch.randn(shape, generator=g, dtype=dtype).to(device).requires_grad_())
    return x, h0


RNN_IDS = [f"{c[0].__name__}-L{c[1]}-{'bi' if c[2] else 'uni'}-T{c[3]}" for c in RNN_CONFIGS]
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])


def same_path(actual, expected, n, msg=None):
    """float64: the same function; float32: the policy's tolerance for sums of n terms."""
    check = assert_same_math if expected.dtype == torch.float64 else assert_close
    check(actual, expected, n=n, msg=msg)


@DTYPES
@pytest.mark.parametrize("cls, layers, bi, T", RNN_CONFIGS, ids=RNN_IDS)
def test_recurrent_fast_path_input_and_state_gradients(cls, layers, bi, T, device, dtype):
    torch.manual_seed(0)
    readable = cls(6, 5, num_layers=layers, bidirectional=bi).to(device=device, dtype=dtype)
    fast = cls(6, 5, num_layers=layers, bidirectional=bi, fast=True).to(device=device, dtype=dtype)
    fast.load_state_dict(readable.state_dict())
    results = []
    for layer in (readable, fast):
        x, h0 = _rnn_inputs(cls, layers, bi, T, device, dtype)
        out, state = layer(x, h0)
        states = state if isinstance(state, tuple) else (state,)
        w = torch.linspace(-1, 1, out.numel(), device=device).view_as(out)  # a loss that weighs every output
        ((out * w).sum() + sum(s.square().sum() for s in states)).backward()
        initial = h0 if isinstance(h0, tuple) else (h0,)
        results.append((out, states, x.grad, [h.grad for h in initial]))
    (o1, s1, gx1, gh1), (o2, s2, gx2, gh2) = results
    # The fused kernel adds in another order. Every step sums D + H = 11 terms into the state, which
    # carries them through T steps and the layers; the backward pass does the same again.
    n = 2 * T * 11 * layers
    same_path(o2, o1, n)
    for a, b in zip(s2, s1, strict=True):
        same_path(a, b, n)
    same_path(gx2, gx1, n)
    for a, b in zip(gh2, gh1, strict=True):
        assert a is not None and b is not None
        same_path(a, b, n)


def test_readable_recurrent_backward_is_linear_in_length():
    """The loop's backward must not write a full (B, T, G*H) gradient per step (quadratic in T).

    The fused kernel is the yardstick: the readable loop may be a constant factor slower, but the
    factor must not grow with the length."""
    import time

    def cost(layer, T):
        x = torch.randn(4, T, 8, requires_grad=True)
        best = math.inf
        for _ in range(3):
            t0 = time.process_time()
            layer(x)[0].sum().backward()
            best = min(best, time.process_time() - t0)
        return best

    torch.manual_seed(0)
    readable = LSTM(8, 64)
    fast = LSTM(8, 64, fast=True)
    fast.load_state_dict(readable.state_dict())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # CPU time is then the time of this one thread
    try:
        factor = [cost(readable, T) / cost(fast, T) for T in (100, 800)]
    finally:
        torch.set_num_threads(threads)
    assert factor[1] < 3.5 * factor[0], factor  # measured: 1.7x with unbind, 5.7x with xw[:, t]


# ---------------------------------------------------------------------------------------------
# Fast paths equal readable paths: attention and the transformer layers.
# (tests/models/test_attention.py checks parameter gradients for padding and causal masks.)
# ---------------------------------------------------------------------------------------------


def _mha_masks(kind, B, H, L, S, device, dtype=torch.float32):
    g = torch.Generator().manual_seed(5)
    if kind == "float (L, S)":
        return {"attn_mask": torch.randn(L, S, generator=g, dtype=dtype).to(device)}
    if kind == "bool (B*H, L, S)":
        blocked = torch.rand(B * H, L, S, generator=g) > 0.6
        blocked[..., 0] = False
        return {"attn_mask": blocked.to(device)}
    if kind == "padding + causal":  # a bool key_padding_mask (a float one is refused, issue 35)
        pad = (torch.arange(S) >= S - 2).expand(B, S)
        return {"key_padding_mask": pad.to(device), "is_causal": True}
    return {"is_causal": True}  # causal with L != S: the top-left aligned triangle


MASK_KINDS = ["float (L, S)", "bool (B*H, L, S)", "padding + causal", "causal L != S"]


@DTYPES
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_mha_fast_path_input_gradients(kind, device, dtype):
    torch.manual_seed(4)
    B, H, L, S, E = 2, 4, 5, 7, 16
    readable = MultiHeadAttention(E, H, fast=False).to(device=device, dtype=dtype)
    fast = MultiHeadAttention(E, H, fast=True).to(device=device, dtype=dtype)
    fast.load_state_dict(readable.state_dict())
    g = torch.Generator().manual_seed(6)
    base = [torch.randn(B, n, E, generator=g, dtype=dtype).to(device) for n in (L, S, S)]
    masks = _mha_masks(kind, B, H, L, S, device, dtype)
    results = []
    for m in (readable, fast):
        q, k, v = (t.clone().requires_grad_() for t in base)
        out, weights = m(q, k, v, need_weights=False, **masks)
        assert weights is None
        out.square().sum().backward()
        results.append((out, q.grad, k.grad, v.grad, m.q_proj.weight.grad))
    # projections E, attention E / H + 2 S, W^O E; forward and backward, and the sum over B * L
    n = 2 * (E + E // H + 2 * S + E) + B * L
    for a, b in zip(*results, strict=True):
        assert torch.isfinite(a).all()
        same_path(a, b, n)


@pytest.mark.parametrize("math_kernel", [False, True], ids=["as found", "math kernel"])
def test_fused_attention_bf16_on_the_cpu(math_kernel, monkeypatch):
    """bfloat16 rows long enough for PyTorch's packed CPU kernel, plain and under autocast.

    "math kernel" forces the path taken where that kernel fails (PyTorch 2.13 on a CPU with
    AMX under a lowered ``ATEN_CPU_CAPABILITY``), so every host runs both paths.
    """
    if math_kernel:
        monkeypatch.setattr(attention, "_cpu_fused_bf16_fails", lambda: True)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 64, 32, generator=g).bfloat16().float() for _ in range(3))
    keep = torch.rand(64, 64, generator=g) > 0.3
    for mask, causal in ((None, True), (keep, False)):
        ref, _ = attention.scaled_dot_product_attention(q, k, v, mask, is_causal=causal)
        ref = ref.bfloat16()  # the tolerance of bfloat16 sums of 64 scores and 64 values
        half = [t.bfloat16().requires_grad_() for t in (q, k, v)]
        out = attention.fused_attention(*half, mask, is_causal=causal)
        out.float().square().sum().backward()
        assert out.dtype == torch.bfloat16 and all(torch.isfinite(t.grad).all() for t in half)
        assert_close(out, ref, n=2 * 64)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = attention.fused_attention(q, k, v, mask, is_causal=causal)
        assert mixed.dtype == torch.bfloat16
        assert_close(mixed, ref, n=2 * 64)


@DTYPES
@pytest.mark.parametrize("masks", ["none", "padding + causal"])
def test_transformer_layers_fast_path_gradients(masks, device, dtype):
    torch.manual_seed(7)
    B, T, S, E, H = 3, 6, 5, 16, 4
    enc = EncoderLayer(E, H, dropout=0.0).to(device=device, dtype=dtype)
    dec = DecoderLayer(E, H, dropout=0.0).to(device=device, dtype=dtype)
    g = torch.Generator().manual_seed(8)
    x0 = torch.randn(B, T, E, generator=g, dtype=dtype).to(device)
    mem0 = torch.randn(B, S, E, generator=g, dtype=dtype).to(device)
    src_pad = torch.arange(T, device=device)[None, :] >= torch.tensor([T, T - 2, 1], device=device)[:, None]
    mem_pad = torch.arange(S, device=device)[None, :] >= torch.tensor([S, 2, S - 1], device=device)[:, None]
    enc_kw = {"key_padding_mask": src_pad, "is_causal": True} if masks != "none" else {}
    dec_kw = {"memory_key_padding_mask": mem_pad, "tgt_is_causal": True} if masks != "none" else {}
    results = []
    for fast in (False, True):
        set_fast(enc, fast), set_fast(dec, fast)
        enc.zero_grad(), dec.zero_grad()
        x, mem = x0.clone().requires_grad_(), mem0.clone().requires_grad_()
        y = dec(enc(x, **enc_kw), mem, **dec_kw)
        y.square().sum().backward()
        grads = [p.grad.clone() for p in (*enc.parameters(), *dec.parameters())]
        results.append((y, x.grad, mem.grad, grads))
    (y1, gx1, gm1, p1), (y2, gx2, gm2, p2) = results
    # encoder: LayerNorm E, attention E + E/H + 2T + E, LayerNorm E, feed-forward E + 4E; the decoder
    # adds cross-attention: about 400 terms forward, as many backward, and the sum over B * T
    n = 2 * 400 + B * T
    same_path(y2, y1, n)
    same_path(gx2, gx1, n)
    same_path(gm2, gm1, n)
    assert len(p1) == len(p2)
    for a, b in zip(p2, p1, strict=True):
        same_path(a, b, n)


# ---------------------------------------------------------------------------------------------
# Hopfield: the batched retrieval equals one query at a time.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [1, 3])
def test_hopfield_batched_retrieval_equals_one_query_at_a_time(steps, device):
    torch.manual_seed(9)
    patterns = torch.randn(10, 8, device=device, dtype=torch.float64, requires_grad=True)
    queries = torch.randn(6, 8, device=device, dtype=torch.float64, requires_grad=True)
    batched = hopfield.retrieve(patterns, queries, beta=2.0, steps=steps)
    looped = torch.stack([hopfield.retrieve(patterns, q, beta=2.0, steps=steps) for q in queries])
    n = steps * (8 + 2 * 10)  # per step: similarities over d = 8, softmax and mean over 10 patterns
    assert_same_math(batched, looped, n=n)
    g_batched = torch.autograd.grad(batched.square().sum(), (patterns, queries))
    g_looped = torch.autograd.grad(looped.square().sum(), (patterns, queries))
    for a, b in zip(g_batched, g_looped, strict=True):
        assert_same_math(a, b, n=2 * n + 6)  # backward too; the patterns' gradient sums over 6 queries


def test_every_committed_result_names_its_commit():
    """perf/*.json and results/**/*.json say which commit of the code produced them."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = sorted((root / "perf").rglob("*.json")) + sorted((root / "results").rglob("*.json"))
    assert files
    for path in files:
        data = json.loads(path.read_text())
        commit = data.get("commit") or data.get("meta", {}).get("commit")
        assert isinstance(commit, str) and len(commit) >= 7, f"{path.name} names no commit"


def test_committed_gpu_runs_measured_the_configuration_they_name():
    """What a GPU run of the programme commits (perf/gpt_train/, perf/kernels.json) is what the
    book says it is: the training command in bf16 on CUDA, DDP and FSDP over NCCL; kernels timed
    only after their check ran on the GPU itself, and ratios only for kernels that passed it.
    Skipped while no GPU run has been committed."""
    from pathlib import Path

    perf = Path(__file__).resolve().parents[2] / "perf"
    logs = {p.stem: json.loads(p.read_text()) for p in sorted((perf / "gpt_train").glob("*.json"))}
    kernels = json.loads((perf / "kernels.json").read_text()) if (perf / "kernels.json").exists() else None
    if not logs and kernels is None:
        pytest.skip("no GPU run of the training command or the kernels step committed yet")
    for name, log in logs.items():
        assert (log["device"], log["bf16"], log["world_size"]) == ("cuda", True, 1), name
        assert log["parallel"] == {"single": "none"}.get(name, name), name
        assert log["backend"] == (None if name == "single" else "nccl"), name
        assert log["peak_memory"] == "torch.cuda.max_memory_allocated", name
    if kernels is not None:
        assert kernels["meta"]["device"] == "cuda"
        checks = {(pair, side): c for pair, sides in kernels["checks"].items()
                  for side, c in sides.items()}
        assert checks and all(c["against"] == "kernel" for c in checks.values())
        for r in kernels["rows"]:
            if r["kind"] == "production" and r["status"] == "ok":
                assert r["check_ok"] == checks[(r["pair"], r["name"])]["ok"]
        ok = {(r["pair"], r["name"]) for r in kernels["rows"] if r.get("check_ok")}
        assert all((r["pair"], r["kernel"]) in ok for r in kernels["ratios"])


@pytest.mark.parametrize("chunk", [7, 64, 1000])
def test_chunked_cross_entropy_is_the_models_loss_and_gradients(chunk):
    """The ``chunked-ce`` variant trains the same function: its loss and every parameter's gradient
    equal GPT's own (float32 on the CPU), for slices that do not divide the rows and for one slice."""
    from benchmarks.chunked_loss import ChunkedLinearCrossEntropy, ChunkedLossGPT
    from seqbook.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=61, block_size=16, n_layer=2, n_head=2, n_embd=16, dropout=0.0))
    idx, targets = torch.randint(61, (3, 16)), torch.randint(61, (3, 16))
    _, loss = gpt(idx, targets)
    (2 * loss).backward()  # an upstream gradient other than 1 reaches both
    expected = {n: p.grad.clone() for n, p in gpt.named_parameters()}
    gpt.zero_grad()
    _, chunked = ChunkedLossGPT(gpt, chunk=chunk, dtype=torch.float32)(idx, targets)
    (2 * chunked).backward()
    assert_close(chunked, loss, n=61)  # a sum over the vocabulary
    for name, p in gpt.named_parameters():
        assert_close(p.grad, expected[name], n=48 * 61, msg=name)  # over rows and vocabulary
    # the function alone, against F.cross_entropy: the gradients of h and of W (untied)
    h, w = torch.randn(10, 4, requires_grad=True), torch.randn(7, 4, requires_grad=True)
    y = torch.randint(7, (10,))
    ChunkedLinearCrossEntropy.apply(h, w, y, min(chunk, 3), torch.float32).backward()
    h_ref, w_ref = h.detach().requires_grad_(), w.detach().requires_grad_()
    torch.nn.functional.cross_entropy(h_ref @ w_ref.T, y).backward()
    assert_close(h.grad, h_ref.grad, n=7)
    assert_close(w.grad, w_ref.grad, n=10)


def bfloat16_attention_runs() -> bool:
    """PyTorch 2.13's bfloat16 flash attention on the CPU packs its inputs with AVX-512 VNNI
    whenever the CPU has AMX, even under ATEN_CPU_CAPABILITY=avx2 or default, and then refuses
    ("pack_vnni2 is only supported when avx512 is supported"). Such a run cannot count it."""
    q = torch.randn(1, 2, 64, 32, dtype=torch.bfloat16)  # large enough for the flash kernel
    try:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    except RuntimeError as err:
        if "pack_vnni2" in str(err):
            return False
        raise
    return True


def test_committed_memory_count_is_the_current_codes():
    """perf/train_memory.json (what GPT-2-small's step saves, counted on the CPU) still describes
    the code: a fresh eager count equals the committed one; the compiled counts say what the
    Performance appendix reads from them (the compiled step keeps less than the eager one, the
    loss-only model as much as the compiled one, and only the compiled model that returns its
    logits zero-fills a gradient for them). Skipped only where PyTorch's bfloat16 attention cannot
    run on the CPU kernels chosen (an AMX CPU under a lower ATEN_CPU_CAPABILITY); the native run
    counts it."""
    if not bfloat16_attention_runs():
        pytest.skip("PyTorch's bfloat16 flash attention fails on this CPU under "
                    f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')} (pack_vnni2)")
    from pathlib import Path

    from benchmarks.gpu.gpt_throughput import gpt_config
    from benchmarks.train_memory import count
    from seqbook.gpt import GPT

    run = json.loads((Path(__file__).resolve().parents[2] / "perf" / "train_memory.json").read_text())
    config = gpt_config(dry=False)
    assert run["model"]["vocab_size"] == config.vocab_size
    assert run["model"]["activation"] == config.activation
    torch.manual_seed(0)
    model = set_fast(GPT(config), True)
    assert run["model"]["parameters"] == sum(p.numel() for p in model.parameters())
    (a, filled, _), (b, _, _) = (count(model, model, T, config.vocab_size) for T in (64, 128))
    eager = run["eager"]
    assert (b - a) // 64 == eager["bytes_per_token"] and 2 * a - b == eager["fixed_bytes"]
    assert not filled and not eager["logits_gradient_zero_filled"]
    compiled, loss_only = run["compiled"], run["compiled_loss_only"]
    assert compiled["bytes_per_token"] < eager["bytes_per_token"]
    assert compiled["fixed_bytes"] == eager["fixed_bytes"] == 2 * run["model"]["matrix_weights"] + 4
    assert loss_only["bytes_per_token"] == compiled["bytes_per_token"]
    assert compiled["logits_gradient_zero_filled"] and not loss_only["logits_gradient_zero_filled"]
    exact = run["compiled_exact_gelu"]  # the GELU of the GPU run saves the same bytes
    assert exact["saved_bytes"] == compiled["saved_bytes"][str(exact["length"])]
