"""catcap.models.linear: the oneDNN path computes what nn.Linear computes, forward and backward,
and the backend choice follows its documented rules."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from catcap.models import linear as lin


@pytest.fixture
def backend(monkeypatch):
    """Set CATCAP_CPU_GEMM for one test and re-decide the backend before and after it."""

    def choose(value: str | None) -> str:
        if value is None:
            monkeypatch.delenv(lin.ENV_VAR, raising=False)
        else:
            monkeypatch.setenv(lin.ENV_VAR, value)
        lin.cpu_gemm_backend.cache_clear()
        return lin.cpu_gemm_backend()

    yield choose
    monkeypatch.undo()
    lin.cpu_gemm_backend.cache_clear()


@pytest.fixture
def onednn(backend, monkeypatch):
    """oneDNN for every product, however small (these tests use small ones), with a call count."""
    if backend("onednn") != "onednn":
        pytest.skip("this PyTorch has no working oneDNN linear (catcap falls back to F.linear)")
    monkeypatch.setattr(lin, "MIN_MACS", 0)
    calls = []
    product = lin._product
    monkeypatch.setattr(lin, "_product", lambda *a: calls.append(a[0].shape) or product(*a))
    return calls


def _case(shape_in, fan_out=24, seed=0):
    gen = torch.Generator().manual_seed(seed)
    layer = lin.Linear(shape_in[-1], fan_out)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen))
        layer.bias.copy_(torch.randn(fan_out, generator=gen))
    return layer, torch.randn(*shape_in, generator=gen)


@pytest.mark.parametrize("shape_in", [(7, 40), (3, 5, 40), (2, 3, 4, 40)])
def test_forward_matches_f_linear(onednn, shape_in):
    layer, x = _case(shape_in)
    with torch.no_grad():
        got = layer(x)
    want = F.linear(x, layer.weight, layer.bias)
    assert onednn == [x.shape]
    assert got.shape == want.shape == (*shape_in[:-1], 24)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_strided_input_and_no_bias(onednn):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(40, 9, generator=gen).t()  # (9, 40), not contiguous
    w = torch.randn(12, 40, generator=gen)
    torch.testing.assert_close(lin.linear(x, w), x @ w.t(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape_in", [(7, 40), (3, 5, 40)])
def test_gradients_match_f_linear(onednn, shape_in):
    layer, x = _case(shape_in, seed=2)
    x.requires_grad_(True)
    grad_out = torch.randn(*shape_in[:-1], 24, generator=torch.Generator().manual_seed(3))
    layer(x).backward(grad_out)
    assert len(onednn) == 3  # forward, grad of x, grad of the weight
    got = (x.grad.clone(), layer.weight.grad.clone(), layer.bias.grad.clone())
    x.grad = layer.weight.grad = layer.bias.grad = None
    F.linear(x, layer.weight, layer.bias).backward(grad_out)
    for g, want in zip(got, (x.grad, layer.weight.grad, layer.bias.grad)):
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-4)


def test_frozen_weight_gets_no_gradient(onednn):
    layer, x = _case((4, 40))
    layer.requires_grad_(False)
    x.requires_grad_(True)
    layer(x).sum().backward()
    assert layer.weight.grad is None and layer.bias.grad is None
    torch.testing.assert_close(x.grad, layer.weight.sum(0).expand(4, 40), rtol=1e-5, atol=1e-5)


def test_other_dtypes_and_autocast_take_pytorchs_path(onednn):
    layer, x = _case((4, 40))
    double = lin.Linear(40, 24).double()
    xd = x.double()
    assert torch.equal(double(xd), F.linear(xd, double.weight, double.bias))  # bit for bit
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
        want = F.linear(x, layer.weight, layer.bias)
    assert out.dtype == torch.bfloat16 and torch.equal(out, want)
    assert onednn == []


def test_small_products_stay_on_pytorchs_path(onednn, monkeypatch):
    monkeypatch.setattr(lin, "MIN_MACS", 6 * 40 * 24)
    small, x = _case((5, 40))
    assert torch.equal(small(x), F.linear(x, small.weight, small.bias)) and onednn == []
    _, x6 = _case((6, 40))
    small(x6)
    assert onednn == [x6.shape]


def test_backend_torch_is_f_linear_bit_for_bit(backend):
    assert backend("torch") == "torch"
    layer, x = _case((6, 40))
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


def test_unknown_backend_is_refused_with_the_choices(backend):
    with pytest.raises(ValueError, match="CATCAP_CPU_GEMM='mkl' is not a backend; expected one of auto, onednn, torch"):
        backend("mkl")


def test_auto_uses_onednn_only_for_mkl_on_non_intel_avx512(backend, monkeypatch):
    monkeypatch.setattr(lin, "_onednn_problem", lambda: None)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    cases = [("AuthenticAMD", "AVX512", "onednn"), ("GenuineIntel", "AVX512", "torch"),
             ("AuthenticAMD", "AVX2", "torch"), (None, "AVX512", "torch")]
    for vendor, capability, want in cases:
        monkeypatch.setattr(lin, "_cpu_vendor", lambda v=vendor: v)
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        assert backend(None) == want, (vendor, capability)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: False)
    monkeypatch.setattr(lin, "_cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert backend(None) == "torch"  # no MKL (e.g. an OpenBLAS or ARM build): nothing to fix


def test_broken_onednn_falls_back_with_a_warning(backend, monkeypatch):
    monkeypatch.setattr(lin, "_onednn_problem", lambda: "torch.ops.mkldnn._linear_pointwise failed: boom")
    with pytest.warns(RuntimeWarning, match="oneDNN linear unavailable .*boom.*CATCAP_CPU_GEMM=torch"):
        assert backend("onednn") == "torch"


def test_probe_detects_a_wrong_product(monkeypatch):
    if not torch.backends.mkldnn.is_available():
        pytest.skip("PyTorch built without oneDNN")
    assert lin._onednn_problem() is None
    monkeypatch.setattr(lin, "_product", lambda x, w, b: F.linear(x, w, b) + 1.0)
    assert "disagrees" in lin._onednn_problem()


def test_checkpoint_names_are_nn_linears():
    layer = lin.Linear(8, 3)
    assert isinstance(layer, nn.Linear)
    assert sorted(layer.state_dict()) == ["bias", "weight"]


def test_gradients_of_an_input_sliced_from_a_larger_tensor(onednn):
    """An LSTM reads step t's word as ``words[:, t]`` (rows T * E apart); the weight gradient is
    computed from contiguous rows (oneDNN took ~1,600x longer on such a strided operand)."""
    gen = torch.Generator().manual_seed(4)
    layer = lin.Linear(16, 24)
    words = torch.randn(6, 5, 16, generator=gen, requires_grad=True)
    grad_out = torch.randn(6, 24, generator=gen)
    layer(words[:, 2]).backward(grad_out)
    got = (words.grad.clone(), layer.weight.grad.clone())
    words.grad = layer.weight.grad = layer.bias.grad = None
    F.linear(words[:, 2], layer.weight, layer.bias).backward(grad_out)
    for g, want in zip(got, (words.grad, layer.weight.grad)):
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-4)


def test_the_onednn_self_check_passes_inside_a_bf16_autocast():
    """The first Linear call (which runs the self-check) may come inside `catcap evaluate
    --precision bf16`'s autocast: the check must compare fp32 with fp32 there too."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("PyTorch without oneDNN")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert lin._onednn_problem() is None


