"""Typed configs: dataclasses loaded from YAML, with dotted overrides and strict checking.

    cfg = load_config(ExperimentConfig, "configs/experiments/demo.yaml", ["model.d_model=256"])

Unknown keys and wrong types are errors that name the key, what was expected, what was
found and the valid choices, raised before any work starts. Overrides are ``key.sub=value``
with the value read as YAML (``train.epochs=3``, ``model.cross_attention=caca``,
``data.splits=[train,val]``). A config file may name a ``base:`` file (relative to itself)
whose values it overrides.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from pathlib import Path
from typing import Any, Literal, Sequence, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

C = TypeVar("C")
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


class ConfigError(ValueError):
    """A config that cannot be used (unknown key, wrong type, unreadable file)."""


def check_at_least(section: str, obj, minimum: dict[str, float]) -> None:
    """Refuse out-of-range numbers of a config section up front: ``minimum`` maps field names to
    their smallest allowed value (e.g. ``{"epochs": 1}``)."""
    for name, low in minimum.items():
        value = getattr(obj, name)
        if not value >= low:  # NaN too (a dataclass built in Python skips the loader's finite check)
            raise ConfigError(f"{section}.{name} must be >= {low}, found {value!r}")


def _type_name(tp) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _coerce(value: Any, tp, where: str) -> Any:
    """Check ``value`` against the annotation ``tp`` (int -> float is allowed)."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        for option in args:
            try:
                return _coerce(value, option, where)
            except NonFiniteError:
                raise  # the number is the problem, not its type: say so rather than "expected float or None"
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {' or '.join(_type_name(a) for a in args)}, found {value!r}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: expected one of {', '.join(repr(a) for a in args)}, found {value!r}")
        return value
    if origin in (list, tuple, Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, found {value!r}")
        item = args[0] if args else Any
        items = [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple or tp is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, found {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{where}: expected null, found {value!r}")
        return None
    if tp is float and (isinstance(value, (int, float)) and not isinstance(value, bool)
                        or isinstance(value, str) and _FLOAT.fullmatch(value.strip())):  # YAML 1.1 reads 5e-6 as text
        return _finite(value, where)
    if tp in (int, float) and isinstance(value, bool):
        raise ConfigError(f"{where}: expected {tp.__name__}, found a boolean {value!r}")
    if isinstance(tp, type) and not isinstance(value, tp):
        quote = f" (YAML read it as {'a boolean' if isinstance(value, bool) else 'a number'}: quote it to keep it " \
                f"text, e.g. '\"{value}\"')" \
            if tp is str and isinstance(value, (int, float, bool)) else ""
        raise ConfigError(f"{where}: expected {tp.__name__}, found {type(value).__name__} {value!r}{quote}")
    return value


class NonFiniteError(ConfigError):
    """A NaN or infinite number where a setting needs a real one (refused before any run)."""


def _finite(written: int | float | str, where: str) -> float:
    """``written`` (a number, or its text) as a float when it is finite: a NaN or infinite setting
    would train to NaN weights or end in a traceback far from its cause, so every float of every
    config section is checked here, where YAML values and overrides become settings."""
    try:
        number = float(written)
    except OverflowError:  # an integer too large for a float
        number = math.inf
    if not math.isfinite(number):
        raise NonFiniteError(f"{where}: expected a finite number, found {written!r:.40}; NaN and infinite values are "
                             "refused: give a real number (e.g. 0.1)")
    return number


def from_dict(cls: type[C], data: Any, where: str = "config") -> C:
    """Build dataclass ``cls`` from a mapping; unknown keys and wrong types are errors."""
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of {cls.__name__} settings, found {data!r}")
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}{did_you_mean(unknown, names)}; "
                          f"valid keys: {', '.join(names)}")
    values = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**values)
    except TypeError as err:
        raise ConfigError(f"{where}: {err}") from None


def path_field(default: str, kind: str, names: tuple[str, ...] | None = None):
    """A config field that names a file or folder the run reads (``kind="input"``) or writes
    (``"output"``; ``names``: the entries it writes inside the folder). ``catcap train`` and
    ``validate-config`` refuse an output that meets an input (catcap/cli/paths.py)."""
    return dataclasses.field(default=default, metadata={"path": {"kind": kind, "names": names}})


def path_fields(cfg, prefix: str = "") -> list[tuple[str, str, dict]]:
    """(dotted key, value, role) of every non-empty :func:`path_field` of a config, sections included."""
    found = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            found += path_fields(value, f"{prefix}{f.name}.")
        elif "path" in f.metadata and value:
            found.append((f"{prefix}{f.name}", str(value), dict(f.metadata["path"])))
    return found
def did_you_mean(unknown: Sequence[str], names: Sequence[str]) -> str:
    """`` (did you mean 'epochs'?)`` for the unknown keys that are close to a valid one, else ""."""
    import difflib

    close = [(k, difflib.get_close_matches(str(k), names, n=1, cutoff=0.6)) for k in unknown]
    hints = [f"{m[0]!r}" + (f" for {k!r}" if len(unknown) > 1 else "") for k, m in close if m]
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


def to_dict(cfg) -> dict:
    """Plain dict (lists for tuples) ready for YAML/JSON."""
    return _plain(dataclasses.asdict(cfg))


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def apply_overrides(data: dict, overrides: Sequence[str]) -> dict:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a nested dict copy."""
    out = _deep_copy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value, e.g. train.epochs=3")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"override {item!r}: empty key")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {p!r} is not a section")
        try:
            node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as err:
            raise ConfigError(f"override {item!r}: the value is not valid YAML ({yaml_error_line(err)})") from None
    return out


def _deep_copy(d):
    return {k: _deep_copy(v) for k, v in d.items()} if isinstance(d, dict) else d


def yaml_error_line(err: Exception) -> str:
    """A YAML parser's error in one line ("expected ',' or ']' at line 2, column 1"): its own text
    spans several lines with a drawing of the spot."""
    problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(err).split())


def read_yaml(path: str | Path, _seen: tuple = ()) -> dict:
    """Read a YAML config, merging its ``base:`` chain (later files win)."""
    path = Path(path)
    if path.is_dir():
        yamls = sorted(p.name for p in path.glob("*.yaml"))[:5]
        raise ConfigError(f"config {path} is a folder; expected a YAML file"
                          + (f", e.g. {path / yamls[0]} (it holds {', '.join(yamls)})" if yamls else ""))
    if not path.is_file():
        raise ConfigError(f"config file not found: {path} (expected a YAML file, e.g. configs/experiments/demo.yaml)")
    if path.resolve() in _seen:
        raise ConfigError(f"config {path}: 'base' files form a cycle")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(f"config {path} is not valid YAML: {yaml_error_line(err)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path}: expected a mapping at the top level, found {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    return _merge(read_yaml(path.parent / base, _seen + (path.resolve(),)), data)


def _merge(base: dict, top: dict) -> dict:
    out = _deep_copy(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(cls: type[C], path: str | Path | None = None, overrides: Sequence[str] = ()) -> C:
    """Defaults of ``cls``, then the YAML file (and its bases), then the overrides."""
    data = read_yaml(path) if path is not None else {}
    return from_dict(cls, apply_overrides(data, overrides))


__all__ = ["ConfigError", "NonFiniteError", "apply_overrides", "from_dict", "load_config", "path_field", "path_fields",
           "read_yaml", "to_dict"]
