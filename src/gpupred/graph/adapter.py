"""A torch module with any inputs and outputs as one the exporters take: positional tensors in, a flat tuple out.

``gpupred.export_model`` accepts one tensor, a tuple of tensors, or a dict of keyword inputs (non-tensor values
passed through as constants), and outputs that are tensors, tuples, dicts or ModelOutput-like objects; both
export recipes (:mod:`gpupred.graph.export`, :mod:`gpupred.graph.weightless`) trace the adapter built here.
torch is imported inside functions only.
"""

from __future__ import annotations

from typing import Any, Sequence

from gpupred.errors import GpupredError


def flatten_outputs(out: Any) -> tuple[Any, ...]:
    """The tensors of a model's output, in order: a tensor, a tuple/list, a dict or a ModelOutput-like object."""
    import torch

    if isinstance(out, torch.Tensor):
        return (out,)
    if out is None:
        return ()
    if hasattr(out, "to_tuple") and callable(out.to_tuple):  # transformers' ModelOutput
        out = out.to_tuple()
    elif isinstance(out, dict):
        out = list(out.values())
    elif hasattr(out, "__dataclass_fields__"):
        out = [getattr(out, f) for f in out.__dataclass_fields__]
    if isinstance(out, (tuple, list)):
        return tuple(t for item in out for t in flatten_outputs(item))
    return ()


def adapter(model: Any, keys: Sequence[str] | None, constants: dict[str, Any]) -> Any:
    """A module taking the example's tensors positionally and returning a flat tuple of tensors."""
    import torch

    class Adapter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> tuple[Any, ...]:
            out = self.model(**dict(zip(keys, args)), **constants) if keys is not None else self.model(*args)
            flat = flatten_outputs(out)
            if not flat:
                raise GpupredError(f"{type(model).__name__} returned no tensor; export_model needs tensor outputs")
            return flat

    return Adapter()


def positional(model: Any, example_input: Any, batch_axis: int = 0) -> tuple[Any, list[Any], list[str]]:
    """The adapter of a module, its example's tensors in order and their input names (checked: a batch axis each)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise GpupredError(f"export_model needs a torch.nn.Module, got {type(model).__name__}")
    keys: list[str] | None = None
    constants: dict[str, Any] = {}
    if isinstance(example_input, torch.Tensor):
        tensors: list[Any] = [example_input]
        names = ["input"]
    elif isinstance(example_input, (tuple, list)):
        tensors = list(example_input)
        names = [f"input_{i}" for i in range(len(tensors))] if len(tensors) > 1 else ["input"]
    elif isinstance(example_input, dict):
        keys = [k for k, v in example_input.items() if isinstance(v, torch.Tensor)]
        tensors = [example_input[k] for k in keys]
        constants = {k: v for k, v in example_input.items() if not isinstance(v, torch.Tensor)}
        names = list(keys)
    else:
        raise GpupredError(f"example_input must be a tensor, a tuple of tensors or a dict, got {type(example_input).__name__}")
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        raise GpupredError("example_input must hold at least one tensor, and only tensors when it is a tuple")
    for name, t in zip(names, tensors):
        if t.dim() <= batch_axis:
            raise GpupredError(f"example input {name!r} has shape {tuple(t.shape)}: no batch axis {batch_axis}")
    return adapter(model, keys, constants), tensors, names
