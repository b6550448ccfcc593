"""Proofs of seqbook.gpt_train on CPU, in float64: two processes (gloo, started by torchrun) train
the same run as one process, FSDP2 the same as DDP, accumulation the same as a larger batch; a
stopped run resumes bit for bit, and a checkpoint written by two processes resumes in one and the
reverse; damaged or foreign checkpoints and bad command lines are refused with clear messages.

Every test has a time limit: the two-process runs through ``subprocess.run(..., timeout=...)``, the
runs inside pytest's process through an alarm, so a hung collective fails instead of blocking.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from seqbook.distributed import (
    CheckpointDamaged,
    CheckpointError,
    Dist,
    RunSettings,
    checkpoint_folders,
    global_batch_starts,
    latest_checkpoint,
    load_checkpoint,
    train_distributed,
    windows,
)
from seqbook.gpt import GPT, GPTConfig
from seqbook.gpt_train import build_parser, main

TIMEOUT = 120  # seconds for one torchrun launch
# a tiny GPT on The Time Machine's characters: 2 layers of width 16, windows of 16, 8 per step
TINY = ["--n-layer", "2", "--n-embd", "16", "--n-head", "2", "--block-size", "16", "--dropout", "0",
        "--dtype", "float64", "--batch-size", "8", "--steps", "5", "--lr", "1e-2", "--warmup", "1",
        "--clip", "0.5", "--eval-windows", "8", "--device", "cpu", "--quiet"]


@pytest.fixture(autouse=True)
def time_limit():
    """Runs inside this process end with an error after TIMEOUT seconds."""
    def expire(signum, frame):
        raise TimeoutError(f"test ran past {TIMEOUT} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TIMEOUT)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def torchrun(plan: list[list[str]], cwd: Path) -> None:
    """Run every command line of ``plan`` in turn under one ``torchrun --standalone
    --nproc-per-node 2`` launch on the CPU (this file is the script: see the end), so that the
    processes start, import torch and join the group once. ``--standalone`` lets the rendezvous
    pick a free port, so parallel tests do not collide."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "CUDA_VISIBLE_DEVICES": ""}
    (cwd / "plan.json").write_text(json.dumps(plan))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           __file__, str(cwd / "plan.json")]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=2 * TIMEOUT)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


