"""Read one GGUF file safely: header validation, metadata, tensors (dequantized on demand).

The ``gguf`` package's memory-mapped ``GGUFReader`` does the real reading. It checks the
magic, the version and the alignment but trusts every count and offset in the header: a
truncated download or a hostile file makes it allocate absurd arrays, index past the end of
the map, or fail with an opaque numpy error. So before handing the file to it we walk the
header ourselves with bounds on every count, and check that each tensor's data lies inside
the file. Every problem becomes one ``ModelFileError`` naming the file and what is wrong.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import struct
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from s2studio.errors import ModelFileError

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
MAX_DIMS = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types -> (struct format, size); STRING (8) and ARRAY (9) are variable.
_SCALAR_TYPES = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
    6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9

# Tensor types the engine can turn into float weights (all published S2 Pro variants, plus
# the legacy block types quantizers sometimes fall back to).
SUPPORTED_TENSOR_TYPES = {
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order: reversed ggml ne, so 2-D weights are (out, in)
    type_name: str  # e.g. "F16", "Q8_0"
    n_elements: int
    n_bytes: int
    offset: int  # absolute offset of the data in the file


class _Cursor:
    """Bounds-checked little-endian reader over the mapped header."""

    def __init__(self, buf: mmap.mmap | bytes, path: str):
        self.buf = buf
        self.pos = 0
        self.path = path

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise ModelFileError(
                self.path,
                f"the file is truncated or corrupt: {what} at byte {self.pos} runs past the end "
                f"of the file ({len(self.buf)} bytes). Was the download incomplete?",
            )

    def scalar(self, fmt: str, size: int, what: str) -> Any:
        self.need(size, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def u32(self, what: str) -> int:
        return self.scalar("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("<Q", 8, what)

    def string(self, what: str) -> str:
        n = self.u64(f"length of {what}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelFileError(self.path, f"{what} is not valid UTF-8 (corrupt header)") from None


def _read_value(cur: _Cursor, vtype: int, key: str, depth: int = 0) -> Any:
    if vtype in _SCALAR_TYPES:
        fmt, size = _SCALAR_TYPES[vtype]
        return cur.scalar(fmt, size, f"value of '{key}'")
    if vtype == _STRING:
        return cur.string(f"value of '{key}'")
    if vtype == _ARRAY:
        if depth > 2:
            raise ModelFileError(cur.path, f"metadata '{key}' nests arrays too deeply (corrupt header)")
        item_type = cur.u32(f"array type of '{key}'")
        count = cur.u64(f"array length of '{key}'")
        if item_type in _SCALAR_TYPES:
            fmt, size = _SCALAR_TYPES[item_type]
            cur.need(count * size, f"array '{key}' ({count} items)")
            arr = np.frombuffer(cur.buf, dtype=np.dtype(fmt), count=count, offset=cur.pos)
            cur.pos += count * size
            return arr.tolist() if count <= 4096 else arr.copy()
        if item_type not in (_STRING, _ARRAY):
            raise ModelFileError(cur.path, f"metadata '{key}' has unknown array item type {item_type}")
        # Each string/array item takes at least 8 bytes, which bounds a hostile count.
        cur.need(count * 8, f"array '{key}' ({count} items)")
        return [_read_value(cur, item_type, key, depth + 1) for _ in range(count)]
    raise ModelFileError(cur.path, f"metadata '{key}' has unknown value type {vtype} (corrupt header)")


def _quant_layout(type_id: int) -> tuple[str, int, int] | None:
    import gguf

    try:
        qtype = gguf.GGMLQuantizationType(type_id)
    except ValueError:
        return None
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    return qtype.name, block, type_size


def scan_header(path: str, buf: mmap.mmap | bytes) -> tuple[dict[str, tuple[int, Any]], dict[str, TensorInfo]]:
    """Walk the GGUF header with bounds checks. Returns (metadata {key: (type, value)}, tensors)."""
    cur = _Cursor(buf, path)
    cur.need(4, "the GGUF magic")
    if bytes(buf[0:4]) != GGUF_MAGIC:
        raise ModelFileError(path, "not a GGUF file (the first bytes are not 'GGUF'). "
                                   "Pick the .gguf model file, not the tokenizer or an audio file.")
    cur.pos = 4
    version = cur.u32("the GGUF version")
    if version not in (2, 3):
        raise ModelFileError(path, f"unsupported GGUF version {version} (this build reads versions 2 and 3)")
    n_tensors = cur.u64("the tensor count")
    n_kv = cur.u64("the metadata count")
    # Smallest possible entries: a KV is 8 (key len) + 4 (type) + 1; a tensor info is
    # 8 + 4 + 8 + 4 + 8. Counts that cannot fit in the file are corruption, not a reason to loop.
    if n_kv * 13 > len(buf) or n_tensors * 32 > len(buf):
        raise ModelFileError(path, f"the file is damaged (corrupt header: {n_kv} metadata entries and "
                                   f"{n_tensors} tensors cannot fit in {len(buf):,} bytes). Download it again.")
    meta: dict[str, tuple[int, Any]] = {}
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        vtype = cur.u32(f"type of '{key}'")
        meta[key] = (vtype, _read_value(cur, vtype, key))

    infos: list[tuple[str, tuple[int, ...], int, int]] = []
    for i in range(n_tensors):
        name = cur.string(f"name of tensor #{i}")
        n_dims = cur.u32(f"dimension count of '{name}'")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ModelFileError(path, f"tensor '{name}' claims {n_dims} dimensions (GGUF allows 1 to {MAX_DIMS})")
        ne = tuple(cur.u64(f"dimensions of '{name}'") for _ in range(n_dims))
        n_el = 1
        for d in ne:
            if d == 0:
                raise ModelFileError(path, f"tensor '{name}' has a zero-sized dimension {list(ne)}")
            n_el *= d
            if n_el >= 1 << 62:
                raise ModelFileError(path, f"tensor '{name}' claims an impossible size {list(ne)}")
        type_id = cur.u32(f"type of '{name}'")
        offset = cur.u64(f"data offset of '{name}'")
        infos.append((name, ne, type_id, offset))

    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in meta:
        atype, alignment = meta["general.alignment"]
        if atype != 4 or alignment <= 0 or alignment & (alignment - 1):
            raise ModelFileError(path, f"invalid general.alignment {alignment!r}")
    data_start = -(-cur.pos // alignment) * alignment

    tensors: dict[str, TensorInfo] = {}
    for name, ne, type_id, offset in infos:
        layout = _quant_layout(type_id)
        if layout is None:
            raise ModelFileError(path, f"tensor '{name}' has unknown type id {type_id}")
        type_name, block, type_size = layout
        if ne[0] % block:
            raise ModelFileError(path, f"tensor '{name}' ({type_name}) has a row length {ne[0]} that is "
                                       f"not a multiple of its block size {block}")
        n_el = int(np.prod(ne, dtype=object))
        n_bytes = n_el // block * type_size
        if offset % alignment:
            raise ModelFileError(path, f"tensor '{name}' data offset {offset} is not aligned to {alignment}")
        start = data_start + offset
        if start + n_bytes > len(buf):
            raise ModelFileError(
                path,
                f"the file is truncated: tensor '{name}' needs bytes {start}..{start + n_bytes} but the "
                f"file has only {len(buf)} bytes. Was the download incomplete?",
            )
        if name in tensors:
            raise ModelFileError(path, f"tensor '{name}' appears twice")
        tensors[name] = TensorInfo(name, tuple(int(d) for d in reversed(ne)), type_name, n_el, n_bytes, start)
    return meta, tensors


def _why_missing(path: str) -> str:
    """Why ``os.path.exists`` said no: it also says no for a symbolic-link loop, a dangling link
    and a folder we may not enter, which need different fixes than a wrong name."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "it is a symbolic link that loops back on itself (a link cycle); point it at the real file"
        if exc.errno in (errno.EACCES, errno.EPERM):
            return f"it cannot be reached: {exc.strerror} (check the permissions of its folders)"
        if os.path.islink(path):
            return f"it is a symbolic link to '{os.readlink(path)}', which does not exist"
    return "the file does not exist"


