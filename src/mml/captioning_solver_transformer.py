"""``CaptioningSolverTransformer``: Adam on the masked cross-entropy of a captioning model.

Legend: N batch, T caption length (with ``<START>``/``<END>``), V vocabulary.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from mml.coco_utils import sample_coco_minibatch

__all__ = ["CaptioningSolverTransformer", "temporal_softmax_loss"]

_DEFAULTS = {"learning_rate": 0.001, "batch_size": 100, "num_epochs": 10, "print_every": 10, "verbose": True}


def temporal_softmax_loss(scores: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """scores (N, T, V), targets (N, T) ids, mask (N, T) 1 = real word -> scalar.

    The course's definition: cross-entropy per position, zero at padding, averaged over all
    N * T positions (padding included in the count), so numbers compare with the course's.
    """
    n, t, v = scores.shape
    per_position = F.cross_entropy(scores.reshape(n * t, v), targets.reshape(n * t), reduction="none")
    return (per_position * mask.reshape(n * t).to(per_position.dtype)).mean()


class CaptioningSolverTransformer:
    """Trains ``model`` on ``data`` (from ``load_coco_data``) with minibatches drawn at random.

    Keyword options: ``learning_rate`` (0.001), ``batch_size`` (100), ``num_epochs`` (10),
    ``print_every`` (10 iterations), ``verbose`` (True). One epoch is
    ``max(num_train_captions // batch_size, 1)`` iterations; minibatches are drawn with
    NumPy's global RNG (``sample_coco_minibatch``). ``loss_history`` holds one float per
    iteration.
    """

    def __init__(self, model, data: dict, idx_to_word, **options):
        unknown = sorted(set(options) - set(_DEFAULTS))
        if unknown:
            raise ValueError(f"unrecognised option(s) {unknown}; expected some of {sorted(_DEFAULTS)}")
        _check_data(data)
        settings = {**_DEFAULTS, **options}
        self.model, self.data, self.idx_to_word = model, data, idx_to_word
        self.learning_rate = settings["learning_rate"]
        self.batch_size = settings["batch_size"]
        self.num_epochs = settings["num_epochs"]
        self.print_every = settings["print_every"]
        self.verbose = settings["verbose"]
        self._null = data["word_to_idx"]["<NULL>"]
        self.optim = torch.optim.Adam(self.model.parameters(), self.learning_rate)
        self.loss_history: list[float] = []

    def train(self) -> None:
        """Run ``num_epochs`` epochs, printing the loss every ``print_every`` iterations."""
        num_train = self.data["train_captions"].shape[0]
        num_iterations = self.num_epochs * max(num_train // self.batch_size, 1)
        self.model.train()
        for it in range(num_iterations):
            self._step()
            if self.verbose and it % self.print_every == 0:
                print("(Iteration %d / %d) loss: %f" % (it + 1, num_iterations, self.loss_history[-1]))

    def _step(self) -> None:
        captions, features, _ = sample_coco_minibatch(self.data, batch_size=self.batch_size, split="train")
        captions = torch.as_tensor(captions.astype(np.int64))
        words_in, words_out = captions[:, :-1], captions[:, 1:]
        scores = self.model(torch.as_tensor(features, dtype=torch.float32), words_in)
        loss = temporal_softmax_loss(scores, words_out, words_out != self._null)
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        self.loss_history.append(float(loss.detach()))


def _check_data(data: dict) -> None:
    needed = ["train_captions", "train_image_idxs", "train_features", "train_urls", "word_to_idx"]
    missing = [k for k in needed if k not in data]
    if missing:
        raise ValueError(f"data is missing {missing}; pass the dictionary that load_coco_data() returns")
