"""``GenerationConfig``: every setting of caption generation, in one dataclass, checked once.

The CLI flags (``--beam``, ``--max-len``, ...), the YAML settings (``train.val_beam``,
``train.val_max_len``, ``train.scst``), the web demo's form and the Python API all build one;
the decoding loop (:func:`catcap.decoding.generate`) and everything below it trust it and never
check or rename its fields again. A bad value is one :class:`GenerationConfigError` naming the
setting, the value and what is allowed; a face that calls the setting something else (``--beam``,
``train.val_beam``) adds its own name in front with :meth:`GenerationConfigError.named`.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields

from catcap.config import ConfigError

DEFAULT_NUM_BEAMS = 3  # the bundled models' card scores are beam 3, 20 words (zoo/*/README.md)


class GenerationConfigError(ConfigError):
    """A generation setting out of range or contradicting another: ``setting`` (a
    :class:`GenerationConfig` field), ``value`` and ``allowed`` (what the setting may be)."""

    def __init__(self, setting: str, value, allowed: str, name: str | None = None):
        self.setting, self.value, self.allowed, self.name = setting, value, allowed, name
        where = f"{name}: " if name and name != setting else ""
        super().__init__(f"{where}{setting} must be {allowed}, got {value!r}")

    def named(self, names: dict[str, str]) -> "GenerationConfigError":
        """The same error as the user wrote the settings (``names``: field -> a flag or YAML key):
        the setting's name in front of it, and the other settings its range mentions by theirs
        (``1.0 without do_sample=True`` -> ``1.0 without --do-sample``)."""
        def other(match: re.Match) -> str:
            name = names.get(match.group(1), match.group(1))
            return name if name.startswith("--") and match.group(2) else name + (match.group(2) or "")

        fields_named = "|".join(re.escape(f) for f in sorted(names, key=len, reverse=True))
        allowed = re.sub(rf"\b({fields_named})\b(=True)?", other, self.allowed) if fields_named else self.allowed
        return GenerationConfigError(self.setting, self.value, allowed, names.get(self.setting, self.setting))


@dataclass(frozen=True)
class GenerationConfig:
    """How captions are generated (B images; every length counts words).

    Search: ``num_beams`` hypotheses per image (1 = greedy; default 3, and 1 with ``do_sample``);
    ``num_beam_groups`` G splits them into G groups searched one after the other at every step,
    each group's candidates penalised by ``diversity_penalty`` for every open beam of an earlier
    group that chose the same token at that step (diverse beam search, Vijayakumar et al. 2018:
    Hamming diversity); ``length_penalty`` ranks finished beams by ``sum log p / length ** lp``
    (length = words + ``<eos>``; 0 = plain sums). Sampling: ``do_sample`` draws
    ``num_return_sequences`` captions per image from the model's distribution divided by
    ``temperature``, kept to the ``top_k`` best tokens (0 = all) and to the smallest set reaching
    probability ``top_p`` (1 = all); ``seed`` makes the draws repeatable. Rules for every
    strategy: at most ``max_length`` words (``<eos>`` is forced after them), at least
    ``min_length`` words, no n-gram of ``no_repeat_ngram_size`` words twice (0 = off), and with
    ``remove_bad_endings`` no caption ending on "a", "the", "of", ... ``num_return_sequences``:
    captions per image (beams: the best finished ones, at most ``num_beams``; greedy: 1).
    ``output_attentions`` / ``output_history_weights``: the output also holds, per returned
    caption, step, decoder layer and head, the attention over the regions and the history
    entries / the history weight (see :class:`~catcap.decoding.output.GenerationOutput`).

    The names are those of Hugging Face's ``GenerationConfig``; the differences: ``max_length``
    and ``min_length`` count words, not tokens (``<bos>`` and ``<eos>`` excluded, as the
    captioning literature's "16 words"); ``length_penalty`` defaults to 0 (HF: 1);
    ``top_k`` defaults to 0, off (HF: 50); ``num_beams`` defaults to 3 (HF: 1); sampling with
    beams (HF's beam-sample) is not offered; and a setting that would change nothing in the
    chosen strategy (``top_p`` without ``do_sample``, ``diversity_penalty`` without groups,
    ``length_penalty`` without beams, ...) is refused rather than ignored. The config is frozen:
    ``dataclasses.replace`` gives a changed copy, checked again (it keeps the resolved
    ``num_beams``, so switching to sampling needs ``num_beams=1`` too).
    """

    num_beams: int | None = None
    num_beam_groups: int = 1
    diversity_penalty: float = 0.0
    max_length: int = 20
    min_length: int = 0
    length_penalty: float = 0.0
    no_repeat_ngram_size: int = 0
    remove_bad_endings: bool = False
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    num_return_sequences: int = 1
    seed: int | None = None
    output_attentions: bool = False
    output_history_weights: bool = False

    def __post_init__(self):
        for name in ("remove_bad_endings", "do_sample", "output_attentions", "output_history_weights"):
            _boolean(name, getattr(self, name))
        if self.num_beams is None:
            object.__setattr__(self, "num_beams", 1 if self.do_sample else DEFAULT_NUM_BEAMS)
        _check_search(self)
        _check_lengths(self)
        _check_sampling(self)
        _check_returns(self)

    @property
    def strategy(self) -> str:
        """``greedy``, ``sample``, ``beam`` or ``diverse_beam``."""
        if self.do_sample:
            return "sample"
        if self.num_beams == 1:
            return "greedy"
        return "beam" if self.num_beam_groups == 1 else "diverse_beam"

    @property
    def records_steps(self) -> bool:
        """True when the output keeps per-step attention maps or history weights."""
        return self.output_attentions or self.output_history_weights

    def to_dict(self) -> dict:
        return asdict(self)

    def changed(self) -> dict:
        """The settings that differ from the defaults (``num_beams`` against its default for the
        strategy: 1 with ``do_sample``)."""
        default, beams = GenerationConfig(), 1 if self.do_sample else DEFAULT_NUM_BEAMS
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != (beams if f.name == "num_beams" else getattr(default, f.name))}

    def describe(self) -> str:
        """A few words for progress bars and logs, e.g. ``beam 3, 20 words``."""
        what = {"greedy": "greedy", "sample": f"{self.num_return_sequences} samples",
                "beam": f"beam {self.num_beams}",
                "diverse_beam": f"beam {self.num_beams} in {self.num_beam_groups} groups"}[self.strategy]
        return f"{what}, {self.max_length} words"


def build_generation_config(settings: dict, base: GenerationConfig | None = None,
                            names: dict[str, str] | None = None) -> GenerationConfig:
    """A :class:`GenerationConfig` from ``settings`` (field name -> value; None = unset) on top
    of ``base``'s changed settings (default: none), an error naming the setting as the caller's
    user wrote it: ``names`` maps fields to flags or YAML keys (e.g. ``{"num_beams": "--beam"}``)."""
    given = {**(base.changed() if base is not None else {}), **{k: v for k, v in settings.items() if v is not None}}
    unknown = sorted(set(given) - {f.name for f in fields(GenerationConfig)})
    if unknown:
        raise TypeError(f"unknown generation setting(s) {', '.join(unknown)}; the settings are "
                        f"{', '.join(f.name for f in fields(GenerationConfig))}")
    try:
        return GenerationConfig(**given)
    except GenerationConfigError as err:
        raise err.named(names or {}) from None


def _integer(name: str, value, low: int, allowed: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise GenerationConfigError(name, value, allowed)


def _number(name: str, value, allowed: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise GenerationConfigError(name, value, allowed)
    return float(value)


def _boolean(name: str, value) -> None:
    if not isinstance(value, bool):
        raise GenerationConfigError(name, value, "True or False")


def _check_search(c: GenerationConfig) -> None:
    _integer("num_beams", c.num_beams, 1, ">= 1 (1 = greedy)")
    _integer("num_beam_groups", c.num_beam_groups, 1, ">= 1 (1 = plain beam search)")
    if c.num_beams % c.num_beam_groups:
        divisors = [d for d in range(1, c.num_beams + 1) if c.num_beams % d == 0]
        raise GenerationConfigError("num_beam_groups", c.num_beam_groups,
                                    f"a divisor of num_beams={c.num_beams} ({', '.join(map(str, divisors))})")
    penalty = _number("diversity_penalty", c.diversity_penalty, "a finite number > 0 with num_beam_groups > 1")
    if c.num_beam_groups > 1 and penalty <= 0:
        raise GenerationConfigError("diversity_penalty", c.diversity_penalty, "> 0 with num_beam_groups > 1 (at 0 "
                                    "every group runs the same search)")
    if c.num_beam_groups == 1 and penalty != 0:
        raise GenerationConfigError("diversity_penalty", c.diversity_penalty, "0 with num_beam_groups=1 (it "
                                    "penalises groups against each other: set num_beam_groups > 1)")
    lp = _number("length_penalty", c.length_penalty, "a finite number (0 = plain log-probability sums, "
                 "1 = per-token mean)")
    if lp != 0 and c.num_beams == 1:
        raise GenerationConfigError("length_penalty", c.length_penalty, "0 with num_beams=1 (it ranks the finished "
                                    "hypotheses of a beam search: set num_beams > 1)")


def _check_lengths(c: GenerationConfig) -> None:
    _integer("max_length", c.max_length, 1, ">= 1 (words per caption)")
    _integer("min_length", c.min_length, 0, f"between 0 and max_length={c.max_length} (words)")
    if c.min_length > c.max_length:
        raise GenerationConfigError("min_length", c.min_length, f"between 0 and max_length={c.max_length} (words)")
    _integer("no_repeat_ngram_size", c.no_repeat_ngram_size, 0, ">= 0 (0 = off)")


def _check_sampling(c: GenerationConfig) -> None:
    temperature = _number("temperature", c.temperature, "a finite number > 0")
    if temperature <= 0:
        raise GenerationConfigError("temperature", c.temperature, "a finite number > 0")
    _integer("top_k", c.top_k, 0, ">= 0 (0 = off)")
    top_p = _number("top_p", c.top_p, "in (0, 1] (1 = off)")
    if not 0 < top_p <= 1:
        raise GenerationConfigError("top_p", c.top_p, "in (0, 1] (1 = off)")
    if c.seed is not None:
        _integer("seed", c.seed, 0, "None or an integer >= 0")
    if c.do_sample:
        if c.num_beams != 1:
            raise GenerationConfigError("num_beams", c.num_beams, "1 with do_sample=True (beam-sample decoding is "
                                        "not offered: sample n captions with num_return_sequences, or search with "
                                        "num_beams alone)")
        return
    for name, off in (("temperature", 1.0), ("top_k", 0), ("top_p", 1.0), ("seed", None)):
        if getattr(c, name) != off:
            raise GenerationConfigError(name, getattr(c, name), f"{off} without do_sample=True (it only shapes the "
                                        "sampling distribution: set do_sample=True)")


def _check_returns(c: GenerationConfig) -> None:
    most = 1 if c.strategy == "greedy" else c.num_beams if not c.do_sample else None
    allowed = ">= 1" if most is None else f"between 1 and {most}" + (
        " (greedy decoding gives one caption: use num_beams or do_sample for more)" if c.strategy == "greedy"
        else f" (the beams, num_beams={c.num_beams})")
    _integer("num_return_sequences", c.num_return_sequences, 1, allowed)
    if most is not None and c.num_return_sequences > most:
        raise GenerationConfigError("num_return_sequences", c.num_return_sequences, allowed)
