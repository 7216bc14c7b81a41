"""Non-finite numbers are refused before any work (issue 40; docs/reliability.md), generated from
the definitions: every float field of every config section (the dataclasses walked from
ExperimentConfig: model, train and its schedule, scst, awc, mlm, scheduled sampling; data) given
NaN, +-inf or a number too large for a float, and every ``type=float`` option of every command
given nan and inf. A new field or option is covered without editing this file."""

import dataclasses
import math
import typing

import pytest

from catcap.cli.main import main
from catcap.config import ConfigError, NonFiniteError, load_config
from catcap.training.experiment import ExperimentConfig
from cli_table import argv, commands


def _float_fields(cls, prefix=""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _float_fields(tp, f"{prefix}{f.name}.")
        elif tp is float or float in typing.get_args(tp):
            yield f"{prefix}{f.name}"


FLOAT_FIELDS = list(_float_fields(ExperimentConfig))
FLOAT_FLAGS = [pytest.param(c, a, id=f"{c.name} {a.option_strings[0]}") for c in commands() for a in c.actions
               if a.type is float]
WRITTEN = [".nan", ".inf", "-.inf", "1e999", "1" + "0" * 400]  # YAML: NaN, inf, -inf, text that overflows, an int


def test_the_walk_finds_every_section():
    sections = {f.rsplit(".", 1)[0] for f in FLOAT_FIELDS}
    assert {"model", "train", "train.schedule", "train.scst", "train.awc", "train.mlm",
            "train.scheduled_sampling"} <= sections, sections
    assert len(FLOAT_FLAGS) >= 6, FLOAT_FLAGS


@pytest.mark.parametrize("key", FLOAT_FIELDS)
def test_a_non_finite_config_number_is_refused(key):
    for written in WRITTEN:
        with pytest.raises(NonFiniteError) as info:
            load_config(ExperimentConfig, None, [f"{key}={written}"])
        assert key in str(info.value) and "finite" in str(info.value), str(info.value)


@pytest.mark.parametrize("key", FLOAT_FIELDS)
def test_a_finite_config_number_still_loads(key):
    """The check refuses the non-finite only: 0.5 loads (or is refused by the field's own range)."""
    try:
        cfg = load_config(ExperimentConfig, None, [f"{key}=0.5"])
    except NonFiniteError:
        raise
    except ConfigError as err:  # a range of the field itself (e.g. a rate that must be >= 1)
        assert "finite" not in str(err)
        return
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    assert value == 0.5 and math.isfinite(value)


def test_the_cli_refuses_a_non_finite_config_number(capsys):
    assert main(["validate-config", "--no-data", "train.schedule.lr=.nan"]) == 2
    err = capsys.readouterr().err
    assert "config.train.schedule.lr: expected a finite number, found nan" in err and "Traceback" not in err


@pytest.mark.parametrize("command,action", FLOAT_FLAGS)
def test_a_non_finite_number_flag_is_refused(command, action, tmp_path, capsys):
    for written in ("nan", "inf", "-inf"):
        line = argv(command, tmp_path, {action: written})
        assert main(line) == 2, line
        err = capsys.readouterr().err
        # cli/checks.py's message, or for a generation flag GenerationConfig's (with the range): flag and value named
        assert f"{action.option_strings[0]}: " in err and written.lstrip("-") in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []
