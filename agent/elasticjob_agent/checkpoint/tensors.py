"""A ``state_dict`` as one file in shared memory: the tensors' raw bytes, each 64-byte aligned,
after a pickled skeleton that names them (torch; the plain API's format).

Writing is one ``pwrite`` per tensor from its own memory (after a device-to-host copy for a
GPU tensor); nothing is serialized byte by byte, which is why a save blocks so briefly.
Dense tensors of any dtype are supported; anything else in the dict (ints, strings, optimizer
hyper-parameters) is pickled in the skeleton.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from elasticjob_agent.checkpoint.resize import flatten

MAGIC = b"EJCKPT01"
ALIGN = 64
_HEAD = struct.Struct("<8sQ")


@dataclass(frozen=True)
class TensorRef:
    """Where one tensor's bytes are in the file."""

    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _split(value: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_quantized:
            raise ValueError(
                f"only dense tensors can be checkpointed this way, not {value.layout}: "
                "use the DCP writer (checkpoint.dcp) for other tensors"
            )
        tensors.append(value)
        return TensorRef(
            -1, value.numel() * value.element_size(), str(value.dtype), tuple(value.shape)
        )
    if isinstance(value, dict):
        return type(value)((k, _split(v, tensors)) for k, v in value.items())
    if isinstance(value, list):
        return [_split(v, tensors) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_split(v, tensors) for v in value)
    return value


def _place(value: Any, offsets: list[int], counter: list[int]) -> Any:
    if isinstance(value, TensorRef):
        i = counter[0]
        counter[0] += 1
        return TensorRef(offsets[i], value.nbytes, value.dtype, value.shape)
    if isinstance(value, dict):
        return type(value)((k, _place(v, offsets, counter)) for k, v in value.items())
    if isinstance(value, list):
        return [_place(v, offsets, counter) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_place(v, offsets, counter) for v in value)
    return value


@dataclass(frozen=True)
class Layout:
    """A state dict planned into one file: its skeleton, tensors and total size."""

    header: bytes
    tensors: tuple[torch.Tensor, ...]
    offsets: tuple[int, ...]
    size: int


def plan(state: Any) -> Layout:
    """Lay ``state`` out; ``ValueError`` for what cannot be saved this way."""
    tensors: list[torch.Tensor] = []
    skeleton = _split(state, tensors)
    offsets = []
    # The header's size depends on the offsets it holds: place the data after a bound on it.
    draft = pickle.dumps(_place(skeleton, [1 << 62] * len(tensors), [0]), protocol=5)
    position = _align(_HEAD.size + len(draft) + 64)
    for t in tensors:
        offsets.append(position)
        position = _align(position + t.numel() * t.element_size())
    header = pickle.dumps(_place(skeleton, offsets, [0]), protocol=5)
    if offsets and _HEAD.size + len(header) > offsets[0]:
        raise ValueError("checkpoint header overflow")  # smaller offsets never pickle longer
    return Layout(header, tuple(tensors), tuple(offsets), max(position, _HEAD.size + len(header)))


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes on the host, without a copy for a contiguous CPU tensor."""
    flat = tensor.detach().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    return memoryview(flat.contiguous().view(torch.uint8).numpy())  # type: ignore[arg-type]


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


def write(layout: Layout, path: Path, recycled: Path | None = None) -> None:
    """Write the planned state to ``path`` (a tmpfs file): the copy training waits for.

    ``pwrite`` straight from each tensor's memory: the kernel copies into the page cache of
    the tmpfs (a ``copy_`` into a mapping of the file faulted page by page, several times
    slower). ``recycled``: a file of an older checkpoint to overwrite in place."""
    if recycled is not None:
        with contextlib.suppress(FileNotFoundError):
            os.rename(recycled, path)  # its pages are reused: not truncated, resized
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, layout.size)
        _pwrite_all(fd, memoryview(_HEAD.pack(MAGIC, len(layout.header)) + layout.header), 0)
        for tensor, offset in zip(layout.tensors, layout.offsets, strict=True):
            if tensor.numel():
                _pwrite_all(fd, _bytes_of(tensor), offset)
    finally:
        os.close(fd)


def read(path: Path) -> Any:
    """The state saved at ``path``, with fresh CPU tensors (read straight into them)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        head = os.pread(fd, _HEAD.size, 0)
        if len(head) != _HEAD.size:
            raise ValueError(f"{path} is not an elasticjob checkpoint file")
        magic, length = _HEAD.unpack(head)
        if magic != MAGIC:
            raise ValueError(f"{path} is not an elasticjob checkpoint file")
        skeleton = pickle.loads(os.pread(fd, length, _HEAD.size))
        return _fill(skeleton, fd)
    finally:
        os.close(fd)


def _fill(value: Any, fd: int) -> Any:
    if isinstance(value, TensorRef):
        dtype = getattr(torch, value.dtype.removeprefix("torch."))
        out = torch.empty(value.shape, dtype=dtype)
        if value.nbytes:
            view = memoryview(out.reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]
            offset = value.offset
            while view:
                got = os.preadv(fd, [view], offset)
                if got <= 0:
                    raise ValueError("checkpoint file is shorter than its header says")
                view, offset = view[got:], offset + got
        return out
    if isinstance(value, dict):
        return type(value)((k, _fill(v, fd)) for k, v in value.items())
    if isinstance(value, list):
        return [_fill(v, fd) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_fill(v, fd) for v in value)
    return value


def _crc_range(fd: int, offset: int, nbytes: int) -> int:
    crc = 0
    while nbytes > 0:
        chunk = os.pread(fd, min(nbytes, 4 << 20), offset)
        if not chunk:
            raise ValueError("checkpoint file is shorter than its header says")
        crc = zlib.crc32(chunk, crc)
        offset, nbytes = offset + len(chunk), nbytes - len(chunk)
    return crc


def digests(path: Path) -> dict[str, tuple[tuple[Any, ...], int]]:
    """Every entry of the state saved at ``path`` (``resize.flatten``'s paths) to
    ``(structure, crc)``: ``structure`` is ``(dtype, shape)`` for a tensor, ``(type name,)``
    for a plain value; ``crc`` the CRC-32 of its bytes. Tensors are not materialized."""
    fd = os.open(path, os.O_RDONLY)
    try:
        head = os.pread(fd, _HEAD.size, 0)
        magic, length = _HEAD.unpack(head) if len(head) == _HEAD.size else (b"", 0)
        if magic != MAGIC:
            raise ValueError(f"{path} is not an elasticjob checkpoint file")
        skeleton = pickle.loads(os.pread(fd, length, _HEAD.size))

        def leaf(value: Any) -> tuple[tuple[Any, ...], int]:
            if isinstance(value, TensorRef):
                return (value.dtype, value.shape), _crc_range(fd, value.offset, value.nbytes)
            return (type(value).__name__,), zlib.crc32(pickle.dumps(value, protocol=5))

        return flatten(skeleton, leaf)
    finally:
        os.close(fd)


def signature(state: Any) -> dict[str, tuple[str, tuple[int, ...]] | None]:
    """Entry path to ``(dtype, shape)`` for each tensor of a live state dict (``None`` for a
    plain value): what ``resize.first_mismatch`` compares."""

    def leaf(value: Any) -> tuple[str, tuple[int, ...]] | None:
        if isinstance(value, torch.Tensor):
            return str(value.dtype), tuple(value.shape)
        return None

    return flatten(state, leaf)
