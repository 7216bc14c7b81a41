"""``mml``: the teaching API of the "Image Captioning with Transformers" notebook, on catcap.

The notebook (``../shared/seeds/001_*``, see ``docs/teaching.md``) imports

* :mod:`mml.transformer_layers` - ``MultiHeadAttention``, ``PositionalEncoding``;
* :mod:`mml.classifiers.transformer` - ``CaptioningTransformer`` (post-norm decoder);
* :mod:`mml.captioning_solver_transformer` - ``CaptioningSolverTransformer``;
* :mod:`mml.coco_utils` - ``load_coco_data``, ``sample_coco_minibatch``, ``decode_captions``;
* :mod:`mml.image_utils` - ``image_from_url``; :mod:`mml.gradient_check`.

Data: :mod:`mml.build_data` writes the course's file layout from catcap data into the data
directory (:func:`mml.paths.data_dir`: ``$MML_DATA_DIR``, else
``mml/coco_captioning`` in catcap's cache folder: ``$CATCAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/catcap``, else ``~/.cache/catcap``).

Dropout: the notebook's expected numbers were printed by PyTorch 1.x + MKL, whose dropout
masks differ from today's. Importing ``mml`` turns on catcap's legacy-dropout switch
(:mod:`catcap.models.legacy_dropout`), which only ``mml``'s layers consult; set the
environment variable ``MML_LEGACY_DROPOUT=0`` before importing, or call
``catcap.models.legacy_dropout.set_legacy_dropout(False)``, to get today's dropout.
"""

import os

from catcap.models.legacy_dropout import set_legacy_dropout

ENV_LEGACY_DROPOUT = "MML_LEGACY_DROPOUT"


def _legacy_wanted() -> bool:
    value = os.environ.get(ENV_LEGACY_DROPOUT, "1").strip().lower()
    if value not in ("0", "1", "false", "true", "no", "yes", "off", "on", ""):
        raise ValueError(f"{ENV_LEGACY_DROPOUT} must be 1/0 (or true/false), found {value!r}")
    return value not in ("0", "false", "no", "off")


set_legacy_dropout(_legacy_wanted())
