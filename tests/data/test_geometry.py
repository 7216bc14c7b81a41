"""Region geometry columns (catcap.data.geometry): expected values worked by hand."""

import numpy as np
import pytest

from catcap.data.feature_base import FeatureStoreError, ImageFeatures
from catcap.data.geometry import (GEOMETRY_DIM, GeometryStore, append_geometry, box_geometry, check_region_classes,
                                  with_geometry)
from catcap.features.efficientnet import grid_boxes
from catcap.models.config import ModelConfig


def test_fraction_boxes_are_kept_and_get_their_area():
    boxes = np.array([[0.0, 0.0, 0.5, 0.5], [0.25, 0.5, 1.0, 0.75]])
    # areas by hand: 0.5 * 0.5 = 0.25; 0.75 * 0.25 = 0.1875
    expected = [[0.0, 0.0, 0.5, 0.5, 0.25], [0.25, 0.5, 1.0, 0.75, 0.1875]]
    np.testing.assert_allclose(box_geometry(boxes), expected, atol=1e-7)


def test_pixel_boxes_are_normalised_by_the_frame_they_span():
    # frame: x 10..110, y 20..70 (width 100, height 50)
    boxes = np.array([[10, 20, 60, 70], [60, 45, 110, 70]], dtype=np.float32)
    expected = [[0.0, 0.0, 0.5, 1.0, 0.5], [0.5, 0.5, 1.0, 1.0, 0.25]]
    np.testing.assert_allclose(box_geometry(boxes), expected, atol=1e-7)


def test_grid_cells_of_any_photo_size_give_the_same_cell_boxes():
    """EfficientNet grids: the frame is the encoder's centre crop, so a 7x7 cell (i, j) is
    [j/7, i/7, (j+1)/7, (i+1)/7] whatever the photo's size."""
    cells = np.array([(j / 7, i / 7, (j + 1) / 7, (i + 1) / 7, 1 / 49) for i in range(7) for j in range(7)])
    for width, height in [(224, 224), (500, 333), (333, 500), (1024, 768)]:
        np.testing.assert_allclose(box_geometry(grid_boxes(width, height, 224, (7, 7))), cells, atol=1e-6)


def test_a_store_without_boxes_is_refused_with_advice():
    with pytest.raises(FeatureStoreError, match=r"image '7' has no boxes.*region_geometry=false"):
        append_geometry("7", ImageFeatures(np.zeros((3, 4), np.float32), None))


def test_boxes_spanning_no_area_are_refused():
    with pytest.raises(ValueError, match="span no area"):
        box_geometry(np.array([[5, 5, 5, 9], [5, 6, 5, 7]], dtype=np.float32))


class _Store:
    """An in-memory store of two images (regions (N, 4), fraction boxes)."""

    feature_dim, meta = 4, {"encoder": "test"}

    def __init__(self):
        self.items = {"a": ImageFeatures(np.ones((2, 4), np.float32), np.array([[0, 0, 1, 1], [0, 0, 0.5, 1]], np.float32))}
        self.closed = False

    def keys(self):
        return list(self.items)

    def __contains__(self, key):
        return key in self.items

    def __len__(self):
        return len(self.items)

    def get(self, key):
        return self.items[key]

    def close(self):
        self.closed = True


def test_the_wrapped_store_appends_five_columns_and_passes_the_rest_through():
    inner = _Store()
    store = with_geometry(inner, ModelConfig(encoder="vlp_regions", decoder="vlp", region_geometry=True))
    assert isinstance(store, GeometryStore) and store.feature_dim == 4 + GEOMETRY_DIM == 9
    assert store.meta == inner.meta and store.keys() == ["a"] and "a" in store and len(store) == 1
    rows = store.get("a").regions
    np.testing.assert_array_equal(rows[:, :4], 1.0)
    np.testing.assert_allclose(rows[:, 4:], [[0, 0, 1, 1, 1], [0, 0, 0.5, 1, 0.5]])
    with store:
        pass
    assert inner.closed
    assert with_geometry(inner, ModelConfig()) is inner  # no geometry: the store itself
    assert with_geometry(store, ModelConfig(encoder="vlp_regions", decoder="vlp", region_geometry=True)) is store


def test_the_class_term_needs_the_grid_of_the_encoder_it_names():
    """model.region_classes applies one encoder's ImageNet head: a store of that encoder passes, a
    store of another encoder or of none (imported, synthetic) is refused with what to set."""
    terms = ModelConfig(encoder="vlp_regions", decoder="vlp", feature_dim=1280, region_classes="efficientnet-lite1")
    store = _Store()
    store.meta = {"encoder": "efficientnet-lite1"}
    check_region_classes(store, terms)
    check_region_classes(_Store(), ModelConfig())  # no class term: any store
    store.meta = {"encoder": "efficientnet-lite0"}
    with pytest.raises(FeatureStoreError, match="holds efficientnet-lite0 grid features; set "
                                                "model.region_classes=efficientnet-lite0 or extract"):
        check_region_classes(store, terms)
    store.meta = {}
    with pytest.raises(FeatureStoreError, match="holds features of no catcap image encoder .*; set "
                                                "model.region_classes=null or extract the images with "
                                                "`catcap extract --encoder efficientnet-lite1`"):
        check_region_classes(store, terms)
