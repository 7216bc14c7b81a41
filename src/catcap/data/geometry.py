"""Region geometry as extra feature columns (VLP's ``G_i``: normalised corners and area).

A model whose config sets ``model.region_geometry`` reads every region as ``[R_i | G_i]``:
its F feature numbers followed by :data:`GEOMETRY_DIM` = 5 numbers ``x1, y1, x2, y2, area``
of its box, normalised to [0, 1]. The columns are appended where a feature store is opened
for such a model (:func:`with_geometry`) and where raw photos become features
(:func:`grid_geometry_rows`), so batching, decoding, evaluation and every other caller see one
(N, F + 5) array per image and need no extra argument.

Normalisation: boxes already within [0, 1] (the shapes world stores fractions of the image)
are kept; pixel boxes are divided by the frame that the image's boxes span (smallest x1, y1 to
largest x2, y2). For grid features from ``catcap extract`` that frame is exactly the square the
encoder saw (the centre crop), so ``G_i`` is the cell's box in the encoder's view and does not
depend on the photo's size; for detector boxes it is the part of the photo the detector covered.

VLP's other region term, the class probabilities ``C_i`` (``model.region_classes``), needs no
column: the model applies the named image encoder's ImageNet head to each grid cell. It is
right only for that encoder's grids: :func:`check_region_classes` refuses any other store.
"""

from __future__ import annotations

import numpy as np

from catcap.data.feature_base import FeatureStoreError, ImageFeatures

#: x1, y1, x2, y2, area
GEOMETRY_DIM = 5


def box_geometry(boxes: np.ndarray) -> np.ndarray:
    """boxes (N, 4) ``x1, y1, x2, y2`` (fractions of the image, or pixels) -> (N, 5) float32
    ``x1, y1, x2, y2, area`` in [0, 1] (see the module doc for the frame of pixel boxes)."""
    boxes = np.asarray(boxes, dtype=np.float64)
    if boxes.min() < 0 or boxes.max() > 1:
        x0, y0 = boxes[:, 0].min(), boxes[:, 1].min()
        x1, y1 = boxes[:, 2].max(), boxes[:, 3].max()
        if x1 <= x0 or y1 <= y0:
            raise ValueError(f"the boxes span no area (frame {x0},{y0} to {x1},{y1}); expected x1 < x2, y1 < y2")
        boxes = (boxes - [x0, y0, x0, y0]) / [x1 - x0, y1 - y0, x1 - x0, y1 - y0]
    area = (boxes[:, 2] - boxes[:, 0]).clip(0) * (boxes[:, 3] - boxes[:, 1]).clip(0)
    return np.concatenate([boxes, area[:, None]], 1).astype(np.float32)


def append_geometry(key: str, feats: ImageFeatures) -> ImageFeatures:
    """One image's regions (N, F) -> (N, F + 5) with its boxes' geometry; a clear error when
    the store holds no boxes for it."""
    if feats.boxes is None:
        raise FeatureStoreError(f"image {key!r} has no boxes in its feature store, but model.region_geometry "
                                "needs one box per region; use a store written with boxes (catcap extract, "
                                "catcap synth, catcap import features --boxes) or set model.region_geometry=false")
    return ImageFeatures(np.concatenate([feats.regions, box_geometry(feats.boxes)], 1), feats.boxes)


class GeometryStore:
    """A feature store whose ``get`` appends the geometry columns; ``feature_dim`` is F + 5."""

    def __init__(self, store):
        self.inner = store
        self.feature_dim = store.feature_dim + GEOMETRY_DIM
        self.meta = store.meta

    def keys(self) -> list[str]:
        return self.inner.keys()

    def __contains__(self, key: str) -> bool:
        return key in self.inner

    def __len__(self) -> int:
        return len(self.inner)

    def get(self, key: str) -> ImageFeatures:
        return append_geometry(key, self.inner.get(key))

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> "GeometryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def with_geometry(store, model_cfg):
    """``store`` as the model configured by ``model_cfg`` (a ModelConfig) reads it: wrapped in
    :class:`GeometryStore` when ``model.region_geometry`` is on, else unchanged."""
    if getattr(model_cfg, "region_geometry", False) and not isinstance(store, GeometryStore):
        return GeometryStore(store)
    return store


def check_region_classes(store, model_cfg) -> None:
    """With ``model.region_classes``, ``store`` must hold that encoder's grid features (its meta
    ``encoder``, written by ``catcap extract``): another encoder's 1280-d grid would be classified
    by the wrong head, and detector or imported features have no ImageNet classes at all."""
    wanted = getattr(model_cfg, "region_classes", None)
    if not wanted:
        return
    found = (getattr(store, "meta", None) or {}).get("encoder")
    if found != wanted:
        held = f"{found} grid features" if found else "features of no catcap image encoder (imported or synthetic)"
        raise FeatureStoreError(f"model.region_classes={wanted} classifies grid cells with {wanted}'s ImageNet head, "
                                f"but {getattr(store, 'path', 'the feature store')} holds {held}; "
                                + (f"set model.region_classes={found}" if found else "set model.region_classes=null")
                                + f" or extract the images with `catcap extract --encoder {wanted}`")


def grid_geometry_rows(regions: np.ndarray, boxes: np.ndarray, model_cfg) -> np.ndarray:
    """A raw photo's grid (N, F) and its cells' pixel boxes (N, 4) -> the rows the model reads."""
    if not getattr(model_cfg, "region_geometry", False):
        return regions
    return np.concatenate([regions, box_geometry(boxes)], 1)
