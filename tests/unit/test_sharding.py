"""Shards: contiguous blocks that cover a job exactly once, their part files and parsing."""

import pytest

from catcap.sharding import Shard, find_parts, parse_shard, part_path, resolve_shard


@pytest.mark.parametrize("n", [0, 1, 2, 7, 10, 101])
@pytest.mark.parametrize("count", [1, 2, 3, 8])
def test_shards_cover_every_item_once_in_order(n, count):
    items = list(range(n))
    parts = [Shard(i, count).take(items) for i in range(count)]
    assert sum(parts, []) == items
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_parse_and_errors():
    assert parse_shard(" 2 / 5 ") == Shard(2, 5)
    for bad in ("5/5", "-1/3", "1", "a/b", "1/0"):
        with pytest.raises(ValueError, match="I/N"):
            parse_shard(bad)


def test_resolve_from_torchrun_and_conflict(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_shard(None) == Shard()
    assert resolve_shard("1/3") == Shard(1, 3)
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "2")
    assert resolve_shard(None) == Shard(2, 3)
    with pytest.raises(ValueError, match="torchrun"):
        resolve_shard("0/3")


def test_part_paths_and_find(tmp_path):
    out = tmp_path / "feats.h5"
    assert part_path(out, Shard()) == out
    assert part_path(out, Shard(1, 4)).name == "feats.part-001-of-004.h5"
    with pytest.raises(FileNotFoundError, match="no parts"):
        find_parts(out)
    for i in (0, 2):
        part_path(out, Shard(i, 3)).write_text("x")
    with pytest.raises(FileNotFoundError, match="1/3"):
        find_parts(out)
    part_path(out, Shard(1, 3)).write_text("x")
    assert [p.name for p in find_parts(out)] == [f"feats.part-00{i}-of-003.h5" for i in range(3)]
    part_path(out, Shard(0, 2)).write_text("x")
    with pytest.raises(ValueError, match="mixed"):
        find_parts(out)
