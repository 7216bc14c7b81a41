"""Fine-tuning a VLP model for visual question answering, evaluating and asking it (SPEC.md §5).

Starts from a VLP checkpoint written by ``catcap train`` (captioning or masked-token
pre-training): its region embedding and shared Transformer get the VQA head of
:mod:`catcap.models.vqa`. The text vocabulary is the checkpoint's, extended by the words of the
training questions it lacks (new embedding rows drawn N(0, 1) like the others, appended, so
every old id keeps its row); the answer vocabulary is the training questions' answers
(:class:`~catcap.data.vqa.AnswerVocab`). Adam at a fixed rate, soft-score BCE, validation
accuracy after every epoch (a line in ``log.jsonl``); ``best`` (by validation accuracy) and
``last`` are checkpoints as ``catcap train`` writes them (safetensors + JSON, atomic). Accuracy is VQA's
(:func:`~catcap.data.vqa.answer_score` of the top answer), overall and per question type, beside
the "most frequent training answer of the question's type" baseline.
Legend: B questions, N regions, T question tokens, A answers.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from torch.utils.data import DataLoader, Dataset

from catcap.config import from_dict
from catcap.data.collate import pad_captions, pad_regions
from catcap.data.features import open_feature_store
from catcap.data.geometry import check_region_classes, with_geometry
from catcap.data.karpathy import load_karpathy
from catcap.data.vocab import Vocab
from catcap.data.vqa import AnswerVocab, Question, answer_score, load_questions, soft_scores
from catcap.models.builders import build_captioner
from catcap.models.vlp import VLPDecoder
from catcap.models.vqa import VLPQuestionAnswerer, vqa_loss
from catcap.progress import progress_bar
from catcap.training.checkpoint import load_checkpoint, save_checkpoint
from catcap.training.experiment import ExperimentConfig


@dataclass
class VQAConfig:
    """``catcap vqa train`` settings. ``dataset`` / ``features`` default to the checkpoint's;
    ``fresh`` keeps the checkpoint's architecture and vocabulary but not its weights (seeded new
    ones): the control of "does pre-training help"."""

    checkpoint: str
    out_dir: str = "runs/vqa"
    dataset: str = ""
    features: str = ""
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-4
    seed: int = 0
    min_answer_count: int = 1
    max_question_len: int = 20
    train_split: str = "train"
    val_split: str = "val"
    progress: bool = True
    fresh: bool = False  # the no-pre-training control: the checkpoint's architecture, new weights


@dataclass
class QuestionBatch:
    """features (B, N, F), feature_mask (B, N), tokens (B, T) ``q_1..q_k [STOP]``, token_mask
    (B, T), targets (B, A) soft scores, index (B,) of the questions in their list."""

    features: torch.Tensor
    feature_mask: torch.Tensor
    tokens: torch.Tensor
    token_mask: torch.Tensor
    targets: torch.Tensor
    index: torch.Tensor


class QuestionSet(Dataset):
    """Questions with their image's regions, token ids and soft targets."""

    def __init__(self, questions: list[Question], store, vocab: Vocab, answers: AnswerVocab, max_len: int):
        self.questions, self.store, self.vocab, self.answers, self.max_len = questions, store, vocab, answers, max_len

    def __len__(self) -> int:
        return len(self.questions)

    def __getitem__(self, i: int):
        q = self.questions[i]
        target = torch.zeros(len(self.answers))
        for a, score in soft_scores(q.answers, self.answers).items():
            target[a] = score
        ids = torch.tensor(self.vocab.encode(q.tokens, self.max_len, add_bos=False))
        return torch.from_numpy(self.store.get(q.key).regions), ids, target, i


def collate_questions(items) -> QuestionBatch:
    features, feature_mask, _ = pad_regions([it[0] for it in items], [None] * len(items))
    tokens, token_mask = pad_captions([it[1] for it in items])
    return QuestionBatch(features, feature_mask, tokens, token_mask, torch.stack([it[2] for it in items]),
                         torch.tensor([it[3] for it in items]))


def extend_vocab(vocab: Vocab, questions: list[Question]) -> Vocab:
    """``vocab`` with the question words it lacks appended (sorted), old ids unchanged."""
    new = sorted({w for q in questions for w in q.tokens} - set(vocab.tokens))
    return Vocab(vocab.tokens[4:] + new)


