"""Every command the README shows is run on a fresh clone: by a test (named in COVERED, which must
exist and use the command) or by `.ci/run`. A new command in the README fails here until it is
covered. The README's own caption commands run here as written, on a real photo."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

CHAIN = "tests/e2e/test_first_hour.py::test_caption_evaluate_compare_report_and_human_eval_read_each_others_files"
#: README shell command (without its comment) -> the test that runs it, or ".ci/run"
COVERED = {
    "make setup && . .venv/bin/activate": ".ci/run",  # make test makes the same .venv first ($(STAMP))
    "catcap caption photo.jpg": "tests/e2e/test_readme.py::test_the_readme_caption_commands_run_as_written",
    "catcap evaluate --example": "tests/cli/test_cli.py::test_evaluate_example_writes_toolkit_names",
    "catcap serve": "tests/web/test_serve_default.py::"
                    "test_serve_without_arguments_serves_the_bundled_default_and_offers_the_others",
    "make demo": "tests/e2e/test_demo.py::test_make_demo_is_the_demo_and_prints_the_readmes_ranges",
    "make test": ".ci/run",
    "catcap evaluate --checkpoint flickr8k-m2 --images ../shared/data/flickr8k/images --refs "
    "data/flickr8k/dataset_flickr8k.json --split val --beam 3":
        "tests/zoo/test_card_scores.py::test_a_zoo_model_is_scored_from_its_photos_through_its_own_encoder",
    "catcap import flickr8k --tokens ../shared/data/flickr8k/Flickr8k.token.txt --train "
    "../shared/data/flickr8k/Flickr_8k.trainImages.txt --val ../shared/data/flickr8k/Flickr_8k.devImages.txt "
    "--images ../shared/data/flickr8k/images --out data/flickr8k/dataset_flickr8k.json": CHAIN,
    "catcap caption photos/ --refs data/flickr8k/dataset_flickr8k.json --out m2.jsonl": CHAIN,
    "catcap caption photos/ --refs data/flickr8k/dataset_flickr8k.json --checkpoint flickr8k-cat --out cat.jsonl":
        CHAIN,
    "catcap evaluate --results cat.jsonl --refs data/flickr8k/dataset_flickr8k.json --split val": CHAIN,
    "catcap compare m2.jsonl cat.jsonl --refs data/flickr8k/dataset_flickr8k.json --split val": CHAIN,
    "catcap report m2.jsonl cat.jsonl --refs data/flickr8k/dataset_flickr8k.json --split val --images photos/ "
    "--out report.html": CHAIN,
    "catcap human-eval create --a m2.jsonl --b cat.jsonl --refs data/flickr8k/dataset_flickr8k.json --split val "
    "--images photos/ --n 5 --out study": CHAIN,
}


def readme_blocks(language: str) -> list[str]:
    """The fenced code blocks of the README in ``language``."""
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)


def readme_commands() -> list[str]:
    """Each line of the README's ``sh`` blocks, without its trailing comment."""
    return [line.split("  #")[0].strip() for block in readme_blocks("sh") for line in block.splitlines()
            if line.strip()]


def test_every_readme_command_is_run_by_a_test_or_by_ci():
    commands = readme_commands()
    assert "make demo" in commands and "make test" in commands  # the README's two commands
    assert [c for c in commands if c not in COVERED] == [], "README commands no test runs: add them to COVERED"
    for command in commands:
        where = COVERED[command]
        if where == ".ci/run":
            assert "make test" in (REPO / ".ci" / "run").read_text()
            assert re.search(r"^test: \$\(STAMP\)", (REPO / "Makefile").read_text(), re.M)
            continue
        path, name = where.split("::")
        source = (REPO / path).read_text(encoding="utf-8")
        assert f"def {name}(" in source, f"{where} (covering {command!r}) does not exist"
        words = shlex.split(command)
        verb = words[1] if words[0] == "catcap" else words[-1]
        assert verb in source, f"{where} never mentions {verb!r}, so it does not run {command!r}"


def test_the_readme_caption_commands_run_as_written(capsys):
    """`catcap caption photo.jpg` and the README's Python lines, on a Flickr8k photo: the same
    caption, from the bundled default model."""
    from catcap import zoo
    from catcap.cli.main import main
    from flickr8k_files import FLICKR8K

    photo = FLICKR8K / "images" / "1000268201_693b08cb0e.jpg"
    if not photo.is_file():
        pytest.skip(f"the Flickr8k photo {photo} is not there (see ../shared/data/flickr8k/README.md)")
    if zoo.DEFAULT_MODEL not in {e.name for e in zoo.list_models()}:
        pytest.skip(f"the bundled model {zoo.DEFAULT_MODEL} is not in {zoo.zoo_root()}")
    pytest.importorskip("efficientnet_lite_pytorch", reason="pip install efficientnet-lite-pytorch")
    command = next(c for c in readme_commands() if c.startswith("catcap caption photo.jpg"))
    assert main(shlex.split(command.replace("photo.jpg", str(photo)))[1:]) == 0
    printed = capsys.readouterr().out.strip()
    [python] = readme_blocks("python")
    exec(python.replace('"photo.jpg"', repr(str(photo))), {})
    assert capsys.readouterr().out.strip() == printed.split(": ", 1)[1]