class GGUFFile:
    """A validated, memory-mapped GGUF file.

    ``meta(key)`` returns a metadata value (or None); ``array(name)`` returns a tensor as a
    float32 numpy array in numpy order (2-D weights are ``(out, in)``), dequantized with
    ``gguf.quants`` when the file stores it quantized.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise ModelFileError(self.path, _why_missing(self.path))
        if os.path.isdir(self.path):
            raise ModelFileError(self.path, "this is a folder; pick the .gguf file inside it")
        size = os.path.getsize(self.path)
        if size < 24:
            raise ModelFileError(self.path, f"the file is only {size} bytes: not a GGUF model (empty or truncated)")
        try:
            with open(self.path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise ModelFileError(self.path, f"cannot be read ({exc.strerror or exc})") from exc
        self._meta, self.tensors = scan_header(self.path, self._map)
        import gguf

        try:
            self._reader = gguf.GGUFReader(self.path, "r")
        except Exception as exc:  # the header passed our checks; anything else is still corruption
            raise ModelFileError(self.path, f"the gguf reader rejected the file: {exc}") from exc
        self._reader_tensors = {t.name: t for t in self._reader.tensors}

    # ---- metadata -------------------------------------------------------------------------
    def meta(self, key: str, default: Any = None) -> Any:
        entry = self._meta.get(key)
        return default if entry is None else entry[1]

    def meta_type(self, key: str) -> int | None:
        entry = self._meta.get(key)
        return None if entry is None else entry[0]

    def meta_keys(self) -> list[str]:
        return list(self._meta)

    @property
    def architecture(self) -> str | None:
        value = self.meta("general.architecture")
        return value if isinstance(value, str) else None

    # ---- tensors --------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self.tensors

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelFileError(self.path, f"required tensor '{name}' is missing. "
                                            "The file is not an S2 Pro model, or it is damaged.") from None

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as the gguf reader maps them (no copy)."""
        self.info(name)
        return self._reader_tensors[name].data

    def array(self, name: str) -> np.ndarray:
        """The tensor as float32 in numpy order (a copy, dequantized if needed)."""
        info = self.info(name)
        if info.type_name not in SUPPORTED_TENSOR_TYPES:
            raise ModelFileError(self.path, f"tensor '{name}' has type {info.type_name}, which this engine "
                                            f"does not support (supported: {', '.join(sorted(SUPPORTED_TENSOR_TYPES))})")
        data = self._reader_tensors[name].data
        if info.type_name == "F32":
            out = np.array(data, dtype=np.float32)
        elif info.type_name == "F16":
            out = data.astype(np.float32)
        else:
            import gguf

            out = gguf.quants.dequantize(np.asarray(data), gguf.GGMLQuantizationType[info.type_name])
        return out.reshape(info.shape)

    def tensor(self, name: str, dtype, device="cpu", share: bool = False):
        """The tensor as a torch tensor of ``dtype`` (numpy order), without a float32 detour
        where the stored type allows it: F32/F16/BF16 are cast directly and Q8_0 blocks are
        decoded in torch (multi-threaded, exactly ``gguf.quants``' arithmetic), in row chunks
        so a 155776-row table never needs a full float32 copy. Other types go through
        ``gguf.quants``. ``share``: F32/F16 data already in ``dtype`` on the CPU comes back as a
        copy-on-write view of the file instead of a copy."""
        import torch

        def view(arr: np.ndarray) -> "torch.Tensor":
            # A read-only view of the map (never written; every path below copies).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(np.ascontiguousarray(arr))

        info = self.info(name)
        data = self._reader_tensors[name].data
        if info.type_name in ("F32", "F16"):
            t = view(data).reshape(info.shape)
            if share and t.dtype == dtype and torch.device(device).type == "cpu":
                # A copy-on-write view of the file: no copy at load and resident memory is the
                # file's pages; a write (none in the engine) gets a private page, not a fault.
                rt = self._reader_tensors[name]
                raw = self._cow_map()[rt.data_offset: rt.data_offset + rt.n_bytes]
                return torch.from_numpy(raw.view(data.dtype).reshape(info.shape))
            return t.to(device=device, dtype=dtype, copy=True)
        if info.type_name == "BF16":
            bits = view(data.view(np.int16)).to(torch.int32) << 16
            return bits.view(torch.float32).reshape(info.shape).to(device=device, dtype=dtype)
        if info.type_name == "Q8_0":
            rows = int(np.prod(info.shape[:-1]))
            blocks = view(data).reshape(rows, -1, 34)
            out = torch.empty((rows, info.shape[-1]), dtype=dtype)
            step = max(1, (1 << 24) // info.shape[-1])
            for r in range(0, rows, step):
                b = blocks[r:r + step]
                scale = b[..., :2].contiguous().view(torch.float16).float()  # (n, blocks, 1)
                q = b[..., 2:].contiguous().view(torch.int8).float()  # (n, blocks, 32)
                out[r:r + step] = (q * scale).reshape(b.shape[0], -1).to(dtype)
            return out.reshape(info.shape).to(device)
        return torch.from_numpy(self.array(name)).to(device=device, dtype=dtype)

    def _cow_map(self) -> np.ndarray:
        """The whole file mapped copy-on-write (MAP_PRIVATE), opened on first use."""
        cow = getattr(self, "_cow", None)
        if cow is None:
            cow = self._cow = np.asarray(np.memmap(self.path, mode="c"))
        return cow

    def shares_map(self, arr: np.ndarray) -> bool:
        """Whether ``arr`` may be a view of the file's memory map (rather than a copy)."""
        data = getattr(self._reader, "data", None)
        return data is not None and bool(np.may_share_memory(arr, data))

    def drop_resident(self, names) -> int:
        """Tell the OS that this process is done with these tensors' bytes in the memory map
        (after copying them, e.g. the codec's F16 weights into float32): their pages leave our
        resident set (the page cache keeps them). Returns the bytes released; 0 where the
        platform has no madvise (Windows)."""
        import mmap as _mmap

        mm = getattr(getattr(self._reader, "data", None), "_mmap", None)
        if mm is None or not hasattr(mm, "madvise") or not hasattr(_mmap, "MADV_DONTNEED"):
            return 0
        page = _mmap.PAGESIZE
        spans = sorted((t.data_offset, t.data_offset + t.n_bytes) for n in names
                       if (t := self._reader_tensors.get(n)) is not None)
        merged: list[list[int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        released = 0
        for a, b in merged:
            a, b = -(-a // page) * page, b // page * page  # whole pages inside the span only
            if b > a:
                mm.madvise(_mmap.MADV_DONTNEED, a, b - a)
                released += b - a
        return released

    def close(self) -> None:
        # numpy memmaps inside the reader keep the file open until they are collected.
        self._reader_tensors = {}
        self._reader = None
        self._cow = None
        try:
            self._map.close()
        except (BufferError, ValueError):
            pass

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
