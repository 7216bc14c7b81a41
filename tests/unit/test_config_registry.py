from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from catcap.config import ConfigError, apply_overrides, from_dict, load_config, to_dict
from catcap.registry import Registry, UnknownName


@dataclass
class Model:
    d_model: int = 512
    dropout: float = 0.1
    cross_attention: Literal["vanilla", "caca"] = "vanilla"
    layers: list[int] = field(default_factory=lambda: [3, 3])
    name: Optional[str] = None


@dataclass
class Experiment:
    model: Model = field(default_factory=Model)
    seed: int = 0


def test_defaults_yaml_base_and_overrides(tmp_path):
    (tmp_path / "base.yaml").write_text("model:\n  d_model: 256\n  dropout: 0.2\nseed: 1\n")
    (tmp_path / "exp.yaml").write_text("base: base.yaml\nmodel:\n  dropout: 0\n")
    cfg = load_config(Experiment, tmp_path / "exp.yaml", ["model.cross_attention=caca", "seed=7", "model.layers=[2, 4]"])
    assert cfg.model.d_model == 256 and cfg.model.dropout == 0.0 and isinstance(cfg.model.dropout, float)
    assert cfg.model.cross_attention == "caca" and cfg.seed == 7 and cfg.model.layers == [2, 4]
    assert to_dict(cfg)["model"]["layers"] == [2, 4]
    assert load_config(Experiment) == Experiment()


@pytest.mark.parametrize("overrides, message", [
    (["model.d_modle=3"], r"config.model: unknown key\(s\) 'd_modle' \(did you mean 'd_model'\?\); valid keys: "
                          r"d_model, dropout"),
    (["model.cross_attention=lstm"], r"config.model.cross_attention: expected one of 'vanilla', 'caca', found 'lstm'"),
    (["seed=abc"], r"config.seed: expected int, found str 'abc'"),
    (["seed=true"], r"expected int, found a boolean"),
    (["model.layers=3"], r"model.layers: expected a list"),
    (["model=3"], r"config.model: expected a mapping of Model settings"),
    (["seed"], r"expected key=value"),
])
def test_bad_overrides_name_the_key_and_the_choices(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(Experiment, None, overrides)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(Experiment, tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level"):
        load_config(Experiment, tmp_path / "list.yaml")
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(Experiment, tmp_path / "a.yaml")


def test_overrides_do_not_touch_the_input():
    data = {"model": {"d_model": 8}}
    out = apply_overrides(data, ["model.d_model=16"])
    assert data == {"model": {"d_model": 8}} and out == {"model": {"d_model": 16}}
    assert from_dict(Experiment, out).model.d_model == 16


def test_registry():
    reg = Registry("cross_attention")

    @reg.register("vanilla")
    class Vanilla:
        pass

    assert reg.get("vanilla") is Vanilla and "vanilla" in reg and reg.names() == ["vanilla"]
    with pytest.raises(UnknownName, match="unknown cross_attention 'caca'; choose one of: vanilla"):
        reg.get("caca")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("vanilla")(object)
