"""Stand-ins for fast tests of the extraction plumbing (importable as ``extract_fakes``: pytest
puts tests/features on sys.path for its conftest)."""


class FakeEncoder:
    """A tiny stand-in for ImageEncoder (input 32, grid 2x2, 4 channels): fast tests of the
    extraction plumbing without the EfficientNet weights. ``fail_on_call`` = N raises on the Nth batch."""

    input_size, grid, channels = 32, (2, 2), 4

    def __init__(self, name: str = "efficientnet-lite0", fail_on_call: int = 0):
        self.name, self.fail_on_call, self.calls = name, fail_on_call, 0

    @property
    def meta(self) -> dict:
        return {"encoder": self.name, "input_size": self.input_size, "grid": list(self.grid),
                "channels": self.channels}

    def __call__(self, batch):
        import torch

        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError(f"simulated crash in batch {self.calls}")
        cells = torch.nn.functional.avg_pool2d(batch, 16)  # (B, 3, 2, 2)
        fmap = torch.cat([cells, torch.ones_like(cells[:, :1])], dim=1)  # (B, 4, 2, 2)
        grid = fmap.flatten(2).transpose(1, 2)
        return grid, grid.mean(dim=1)

    def boxes(self, width: int, height: int):
        from catcap.features.efficientnet import grid_boxes

        return grid_boxes(width, height, self.input_size, self.grid)


TINY_NAMES = ["1000268201_693b08cb0e.png", "1001773457_577c3a7d70.png", "1002674143_1b742ab4b8.png"]
