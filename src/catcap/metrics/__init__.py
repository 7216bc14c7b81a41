"""COCO-exact caption metrics (BLEU, METEOR, ROUGE-L, CIDEr-D, CIDEr, SPICE).

This layer depends on nothing else in catcap (a test checks it). Scores equal those of
pycocoevalcap 1.2; tokenisation is a pure-Python port of its PTB tokenizer, so no Java is
needed except for METEOR and SPICE, which run the official jars.
"""
