"""mml command-line tools: build_data / notebook bad input -> a message and exit 2, before any work."""
import subprocess
import sys

from mml.build_data import main


def _run(module, *argv):
    return subprocess.run([sys.executable, "-m", module, *map(str, argv)], capture_output=True, text=True)


def test_non_empty_out_is_refused_before_the_world_is_made(tmp_path, monkeypatch, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")

    def no_world(*a, **k):
        raise AssertionError("the world was made before the target was checked")
    monkeypatch.setattr("catcap.data.synthetic.make_world", no_world)
    for extra in ([], ["--overwrite"]):
        assert main(["--out", str(out), "--train", "6", "--val", "2", "--feature-dim", "8", *extra]) == 2
        err = capsys.readouterr().err
        assert "is not a course data folder" in err and "thesis.tex" in err and "nothing was changed" in err
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"]


def test_overwrite_replaces_only_a_course_folder(tmp_path, capsys):
    out = tmp_path / "course"
    assert main(["--out", str(out), "--train", "6", "--val", "2", "--feature-dim", "8"]) == 0
    assert main(["--out", str(out), "--train", "6", "--val", "2", "--feature-dim", "8"]) == 2
    assert "already holds a course data folder; pass --overwrite" in capsys.readouterr().err
    assert main(["--out", str(out), "--train", "7", "--val", "2", "--feature-dim", "8", "--overwrite"]) == 0
    (out / "notes.txt").write_text("mine")
    assert main(["--out", str(out), "--train", "6", "--val", "2", "--feature-dim", "8", "--overwrite"]) == 2
    assert "plus other files (notes.txt)" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine"


def test_cli_messages_not_tracebacks(tmp_path):
    for argv, text in [(["--train", "0"], "argument --train: expected a whole number >= 1, found 0"),
                       (["--pca-dim", "x"], "argument --pca-dim: expected a whole number >= 1, found 'x'"),
                       (["--karpathy", tmp_path / "no.json", "--features", tmp_path / "f.h5"],
                        "--karpathy " + str(tmp_path / "no.json") + " does not exist")]:
        proc = _run("mml.build_data", *argv)
        assert proc.returncode == 2 and text in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    help_text = _run("mml.build_data", "--help").stdout
    for text in ("--pca-dim N", "(default 512", "--max-words N", "(default 15", "(default 3000)", "(default 250)"):
        assert text in " ".join(help_text.split()), help_text
    for path, text in [(tmp_path / "missing.txt", "missing.txt does not exist; expected a notebook exported as text"),
                       (tmp_path, "is a folder; expected a notebook")]:
        proc = _run("mml.notebook", path)
        assert proc.returncode == 2 and text in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
