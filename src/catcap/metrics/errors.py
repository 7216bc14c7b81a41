"""Errors raised by catcap.metrics.

Every message says what was expected, what was found and how to fix it.
"""


class MetricInputError(ValueError):
    """Results or references that cannot be scored (wrong schema, missing images, ...)."""


class MetricUnavailable(RuntimeError):
    """A metric that cannot run on this machine (no Java, no CoreNLP jars, ...).

    ``metric`` names the metric and ``reason`` says why, so that a report can print
    ``SPICE: unavailable (reason)`` and still show every other metric.
    """

    def __init__(self, metric: str, reason: str):
        super().__init__(f"{metric} is unavailable: {reason}")
        self.metric = metric
        self.reason = reason
