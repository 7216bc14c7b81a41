"""catcap.data: captions, vocabularies, Karpathy split files, image feature stores, datasets.

Depends on nothing else of catcap but ``catcap.metrics`` (for the caption tokenizer, so that
training and evaluation see the same words). Import the module you need, e.g.
``from catcap.data.vocab import Vocab``.
"""