def test_eval_without_grad_reads_a_packed_weight_with_the_same_result(onednn):
    layer = lin.Linear(24, 40).eval()
    x = torch.randn(64, 24)
    with torch.no_grad():
        packed = layer(x)
        first = layer.packed_weight()
        layer(x)
    assert layer.packed_weight() is first  # packed once, kept
    assert torch.allclose(packed, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    assert list(layer.state_dict()) == ["weight", "bias"]


def test_packed_weight_follows_weight_changes(onednn):
    layer = lin.Linear(24, 40).eval()
    x = torch.randn(64, 24)
    with torch.no_grad():
        layer(x)
        layer.weight.mul_(-2.0)  # in place: the version counter moves
        assert torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        layer.load_state_dict({"weight": torch.zeros(40, 24), "bias": torch.ones(40)})
        assert torch.equal(layer(x), torch.ones(64, 40))


def test_training_mode_and_autograd_use_the_plain_weight(onednn):
    layer = lin.Linear(24, 40).eval()
    with torch.no_grad():
        layer(torch.randn(8, 24))
    assert "_packed" in layer.__dict__
    layer.train()
    assert "_packed" not in layer.__dict__  # dropped: training changes the weights
    x = torch.randn(8, 24, requires_grad=True)
    layer.eval()(x).sum().backward()  # eval with gradients: the autograd path, no packing
    assert "_packed" not in layer.__dict__ and x.grad is not None


def test_copies_leave_the_packed_weight_out(onednn):
    import copy

    layer = lin.Linear(24, 40).eval()
    with torch.no_grad():
        layer(torch.randn(8, 24))
    twin = copy.deepcopy(layer)
    assert "_packed" not in twin.__dict__
    with torch.no_grad():
        x = torch.randn(8, 24)
        assert torch.equal(twin(x), layer(x))
