"""GPUMemNet's fully connected networks (family ``fcnet``): the width rule of each architecture, torch-free.

GPUMemNet (itu-rad/GPUMemNet, ``NeuroNetGen_scripts/MLP/mlp.py``) trained Linear+ReLU stacks whose hidden
widths follow one of four rules from (input size, output size, hidden-layer count ``d``); a last Linear maps
to the output. Our reading of the rules, checked against every layer list of ``mlp_data_step1.csv`` by
:mod:`gpupred.importers.gpumemnet` (a network whose list differs is refused, never approximated):

- ``fc_pyramid``: each hidden layer halves the previous width (floor), never below the output size;
- ``fc_uniform``: ``d`` hidden layers as wide as the input;
- ``fc_bottleneck``: the pyramid, then one more halving layer (the "bottleneck");
- ``fc_gradual``: each hidden layer is narrower by ``(input - output) // d``, never below the output size.
"""

from __future__ import annotations

from gpupred.errors import GpupredError

SHAPES: tuple[str, ...] = ("fc_pyramid", "fc_uniform", "fc_bottleneck", "fc_gradual")


def fc_widths(in_features: int, out_features: int, depth: int, shape: str) -> list[int]:
    """The output width of every Linear layer, in order (the last one is ``out_features``)."""
    if shape not in SHAPES:
        raise GpupredError(f"unknown fully connected shape {shape!r}; known: {', '.join(SHAPES)}")
    if in_features < 1 or out_features < 1 or depth < 1:
        raise GpupredError(f"fcnet needs positive input, output and depth, got {in_features}, {out_features}, {depth}")
    widths: list[int] = []
    width = in_features
    if shape == "fc_uniform":
        widths = [in_features] * depth
    elif shape in ("fc_pyramid", "fc_bottleneck"):
        for _ in range(depth + (shape == "fc_bottleneck")):
            width = max(int(width * 0.5), out_features)
            widths.append(width)
    else:  # fc_gradual
        step = (in_features - out_features) // depth
        for _ in range(depth):
            width = max(width - step, out_features)
            widths.append(width)
    return [*widths, out_features]
