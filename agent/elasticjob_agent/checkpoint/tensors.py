"""A ``state_dict`` as one file in shared memory: the tensors' raw bytes, each 64-byte aligned,
after a pickled skeleton that names them (torch; the plain API's format).

Writing is one ``copy_`` per tensor into a mapping of the file (a device-to-host copy for GPU
tensors); nothing else is serialized byte by byte, which is why a save blocks so briefly.
Dense tensors of any dtype are supported; anything else in the dict (ints, strings, optimizer
hyper-parameters) is pickled in the skeleton.
"""

from __future__ import annotations

import mmap
import os
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

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
        return TensorRef(-1, value.numel() * value.element_size(), str(value.dtype), tuple(value.shape))
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


def write(layout: Layout, path: Path) -> None:
    """Write the planned state to ``path`` (a tmpfs file): the copy training waits for."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, layout.size)
        if layout.size == 0:
            return
        with mmap.mmap(fd, layout.size) as mm:
            mm[: _HEAD.size] = _HEAD.pack(MAGIC, len(layout.header))
            mm[_HEAD.size : _HEAD.size + len(layout.header)] = layout.header
            if layout.tensors:
                buffer = torch.frombuffer(mm, dtype=torch.uint8)
                for tensor, offset in zip(layout.tensors, layout.offsets, strict=True):
                    n = tensor.numel() * tensor.element_size()
                    if n:
                        src = tensor.detach().reshape(-1).view(torch.uint8)
                        buffer[offset : offset + n].copy_(src)
                del buffer
    finally:
        os.close(fd)


def read(path: Path) -> Any:
    """The state saved at ``path``, with fresh CPU tensors."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as mm:
        magic, length = _HEAD.unpack_from(mm, 0)
        if magic != MAGIC:
            raise ValueError(f"{path} is not an elasticjob checkpoint file")
        skeleton = pickle.loads(mm[_HEAD.size : _HEAD.size + length])
        buffer = torch.frombuffer(mm, dtype=torch.uint8)
        try:
            return _fill(skeleton, buffer)
        finally:
            del buffer


def _fill(value: Any, buffer: torch.Tensor) -> Any:
    if isinstance(value, TensorRef):
        dtype = getattr(torch, value.dtype.removeprefix("torch."))
        out = torch.empty(value.shape, dtype=dtype)
        if value.nbytes:
            out.reshape(-1).view(torch.uint8).copy_(buffer[value.offset : value.offset + value.nbytes])
        return out
    if isinstance(value, dict):
        return type(value)((k, _fill(v, buffer)) for k, v in value.items())
    if isinstance(value, list):
        return [_fill(v, buffer) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_fill(v, buffer) for v in value)
    return value
