import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# TF32 rounds the inputs of CUDA matrix products to 10 bits (eps 1e-3): no float32 tolerance of the
# policy in tests/tolerance.py would hold. The tests compare float32 as float32.
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


@pytest.fixture(params=DEVICES)
def device(request):
    """Every device-parametrised test runs on the CPU, and on CUDA when one is present."""
    return torch.device(request.param)


@pytest.fixture(autouse=True)
def seeded_torch():
    """Every test starts from the same torch random state, so no result depends on the tests that ran
    before it (pytest-randomly reseeds ``random`` and numpy for every test, but not torch)."""
    torch.manual_seed(0)


def pytest_terminal_summary(terminalreporter):
    """The kill rate of the exercise checks per chapter (tests/exercises/test_exercise_mutants.py)."""
    rows = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for key, value in getattr(report, "user_properties", ()):
                if key == "mutants" and getattr(report, "when", "call") == "call":
                    rows[value[1]] = value
    if not rows:
        return
    terminalreporter.section("exercise checks against mutants of their solutions")
    chapters = {}
    for chapter, _, made, killed, equivalent in rows.values():
        c = chapters.setdefault(chapter, [0, 0, 0, 0])
        c[0] += 1
        c[1] += made
        c[2] += killed
        c[3] += equivalent
    for chapter, (n, made, killed, equivalent) in sorted(chapters.items()):
        rate = killed / max(made - equivalent, 1)
        terminalreporter.write_line(
            f"chapter {chapter}: {n:2d} exercises, {made:4d} mutants, {killed:4d} killed, "
            f"{equivalent:3d} equivalent (listed), kill rate {rate:.1%} of the non-equivalent")
