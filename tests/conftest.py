import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    """Every device-parametrised test runs on the CPU, and on CUDA when one is present."""
    return torch.device(request.param)