class Runs:
    """The runs the tests compare, each made once (on first use) in a folder of its own. The
    two-process runs are made together, in one launch."""

    TWO = ("ddp", "fsdp", "fsdp_resumed", "one_to_two", "ddp_accumulate")

    def __init__(self, root: Path):
        self.root = root
        self.logs: dict[str, dict] = {}

    def folder(self, name: str) -> Path:
        return self.root / name

    def log(self, name: str) -> dict:
        if name not in self.logs:
            if name in self.TWO:
                self._make_two()
            else:
                self.logs[name] = self._make(name)
        return self.logs[name]

    def tensors(self, name: str, step: int = 5) -> dict[str, torch.Tensor]:
        self.log(name)
        found = load_file(str(self.folder(name) / f"step_{step:08d}" / "tensors.safetensors"))
        return {k: v for k, v in found.items() if k.startswith(("model/", "optim/"))}

    def _files(self, name: str) -> list[str]:
        return ["--checkpoint-dir", str(self.folder(name)), "--checkpoint-every", "3",
                "--json-log", str(self.root / f"{name}.json")]

    def _step3(self, name: str) -> str:
        return str(self.folder(name) / "step_00000003")

    def _make_two(self) -> None:
        self.log("single")
        plan = {
            "ddp": ["--parallel", "ddp"],
            "fsdp": ["--parallel", "fsdp"],
            # two processes resume what two FSDP processes wrote at step 3 (the run above)
            "fsdp_resumed": ["--parallel", "fsdp", "--resume", self._step3("fsdp")],
            # two processes resume what one process wrote, and accumulate two micro-batches of 2
            "one_to_two": ["--parallel", "fsdp", "--accumulate", "2", "--resume", self._step3("single")],
            "ddp_accumulate": ["--parallel", "ddp", "--accumulate", "2"],
        }
        torchrun([TINY + argv + self._files(name) for name, argv in plan.items()], self.root)
        for name in plan:
            self.logs[name] = json.loads((self.root / f"{name}.json").read_text())

    def _make(self, name: str) -> dict:
        files = self._files(name)
        if name == "stopped_resumed":  # stop at step 3, then go on from the newest checkpoint
            main(TINY + files + ["--stop-after", "3"])
            return main(TINY + files + ["--resume"])
        if name == "auto_resumed":  # the same with one command line, --resume auto
            first = main(TINY + files + ["--resume", "auto", "--stop-after", "3"])
            assert first["resumed_from"] is None and first["stopped_at"] == 3
            return main(TINY + files + ["--resume", "auto"])
        if name == "restarted":  # a failed job that torchrun starts again
            return self._restarted(files)
        extra = {
            "single": lambda: [],
            "accumulate": lambda: ["--accumulate", "2"],
            "two_to_one": lambda: ["--resume", self._step3_of("fsdp")],
            "ddp_to_one": lambda: ["--resume", self._step3_of("ddp")],
        }[name]()
        return main(TINY + extra + files)

    def _restarted(self, files: list[str]) -> dict:
        """Two processes under ``torchrun --max-restarts 1`` with one command line and
        ``--resume auto``: the first attempt finds no checkpoint, starts at step 0 and fails after
        its checkpoint at step 3 (as a process that died would); torchrun starts both processes
        again, and they go on from that checkpoint."""
        script = self.root / "fails_once.py"
        script.write_text(
            "import os, sys\n"
            "from seqbook.gpt_train import main\n"
            "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0':\n"
            "    assert main(sys.argv[1:] + ['--stop-after', '3'])['resumed_from'] is None\n"
            "    sys.exit(1)\n"
            "main(sys.argv[1:])\n")
        # torchrun's agent keeps one store for all attempts, and the restarted processes may read
        # the first attempt's addresses from it and fail to connect (gloo, torch 2.13: 2 of 6
        # restarts here); with this variable every attempt gets a store of its own
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "",
               "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--max-restarts", "1", str(script),
               *TINY, "--parallel", "ddp", "--resume", "auto", *files]
        done = subprocess.run(cmd, cwd=self.root, env=env, capture_output=True, text=True,
                              timeout=2 * TIMEOUT)
        assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr[-3000:]}"
        return json.loads((self.root / "restarted.json").read_text())

    def _step3_of(self, name: str) -> str:
        self.log(name)
        return self._step3(name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("gpt_train"))


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert sorted(a) == sorted(b)
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def assert_same_run(a: dict, b: dict, tol: float) -> None:
    assert a["step"] == b["step"] == [1, 2, 3, 4, 5]
    for key in ("loss", "grad_norm", "eval_loss"):
        assert a[key] == pytest.approx(b[key], abs=tol, rel=0), key
    assert a["lr"] == b["lr"]


def test_ddp_equals_one_process_step_for_step(runs):
    one, ddp = runs.log("single"), runs.log("ddp")
    assert (ddp["world_size"], ddp["parallel"], ddp["backend"]) == (2, "ddp", "gloo")
    assert (one["world_size"], one["parallel"], one["backend"]) == (1, "none", None)
    assert ddp["micro_batch_size"] == 4 and one["micro_batch_size"] == 8
    assert_same_run(one, ddp, 1e-12)
    assert min(one["grad_norm"]) > 0.5  # clipping acts at every step: the norm is the global one
    for step in (3, 5):
        assert max_difference(runs.tensors("single", step), runs.tensors("ddp", step)) < 1e-10


def test_fsdp_equals_ddp(runs):
    fsdp = runs.log("fsdp")
    assert fsdp["parallel"] == "fsdp"
    assert_same_run(runs.log("ddp"), fsdp, 1e-12)
    assert max_difference(runs.tensors("ddp"), runs.tensors("fsdp")) < 1e-10


