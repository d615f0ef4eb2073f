"""Load an ONNX file's structure without parsing its weight bytes (a wire-format scan of the protobuf).

A legacy ``torch.onnx.export`` file keeps every weight inline (ResNet-50: 102 MB). ``onnx.load`` parses
all of it, 0.5-0.9 s, although the featurizer needs only each initializer's name, dims and type. This
module walks the protobuf wire format of ``ModelProto -> GraphProto -> TensorProto`` over a memory map,
copies every field except the bulk data of large initializers, marks those initializers as external
data in a file that does not exist (as :func:`gpupred.graph.stripped.strip_weights` does), and lets
protobuf parse the few kilobytes that remain. Pages holding weight bytes are never read.

Field numbers are those of ``onnx.proto`` (stable since IR version 3): ModelProto.graph = 7,
GraphProto.initializer = 5, TensorProto.dims = 1, data_type = 2, name = 8, the data fields
4, 5, 6, 7, 9, 10, 11, external_data = 13, data_location = 14.
"""

from __future__ import annotations

import gzip
import mmap
import os
from pathlib import Path

from onnx import ModelProto

STRIPPED_LOCATION = "weights-not-read-by-gpupred"  # external-data location of the tensors skipped here
KEEP_DATA_BYTES = 64 * 1024  # initializers with at most this many data bytes are kept whole (shape constants)
SCAN_MIN_BYTES = 1 << 20  # files smaller than this are parsed by protobuf directly
GZIP_MAGIC = b"\x1f\x8b"

_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_DATA_FIELDS = frozenset({4, 5, 6, 7, 9, 10, 11})
_TENSOR_EXTERNAL_DATA = 13
_TENSOR_DATA_LOCATION = 14


class ScanError(ValueError):
    """The bytes are not well-formed protobuf wire format."""


def _varint(buf: memoryview | bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ScanError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ScanError("varint too long")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _fields(buf: memoryview, start: int, end: int):  # -> Iterator[tuple[int, int, int, int, int]]
    """(field number, wire type, record start, payload start, payload end) of each field in ``buf[start:end]``."""
    pos = start
    while pos < end:
        rec = pos
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(buf, pos, end)
            yield field, wire, rec, pos, pos
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise ScanError("length-delimited field runs past its message")
            yield field, wire, rec, pos, pos + length
            pos += length
        elif wire == 1:
            pos += 8
            yield field, wire, rec, pos, pos
        elif wire == 5:
            pos += 4
            yield field, wire, rec, pos, pos
        else:
            raise ScanError(f"unsupported wire type {wire}")
    if pos != end:
        raise ScanError("message runs past its end")


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _encode_varint((field << 3) | 2) + _encode_varint(len(payload)) + payload


_EXTERNAL_MARK = (
    _length_delimited(_TENSOR_EXTERNAL_DATA, _length_delimited(1, b"location") + _length_delimited(2, STRIPPED_LOCATION.encode()))
    + _encode_varint((_TENSOR_DATA_LOCATION << 3) | 0) + _encode_varint(1)
)


def _tensor(buf: memoryview, start: int, end: int) -> bytes | None:
    """The TensorProto without its bulk data (marked external), or None when it is small enough to keep whole."""
    data = sum(p_end - p_start for field, _, _, p_start, p_end in _fields(buf, start, end) if field in _TENSOR_DATA_FIELDS)
    if data <= KEEP_DATA_BYTES:
        return None
    parts = []
    for field, _, rec, _, p_end in _fields(buf, start, end):
        if field in _TENSOR_DATA_FIELDS or field in (_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            continue
        parts.append(bytes(buf[rec:p_end]))
    parts.append(_EXTERNAL_MARK)
    return b"".join(parts)


def _graph(buf: memoryview, start: int, end: int) -> bytes:
    parts = []
    for field, wire, rec, p_start, p_end in _fields(buf, start, end):
        if field == _GRAPH_INITIALIZER and wire == 2:
            slim = _tensor(buf, p_start, p_end)
            if slim is not None:
                parts.append(_length_delimited(_GRAPH_INITIALIZER, slim))
                continue
        parts.append(bytes(buf[rec:p_end]))
    return b"".join(parts)


def structure_bytes(data: memoryview | bytes) -> bytes:
    """A serialized ModelProto equal to ``data`` except that large initializers carry no data (marked external)."""
    buf = memoryview(data)
    parts = []
    for field, wire, rec, p_start, p_end in _fields(buf, 0, len(buf)):
        if field == _MODEL_GRAPH and wire == 2:
            parts.append(_length_delimited(_MODEL_GRAPH, _graph(buf, p_start, p_end)))
        else:
            parts.append(bytes(buf[rec:p_end]))
    return b"".join(parts)


def load_without_weights(path: str | os.PathLike[str]) -> ModelProto:
    """The ONNX model in ``path`` (plain or gzip-compressed, as the graph store keeps them) with large initializers'
    data left unread; raises ScanError, DecodeError or OSError on bad files."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) == GZIP_MAGIC:
            f.seek(0)
            return ModelProto.FromString(structure_bytes(gzip.decompress(f.read())))
        f.seek(0)
        if size < SCAN_MIN_BYTES:
            return ModelProto.FromString(f.read())
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                slim = structure_bytes(view)
            finally:
                view.release()
    return ModelProto.FromString(slim)