def grow_embedding(vlp: VLPDecoder, size: int, seed: int = 0) -> None:
    """Give the word embedding ``size`` rows, the first ones unchanged, new ones N(0, 1)."""
    old = vlp.embed.weight.data
    if size == old.shape[0]:
        return
    extra = torch.randn(size - old.shape[0], old.shape[1], generator=torch.Generator().manual_seed(seed))
    grown = torch.nn.Embedding(size, old.shape[1], padding_idx=vlp.embed.padding_idx)
    grown.weight.data = torch.cat([old, extra.to(old)], 0)
    vlp.embed = grown


def _vlp_captioner(config: ExperimentConfig, caption_vocab_size: int):
    """The VLP captioner a VQA model starts from (region embedding + shared Transformer)."""
    model = build_captioner(config.model, caption_vocab_size)
    if not isinstance(model.decoder, VLPDecoder):
        raise ValueError(f"VQA needs a VLP checkpoint (model.decoder=vlp), found model.decoder={config.model.decoder!r}")
    return model


def _questions(dataset: str, split: str) -> list[Question]:
    questions = load_questions(load_karpathy(dataset, [split])[split])
    if not questions:
        raise ValueError(f"{dataset} has no questions in split {split!r}: VQA needs image entries with a \"qa\" list "
                         "(the built-in world writes them: catcap synth or catcap demo)")
    return questions