@pytest.mark.parametrize("name, micro", [("accumulate", 4), ("ddp_accumulate", 2)])
def test_accumulation_equals_one_larger_batch(runs, name, micro):
    acc = runs.log(name)
    assert (acc["accumulate"], acc["micro_batch_size"]) == (2, micro)
    assert_same_run(runs.log("single"), acc, 1e-12)
    assert max_difference(runs.tensors("single"), runs.tensors(name)) < 1e-10


def test_stopped_and_resumed_equals_the_run_that_never_stopped_bit_for_bit(runs):
    resumed, whole = runs.log("stopped_resumed"), runs.log("single")
    assert resumed["resumed_from"]["step"] == 3 and resumed["resumed_from"]["rng_restored"]
    for key in ("step", "loss", "grad_norm", "lr", "eval_loss"):
        assert resumed[key] == whole[key], key
    a, b = runs.tensors("single"), runs.tensors("stopped_resumed")
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["auto_resumed", "restarted"])
def test_resume_auto_starts_at_step_0_then_goes_on_from_the_newest_checkpoint(runs, name):
    log = runs.log(name)
    assert log["resumed_from"]["step"] == 3 and log["resumed_from"]["rng_restored"]
    assert log["world_size"] == (1 if name == "auto_resumed" else 2)
    assert_same_run(runs.log("single"), log, 1e-12)


def test_two_processes_resume_bit_for_bit(runs):
    a, b = runs.tensors("fsdp"), runs.tensors("fsdp_resumed")
    assert runs.log("fsdp_resumed")["resumed_from"]["world_size"] == 2
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert runs.log("fsdp_resumed")["loss"] == runs.log("fsdp")["loss"]


@pytest.mark.parametrize("name", ["two_to_one", "ddp_to_one", "one_to_two"])
def test_a_checkpoint_resumes_on_another_number_of_processes(runs, name):
    log = runs.log(name)
    assert log["resumed_from"]["step"] == 3
    assert log["resumed_from"]["world_size"] != log["world_size"]
    assert not log["resumed_from"]["rng_restored"]  # reseeded; with dropout 0 nothing depends on it
    assert_same_run(runs.log("single"), log, 1e-12)
    assert max_difference(runs.tensors("single"), runs.tensors(name)) < 1e-10


def test_the_log_records_the_command_and_the_commit(runs, monkeypatch):
    runs.log("ddp")
    log = json.loads((runs.root / "ddp.json").read_text())  # the file torchrun's rank 0 wrote
    assert log["format"] == "seqbook.gpt_train log" and log["version"] == 1
    assert log["command"][:3] == ["python", "-m", "seqbook.gpt_train"] and "--json-log" in log["command"]
    assert "commit" in log and log["checkpoints"][-1].endswith("step_00000005")
    assert log["data"]["tokenizer"] == "char" and log["config"]["n_embd"] == 16
    # rank 0's peak memory, with what was measured (a CPU run: the process's resident set)
    assert log["peak_memory"] == "peak resident set of the process" and log["peak_memory_mib"] > 10
    monkeypatch.setenv("SEQBOOK_COMMIT", "abc123")
    assert main(TINY + ["--steps", "1", "--warmup", "0"])["commit"] == "abc123"


# ---------------------------------------------------------------------------------------------
# Damaged, foreign and mismatched checkpoints
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def copy_of_step3(runs, tmp_path):
    runs.log("single")
    target = tmp_path / "step_00000003"
    shutil.copytree(runs.folder("single") / "step_00000003", target)
    return target


def refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_a_corrupted_checkpoint_is_refused(copy_of_step3, capsys):
    f = copy_of_step3 / "tensors.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    err = refused(TINY + ["--resume", str(copy_of_step3)], capsys)
    assert str(f) in err and "SHA-256" in err and "corrupted" in err


def test_a_truncated_checkpoint_is_refused(copy_of_step3, capsys):
    f = copy_of_step3 / "tensors.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    err = refused(TINY + ["--resume", str(copy_of_step3)], capsys)
    assert str(f) in err and "truncated" in err
    s = copy_of_step3 / "state.json"
    s.write_text(s.read_text()[:200])
    err = refused(TINY + ["--resume", str(copy_of_step3)], capsys)
    assert str(s) in err and "JSON" in err


