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
