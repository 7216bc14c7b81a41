"""The generation flags of ``catcap caption`` and ``catcap evaluate --checkpoint``: each is one
:class:`~catcap.decoding.GenerationConfig` setting, and together they build one config (an
unset flag takes the config's default; a bad value is the config's error, named by the flag)."""

from __future__ import annotations

import argparse

#: GenerationConfig field -> the flag that sets it (as errors name it)
FLAGS = {"num_beams": "--beam", "num_beam_groups": "--num-beam-groups", "diversity_penalty": "--diversity-penalty",
         "max_length": "--max-len", "min_length": "--min-len", "length_penalty": "--length-penalty",
         "no_repeat_ngram_size": "--no-repeat-ngram-size", "remove_bad_endings": "--remove-bad-endings",
         "do_sample": "--do-sample", "temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
         "seed": "--seed"}


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags, in a group of their own; defaults are GenerationConfig's (docs/generation.md)."""
    g = parser.add_argument_group("generation (a GenerationConfig; unset flags take its defaults, docs/generation.md)")
    g.add_argument("--beam", "--num-beams", dest="num_beams", type=int, metavar="K",
                   help="beam size, 1 = greedy (default 3)")
    g.add_argument("--num-beam-groups", type=int, metavar="G",
                   help="diverse beam search: the K beams in G groups, each penalised for the tokens earlier "
                        "groups took at the same step (default 1: plain beam search; needs --diversity-penalty)")
    g.add_argument("--diversity-penalty", type=float, metavar="D",
                   help="with --num-beam-groups > 1: subtracted from a candidate's score once per earlier group's "
                        "beam that took the same token at that step (e.g. 0.5)")
    g.add_argument("--max-len", "--max-length", dest="max_length", type=int, metavar="N",
                   help="most words per caption (default 20)")
    g.add_argument("--min-len", "--min-length", dest="min_length", type=int, metavar="N",
                   help="fewest words per caption (default 0)")
    g.add_argument("--length-penalty", type=float, metavar="LP",
                   help="with --beam > 1: rank finished captions by sum log p / length ** LP (default 0: plain sums, "
                        "which favour short captions; 1 = the mean log-probability per word). On Flickr8k val the "
                        "bundled flickr8k-m2 gives CIDEr-D 56.2 at --beam 3 and 0, 57.6 at --beam 5 and 1.0 "
                        "(benchmarks/flickr8k.md)")
    g.add_argument("--no-repeat-ngram-size", type=int, metavar="N", help="no n-gram of N words twice (default 0: off)")
    g.add_argument("--remove-bad-endings", action="store_true", default=None,
                   help='no caption ending on "a", "the", "of", ... (default off)')
    g.add_argument("--do-sample", action="store_true", default=None,
                   help="draw each caption from the model's distribution instead of searching (not with --beam > 1)")
    g.add_argument("--temperature", type=float, metavar="T", help="with --do-sample: divide the logits by T (default 1)")
    g.add_argument("--top-k", type=int, metavar="K", help="with --do-sample: draw from the K best words (default 0: all)")
    g.add_argument("--top-p", type=float, metavar="P",
                   help="with --do-sample: draw from the smallest set of best words of probability >= P (default 1: all)")
    g.add_argument("--seed", type=int, help="with --do-sample: the random seed (default: not seeded)")
    g.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false",
                   help="on a GPU, decode eagerly instead of replaying the decoding loop as a CUDA graph (the "
                        "captions are the same; docs/generation.md, 'Static decoding and CUDA graphs')")
    for action in g._group_actions:  # GenerationConfig checks these (ranges too); cli/checks.py leaves them to it
        action.checked_by = "GenerationConfig"


def given_generation_flags(args: argparse.Namespace) -> list[str]:
    """The generation flags set on this command line."""
    return [flag for field, flag in FLAGS.items() if getattr(args, field, None) is not None]


def generation_config(args: argparse.Namespace):
    """The flags' GenerationConfig (errors name the flag: ``--beam: num_beams must be >= 1 ...``);
    ``--no-cuda-graphs`` turns CUDA graphs off for the command (``GRAPHS.enabled``)."""
    from catcap.decoding.config import build_generation_config
    from catcap.decoding.graphs import GRAPHS

    GRAPHS.enabled = getattr(args, "cuda_graphs", True)
    return build_generation_config({field: getattr(args, field) for field in FLAGS}, names=FLAGS)


def checkpoints(values: list[str] | str | None) -> list[str] | None:
    """``--checkpoint A --checkpoint B`` or ``--checkpoint A,B`` -> [A, B] (None: none given)."""
    if values is None:
        return None
    values = [values] if isinstance(values, str) else values
    parts = [part.strip() for value in values for part in value.split(",") if part.strip()]
    if not parts:
        raise ValueError(f"--checkpoint: expected a checkpoint folder, a zoo name or an ensemble A,B; found "
                         f"{', '.join(repr(v) for v in values)}: give at least one model")
    return parts