def test_a_foreign_file_is_refused(copy_of_step3, capsys):
    s = copy_of_step3 / "state.json"
    s.write_text(json.dumps({"format": "something else", "step": 3}))
    err = refused(TINY + ["--resume", str(copy_of_step3)], capsys)
    assert str(s) in err and "seqbook.gpt_train checkpoint" in err


def test_a_checkpoint_of_another_model_size_is_refused(copy_of_step3, capsys):
    err = refused(TINY + ["--n-embd", "32", "--resume", str(copy_of_step3)], capsys)
    assert str(copy_of_step3) in err and "config.n_embd: checkpoint 16, this run 32" in err
    err = refused(TINY + ["--lr", "0.5", "--resume", str(copy_of_step3)], capsys)
    assert "run.lr: checkpoint 0.01, this run 0.5" in err


@pytest.fixture
def copy_of_run(runs, tmp_path):
    """A copy of the one-process run's checkpoint folder (steps 3 and 5)."""
    runs.log("single")
    target = tmp_path / "ckpt"
    shutil.copytree(runs.folder("single"), target)
    return target


def damage(folder: Path) -> Path:
    f = folder / "tensors.safetensors"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    return f


@pytest.mark.parametrize("how", ["--resume", "--resume auto"])
def test_a_damaged_newest_checkpoint_gives_way_to_the_next_older(runs, copy_of_run, how, capsys):
    bad = damage(copy_of_run / "step_00000005")
    log = main(TINY + ["--checkpoint-dir", str(copy_of_run), *how.split()])
    resumed = log["resumed_from"]
    assert resumed["step"] == 3 and resumed["path"] == str(copy_of_run / "step_00000003")
    assert len(resumed["skipped"]) == 1 and str(bad) in resumed["skipped"][0]
    assert "SHA-256" in resumed["skipped"][0] and "damaged_step_00000005" in resumed["skipped"][0]
    assert str(bad) in capsys.readouterr().err
    # set aside, not deleted; the rerun of steps 4 and 5 is the uninterrupted run's
    assert (copy_of_run / "damaged_step_00000005" / "tensors.safetensors").is_file()
    assert log["loss"] == runs.log("single")["loss"]
    again = main(TINY + ["--checkpoint-dir", str(copy_of_run), "--resume"])  # the new step 5
    assert again["resumed_from"]["step"] == 5 and again["resumed_from"]["skipped"] == []


def test_checkpoint_folders_lists_the_run_oldest_first_and_skips_the_set_aside(tmp_path):
    assert checkpoint_folders(tmp_path / "absent") == [] and latest_checkpoint(tmp_path) is None
    for name in ["step_00000010", "step_00000002", "damaged_step_00000011", "notes"]:
        (tmp_path / name).mkdir()
    (tmp_path / "step_00000012").write_text("a file, not a folder")
    assert [p.name for p in checkpoint_folders(tmp_path)] == ["step_00000002", "step_00000010"]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000010"


def test_when_every_checkpoint_is_damaged_each_is_named_and_none_is_moved(copy_of_run, capsys):
    bad = [damage(copy_of_run / "step_00000005"), damage(copy_of_run / "step_00000003")]
    err = refused(TINY + ["--checkpoint-dir", str(copy_of_run), "--resume"], capsys)
    assert "no checkpoint could be restored" in err and all(str(f) in err for f in bad)
    assert sorted(p.name for p in copy_of_run.iterdir() if p.is_dir()) == [
        "step_00000003", "step_00000005"]


def test_a_checkpoint_of_another_run_is_no_fallback(copy_of_run, capsys):
    damage(copy_of_run / "step_00000005")
    err = refused(TINY + ["--lr", "0.5", "--checkpoint-dir", str(copy_of_run), "--resume"], capsys)
    assert "run.lr: checkpoint 0.01, this run 0.5" in err and "SHA-256" in err
    assert (copy_of_run / "step_00000005").is_dir()  # nothing restored, nothing moved


