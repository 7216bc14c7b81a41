"""Files with the defects the bad-input tests need, shared by tests/reliability/test_bad_inputs.py
and the class catalogue (benchmarks/bad_input_context.py): any content written to a path, photos
that lie about their size (decompression bombs' headers), and a feature store whose regions a
foreign tool replaced."""

import io
import json
import struct
import zlib
from pathlib import Path


def write(path: Path, content) -> Path:
    """``content`` (bytes, text, or anything JSON) at ``path``, folders made as needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, (bytes, bytearray)):
        path.write_bytes(bytes(content))
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return path


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that claims width x height pixels (a decompression bomb's header) with one empty IDAT."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def jpeg_bytes(mode="RGB", size=(40, 32)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new(mode, size, (10, 200, 30, 40)[: len(mode)] if mode != "L" else 90).save(buf, "JPEG")
    return buf.getvalue()


def huge_jpeg() -> bytes:
    """A valid small JPEG whose SOF0 header is patched to claim 60000 x 60000 pixels."""
    data = bytearray(jpeg_bytes())
    sof = data.index(b"\xff\xc0")
    data[sof + 5: sof + 9] = struct.pack(">HH", 60000, 60000)
    return bytes(data)


def replace_regions(store: Path, values) -> Path:
    """Every image's regions of the HDF5 store replaced by ``values(regions)``, written with h5py
    as a foreign tool would (catcap's own writer refuses NaN), its sha256 dropped with them."""
    import h5py

    with h5py.File(store, "a") as f:
        for key in f["images"]:  # every image: the first batch reads one
            group = f["images"][key]
            new = values(group["regions"][()])
            del group["regions"]
            group.create_dataset("regions", data=new)
            if "sha256" in group.attrs:
                del group.attrs["sha256"]
    return store
