"""The graph store (``config.GRAPHS``, committed): which specs' graphs it holds, and the graph of any spec.

The graph layer knows the specs of :mod:`gpupred.workloads` (the catalog, the fused catalog, the real-world
architectures). Packages above it that rebuild other jobs register theirs with :func:`register_store_specs` when
they are imported (:mod:`gpupred.importers.lucid` registers Lucid's jobs), so :func:`store_specs` is complete once
they are (``gpupred graph export --store`` imports every importer first). GPUMemNet's fully connected networks are
not stored: :func:`fcnet_onnx` writes their graphs with ``onnx.helper``, without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
from onnx import TensorProto, helper

from gpupred.errors import GpupredError
from gpupred.workloads.fcnet import fc_widths
from gpupred.workloads.spec import WorkloadSpec

ACTIVATIONS: dict[str, str] = {"ReLU": "Relu"}  # GPUMemNet's layer name -> ONNX op (the only kind in its step 1)
_REGISTERED: dict[str, Callable[[], list[WorkloadSpec]]] = {}  # name -> the specs a package above adds to the store


def register_store_specs(name: str, specs: Callable[[], list[WorkloadSpec]]) -> None:
    """Add the specs ``specs()`` returns to the store's list, under ``name`` (registering a name again replaces it)."""
    _REGISTERED[name] = specs


def store_specs() -> list[WorkloadSpec]:
    """Every spec whose architecture the graph store holds: the catalog, the fused catalog, the registered specs (in
    the order they were registered) and the real-world architectures (exported without weights), also at the fine-tune
    plan's sequence lengths."""
    from gpupred.workloads.catalog import catalog, fused_catalog
    from gpupred.workloads.realworld import finetune_catalog, realworld_catalog

    return [*catalog(), *fused_catalog(), *[s for specs in _REGISTERED.values() for s in specs()], *realworld_catalog(),
            *finetune_catalog()]


def graph_for(spec: WorkloadSpec) -> Any:
    """An ONNX graph (ModelProto or path) for ``spec``: built (fcnet), from the store, or exported (torch)."""
    if spec.family == "fcnet":
        return fcnet_onnx(spec)
    from gpupred.graph.export import export_onnx  # the store's graph; torch only when the store has none

    return export_onnx(spec)


def fcnet_onnx(spec: WorkloadSpec, activation: str = "ReLU") -> onnx.ModelProto:
    """The structure-only ONNX graph of an ``fcnet`` spec, as torch's exporter writes nn.Linear/nn.ReLU (no weights)."""
    from gpupred.graph.export import OPSET
    from gpupred.graph.stripped import strip_weights

    if spec.family != "fcnet":
        raise GpupredError(f"{spec.id}: fcnet_onnx builds fcnet specs only")
    widths = fc_widths(spec.input_size, spec.knob["o"], spec.knob["d"], spec.arch)
    nodes, inits = [], []
    x, prev = "features", spec.input_size
    for k, w in enumerate(widths):
        wname, bname, out = f"model.{2 * k}.weight", f"model.{2 * k}.bias", f"/model/{2 * k}/Gemm_output_0"
        inits += [TensorProto(name=wname, data_type=TensorProto.FLOAT, dims=[w, prev]),
                  TensorProto(name=bname, data_type=TensorProto.FLOAT, dims=[w])]
        last = k == len(widths) - 1
        nodes.append(helper.make_node("Gemm", [x, wname, bname], ["logits" if last else out], name=f"/model/{2 * k}/Gemm",
                                      alpha=1.0, beta=1.0, transB=1))
        if not last:
            act = f"/model/{2 * k + 1}/{ACTIVATIONS[activation]}_output_0"
            nodes.append(helper.make_node(ACTIVATIONS[activation], [out], [act], name=f"/model/{2 * k + 1}/{ACTIVATIONS[activation]}"))
            x = act
        prev = w
    graph = helper.make_graph(
        nodes, spec.arch_key, [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", spec.input_size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="gpupred.importers.gpumemnet")
    return strip_weights(model)
