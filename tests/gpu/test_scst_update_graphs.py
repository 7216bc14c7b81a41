"""SCST's update replayed as a CUDA graph (catcap.training.scst_graph) against the same update
run eagerly on the same card: for every decoder x cross-attention variant of the contract (fp32
and bf16), the gradients each step applies and the weights after it; then the trainer itself,
graph path against eager path. The CPU side (padding, fallback, reasons, keys) is
tests/training/test_scst_graph.py.

Models in eval mode (no dropout: the two paths draw dropout numbers differently); TF32 off
(conftest). Key-projection biases are left out of the weights' comparison: their exact gradient
is 0 (softmax cancels a bias shared by all keys) and Adam turns the rounding noise in its place
into steps of the learning rate. Skipped where there is no CUDA device."""

import copy

import pytest
import torch

from catcap.training.precision import Precision
from catcap.training.scst import Drawn, sequence_log_probs
from catcap.training.scst_graph import UpdateGraphs
from catcap.training.setup import make_optimizer
from tiny_models import CONTRACT_IDS, CONTRACT_VARIANTS, contract_batch, ending_captioner

if not torch.cuda.is_available():
    pytest.skip("no CUDA device: these tests capture SCST updates as CUDA graphs (run them where "
                "torch.cuda.is_available())", allow_module_level=True)

CUDA = torch.device("cuda")
N, LENGTH = 2, 8


def drawn_captions(step: int) -> Drawn:
    """Two captions for each of the contract batch's 3 images, ending at different steps."""
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(3, 12, (3 * N, 6), generator=g)
    lengths = torch.tensor([6, 4, 2, 5, 3, 1])
    chosen = torch.arange(6)[None, :] < lengths[:, None]
    tokens[torch.arange(6), lengths - 1] = 2  # <eos>
    tokens[~chosen] = 0
    return Drawn(tokens.to(CUDA), chosen.to(CUDA), torch.randn(3 * N, generator=g).to(CUDA), N, {})


def comparable(model) -> dict:
    return {n: p for n, p in model.named_parameters() if not n.endswith("k_proj.bias")}


#: every variant in fp32; in bf16 the first variant of each architecture (capture under autocast)
CASES = [pytest.param(v, "fp32", id=f"{i}-fp32") for v, i in zip(CONTRACT_VARIANTS, CONTRACT_IDS)] + \
    [pytest.param(v, "bf16", id=f"{i}-bf16") for k, (v, i) in enumerate(zip(CONTRACT_VARIANTS, CONTRACT_IDS))
     if all(v[0] != w[0] for w in CONTRACT_VARIANTS[:k])]


@pytest.mark.parametrize("variant, precision", CASES)
def test_a_replayed_update_applies_the_eager_update(variant, precision):
    graphed = ending_captioner(variant).to(CUDA).eval()
    eager = copy.deepcopy(graphed)
    features, fmask, _, _ = contract_batch()
    features, fmask = features.to(CUDA), fmask.to(CUDA)
    paths = {}
    for name, model in (("graph", graphed), ("eager", eager)):
        params = list(model.parameters())
        optimizer = make_optimizer(params, CUDA, lr=1e-3)
        graphs = UpdateGraphs(Precision(precision, CUDA), 1.0, "norm", LENGTH, 0, log=print)

        def score(*args, model=model):
            return *sequence_log_probs(model, *args), None

        grads = []
        for step in range(4):  # step 0 creates Adam's state (eager in both paths, as in the trainer)
            drawn = drawn_captions(step)
            if name == "graph" and step > 0:
                graphs.update(score, model, optimizer, params, features, fmask, drawn)
                assert not graphs.refused, graphs.refused
            else:
                padded = drawn.padded(LENGTH, 0)
                run = graphs.runner(score, optimizer, params, N)
                for p in params:
                    p.grad = None
                run(list(graphs.padded_regions(features, fmask)) + [padded.tokens, padded.chosen, padded.advantage],
                    step=True)
            torch.cuda.synchronize()
            grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
        paths[name] = (grads, graphs)
    (g_grads, g_graphs), (e_grads, _) = paths["graph"], paths["eager"]
    assert g_graphs.captures == 1 and not g_graphs.refused
    tol = dict(rtol=1e-5, atol=1e-6) if precision == "fp32" else dict(rtol=2e-2, atol=1e-3)
    for a, b in zip(g_grads, e_grads):
        assert a.keys() == b.keys()
        for n in a:
            torch.testing.assert_close(a[n], b[n], rtol=tol["rtol"], atol=tol["atol"] * (1 + float(b[n].abs().max())),
                                       msg=n)
    for n, p in comparable(graphed).items():
        torch.testing.assert_close(p, comparable(eager)[n], **tol, msg=n)


def test_the_trainer_replays_its_updates_and_ends_where_the_eager_trainer_ends(tmp_path):
    """Three SCST steps of a tiny run on the GPU, graph path against ``train.scst.cuda_graph=false``:
    the same log records; step 1 eager (no Adam state), step 2 captures, step 3 replays."""
    from catcap.api import load_experiment
    from catcap.data.synthetic import make_world
    from catcap.training.loop import Trainer
    from tiny_runs import tiny_run_overrides

    world = make_world(tmp_path / "shapes", num_train=12, num_val=4, num_test=2, seed=3, feature_dim=16,
                       progress=False)
    runs = {}
    for flag in ("true", "false"):
        items = {"model.feature_dim": 16, "model.dropout": 0.0, "train.batch_size": 6, "train.objective": "scst",
                 "train.scst.num_samples": 3, "train.scst.max_len": 6, "train.scst.lr": 1e-3,
                 "train.device": "cuda", "train.scst.cuda_graph": flag}
        t = Trainer(load_experiment(None, tiny_run_overrides(world, tmp_path / flag, **items)), log=print)
        images, collate = t._train_set()
        batches = [collate([images[i] for i in range(s, s + 6)]) for s in (0, 6, 0)]
        records = [t.train_step(b) for b in batches]
        runs[flag] = (records, t)
    (g_rec, g), (e_rec, e) = runs["true"], runs["false"]
    assert g.scst.graphs.captures == 1 and not g.scst.graphs.refused and e.scst.graphs.captures == 0
    for a, b in zip(g_rec, e_rec):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-4, abs=1e-5), k
    for n, p in comparable(g.model).items():
        torch.testing.assert_close(p, comparable(e.model)[n], rtol=1e-5, atol=1e-6, msg=n)