def test_a_path_named_on_the_command_line_has_no_fallback(copy_of_run, capsys):
    damage(copy_of_run / "step_00000005")
    err = refused(TINY + ["--resume", str(copy_of_run / "step_00000005")], capsys)
    assert "SHA-256" in err and "no checkpoint could be restored" not in err
    assert issubclass(CheckpointDamaged, CheckpointError)


def test_a_refused_checkpoint_restores_nothing(copy_of_step3):
    meta = json.loads((copy_of_step3 / "state.json").read_text())
    f = copy_of_step3 / "tensors.safetensors"
    f.write_bytes(f.read_bytes()[:-8])
    model = GPT(GPTConfig(**meta["config"])).double()
    optimizer = torch.optim.AdamW(model.parameters())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    shapes = {k: list(v.shape) for k, v in before.items()}
    expect = {key: meta[key] for key in ("config", "run", "data")}
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(copy_of_step3, model, optimizer, Dist(), expect, shapes)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not optimizer.state


# ---------------------------------------------------------------------------------------------
# Other data, and bad command lines
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer", ["char", "bpe"])
def test_any_utf8_file(tmp_path, tokenizer):
    text = "Für Elise, la mer et la vie — encore une fois. " * 40
    f = tmp_path / "text.txt"
    f.write_text(text, encoding="utf-8")
    extra = ["--vocab-size", "280"] if tokenizer == "bpe" else []
    log = main(TINY + ["--data", str(f), "--tokenizer", tokenizer, "--steps", "2", *extra])
    assert log["data"]["source"] == str(f) and log["data"]["tokenizer"] == tokenizer
    if tokenizer == "bpe":
        assert 256 < log["config"]["vocab_size"] <= 280
    else:
        assert log["config"]["vocab_size"] == len(set(text)) + 4  # four reserved tokens
    assert len(log["loss"]) == 2


@pytest.mark.parametrize("argv, message", [
    (["--parallel", "zero"], "invalid choice: 'zero'"),
    (["--accumulate", "0"], "--accumulate: must be an int >= 1, got 0"),
    (["--batch-size", "6", "--accumulate", "4"], "--batch-size 6 must be divisible by processes x"),
    (["--resume"], "need --checkpoint-dir"),
    (["--resume", "auto"], "with auto need --checkpoint-dir"),
    (["--stop-after", "2"], "need --checkpoint-dir"),
    (["--data", "no/such/file.txt"], "--data no/such/file.txt: no such file"),
    (["--bf16", "--dtype", "float32"], "--bf16 needs a GPU"),
    (["--tokenizer", "bpe", "--vocab-size", "100"], "--vocab-size: must be an int >= 256"),
    (["--steps", "3", "--warmup", "3"], "--warmup 3 must be < --steps 3"),
    (["--n-embd", "15"], "--n-embd 15 must be divisible by --n-head 2"),
])
def test_bad_command_lines_are_refused(argv, message, capsys):
    assert message in refused(TINY + argv, capsys)


def test_resume_without_a_checkpoint_is_refused(tmp_path, capsys):
    err = refused(TINY + ["--checkpoint-dir", str(tmp_path), "--resume"], capsys)
    assert f"--resume: no checkpoint in {tmp_path}" in err
    err = refused(TINY + ["--resume", str(tmp_path)], capsys)
    assert "not a checkpoint folder" in err


def test_no_option_is_the_start_of_a_torchrun_option():
    """torchrun parses the whole command line with abbreviations: an option of ours that begins
    one of its options (``--log`` of ``--log-dir``) would be taken or refused by it."""
    from torch.distributed.run import get_args_parser

    theirs = [s for a in get_args_parser()._actions for s in a.option_strings if s.startswith("--")]
    ours = [s for a in build_parser()._actions for s in a.option_strings if s.startswith("--")]
    clashes = [(o, t) for o in ours for t in theirs if t.startswith(o) and o != "--help"]
    assert not clashes
    assert not build_parser().allow_abbrev


if __name__ == "__main__":  # the script of torchrun(): one process of the group
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        for argv in json.loads(Path(sys.argv[1]).read_text()):
            main(argv)
    finally:
        dist.destroy_process_group()



