"""Visual question answering data: questions of a Karpathy-format split file, the answer
vocabulary and VQA-style soft scores (SPEC.md §5, VLP's VQA fine-tuning).

A split file's image entry may carry ``"qa": [{"question": str, "answer": str, "type": str}, ...]``
(the built-in shapes world writes them, :mod:`catcap.data.synthetic.qa`), or ``"answers": [str, ...]``
in place of ``"answer"`` where several people answered (VQA v2 has 10). A candidate answer a
scores ``min(1, n_a / 3)`` against several answers, n_a of which are a (the VQA accuracy and the
soft target of the binary cross-entropy); against one answer it scores 1 when equal, else 0.
Questions are tokenised like captions (:func:`catcap.data.text.caption_tokens`); answers are
lower-cased and stripped.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from catcap.data.karpathy import ImageRecord
from catcap.data.text import caption_tokens

__all__ = ["Question", "AnswerVocab", "VQAFormatError", "load_questions", "soft_scores", "answer_score"]


class VQAFormatError(ValueError):
    """A ``qa`` entry that cannot be used (missing question or answer, wrong types)."""


@dataclass
class Question:
    """One question about the image with feature-store key ``key``."""

    key: str
    tokens: list[str]
    answers: list[str]
    type: str
    text: str


def _answers(qa: dict, where: str) -> list[str]:
    raw = qa.get("answers", [qa["answer"]] if "answer" in qa else None)
    if not isinstance(raw, list) or not raw or not all(isinstance(a, str) and a.strip() for a in raw):
        raise VQAFormatError(f"{where}: expected \"answer\": a non-empty string or \"answers\": a non-empty list of "
                             f"strings, found {qa.get('answers', qa.get('answer'))!r}")
    return [a.strip().lower() for a in raw]


def load_questions(records: Iterable[ImageRecord]) -> list[Question]:
    """The questions of ``records`` (their ``extra["qa"]``), in file order; images without
    questions contribute none."""
    out = []
    for rec in records:
        qas = rec.extra.get("qa", [])
        if not isinstance(qas, list):
            raise VQAFormatError(f"image {rec.key}: \"qa\" must be a list of question objects, found {type(qas).__name__}")
        for j, qa in enumerate(qas):
            where = f"image {rec.key}, qa[{j}]"
            if not isinstance(qa, dict) or not isinstance(qa.get("question"), str) or not qa["question"].strip():
                raise VQAFormatError(f"{where}: expected an object with a non-empty \"question\" string, found {qa!r}")
            tokens = caption_tokens(qa["question"])
            out.append(Question(rec.key, tokens, _answers(qa, where), str(qa.get("type", "other")), qa["question"]))
    return out


class AnswerVocab:
    """The answers a VQA head can give: those of the training questions seen at least
    ``min_count`` times, most frequent first (ties alphabetical)."""

    def __init__(self, answers: list[str]):
        if len(set(answers)) != len(answers) or not answers:
            raise VQAFormatError("an answer vocabulary needs at least one answer and no duplicates")
        self.answers = list(answers)
        self._index = {a: i for i, a in enumerate(self.answers)}

    @classmethod
    def build(cls, questions: Iterable[Question], min_count: int = 1) -> "AnswerVocab":
        counts = Counter(a for q in questions for a in set(q.answers))
        kept = sorted((a for a, c in counts.items() if c >= min_count), key=lambda a: (-counts[a], a))
        if not kept:
            raise VQAFormatError(f"no answer is given for at least {min_count} training questions; lower min_count")
        return cls(kept)

    def __len__(self) -> int:
        return len(self.answers)

    def index(self, answer: str) -> int | None:
        return self._index.get(answer)

    def to_json(self) -> dict:
        return {"answers": self.answers}

    @classmethod
    def from_json(cls, data: dict) -> "AnswerVocab":
        return cls(list(data["answers"]))


def answer_score(candidate: str, answers: list[str]) -> float:
    """VQA accuracy of ``candidate``: ``min(1, n / 3)`` among several answers, 0/1 against one."""
    n = sum(a == candidate for a in answers)
    return float(n > 0) if len(answers) == 1 else min(1.0, n / 3.0)


def soft_scores(answers: list[str], vocab: AnswerVocab) -> dict[int, float]:
    """The soft target of a question: answer index -> score, for the answers in the vocabulary."""
    return {vocab.index(a): answer_score(a, answers) for a in set(answers) if vocab.index(a) is not None}
