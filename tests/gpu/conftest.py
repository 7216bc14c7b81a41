import pytest
import torch


@pytest.fixture(autouse=True)
def fp32_products():
    """TF32 off for every GPU test: CUDA's fp32 products stay fp32, comparable with the CPU's."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
