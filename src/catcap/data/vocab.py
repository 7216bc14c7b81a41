"""The word vocabulary: distinct ids for ``<pad>`` (0), ``<bos>`` (1), ``<eos>`` (2), ``<unk>`` (3).

Words follow the four special tokens, most frequent first (ties alphabetically), so a
vocabulary built from the same captions is always the same. Saved as plain JSON::

    {"format": "catcap.vocab", "version": 1, "tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "a", ...]}

where ``tokens[i]`` is the token of id ``i``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

from catcap.atomic import write_text_atomic

__all__ = ["Vocab", "VocabError", "PAD", "BOS", "EOS", "UNK", "SPECIALS"]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
#: The special tokens, in id order: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3.
SPECIALS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
FORMAT, VERSION = "catcap.vocab", 1


class VocabError(ValueError):
    """A vocabulary that cannot be built or read (bad file, duplicate words, ...)."""


class Vocab:
    """Token <-> id mapping with the special tokens at fixed ids 0..3.

    ``Vocab(words)`` takes the ordinary words (no special tokens, no duplicates); they get
    ids 4, 5, ... in the given order. Use :meth:`build` to count words in captions.
    """

    def __init__(self, words: Iterable[str] = ()):
        self._itos: list[str] = list(SPECIALS) + list(words)
        _check_tokens(self._itos, "Vocab(words)")
        self._stoi: dict[str, int] = {w: i for i, w in enumerate(self._itos)}

    # -- construction -------------------------------------------------------------------
    @classmethod
    def build(cls, token_lists: Iterable[Sequence[str]], min_count: int = 5) -> "Vocab":
        """Vocabulary of the words seen at least ``min_count`` times in ``token_lists``.

        Rarer words will encode as ``<unk>`` (the standard preprocessing uses 5, counted
        on the training captions). Words are ordered by descending count, then
        alphabetically. Tokens spelled like a special token are not counted.
        """
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise VocabError(f"min_count must be an integer >= 1, found {min_count!r}")
        counts: Counter[str] = Counter()
        for i, tokens in enumerate(token_lists):
            if isinstance(tokens, str):
                raise VocabError(
                    f"Vocab.build expects lists of tokens, found the string {tokens!r} at position {i}; "
                    f"tokenise captions first (catcap.data.text.caption_tokens)"
                )
            counts.update(tokens)
        kept = [(w, c) for w, c in counts.items() if c >= min_count and w not in SPECIALS]
        kept.sort(key=lambda wc: (-wc[1], wc[0]))
        return cls(w for w, _ in kept)

    # -- lookups ------------------------------------------------------------------------
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, word: object) -> bool:
        return word in self._stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self._itos == other._itos

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {len(SPECIALS)} special + {len(self) - len(SPECIALS)} words)"

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order (``tokens[i]`` has id ``i``), specials first."""
        return list(self._itos)

    def word(self, i: int) -> str:
        """The token of id ``i`` (an IndexError names the valid range)."""
        i = int(i)
        if not 0 <= i < len(self._itos):
            raise IndexError(f"token id {i} is out of range: this vocabulary has ids 0..{len(self._itos) - 1}")
        return self._itos[i]

    def id(self, word: str) -> int:
        """The id of ``word``; ``unk_id`` for words not in the vocabulary."""
        return self._stoi.get(word, self.unk_id)

    # -- encoding -----------------------------------------------------------------------
    def encode(self, tokens: Sequence[str], max_len: int | None = None,
               add_bos: bool = True, add_eos: bool = True) -> list[int]:
        """Token ids ``[<bos>] w1..wk [<eos>]`` with ``k = min(len(tokens), max_len)``.

        The words are truncated to ``max_len`` *before* ``<eos>`` is added (the standard
        preprocessing truncates training captions to 16 words, then ends them). Unknown
        words, and words spelled like a special token, become ``<unk>``.
        """
        if isinstance(tokens, str):
            raise VocabError(f"encode expects a list of tokens, found the string {tokens!r}; "
                             f"use caption_tokens(raw) first")
        if max_len is not None:
            if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 0:
                raise VocabError(f"max_len must be None or an integer >= 0, found {max_len!r}")
            tokens = tokens[:max_len]
        ids = [self._stoi.get(w, self.unk_id) if w not in SPECIALS else self.unk_id for w in tokens]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Words of an id sequence: stops at the first ``<eos>``, skips ``<pad>`` and ``<bos>``."""
        words = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                words.append(self.word(i))
        return words

    # -- files --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (see the module docstring)."""
        return {"format": FORMAT, "version": VERSION, "tokens": list(self._itos)}

    @classmethod
    def from_dict(cls, data: Any, source: str = "vocab") -> "Vocab":
        """Inverse of :meth:`to_dict`, with checks that say what is wrong."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise VocabError(f"{source}: expected a catcap vocabulary (an object with \"format\": \"{FORMAT}\"), "
                             f"found format {found!r}; write vocabularies with Vocab.to_json")
        if data.get("version") != VERSION:
            raise VocabError(f"{source}: expected vocabulary format version {VERSION}, found {data.get('version')!r}; "
                             f"this catcap reads version {VERSION} only")
        tokens = data.get("tokens")
        if not isinstance(tokens, list):
            raise VocabError(f"{source}: expected \"tokens\" to be a list of strings, found {type(tokens).__name__}")
        if [t for t in tokens[: len(SPECIALS)]] != list(SPECIALS):
            raise VocabError(f"{source}: expected the special tokens {list(SPECIALS)} at ids 0..3, "
                             f"found {tokens[: len(SPECIALS)]}; the file is not a catcap vocabulary or was edited")
        return cls(tokens[len(SPECIALS):])

    def to_json(self, path: str | Path) -> None:
        """Write the vocabulary as JSON, atomically (temp file in the same folder, then rename)."""
        write_text_atomic(Path(path), json.dumps(self.to_dict(), ensure_ascii=False, indent=0) + "\n")

    @classmethod
    def from_json(cls, path: str | Path) -> "Vocab":
        """Read a vocabulary written by :meth:`to_json`."""
        path = Path(path)
        if not path.is_file():
            raise VocabError(f"vocabulary file not found: {path} (expected a JSON file written by Vocab.to_json)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise VocabError(f"vocabulary file {path} is not UTF-8 JSON ({err}); "
                             f"expected a file written by Vocab.to_json") from None
        return cls.from_dict(data, source=str(path))


def _check_tokens(tokens: list, source: str) -> None:
    bad = [(i, t) for i, t in enumerate(tokens) if not isinstance(t, str) or not t]
    if bad:
        i, t = bad[0]
        raise VocabError(f"{source}: every token must be a non-empty string, found {t!r} at id {i}")
    if len(set(tokens)) != len(tokens):
        seen: dict[str, int] = {}
        dups = []
        for i, t in enumerate(tokens):
            if t in seen:
                dups.append(f"{t!r} at ids {seen[t]} and {i}")
            seen.setdefault(t, i)
        raise VocabError(f"{source}: expected distinct tokens, found duplicates: {'; '.join(dups[:5])}"
                         f"{f' ({len(dups)} in all)' if len(dups) > 5 else ''}; "
                         f"each token may appear once (special tokens only at ids 0..3)")
