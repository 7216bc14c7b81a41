"""Captioning models of the ``mml`` teaching API."""
