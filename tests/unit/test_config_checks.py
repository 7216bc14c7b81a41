"""Config values are checked when the config is loaded (before any data or training): ranges,
registered part names, options the chosen part ignores; `catcap validate-config` also reads the
data the config names, as `catcap train` would, and `catcap ablate` checks every row first."""

import pytest

from catcap.ablation import plan
from catcap.cli.main import main
from catcap.config import ConfigError, load_config
from catcap.data.synthetic import make_world
from catcap.registry import UnknownName
from catcap.training.experiment import ExperimentConfig


@pytest.mark.parametrize("override, message", [
    ("train.epochs=0", "train.epochs must be >= 1, found 0"),
    ("train.batch_size=0", "train.batch_size must be >= 1, found 0"),
    ("train.schedule.warmup=0", "train.schedule.warmup must be >= 1, found 0"),
    ("model.d_model=0", "model.d_model must be >= 1, found 0"),
    ("model.num_heads=0", "model.num_heads must be >= 1, found 0"),
    ("model.dropout=1.0", "model.dropout must be < 1"),
    ("data.max_len=0", "data.max_len must be >= 1, found 0"),
    ("train.val_beam=0", "train.val_beam: num_beams must be >= 1"),
    ("train.awc.gamma=-1", "train.awc.gamma must be >= 0.0, found -1"),
    ("model.history.normalize=false", "model.history.normalize=False has no effect on cross_attention 'vanilla'"),
])
def test_bad_values_are_refused_when_the_config_is_loaded(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_config(ExperimentConfig, None, [override])


@pytest.mark.parametrize("override", ["model.cross_attention=foo", "model.decoder=m3", "model.encoder=lstm"])
def test_unknown_parts_are_refused_when_the_config_is_loaded(override):
    with pytest.raises(UnknownName, match="choose one of"):
        load_config(ExperimentConfig, None, [override])


def test_ablate_checks_every_row_before_the_first_one_trains():
    # table 6's rows 1-2 are CACA and accept the option; row 3 is vanilla and does not
    with pytest.raises(ConfigError, match="has no effect on cross_attention 'vanilla'"):
        plan("6", ["model.history.normalize=false"])


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("vc") / "w", num_train=20, num_val=5, num_test=5, seed=1,
                      feature_dim=16, progress=False)


def test_validate_config_reads_the_data_like_train(world, capsys):
    data = [f"data.dataset={world.dataset}", f"data.features={world.features}", "data.min_count=1"]
    assert main(["validate-config", *data, "model.feature_dim=16"]) == 0
    err = capsys.readouterr().err
    assert "config OK" in err and "data OK: " in err and "16-d features" in err
    assert main(["validate-config", *data]) == 2  # the default feature_dim 2048 does not fit
    assert "are 16-d but model.feature_dim is 2048; set model.feature_dim=16" in capsys.readouterr().err
    assert main(["validate-config", *data, "--no-data"]) == 0
    assert "data OK" not in capsys.readouterr().err
    assert main(["validate-config", "data.dataset=/nope.json", "data.features=/nope.h5"]) == 2
    assert "Karpathy split file not found: /nope.json" in capsys.readouterr().err
    assert main(["validate-config", "model.num_heads=0"]) == 2  # a message, not a ZeroDivisionError
    assert "model.num_heads must be >= 1" in capsys.readouterr().err
    assert main(["validate-config"]) == 0
    assert "data not checked" in capsys.readouterr().err


def test_validate_config_has_its_own_help(capsys):
    with pytest.raises(SystemExit):
        main(["validate-config", "--help"])
    out = capsys.readouterr().out
    assert "Check an experiment config" in out and "--no-data" in out and "--resume" not in out


def test_overrides_may_follow_the_flags(capsys):
    assert main(["validate-config", "train.epochs=2", "--device", "cpu", "out_dir=/tmp/elsewhere", "--no-data"]) == 0
    out = capsys.readouterr().out
    assert "out_dir: /tmp/elsewhere" in out and "epochs: 2" in out and "device: cpu" in out
    with pytest.raises(SystemExit):
        main(["validate-config", "--no-data", "--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["evaluate"], "give --results and --refs"),
    (["evaluate", "--example", "--checkpoint", "x"], "not both"),
    (["evaluate", "--example", "--beam", "3"], "--beam only applies with --checkpoint"),
    (["evaluate", "--example", "--save-results", "r.json", "--features", "f.h5"],
     "--save-results, --features only apply with --checkpoint"),
    (["compare", "a.json", "b.json"], "give --refs"),
])
def test_evaluate_and_compare_usage_errors_exit_2_with_a_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_a_folder_given_as_config_says_so_and_names_a_yaml_in_it(tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\n")
    with pytest.raises(ConfigError, match=r"is a folder; expected a YAML file, e\.g\. .*a\.yaml"):
        load_config(ExperimentConfig, tmp_path)


def test_more_micro_batches_than_captions_is_refused():
    with pytest.raises(ConfigError, match=r"train.accumulate \(64 micro-batches\) is larger than train.batch_size \(50\)"):
        load_config(ExperimentConfig, None, ["train.accumulate=64"])
