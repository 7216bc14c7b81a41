"""GenerationConfig: one set of defaults, and one error (the setting, the value, what is
allowed) for a bad value, whether it comes from Python, the CLI (exit 2, no traceback) or YAML."""

import math

import pytest

from catcap.cli.main import main
from catcap.config import ConfigError, load_config
from catcap.decoding import GenerationConfig, GenerationConfigError, build_generation_config
from catcap.training.experiment import ExperimentConfig


def test_the_defaults_are_the_bundled_models_card_setting():
    """Beam 3, at most 20 words, plain log-probability sums (zoo/*/README.md: "beam 3", max-len 20)."""
    c = GenerationConfig()
    assert (c.num_beams, c.max_length, c.length_penalty, c.num_beam_groups, c.min_length) == (3, 20, 0.0, 1, 0)
    assert c.strategy == "beam" and c.describe() == "beam 3, 20 words" and c.changed() == {}
    sampling = GenerationConfig(do_sample=True, top_p=0.9)
    assert sampling.num_beams == 1 and sampling.strategy == "sample"
    assert sampling.changed() == {"do_sample": True, "top_p": 0.9}
    assert GenerationConfig(num_beams=6, num_beam_groups=3, diversity_penalty=0.5).strategy == "diverse_beam"
    assert GenerationConfig(num_beams=1).strategy == "greedy"