def train_vqa(cfg: VQAConfig, log: Callable[[str], None] = print) -> Path:
    """Fine-tune; -> the best checkpoint's folder."""
    start = load_checkpoint(cfg.checkpoint)
    config = from_dict(ExperimentConfig, start["config"])
    dataset, features = cfg.dataset or config.data.dataset, cfg.features or config.data.features
    train_q, val_q = _questions(dataset, cfg.train_split), _questions(dataset, cfg.val_split)
    caption_vocab = Vocab.from_dict(start["vocab"])
    vocab, answers = extend_vocab(caption_vocab, train_q), AnswerVocab.build(train_q, cfg.min_answer_count)
    torch.manual_seed(cfg.seed)
    captioner = _vlp_captioner(config, len(caption_vocab))
    if not cfg.fresh:
        captioner.load_state_dict(start["weights"])
    grow_embedding(captioner.decoder, len(vocab), cfg.seed)
    torch.manual_seed(cfg.seed)
    model = VLPQuestionAnswerer(captioner.encoder, captioner.decoder, len(answers))
    log(f"[catcap] VQA from {cfg.checkpoint}{' (architecture only: new weights)' if cfg.fresh else ''}: {len(train_q)} training questions, {len(answers)} answers, "
        f"{len(vocab) - len(caption_vocab)} question words added to the vocabulary")
    store = open_feature_store(features)
    check_region_classes(store, config.model)
    store = with_geometry(store, config.model)
    loader = DataLoader(QuestionSet(train_q, store, vocab, answers, cfg.max_question_len), batch_size=cfg.batch_size,
                        shuffle=True, collate_fn=collate_questions, generator=torch.Generator().manual_seed(cfg.seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    meta = {"vqa": asdict(cfg), "captioner": start["config"], "caption_vocab_size": len(caption_vocab)}
    out, best = Path(cfg.out_dir), -1.0
    out.mkdir(parents=True, exist_ok=True)
    for epoch in range(cfg.epochs):
        model.train()
        bar, losses = progress_bar(loader, desc=f"vqa epoch {epoch + 1}/{cfg.epochs}", unit="batch",
                                   enabled=cfg.progress), []
        for batch in bar:
            loss = vqa_loss(model(batch.features, batch.feature_mask, batch.tokens, batch.token_mask), batch.targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        result = score(model, val_q, store, vocab, answers, cfg.max_question_len, baseline_from=train_q)
        log(f"[catcap] epoch {epoch + 1}: train loss {sum(losses) / len(losses):.3f}, val accuracy "
            f"{result['accuracy']:.3f} (most frequent answer per type {result['baseline']['accuracy']:.3f})")
        with open(out / "log.jsonl", "a", encoding="utf-8") as f:  # one line per epoch, appended
            f.write(json.dumps({"epoch": epoch + 1, "train_loss": sum(losses) / len(losses), "val": result}) + "\n")
        save = dict(model=model, config=meta, vocab={"text": vocab.to_dict(), "answers": answers.to_json()},
                    features=getattr(store, "meta", None) or start["features"])
        save_checkpoint(out / "last", **save)
        if result["accuracy"] > best:
            best = result["accuracy"]
            save_checkpoint(out / "best", **save)
    return out / "best"


def model_config(meta: dict):
    """The ModelConfig of a VQA checkpoint's VLP (``meta`` from :func:`load_answerer`)."""
    return from_dict(ExperimentConfig, meta["captioner"]).model


def load_answerer(directory: str | Path):
    """-> (model in eval mode, text vocab, answer vocab, meta) of a ``catcap vqa train`` checkpoint;
    ``meta["features"]`` is the meta of the feature store it was trained on."""
    ckpt = load_checkpoint(directory)
    meta = {**ckpt["config"], "features": ckpt["features"]}
    if "vqa" not in meta:
        raise ValueError(f"{directory} is a captioning checkpoint, not a VQA one; fine-tune it with catcap vqa train")
    vocab, answers = Vocab.from_dict(ckpt["vocab"]["text"]), AnswerVocab.from_json(ckpt["vocab"]["answers"])
    captioner = _vlp_captioner(from_dict(ExperimentConfig, meta["captioner"]), meta["caption_vocab_size"])
    grow_embedding(captioner.decoder, len(vocab))
    model = VLPQuestionAnswerer(captioner.encoder, captioner.decoder, len(answers))
    model.load_state_dict(ckpt["weights"])
    return model.eval(), vocab, answers, meta


@torch.no_grad()
def score(model, questions: list[Question], store, vocab: Vocab, answers: AnswerVocab, max_len: int,
          baseline_from: list[Question], batch_size: int = 128) -> dict:
    """VQA accuracy of the top answer, overall and per type, and the per-type majority baseline."""
    model.eval()
    loader = DataLoader(QuestionSet(questions, store, vocab, answers, max_len), batch_size=batch_size,
                        collate_fn=collate_questions)
    predicted = {}
    for batch in loader:
        top = model(batch.features, batch.feature_mask, batch.tokens, batch.token_mask).argmax(-1)
        predicted.update({int(i): answers.answers[int(a)] for i, a in zip(batch.index, top)})
    majority = {t: Counter(a for q in baseline_from if q.type == t for a in q.answers).most_common(1)[0][0]
                for t in {q.type for q in baseline_from}}
    model_scores, base_scores = defaultdict(list), defaultdict(list)
    for i, q in enumerate(questions):
        model_scores[q.type].append(answer_score(predicted[i], q.answers))
        base_scores[q.type].append(answer_score(majority.get(q.type, ""), q.answers))

    def summary(per_type):
        every = [s for v in per_type.values() for s in v]
        return {"accuracy": sum(every) / len(every), "per_type": {t: sum(v) / len(v) for t, v in sorted(per_type.items())}}

    return {**summary(model_scores), "baseline": summary(base_scores), "questions": len(questions)}


def _data_paths(meta: dict, dataset: str | None, features: str | None) -> tuple[str, str]:
    """The fine-tuning run's split file and feature store unless others are named."""
    vqa, data = meta["vqa"], meta["captioner"]["data"]
    return dataset or vqa["dataset"] or data["dataset"], features or vqa["features"] or data["features"]


def evaluate_vqa(directory: str | Path, split: str = "test", *, dataset: str | None = None,
                 features: str | None = None) -> dict:
    """Accuracy of a VQA checkpoint on ``split``, overall and per type, with the baseline."""
    model, vocab, answers, meta = load_answerer(directory)
    dataset, features = _data_paths(meta, dataset, features)
    store = with_geometry(open_feature_store(features), model_config(meta))
    result = score(model, _questions(dataset, split), store, vocab, answers,
                   meta["vqa"]["max_question_len"], baseline_from=_questions(dataset, meta["vqa"]["train_split"]))
    return {"split": split, **result}


@torch.no_grad()
def ask(directory: str | Path, question: str, *, image: str | None = None, photo_features=None, top: int = 3,
        features: str | None = None) -> list:
    """-> [(answer, probability)] of the ``top`` answers to ``question`` about the image with
    feature-store key ``image``, or about a photo: ``photo_features(features_meta, model_cfg)``
    gives the rows the model reads from the meta of the training feature store (the image encoder
    to use) and the model's config (region geometry columns)."""
    from catcap.data.text import caption_tokens

    model, vocab, answers, meta = load_answerer(directory)
    if photo_features is not None:
        regions = photo_features(meta["features"], model_config(meta))
    else:
        _, features = _data_paths(meta, None, features)
        regions = with_geometry(open_feature_store(features), model_config(meta)).get(image).regions
    regions = torch.as_tensor(regions)[None]
    tokens = torch.tensor([vocab.encode(caption_tokens(question), meta["vqa"]["max_question_len"], add_bos=False)])
    probs = torch.sigmoid(model(regions, torch.ones(regions.shape[:2], dtype=torch.bool), tokens,
                                torch.ones_like(tokens, dtype=torch.bool)))[0]
    best = probs.topk(min(top, len(answers)))
    return [(answers.answers[int(i)], float(p)) for p, i in zip(best.values, best.indices)]
