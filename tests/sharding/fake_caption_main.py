"""A stand-in for a sharded ``catcap caption --output OUT.jsonl`` under torchrun: each rank writes
its block of fixed captions to its part, then calls :func:`catcap.merge.finish_sharded` as the
caption command does at its end (``python -m torch.distributed.run ... fake_caption_main.py OUT``)."""

import json
import sys

from catcap.atomic import atomic_write
from catcap.merge import finish_sharded
from catcap.sharding import part_path, resolve_shard

IMAGES = [f"photo{i}.jpg" for i in range(7)]


def lines(images) -> str:
    return "".join(json.dumps({"image": name, "caption": f"caption of {name}"}) + "\n" for name in images)


if __name__ == "__main__":
    out, shard = sys.argv[1], resolve_shard(None)
    with atomic_write(part_path(out, shard)) as f:
        f.write(lines(shard.take(IMAGES)))
    merged = finish_sharded(out, shard, log=print)
    print(f"rank {shard.index}: merged={merged is not None}")
