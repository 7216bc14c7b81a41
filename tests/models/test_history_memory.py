"""CACA's decoding memory (catcap.models.cross.memory): the in-place time-major buffers give
exactly the entries of the functional (copying) memory through appends, beam reorders, a change
of hypotheses per image and capacity growth; under autograd the memory stays functional so
gradients reach the entries."""

from __future__ import annotations

import torch

from catcap.models.attention import KeyValue
from catcap.models.cross.memory import HistoricalContextMemory


def _entry(rows: int, heads: int = 3, d_k: int = 4, grad: bool = False) -> KeyValue:
    return KeyValue(torch.randn(rows, heads, 1, d_k, requires_grad=grad), torch.randn(rows, heads, 1, d_k, requires_grad=grad))


def test_buffers_match_the_functional_memory_through_appends_reorders_and_growth():
    torch.manual_seed(0)
    images, beam = 2, 3
    fast = HistoricalContextMemory()
    slow_keys = None
    with torch.no_grad():
        e = _entry(images)  # beam search's first step: one hypothesis per image
        fast, slow_keys = fast.appended(e), e.contiguous()
        first = torch.arange(images).repeat_interleave(beam)  # -> beam hypotheses per image
        fast, slow_keys = fast.index_select(first), slow_keys.index_select(first)
        for step in range(2 * HistoricalContextMemory.CAPACITY + 3):  # past two doublings
            e = _entry(images * beam)
            fast, slow_keys = fast.appended(e), slow_keys.cat(e)
            within = torch.randint(0, beam, (images * beam,)) + torch.arange(images).repeat_interleave(beam) * beam
            fast, slow_keys = fast.index_select(within), slow_keys.index_select(within)
            assert fast.length == slow_keys.length == step + 2
            assert torch.equal(fast.keys.k, slow_keys.k) and torch.equal(fast.keys.v, slow_keys.v)
        assert fast._store is not None, "decoding must use the in-place buffers"
        fewer = torch.tensor([0, 4])  # to another number of rows: new buffers, same entries
        assert torch.equal(fast.index_select(fewer).keys.k, slow_keys.index_select(fewer).k)


def test_an_older_memory_keeps_its_entries_after_an_append_and_one_reorder():
    with torch.no_grad():
        old = HistoricalContextMemory().appended(_entry(4))
        before = old.keys.k.clone()
        newer = old.appended(_entry(4)).index_select(torch.tensor([3, 2, 1, 0]))
        assert old.length == 1 and torch.equal(old.keys.k, before)
        assert torch.equal(newer.keys.k[:, :, :1], before.flip(0))


def test_under_autograd_the_memory_is_functional_and_gradients_reach_the_entries():
    e1, e2 = _entry(2, grad=True), _entry(2, grad=True)
    memory = HistoricalContextMemory().appended(e1).appended(e2).index_select(torch.tensor([1, 0]))
    assert memory._store is None
    memory.keys.k.sum().backward()
    assert e1.k.grad is not None and torch.equal(e1.k.grad, torch.ones_like(e1.k))
    with torch.no_grad():  # a memory begun under autograd stays functional
        assert memory.appended(_entry(2))._store is None
