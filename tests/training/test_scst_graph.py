"""SCST's update as a graph (catcap.training.scst_graph), everything a CPU can check.

A CUDA capture needs a GPU (tests/gpu/test_scst_update_graphs.py replays real graphs against
eager updates). Here the capture is replaced by ``StandIn``, a CPU stand-in named as such: it keeps the input
buffers and re-runs the recorded update on every "replay", which is what a graph's replay
computes. So these tests check the rest: the padded static shape changes no loss or gradient,
a trainer stepping through the graph path ends where the eager trainer ends, the first step is
eager, a graph is reused and recaptured when its key changes, a failed capture falls back, and
every reason for staying eager."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from catcap.api import load_experiment
from catcap.data.synthetic import make_world
from catcap.training.loop import Trainer
from catcap.training.precision import Precision
from catcap.training.scst import Drawn, sequence_log_probs, update_loss
from catcap.training.scst_graph import UpdateGraphs, capturable
from catcap.training.setup import make_optimizer
from tiny_runs import tiny_run_overrides


class StandIn:
    """CPU stand-in for a captured update (not a graph): buffers like a capture's, and a
    "replay" that re-runs the update on them, writing fresh gradients as a captured backward does."""

    calls = 0

    def __init__(self, inputs, run, optimizer, params):
        self.inputs, self.run, self.params = [t.clone() for t in inputs], run, params

    def __call__(self, inputs):
        StandIn.calls += 1
        for buffer, value in zip(self.inputs, inputs):
            buffer.copy_(value)
        for p in self.params:
            p.grad = None
        return self.run(self.inputs, step=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("scst_graph_world") / "shapes", num_train=12, num_val=4, num_test=2,
                      seed=3, feature_dim=16, progress=False)


def trainer(world, out_dir, logs: list, **extra) -> Trainer:
    items = {"model.feature_dim": 16, "model.dropout": 0.0, "train.batch_size": 6, "train.objective": "scst",
             "train.scst.num_samples": 3, "train.scst.max_len": 6, "train.scst.lr": 1e-3, **extra}
    return Trainer(load_experiment(None, tiny_run_overrides(world, out_dir, **items)), log=logs.append)


def image_batch(t: Trainer, first: int):
    images, collate = t._train_set()
    return collate([images[i] for i in range(first, first + 6)])


def test_padding_changes_no_loss_or_gradient(world, tmp_path):
    """The graph's static shape: captions padded to max_len + 1 columns, the new positions not
    chosen. Oracle: the same update on the unpadded captions."""
    t = trainer(world, tmp_path / "run", [])
    model, b = t.model.eval(), image_batch(t, 0)
    tokens = torch.tensor([[5, 6, 2], [7, 2, 0], [8, 9, 10]] * 2)
    chosen = tokens != 0
    drawn = Drawn(tokens, chosen, torch.tensor([0.5, -1.0, 0.25, 1.0, 0.0, -0.5]), 3, {})

    def score(*args):
        return *sequence_log_probs(model, *args), None

    grads = []
    for d in (drawn, drawn.padded(7, pad_id=0)):
        model.zero_grad(set_to_none=True)
        loss, entropy_sum, _ = update_loss(score, b.features[:2], b.feature_mask[:2], d)
        loss.backward()
        grads.append((loss.detach(), entropy_sum, [p.grad.clone() for p in model.parameters()]))
    assert drawn.padded(7, 0).tokens.shape == (6, 7) and not bool(drawn.padded(7, 0).chosen[:, 3:].any())
    (loss_a, ent_a, g_a), (loss_b, ent_b, g_b) = grads
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ent_b, ent_a, rtol=1e-6, atol=1e-6)
    for a, b_ in zip(g_a, g_b):
        torch.testing.assert_close(b_, a, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="do not fit 2 columns"):
        drawn.padded(2, 0)


def test_a_trainer_on_the_graph_path_ends_where_the_eager_one_ends(world, tmp_path):
    """Three SCST steps through UpdateGraphs (CPU stand-in capture) against three eager steps from
    the same seed: same log records, gradients at every step and weights. Step 1 is eager (Adam
    has no state yet), step 2 captures and replays, step 3 replays the same graph (the two
    batches have 6 and 5 regions: both padded to 16). Key-projection biases are left out of the
    weights' comparison: their exact gradient is 0 (a bias shared by all keys cancels in the
    softmax), and Adam turns the rounding noise in its place into steps of the learning rate."""
    runs = {}
    for name in ("graph", "eager"):
        logs, grads = [], []
        t = trainer(world, tmp_path / name, logs)
        if name == "graph":
            t.scst.graphs.capture, t.scst.graphs.devices = StandIn, ("cpu",)
        step = t.optimizer.step

        def recording_step(*args, t=t, grads=grads, step=step, **kwargs):
            grads.append({n: p.grad.clone() for n, p in t.model.named_parameters() if p.grad is not None})
            return step(*args, **kwargs)

        t.optimizer.step = recording_step
        StandIn.calls = 0
        records = [t.train_step(b) for b in (image_batch(t, 0), image_batch(t, 6), image_batch(t, 0))]
        runs[name] = (records, grads, dict(t.model.named_parameters()), t, logs, StandIn.calls)
    (g_rec, g_grads, g_params, g, g_logs, calls), (e_rec, e_grads, e_params, e, _, _) = runs["graph"], runs["eager"]
    assert g.scst.graphs.captures == 1 and calls == 2 and g.scst.graphs.regions == 16
    assert e.scst.graphs.captures == 0
    assert ("[catcap] SCST updates run eagerly: the optimizer has no state yet (its first step creates it; later "
            "steps are replayed)") in g_logs
    for a, b in zip(g_rec, e_rec):
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-6), k
    assert len(g_grads) == len(e_grads) == 3
    for a, b in zip(g_grads, e_grads):
        assert a.keys() == b.keys()
        for n in a:
            torch.testing.assert_close(a[n], b[n], rtol=1e-4, atol=1e-5 * float(b[n].abs().max()) + 1e-9, msg=n)
    compared = [n for n in e_params if not n.endswith("k_proj.bias")]
    for n in compared:
        torch.testing.assert_close(g_params[n], e_params[n], rtol=1e-5, atol=1e-6, msg=n)
    assert len(compared) > 20 and any(not torch.equal(e_params[n], p) for n, p in
                                      trainer(world, tmp_path / "fresh", []).model.named_parameters())  # weights moved


@pytest.mark.parametrize("keep_awc", [False, True])
def test_cat_with_adaptive_awc_is_replayed_with_or_without_its_betas(world, tmp_path, keep_awc):
    """CAT with learnable AWC betas: in SCST the betas get no gradient (no Adam state) unless
    ``keep_awc``; either way the second step is captured and steps as the eager trainer does."""
    runs = {}
    for name in ("graph", "eager"):
        t = trainer(world, tmp_path / name, [], **{"model.cross_attention": "caca", "train.awc.enabled": True,
                                                   "train.scst.keep_awc": keep_awc})
        if name == "graph":
            t.scst.graphs.capture, t.scst.graphs.devices = StandIn, ("cpu",)
        records = [t.train_step(b) for b in (image_batch(t, 0), image_batch(t, 6))]
        runs[name] = (records, t)
    (g_rec, g), (e_rec, e) = runs["graph"], runs["eager"]
    assert g.scst.graphs.captures == 1
    assert ("awc" in g_rec[1]) == keep_awc and g_rec[1].keys() == e_rec[1].keys()
    for k in g_rec[1]:
        assert g_rec[1][k] == pytest.approx(e_rec[1][k], rel=1e-5, abs=1e-6), k
    torch.testing.assert_close(g.awc.beta, e.awc.beta, rtol=1e-5, atol=1e-6)
    assert (g.awc.beta.grad is None) == (not keep_awc)


def test_a_failed_capture_updates_eagerly_and_is_not_tried_again(world, tmp_path):
    def broken(*args):
        raise RuntimeError("operation not permitted when stream is capturing")

    logs = []
    t = trainer(world, tmp_path / "run", logs)
    t.scst.graphs.capture, t.scst.graphs.devices = broken, ("cpu",)
    b = image_batch(t, 0)
    t.train_step(b)  # eager: no optimizer state
    before = [p.detach().clone() for p in t._parameters()]
    record = t.train_step(b)
    t.train_step(b)
    failed = [m for m in logs if "capturing SCST's update as a CUDA graph failed" in m]
    assert len(failed) == 1 and "operation not permitted" in failed[0]
    assert t.scst.graphs.captures == 0 and len(t.scst.graphs.refused) == 1
    assert {"loss", "reward", "entropy"} <= record.keys()
    assert any(not torch.equal(a, p) for a, p in zip(before, t._parameters()))  # the fallback stepped


def test_a_new_optimizer_or_batch_shape_is_a_new_capture(world, tmp_path):
    t = trainer(world, tmp_path / "run", [])
    graphs = UpdateGraphs(t.precision, 1.0, "norm", 7, 0, capture=StandIn, devices=("cpu",), log=lambda m: None)
    model, params = t.model.train(), t._parameters()
    drawn = Drawn(torch.tensor([[5, 2]] * 4), torch.ones(4, 2, dtype=torch.bool), torch.zeros(4), 2, {})
    features, mask = torch.randn(2, 3, 16), torch.ones(2, 3, dtype=torch.bool)
    other = make_optimizer(params, torch.device("cpu"), lr=1e-3)
    for optimizer in (t.optimizer, other):  # a first step creates Adam's state (the trainer's first step is eager)
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
    for optimizer in (t.optimizer, t.optimizer, other):
        graphs.update(t._score, model, optimizer, params, features, mask, drawn)
    assert graphs.captures == 2
    smaller = Drawn(drawn.tokens[:2], drawn.chosen[:2], drawn.advantage[:2], 2, {})
    graphs.update(t._score, model, optimizer, params, features[:1], mask[:1], smaller)
    assert graphs.captures == 3 and len(graphs.graphs) == 2  # at most max_graphs=2 kept


@pytest.mark.parametrize("case, reason", [
    ("cpu", "on CUDA only (cpu here)"), ("off", "train.scst.cuda_graph is false"),
    ("ddp", "2 processes: DDP all-reduces"), ("accumulate", "3 micro-batches (train.accumulate)"),
    ("fp16", "fp16: the loss scaler decides on the host"), ("deterministic", "train.deterministic"),
    ("fresh", "the optimizer has no state yet"), ("ok", None)])
def test_why_an_update_stays_eager(case, reason):
    linear = torch.nn.Linear(3, 3)
    optimizer = torch.optim.Adam(linear.parameters())
    if case != "fresh":
        linear(torch.randn(2, 3)).sum().backward()
        optimizer.step()
    precision = Precision("fp16" if case == "fp16" else "fp32", torch.device("cpu"))
    graphs = UpdateGraphs(precision, 1.0, "norm", 7, 0, enabled=case != "off",
                          devices=() if case == "cpu" else ("cpu",))
    why = graphs.why_eager(torch.zeros(2, 3), optimizer, list(linear.parameters()),
                           micro_batches=3 if case == "accumulate" else 1, world=2 if case == "ddp" else 1,
                           deterministic=case == "deterministic")
    assert why == reason if reason is None else reason in why


def test_reasons_are_logged_once_and_never_on_a_cpu():
    logs = []
    graphs = UpdateGraphs(SimpleNamespace(), 1.0, "norm", 7, 0, log=logs.append)
    for reason in ("fp16: x", "fp16: x", "SCST's update is replayed as a graph on CUDA only (cpu here)"):
        graphs.say_once(reason)
    assert logs == ["[catcap] SCST updates run eagerly: fp16: x"]


def test_capturable_marks_the_groups_only_while_recording():
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], capturable=False)
    with capturable(optimizer):
        assert optimizer.param_groups[0]["capturable"] is True
    assert optimizer.param_groups[0]["capturable"] is False
