"""One set of decoding defaults (issue 42): ``Captioner.generate``, ``catcap caption``,
``catcap evaluate --checkpoint`` and the bundled models' cards all decode with
:class:`catcap.decoding.GenerationConfig`'s defaults (beam 3, at most 20 words); the web demo's
form starts there too (tests/web/test_serve_default.py reads it in a real browser)."""

import re
import shlex
from pathlib import Path

import pytest

from catcap.cli.generation_args import generation_config
from catcap.cli.main import build_parser
from catcap.decoding import GenerationConfig, build_generation_config

ZOO = Path(__file__).resolve().parents[2] / "zoo"
DEFAULTS = GenerationConfig()


def test_the_defaults_are_beam_3_and_20_words():
    assert (DEFAULTS.num_beams, DEFAULTS.max_length, DEFAULTS.length_penalty) == (3, 20, 0.0)


def test_generate_without_settings_uses_the_defaults():
    """``Captioner.generate(...)`` and ``generate_output`` build their config with this call."""
    assert build_generation_config({}, None) == DEFAULTS


@pytest.mark.parametrize("argv", [["caption", "photo.jpg"], ["evaluate", "--checkpoint", "flickr8k-m2"]])
def test_the_commands_without_generation_flags_use_the_defaults(argv):
    assert generation_config(build_parser().parse_args(argv)) == DEFAULTS


def test_the_bundled_models_cards_were_scored_at_the_defaults():
    """Each card's ``evaluate`` command (the one that produced its scores), parsed by catcap's own
    parser, decodes with the defaults."""
    cards = sorted(ZOO.glob("*/README.md"))
    assert cards, f"no bundled model cards under {ZOO}"
    for card in cards:
        command = re.search(r"^  evaluate: (.*)$", card.read_text(encoding="utf-8"), re.M)
        assert command, f"{card} records no evaluate command"
        argv = shlex.split(command.group(1))
        assert argv[0] == "catcap"
        assert generation_config(build_parser().parse_args(argv[1:])) == DEFAULTS, card

