"""Which options of a command name files it reads and which name files it writes, and the one
rule between them: no command writes over one of its own inputs (docs/reliability.md).

Each command declares the role of its path options once, next to their ``add_argument`` calls::

    paths.declare(ev, results=paths.INPUT, refs=paths.INPUT, output=paths.OUTPUT)

A folder option may name the entries it reads or writes inside the folder (glob patterns; a
callable of the parsed arguments when they depend on another option), e.g.
``paths.writes("vocab.json", "captions.npz", "prepare.json")``; without names the whole folder
counts. ``catcap`` (cli/checks.py) calls :func:`check` after parsing, before the command does
any work: every written path is compared with every read path, both resolved (symlinks, ``..``,
``~``), and a pair that is the same file, or one inside the other, is refused with exit 2 and a
message naming both options; so is an output option that names the very path of an input
option. Hard links are recognised by their inode (looked for only when an existing file has
more than one link, so the usual case costs one ``stat``).

``tests/reliability/test_path_roles.py`` builds its table from these declarations: every command
is run with each output option equal to each input option; it also fails for an option whose
metavar or name says it holds a path but that has no role.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence, Union

Names = Union[Sequence[str], Callable[[argparse.Namespace], Sequence[str]], None]


@dataclass(frozen=True)
class Role:
    """``kind``: "input", "output" or "input+output" (a file the command updates in place, e.g.
    ``zoo build --record-captions``: an output for the other inputs, an input for the other
    outputs). ``names``: entries of a folder it reads or writes (None: the whole path).
    ``path``: the path inside an option's value (``SPLIT=FILE`` -> ``FILE``). ``many``: the paths
    one value stands for (an ensemble ``A,B``; a zoo name -> its folder). ``default``: the path the
    command uses when the option is not given (None: none to check)."""

    kind: str
    names: Names = None
    path: Callable[[str], str] | None = None
    default: Callable[[argparse.Namespace], str | list[str] | None] | None = None
    many: Callable[[str], list[str]] | None = None

    @property
    def reads(self) -> bool:
        return self.kind in ("input", "input+output")

    @property
    def writes(self) -> bool:
        return self.kind in ("output", "input+output")


INPUT, OUTPUT, INPUT_OUTPUT = Role("input"), Role("output"), Role("input+output")


# the photo files a folder stands for: catcap.features.extract.IMAGE_SUFFIXES (not imported here: it
# loads torch; tests/reliability/test_path_roles.py checks that the two lists agree)
PHOTO_SUFFIXES = ("jpg", "jpeg", "png", "bmp", "webp", "gif", "tif", "tiff")


def reads(*names: str) -> Role:
    """An input folder of which the command reads only ``names`` (e.g. a run's ``log.jsonl``)."""
    return Role("input", names=names)


def writes(*names: str, **more) -> Role:
    """An output folder into which the command writes only ``names`` (its other files are kept)."""
    return Role("output", names=names, **more)


PHOTOS = reads(*(f"*.{s}" for s in PHOTO_SUFFIXES))  # image files, or a folder read for its photos


def model_folder(value: str) -> list[str]:
    """The folder a checkpoint option names: a path as it is, a zoo name (``flickr8k-m2``) as its
    folder in the zoo (``catcap.zoo.local_folder``, the loader's own rule; a Hub id is downloaded
    into a cache of its own and left as it is)."""
    if os.path.exists(os.path.expanduser(value)) or not value or "/" in value or os.sep in value:
        return [value]
    from catcap import zoo  # only for a value that may be a zoo name: it loads torch

    folder = zoo.local_folder(value)
    return [str(folder) if folder is not None else value]


def ensemble_folders(value: str) -> list[str]:
    """The folders of ``--checkpoint A,B`` (the split of cli/generation_args.checkpoints)."""
    from catcap.cli.generation_args import checkpoints

    return [folder for part in checkpoints(value) or [] for folder in model_folder(part)]


def checkpoint_data(name: str, fallback: Callable[[argparse.Namespace], str | None] | None = None):
    """A role's default: the training data file ``config.data.<name>`` (dataset, features) of each
    model the command loads (``--checkpoint``, each member of an ensemble; else ``fallback``'s
    model), which the command reads when the option is not given."""
    def default(args: argparse.Namespace) -> list[str]:
        from catcap.inference.data_files import recorded_data_file

        given = getattr(args, "checkpoint", None)
        values = [given] if isinstance(given, str) else list(given or [])
        folders = [f for v in values for f in ensemble_folders(v)] if values else [fallback(args)] if fallback else []
        return [path for folder in folders if folder for path in [recorded_data_file(folder, name)] if path]
    return default


MODEL_FILES = ("*.json", "*.safetensors")  # what a command reads from a checkpoint or zoo folder
CHECKPOINT = Role("input", names=MODEL_FILES, many=model_folder)  # a checkpoint or zoo folder, or a zoo name
CHECKPOINTS = Role("input", names=MODEL_FILES, many=ensemble_folders)  # one of them, or an ensemble A,B


def declare(parser: argparse.ArgumentParser, **roles: Role) -> None:
    """Give the options of ``parser`` (by their ``dest``) their roles; an unknown dest is an error
    of the command's code, raised when the parser is built."""
    actions = {a.dest: a for a in parser._actions}
    for dest, role in roles.items():
        if dest not in actions:
            raise KeyError(f"{parser.prog} has no option with dest {dest!r} (options: {sorted(actions)})")
        actions[dest].path_role = role


def role_of(action: argparse.Action) -> Role | None:
    return getattr(action, "path_role", None)


def label(action: argparse.Action) -> str:
    """How the user wrote the option: its first long flag, or a positional's metavar."""
    longs = [s for s in action.option_strings if s.startswith("--")]
    return (longs or action.option_strings or [str(action.metavar or action.dest).upper()])[0]


@dataclass(frozen=True)
class Named:
    """One path a command reads or writes, with the option (or config key) that named it."""

    label: str
    value: str
    role: Role


def named_paths(actions: Iterable[argparse.Action], args: argparse.Namespace) -> list[Named]:
    """The paths the parsed ``args`` give the declared options (lists: each item; the role's
    default when the option is not given)."""
    found = []
    for action in actions:
        role = role_of(action)
        if role is None:
            continue
        value, name = getattr(args, action.dest, None), label(action)
        if value in (None, "", []) and role.default is not None:
            value, name = role.default(args), f"{name} (not given: its default)"
        for item in value if isinstance(value, (list, tuple)) else [value]:
            item = role.path(item) if role.path and isinstance(item, str) else item
            for one in role.many(item) if role.many and isinstance(item, str) else [item]:
                if isinstance(one, (str, os.PathLike)) and str(one):
                    found.append(Named(name, str(one), role))
    return found


def _resolve(value: str) -> Path:
    return Path(os.path.realpath(os.path.expanduser(value)))


def _expand(named: Named, args: argparse.Namespace) -> list[Path]:
    """The paths ``named`` stands for: the path itself, or the declared entries of a folder (a
    path that exists and is not a folder stands for itself)."""
    base = _resolve(named.value)
    names = named.role.names(args) if callable(named.role.names) else named.role.names
    if not names or (base.exists() and not base.is_dir()):
        return [base]
    return [base / n for n in names]


def _same_part(x: str, y: str) -> bool:
    if x == y:
        return True
    if any(c in x + y for c in "*?["):  # a declared pattern: matched without case (*.jpg is also X.JPG)
        return fnmatchcase(x.lower(), y.lower()) or fnmatchcase(y.lower(), x.lower())
    return False


def _overlap(a: Path, b: Path) -> bool:
    """The same path, or one inside the other (entries may be glob patterns)."""
    return all(_same_part(x, y) for x, y in zip(a.parts, b.parts))


def _inodes(path: Path, limit: int = 200_000) -> Iterator[tuple[int, int]]:
    """(device, inode) of the file ``path``, or of the files under the folder ``path`` (at most
    ``limit`` of them: a search for a hard link must not cost minutes)."""
    if path.is_file():
        st = path.stat()
        yield st.st_dev, st.st_ino
    elif path.is_dir():
        seen = 0
        for root, _, files in os.walk(path):
            for f in files:
                try:
                    st = os.stat(os.path.join(root, f))
                except OSError:
                    continue
                yield st.st_dev, st.st_ino
                seen += 1
                if seen >= limit:
                    return


def _hard_linked(written: Path, read: Path) -> bool:
    """Two different names of one file: only possible for a file with more than one link (and
    only when the output exists: a new file links to nothing)."""
    if not written.exists():
        return False
    for file, other in ((written, read), (read, written)):
        try:
            st = file.stat()
        except OSError:
            continue
        if file.is_file() and st.st_nlink > 1 and (st.st_dev, st.st_ino) in set(_inodes(other)):
            return True
    return False


def clash(outputs: Sequence[Named], inputs: Sequence[Named], args: argparse.Namespace) -> str | None:
    """Why an output of the command would write over one of its inputs (None: it would not)."""
    for out in outputs:
        for inp in inputs:
            if out is inp:  # an input+output option updates its own file on purpose
                continue
            for w in _expand(out, args):
                for r in _expand(inp, args):
                    if _overlap(w, r):
                        return _message(out, inp, w, r)
            w, r = _resolve(out.value), _resolve(inp.value)
            if w == r or _hard_linked(w, r):  # the same path is refused even where no entry would be replaced
                return _message(out, inp, w, r)
    return None


def _message(out: Named, inp: Named, w: Path, r: Path) -> str:
    w, r = (_resolve(n.value) if any(c in str(p) for c in "*?[") else p for n, p in ((out, w), (inp, r)))
    if w == r == _resolve(out.value):
        how = f"both name {w}"
    elif w == r:
        how = f"{out.label} writes {w}, which is the input"
    elif _overlap(w, r) and len(w.parts) < len(r.parts):
        how = f"{out.label} writes {w}, which holds the input {r}"
    elif _overlap(w, r):
        how = f"{out.label} writes {w}, inside the input {r}"
    else:
        how = f"{w} and {r} are hard links of one file"
    return (f"{out.label} {out.value} and {inp.label} {inp.value}: {how}; expected an output apart from the "
            f"command's inputs (it would write over its own input): give {out.label.split(' (')[0]} another path")


def check(named: Sequence[Named], args: argparse.Namespace) -> None:
    """Refuse (ValueError, exit 2) a command line whose outputs meet its inputs."""
    outputs = [n for n in named if n.role.writes]
    inputs = [n for n in named if n.role.reads]
    problem = clash(outputs, inputs, args)
    if problem:
        raise ValueError(problem)
