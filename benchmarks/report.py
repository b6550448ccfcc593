"""Where the numbers come from, and how they are shown: the machine, the text table, the files."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from seqbook.utils import code_commit, cpu_name


def _nvidia_driver() -> str | None:
    """The NVIDIA driver's version, as nvidia-smi reports it (None without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def machine_info(device: torch.device | str = "cpu", commit_also: tuple[str, ...] = ()) -> dict:
    """The machine and software a result came from, and the commit of the code it measured
    (``commit_also``: more folders whose uncommitted changes make it dirty, see ``code_commit``)."""
    device = torch.device(device)
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": code_commit(also=commit_also),
        "device": device.type,
        "cpu": cpu_name(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["gpu_multiprocessors"] = props.multi_processor_count
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
        info["driver"] = _nvidia_driver()
    try:
        import torchhd
        info["torchhd"] = getattr(torchhd, "__version__", "installed")
    except ImportError:
        info["torchhd"] = None
    return info


def _fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_row(r: dict) -> str:
    """One line of the table: a row of :func:`benchmarks.layers.run_pairs`."""
    verdict = "" if r["meets"] is None else ("ok" if r["meets"] else "MISS")
    if r["status"] != "ok":
        verdict = r["status"]
    return (f"{r['group']:<11} {r['name']:<38} {r['reference']:<34} {r['size']:<5} {r['pass']:<16} "
            f"{_fmt(r['ours_ms'], '9.3f')} {_fmt(r['ref_ms'], '9.3f')} {_fmt(r['ratio'], '6.2f')} "
            f"{_fmt(r['target'], '6.1f')} {verdict}")


def format_table(result: dict) -> str:
    """The text table of a result of ``python -m benchmarks``: machine, one line per row, the shapes."""
    m = result["meta"]
    lines = [
        f"seqbook benchmark on {m['device']}: {m['cpu']}, {m['torch_threads']} torch thread(s) of "
        f"{m['logical_cpus']} logical CPUs, torch {m['torch']}, torch-hd {m['torchhd'] or 'not installed'}",
        f"{m['date']}; load average at start {m['load_average']}; command: {m['command']}",
        f"times are medians in ms per call ({m.get('clock', 'wall')} clock); ratio = ours / reference; "
        "the target applies to forward+backward",
        "",
        f"{'group':<11} {'ours':<38} {'reference':<34} {'size':<5} {'pass':<16} "
        f"{'ours ms':>9} {'ref ms':>9} {'ratio':>6} {'target':>6}",
    ]
    lines += [format_row(r) for r in result["rows"]]
    shapes = {}
    for r in result["rows"]:
        shapes.setdefault((r["size"], r["group"], r["name"]), r["shape"])
    lines += ["", "shapes:"]
    lines += [f"  {size:<5} {name:<38} {shape}" for (size, _, name), shape in shapes.items()]
    notes = sorted({r["note"] for r in result["rows"] if r["note"]})
    if notes:
        lines += ["", "notes:"] + [f"  {n}" for n in notes]
    if "scaling" in result:
        for group, res in result["scaling"].items():
            lines += ["", f"scaling, {group}, {res['pass']} ms, sizes {res['sizes']}",
                      f"  {'T':<40}" + "".join(f"{T:>9}" for T in res["lengths"])]
            lines += [f"  {name:<40}" + "".join(f"{t:9.3g}" for t in ms)
                      for name, ms in res["series"].items()]
    return "\n".join(lines) + "\n"


def write_json(path: Path, data: dict) -> None:
    """``data`` as indented JSON at ``path``, its folder made if needed (every result file's form)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def finish(result: dict, device: torch.device, started: float, module: str,
           argv: list[str] | None, path: Path | None, **meta) -> dict:
    """Close a run of ``python -m module``: ``result["meta"]`` gets the machine, ``meta``, the
    seconds since ``started`` (a ``time.perf_counter()``) and the command line; written to ``path``
    if one is given."""
    args = sys.argv[1:] if argv is None else argv
    result["meta"] = {**machine_info(device), **meta,
                      "elapsed_s": round(time.perf_counter() - started, 1),
                      "command": " ".join(["python -m", module, *args])}
    if path:
        write_json(path, result)
    return result


def write_result(out: Path, stem: str, result: dict, table: str | None = None) -> None:
    """Write ``result`` to ``out/<stem>.json`` and, if given, ``table`` to ``out/<stem>.txt``."""
    out.mkdir(parents=True, exist_ok=True)
    if table is not None:
        (out / f"{stem}.txt").write_text(table)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
