import torch
from torch import nn

from catcap.models.encoders.transformer import FeatureProjection
from catcap.models.layers import FeedForward


def _graph_nodes(tensor):
    seen, stack = set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(n for n, _ in node.next_functions)
    return {node.name() for node in seen}


def test_feed_forward_matches_the_formula_and_its_gradient():
    torch.manual_seed(0)
    ffn = FeedForward(6, 10)
    x = torch.randn(2, 3, 6, requires_grad=True)
    out = ffn(x)
    w1, w2 = ffn.net[0], ffn.net[2]
    expected = w2(torch.relu(w1(x.detach().requires_grad_())))
    torch.testing.assert_close(out, expected)
    out.square().sum().backward()
    x_ref = x.detach().requires_grad_()
    ref_w = [p.detach().clone().requires_grad_() for p in (w1.weight, w1.bias, w2.weight, w2.bias)]
    ref = torch.relu(x_ref @ ref_w[0].T + ref_w[1]) @ ref_w[2].T + ref_w[3]
    ref.square().sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for p, r in zip((w1.weight, w1.bias, w2.weight, w2.bias), ref_w):
        torch.testing.assert_close(p.grad, r.grad)


def test_in_place_relus_act_on_whole_tensors_not_views():
    """An in-place op on a view puts CopySlices/AsStrided nodes in the graph, which copy and
    zero-fill the whole gradient in backward (~0.3 s of a paper-size CPU step)."""
    x = torch.randn(2, 3, 6, requires_grad=True)
    for module in (FeedForward(6, 10), FeatureProjection(6, 4, dropout=0.0)):
        nodes = _graph_nodes(module(x).sum())
        assert "ReluBackward0" in nodes or "ThresholdBackward0" in nodes
        assert not {"torch::autograd::CopySlices", "AsStridedBackward0"} & nodes, nodes
    # the check can fail: the old form (Sequential on the 3-D input) does create them
    old = nn.Sequential(nn.Linear(6, 10), nn.ReLU(inplace=True))
    assert "torch::autograd::CopySlices" in _graph_nodes(old(x).sum())
