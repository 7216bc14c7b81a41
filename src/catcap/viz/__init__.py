"""Looking inside trained captioners (``catcap analyze``).

* :mod:`catcap.viz.history`: how CAT / LightCAT use their historical context memory — the
  history weight per generated word position over a split, and one image's attention over
  regions and history entries per word (computation only, no plotting);
* :mod:`catcap.viz.history_plots`: the pictures of those numbers (matplotlib, Agg backend;
  ``pip install catcap[viz]``);
* :mod:`catcap.viz.report`: ``catcap analyze history`` — numbers, JSON and PNGs in one call.

The submodules are imported on first use, so ``import catcap.viz`` loads neither torch nor
matplotlib.
"""

from __future__ import annotations

import importlib

__all__ = ["HistoryCurve", "ImageAttention", "analyze_history", "collect_history_weights", "image_attention",
           "plot_history_weight", "plot_image_attention"]

_WHERE = {"HistoryCurve": "history", "ImageAttention": "history", "collect_history_weights": "history",
          "image_attention": "history", "plot_history_weight": "history_plots",
          "plot_image_attention": "history_plots", "analyze_history": "report"}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"catcap.viz.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'catcap.viz' has no attribute {name!r}")
