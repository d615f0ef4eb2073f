"""Batch shape maps: every tensor's type and shape as a function of the batch, stored in an export's metadata.

Fitted and checked at export (:func:`gpupred.graph.export.export_module`) with the loader's own shape
inference, and tied to the graph by a CRC (:func:`gpupred.graph.loader.graph_fingerprint`), so that
featurize can read a file's shapes at any batch size without running inference. Torch-free.
"""

from __future__ import annotations

import json
from typing import Any

from onnx import ModelProto

from gpupred.errors import GpupredError
from gpupred.graph.fold import SHAPES_KEY
from gpupred.graph.loader import graph_fingerprint, load_graph, read_nodes

SHAPE_PROBES = (1, 2, 3, 64, 7901, 7907, 7919)  # batch sizes a shape map is fitted (last two) and checked at


def batch_shape_map(model: ModelProto) -> str | None:
    """JSON for the model's metadata (:data:`SHAPES_KEY`): every tensor's type and shape as a function of the batch.

    Runs featurize's own load + shape inference at each of :data:`SHAPE_PROBES`, fits each dimension as
    intercept + slope x batch on the two largest and checks the fit at every probe. Returns None (store
    nothing: featurize then infers shapes) when any shape is unknown, not affine in the batch, or needs
    folding at featurize time. Call it on the finished export, after
    :func:`gpupred.graph.stripped.fold_batch_shapes`.
    """
    graphs = []
    for probe in SHAPE_PROBES:
        try:
            graphs.append(load_graph(model, probe, stored=False)[0])
        except GpupredError:
            return None
    nodes = [n[:4] for n in read_nodes(model)]
    if any([n[:4] for n in g.nodes] != nodes or g.missing_shapes() for g in graphs):
        return None  # shapes need folding at featurize time, which changes the nodes
    names = [n for n in graphs[-1].shapes if n not in graphs[-1].inits]
    (p1, g1), (p2, g2) = zip(SHAPE_PROBES[-2:], graphs[-2:])
    tensors: dict[str, Any] = {}
    for name in names:
        d1, et, _ = g1.shapes.get(name, (None, -1, 0))
        d2, et2, _ = g2.shapes[name]
        if et != et2:
            return None
        if d1 is None or d2 is None:
            if d1 is not None or d2 is not None:
                return None
            entry: Any = None
        else:
            if len(d1) != len(d2):
                return None
            entry = []
            for a1, a2 in zip(d1, d2):
                slope, rest = divmod(a2 - a1, p2 - p1)
                if rest:
                    return None
                entry.append(a1 if slope == 0 else [a1 - slope * p1, slope])
        for probe, g in zip(SHAPE_PROBES, graphs):
            shp = g.shapes.get(name)
            want = None if entry is None else tuple(d if isinstance(d, int) else d[0] + d[1] * probe for d in entry)
            if shp is None or shp[1] != et or shp[0] != want:
                return None
        tensors[name] = [et, entry]
    if any(set(n for n in g.shapes if n not in g.inits) != set(names) for g in graphs):
        return None
    types: dict[str, int] = {}  # distinct [elem_type, dims] entries, each stored once
    index = {name: types.setdefault(json.dumps(spec), len(types)) for name, spec in tensors.items()}
    return json.dumps({
        "version": 1, "graph_crc32": graph_fingerprint(model),
        "types": [json.loads(t) for t in types], "tensors": index,
    }, separators=(",", ":"))


def store_batch_shapes(model: ModelProto) -> ModelProto:
    """Write :func:`batch_shape_map` into the model's metadata in place (nothing when there is no map)."""
    text = batch_shape_map(model)
    meta = {p.key: p for p in model.metadata_props}
    if text is None:
        if SHAPES_KEY in meta:
            keep = [p for p in model.metadata_props if p.key != SHAPES_KEY]
            del model.metadata_props[:]
            model.metadata_props.extend(keep)
        return model
    entry = meta.get(SHAPES_KEY) or model.metadata_props.add()
    entry.key, entry.value = SHAPES_KEY, text
    return model
