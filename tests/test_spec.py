"""Workload spec: id grammar, round trips, and one-line errors."""

from __future__ import annotations

import pytest

from gpupred.errors import GpupredError
from gpupred.workloads.spec import WorkloadSpec


@pytest.mark.parametrize(
    "wid",
    [
        "resnet.resnet50-bs64-img224-bf16-sgd",
        "resnet.resnet18-bs128-img32-fp32-adam",
        "lstm.lstm-v10000-e256-h512-l2-bs32-seq64-fp32-adam",
        "mlp.mlp-w1024-d4-bs256-in784-fp32-sgd",
        "neumf.neumf-u100000-i50000-e64-l3-bs1024-bf16-adam",
        "mlp.mlp-w256-d2-bs64-in784-fp32-sgd-x8",
        "resnet.resnet50-bs64-img224-fp16-sgd",
        "pointnet.pointnet_cls-c16-bs32-pts2500-fp16-adam",
    ],
)
def test_id_round_trip(wid: str) -> None:
    spec = WorkloadSpec.from_id(wid)
    assert spec.id == wid
    assert WorkloadSpec.from_json(spec.to_json()) == spec


def test_fields_and_arch_key() -> None:
    spec = WorkloadSpec.from_id("lstm.lstm-v10000-e256-h512-l2-bs32-seq64-fp32-adam")
    assert (spec.family, spec.arch, spec.batch_size, spec.input_size) == ("lstm", "lstm", 32, 64)
    assert spec.knob == {"v": 10000, "e": 256, "h": 512, "l": 2}
    assert spec.kind == "rnn"
    assert spec.arch_key == "lstm.lstm-v10000-e256-h512-l2-seq64"
    other = WorkloadSpec.from_id("lstm.lstm-v10000-e256-h512-l2-bs8-seq64-bf16-sgd")
    assert other.arch_key == spec.arch_key


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "resnet50",
        "resnet.resnet50-bs64-img224-fp8-sgd",  # unknown precision
        "resnet.resnet50-bs64-img224-fp32-lamb",  # unknown optimizer
        "resnet.vgg16-bs64-img224-fp32-sgd",  # arch of another family
        "cnn.resnet50-bs64-img224-fp32-sgd",  # unknown family
        "resnet.resnet50-64-img224-fp32-sgd",  # no bs token
        "mlp.mlp-w1024-bs256-in784-fp32-sgd",  # missing knob
        "resnet.resnet50-bs0-img224-fp32-sgd",  # zero batch
    ],
)
def test_bad_ids_are_one_line_errors(bad: str) -> None:
    with pytest.raises(GpupredError) as info:
        WorkloadSpec.from_id(bad)
    message = str(info.value)
    assert "\n" not in message and repr(bad) in message


def test_parsed_ids_are_kept_per_id() -> None:
    """from_id keeps the specs it parsed (frozen, shared): each id its own, equal to a fresh parse."""
    from gpupred.workloads import spec as spec_module

    ids = ["resnet.resnet50-bs64-img224-fp32-sgd", "resnet.resnet50-bs32-img224-fp32-sgd",
           "resnet.resnet50-bs64-img224-bf16-sgd"]
    specs = [WorkloadSpec.from_id(i) for i in ids]
    assert [s.id for s in specs] == ids
    assert all(WorkloadSpec.from_id(i) is s for i, s in zip(ids, specs))
    assert all(WorkloadSpec._parse_id(i) == s for i, s in zip(ids, specs))
    assert len(spec_module._PARSED) <= spec_module.PARSED_IDS