def _train(**overrides):
    args = dict(config=GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=1, n_embd=8, dropout=0.0),
                train_ids=torch.arange(40) % 10, valid_ids=None, run=RunSettings(steps=1, batch_size=2),
                d=Dist(), data_info={}, progress=False)
    args.update(overrides)
    return train_distributed(**args)


BAD_CALLS = {  # the library below the command line: each argument checked at the door, named
    "train_ids-beyond-vocabulary": (lambda: _train(train_ids=torch.arange(40) % 11), "train_ids", "[0, 9]",
                                    "10"),
    "train_ids-empty": (lambda: _train(train_ids=torch.zeros(0, dtype=torch.long)), "train_ids", "empty"),
    "train_ids-float": (lambda: _train(train_ids=torch.rand(40)), "train_ids", "integer", "float32"),
    "valid_ids-beyond-vocabulary": (lambda: _train(valid_ids=torch.tensor([3, 12])), "valid_ids", "12"),
    "accumulate-0": (lambda: _train(accumulate=0), "accumulate", ">= 1", "0"),
    "accumulate-not-dividing": (lambda: _train(accumulate=3), "batch_size 2", "divisible", "1 x 3"),
    "parallel-unknown": (lambda: _train(parallel="zero"), "parallel", "'zero'"),
    "bf16-on-cpu": (lambda: _train(bf16=True), "bf16=True", "CUDA", "cpu"),  # not float32 silently
    "eval_windows-0": (lambda: _train(eval_windows=0), "eval_windows", "0"),
    "run-dict": (lambda: _train(run={"steps": 1}), "run", "RunSettings", "dict"),
    "RunSettings-steps-0": (lambda: RunSettings(0, 2), "steps", "0"),
    "RunSettings-schedule": (lambda: RunSettings(1, 2, schedule="cos"), "schedule", "'cos'"),
    "Dist-rank-beyond-world": (lambda: Dist(rank=2, world_size=2), "rank", "<= 1", "2"),
    "global_batch_starts-text-too-short": (lambda: global_batch_starts(0, 1, 4, 4, 2), "num_tokens",
                                           "block_size + 1 = 5", "got 4"),
    "windows-start-beyond-text": (lambda: windows(torch.arange(10), torch.tensor([6]), 4), "starts",
                                  "[0, 5]", "6"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_library_calls_are_refused_clearly(case):
    from tests.badinput import assert_clear_error  # not at the top: torchrun runs this file as a script

    fn, *words = BAD_CALLS[case]
    assert_clear_error(fn, *words)


def test_a_state_file_that_cannot_be_read_or_names_another_step_gives_way(runs, copy_of_run,
                                                                          monkeypatch, capsys):
    newest = copy_of_run / "step_00000005" / "state.json"
    meta = json.loads(newest.read_text())
    meta["step"] = 2  # parses, but is not this folder's step
    newest.write_text(json.dumps(meta))
    log = main(TINY + ["--checkpoint-dir", str(copy_of_run), "--resume"])
    assert log["resumed_from"]["step"] == 3 and "differs from the folder's 5" in \
        log["resumed_from"]["skipped"][0]
    assert log["loss"] == runs.log("single")["loss"]
    capsys.readouterr()
    read_text = Path.read_text

    def failing(self, *args, **kwargs):  # a read error, as from a bad sector
        if self == copy_of_run / "step_00000005" / "state.json":
            raise OSError(5, "Input/output error")
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", failing)
    log = main(TINY + ["--checkpoint-dir", str(copy_of_run), "--resume"])
    assert log["resumed_from"]["step"] == 3
    assert "unreadable" in log["resumed_from"]["skipped"][0]


@pytest.mark.parametrize("bad", [None, "ckpt", iter(["a"]), 3])
def test_resume_fallback_must_be_a_list_or_tuple_of_folders(bad):
    config = GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=1, n_embd=4)
    run = RunSettings(steps=1, batch_size=2)
    with pytest.raises(TypeError, match="resume_fallback must be a list or tuple"):
        train_distributed(config, torch.randint(10, (50,)), None, run, Dist(), {},
                          resume_fallback=bad)
