"""``catcap extract`` with the fake encoder, as a script torchrun can start:
``python -m torch.distributed.run --nproc_per_node=N fake_extract_main.py extract ...``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "features"))

from extract_fakes import FakeEncoder

import catcap.features.extract
from catcap.cli.main import main

catcap.features.extract.make_encoder = lambda name, backend="torch": FakeEncoder(name)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
