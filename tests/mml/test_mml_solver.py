"""CaptioningSolverTransformer: options, the course's loss, iteration count and printing."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mml.captioning_solver_transformer import CaptioningSolverTransformer, temporal_softmax_loss
from mml.classifiers.transformer import CaptioningTransformer
from mml.coco_utils import load_coco_data


def test_loss_averages_masked_cross_entropy_over_all_positions():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 5, generator=g)
    targets = torch.tensor([[1, 2, 0], [4, 0, 0]])
    mask = targets != 0
    manual = sum(F.cross_entropy(scores[n, t][None], targets[n, t][None])
                 for n in range(2) for t in range(3) if mask[n, t]) / 6
    torch.testing.assert_close(temporal_softmax_loss(scores, targets, mask), manual)


@pytest.fixture
def small(mml_data):
    np.random.seed(0)
    torch.manual_seed(0)
    data = load_coco_data(mml_data, max_train=30)
    model = CaptioningTransformer(data["word_to_idx"], input_dim=512, wordvec_dim=16, num_heads=2,
                                  num_layers=1, max_length=20)
    return data, model


def test_train_runs_epochs_and_prints(small, capsys):
    data, model = small
    solver = CaptioningSolverTransformer(model, data, data["idx_to_word"], num_epochs=10, batch_size=10,
                                         learning_rate=0.01, verbose=True, print_every=4)
    solver.train()
    history = solver.loss_history
    assert len(history) == 30 and all(isinstance(v, float) for v in history)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("(Iteration")]
    assert lines[0].startswith("(Iteration 1 / 30) loss: ") and len(lines) == 8
    assert np.mean(history[-5:]) < np.mean(history[:5]) - 0.2       # measured 2.43 -> 1.84


def test_unknown_options_and_bad_data_are_refused(small):
    data, model = small
    with pytest.raises(ValueError, match=r"unrecognised option\(s\) \['lr'\]"):
        CaptioningSolverTransformer(model, data, data["idx_to_word"], lr=0.1)
    with pytest.raises(ValueError, match="load_coco_data"):
        CaptioningSolverTransformer(model, {"word_to_idx": {}}, [])