@pytest.mark.parametrize("settings, setting, allowed", [
    ({"num_beams": 0}, "num_beams", ">= 1 (1 = greedy)"),
    ({"num_beams": 2.0}, "num_beams", ">= 1 (1 = greedy)"),
    ({"num_beams": True}, "num_beams", ">= 1 (1 = greedy)"),
    ({"num_beams": 3, "num_beam_groups": 2, "diversity_penalty": 0.5}, "num_beam_groups",
     "a divisor of num_beams=3 (1, 3)"),
    ({"num_beams": 4, "num_beam_groups": 2}, "diversity_penalty", "> 0 with num_beam_groups > 1"),
    ({"diversity_penalty": 0.5}, "diversity_penalty", "0 with num_beam_groups=1"),
    ({"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": math.inf}, "diversity_penalty", "a finite number"),
    ({"do_sample": True, "temperature": math.nan}, "temperature", "a finite number > 0"),
    ({"do_sample": True, "temperature": 0.0}, "temperature", "a finite number > 0"),
    ({"do_sample": True, "top_p": 0.0}, "top_p", "in (0, 1] (1 = off)"),
    ({"do_sample": True, "top_p": 1.5}, "top_p", "in (0, 1] (1 = off)"),
    ({"do_sample": True, "top_k": -1}, "top_k", ">= 0 (0 = off)"),
    ({"do_sample": True, "num_beams": 5}, "num_beams", "1 with do_sample=True (beam-sample decoding is not offered"),
    ({"top_p": 0.9}, "top_p", "1.0 without do_sample=True"),
    ({"temperature": 0.7}, "temperature", "1.0 without do_sample=True"),
    ({"seed": 3}, "seed", "None without do_sample=True"),
    ({"num_beams": 1, "length_penalty": 1.0}, "length_penalty", "0 with num_beams=1"),
    ({"length_penalty": math.nan}, "length_penalty", "a finite number"),
    ({"max_length": 0}, "max_length", ">= 1 (words per caption)"),
    ({"min_length": 8, "max_length": 3}, "min_length", "between 0 and max_length=3 (words)"),
    ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size", ">= 0 (0 = off)"),
    ({"num_beams": 1, "num_return_sequences": 2}, "num_return_sequences", "between 1 and 1 (greedy decoding"),
    ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences", "between 1 and 2 (the beams"),
    ({"do_sample": True, "num_return_sequences": 0}, "num_return_sequences", ">= 1"),
    ({"output_attentions": 1}, "output_attentions", "True or False"),
])
def test_a_bad_setting_is_one_error_naming_the_setting_the_value_and_the_range(settings, setting, allowed):
    with pytest.raises(GenerationConfigError) as caught:
        GenerationConfig(**settings)
    err = caught.value
    assert (err.setting, err.value) == (setting, settings.get(setting, err.value))
    assert str(err).startswith(f"{setting} must be ") and allowed in str(err) and f"got {err.value!r}" in str(err)
    assert isinstance(err, ConfigError) and isinstance(err, ValueError)


def test_a_face_names_the_setting_as_its_user_wrote_it():
    with pytest.raises(GenerationConfigError, match=r"^--beam: num_beams must be >= 1 \(1 = greedy\), got 0$"):
        build_generation_config({"num_beams": 0}, names={"num_beams": "--beam"})
    base = GenerationConfig(num_beams=5, length_penalty=1.0)
    assert build_generation_config({"max_length": 9}, base) == GenerationConfig(num_beams=5, length_penalty=1.0,
                                                                                 max_length=9)
    assert build_generation_config({"do_sample": True}, GenerationConfig(max_length=9)).num_beams == 1
    with pytest.raises(TypeError, match="unknown generation setting"):
        build_generation_config({"beam": 3})


@pytest.mark.parametrize("argv, message", [
    (["--beam", "0"], "--beam: num_beams must be >= 1 (1 = greedy), got 0"),
    (["--beam", "3", "--num-beam-groups", "2", "--diversity-penalty", "0.5"],
     "--num-beam-groups: num_beam_groups must be a divisor of --beam=3 (1, 3), got 2"),
    (["--beam", "4", "--num-beam-groups", "2", "--diversity-penalty", "nan"],
     "--diversity-penalty: diversity_penalty must be a finite number > 0 with --num-beam-groups > 1, got nan"),
    (["--do-sample", "--temperature", "nan"], "--temperature: temperature must be a finite number > 0, got nan"),
    (["--do-sample", "--top-p", "1.5"], "--top-p: top_p must be in (0, 1] (1 = off), got 1.5"),
    (["--top-p", "0.9"], "--top-p: top_p must be 1.0 without --do-sample (it only shapes the sampling distribution: set --do-sample)"),
    (["--max-len", "0"], "--max-len: max_length must be >= 1 (words per caption), got 0"),
])
@pytest.mark.parametrize("command", [["caption", "--checkpoint", "no-such-model", "photo.jpg"],
                                     ["evaluate", "--checkpoint", "no-such-model"]])
def test_the_cli_refuses_a_bad_setting_before_loading_anything(command, argv, message, capsys):
    assert main([*command, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


@pytest.mark.parametrize("override, message", [
    ("train.val_beam=0", "train.val_beam: num_beams must be >= 1 (1 = greedy), got 0"),
    ("train.val_max_len=0", "train.val_max_len: max_length must be >= 1 (words per caption), got 0"),
    ("train.scst.max_len=0", "train.scst.max_len: max_length must be >= 1 (words per caption), got 0"),
    ("train.scst.num_samples=0", "train.scst.num_samples: num_return_sequences must be >= 1, got 0"),
])
def test_yaml_settings_are_checked_as_generation_settings(override, message):
    with pytest.raises(ConfigError) as caught:
        load_config(ExperimentConfig, None, [override, "train.scst.baseline=greedy"])
    assert message in str(caught.value)


def test_the_yaml_keys_build_the_generation_configs():
    cfg = load_config(ExperimentConfig, None, ["train.val_beam=4", "train.val_max_len=12", "train.scst.num_samples=3",
                                               "train.scst.max_len=9"])
    assert cfg.train.validation_generation() == GenerationConfig(num_beams=4, max_length=12)
    assert cfg.train.scst.generation() == GenerationConfig(do_sample=True, num_return_sequences=3, max_length=9)
    beam = load_config(ExperimentConfig, None, ["train.scst.baseline=beam", "train.scst.num_samples=3"]).train.scst
    assert beam.generation() == GenerationConfig(num_beams=3, num_return_sequences=3, max_length=16)
