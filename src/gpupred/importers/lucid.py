"""Lucid (Hu et al., ASPLOS 2023): solo and co-located training jobs measured on an RTX 3090.

Upstream ``S-Lab-System-Group/Lucid`` at a pinned commit: ``simulation/analyzer/single_data.csv`` (66 solo
jobs: model, dataset, batch size, AMP on/off, speed, mean NVML utilization, memory-controller utilization,
memory) and ``simulation/data/colocate_info.csv`` (1,388 pairs sharing one GPU: each member's speed
normalized by its solo speed, the pair's combined readings). How upstream measured (``profile/``):
``nvidia-smi -q -x`` polled every 0.2 s from the end of warm-up, the job run under
``CUDA_LAUNCH_BLOCKING=1`` (every kernel launch waits for the kernel: ``sync = "kernel"``), means over the
window; memory is the mean of the device's ``fb_memory_usage/used`` (CUDA context included).

Each solo job maps to a :class:`~gpupred.workloads.spec.WorkloadSpec` rebuilt from the upstream workload
definitions (``workloads/``); :data:`JOBS` records, per job, the upstream script and every approximation,
and :data:`NOT_REBUILT` the jobs left out and why (also in docs/imported-workloads.md).

Licence: S-Lab License 1.0, redistribution and use for non-commercial purposes only (copy imported beside
the data); anything trained on these rows inherits the restriction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpupred.errors import GpupredError
from gpupred.graph.graphstore import register_store_specs
from gpupred.importers.source import Source, UpstreamFile, read_csv
from gpupred.setups import RESIDENT, InputPipeline
from gpupred.workloads.spec import WorkloadSpec

SOURCE = Source(
    name="lucid",
    repo="S-Lab-System-Group/Lucid",
    commit="63685a3ab7d15d8e940bb47ef98b6d5cca472b13",
    files=(
        UpstreamFile("single_data.csv", "simulation/analyzer/single_data.csv",
                     "6bce9f9410b9d1529c7bcfca50aa7c7bc9684dff49da8e13414013325f99ed23"),
        UpstreamFile("colocate_info.csv", "simulation/data/colocate_info.csv",
                     "eb17384138b035112e7118b9fd33ae2ab9040fb4688942c74af59a700425ed0d"),
        UpstreamFile("LICENSE.txt", "LICENSE.txt", "7fd87dc54bee73480e7acd209f156ba0524de6d6c4d87841c1107aa9d53573d8"),
    ),
    licence="S-Lab License 1.0: redistribution and use for non-commercial purposes only, with the notice retained",
    gpu_name="NVIDIA GeForce RTX 3090",
    measured="nvidia-smi -q -x polled every 0.2 s after warm-up under CUDA_LAUNCH_BLOCKING=1; window means "
             "(memory: mean device fb used, CUDA context included)",
    citation="Hu, Sun, Lai, Zhao, Zhang, Chen. Lucid: A Non-intrusive, Scalable and Interpretable Scheduler for "
             "Deep Learning Training Jobs. ASPLOS 2023",
)
GPU_NAME = SOURCE.gpu_name
GPU_MEMORY_MIB = 24576.0  # RTX 3090: 24 GB
SAMPLER = "nvidia-smi-0.2s"  # how utilization was sampled (a dataset column)
SYNC = "kernel"  # CUDA_LAUNCH_BLOCKING=1: the host waits for every kernel
MEMORY_SOURCE = "nvidia-smi-device-mean"

SOLO_COLUMNS: tuple[str, ...] = (
    "job_key", "model", "dataset", "batch_size", "amp", "workload_id", "speed", "gpu_util", "gmem_util", "memory_mib",
    "gpu_name",
)
PAIR_COLUMNS: tuple[str, ...] = (
    "pair_id", "member", "job_key", "workload_id", "model", "dataset", "batch_size", "amp", "speed_norm", "slowdown",
    "pair_gpu_util", "pair_gmem_util", "pair_memory_mib", "gpu_name",
)
_SOLO_CSV = ("model", "dataset", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem")
_PAIR_CSV = tuple(f"{c}{m}" for m in (1, 2) for c in ("model", "dataset", "batchsize", "amp", "speed")) + (
    "gpu_util", "gmem_util", "gmem")

_COMMON = ("measured under CUDA_LAUNCH_BLOCKING=1 (kernel-synchronous launches; gpupred's own sweeps do not)",
           "cudnn.benchmark=True upstream; the graph does not depend on it")
_PLAIN_SGD = "plain SGD (no momentum) upstream; our sgd keeps a momentum buffer: +1 parameter-sized state, +2 FLOPs/param"


@dataclass(frozen=True)
class LucidJob:
    """How one Lucid (model, dataset) is rebuilt: the spec template, input feeding, upstream script, approximations."""

    model: str
    dataset: str
    family: str
    arch: str
    input_size: int
    optimizer: str
    knobs: tuple[tuple[str, int], ...]
    host_batches: bool  # batches come from a host data loader (copied every step) rather than device-resident
    script: str  # the upstream training script the rebuild follows
    approximations: tuple[str, ...]
    pipeline: InputPipeline = RESIDENT  # how its batches reach the GPU, as the upstream script builds its loader

    def spec(self, batch_size: int, amp: int) -> WorkloadSpec:
        """The spec of one upstream row (AMP is fp16 autocast with a GradScaler)."""
        return WorkloadSpec(self.family, self.arch, int(batch_size), self.input_size, "fp16" if int(amp) else "fp32",
                            self.optimizer, self.knobs)  # type: ignore[arg-type]


# How each job's batches reach the GPU, read from its upstream script (DataLoader arguments; nothing pins memory):
_CIFAR_LOADER = InputPipeline("host-tensors", num_workers=2)  # CIFAR10 in memory: RandomCrop(32, 4), flip, ToTensor, Normalize
# FakeData 3x64x64: randn -> ToPILImage -> ToTensor per sample: timed as CIFAR's in-memory PIL transforms (32x32)
_FAKEDATA_LOADER = InputPipeline("host-tensors", num_workers=2)
# NCF: a (user, item, label) triple of Python ints per sample, collated by torch: indexing and collating a few ints,
# which is what the text-tokens kind times (pre-tokenized ids indexed and collated), not CIFAR's PIL transforms
_NCF_LOADER = InputPipeline("text-tokens", num_workers=2)
_SQUAD_LOADER = InputPipeline("text-tokens")  # a TensorDataset of SQuAD features, num_workers 0: in line
_MULTI30K_LOADER = InputPipeline("text-tokens", num_workers=2)  # id lists padded per batch by the workers' collate
# ShapeNetDataset: np.loadtxt of a .pts file (2,500 x 3 floats) and of its .seg file (2,500 ints) per sample, then
# resample, centre, scale, rotate, jitter. Lucid's workloads pin numpy 1.21.5 (workloads/imagenet/requirements.txt),
# whose loadtxt parsed in Python (array format txt-legacy). That parser pays per row more than per value: numpy 1.21.5
# took 3.5 ms for a .seg of 2,500 one-value rows against 6.9 ms for a .pts of 2,500 three-value rows (timed on the
# development machine, Python 3.10), so a sample costs 1.5 .pts files: 3,750 rows of 3 values, 45,000 float32 bytes.
_POINTNET_LOADER = InputPipeline("array-files", num_workers=2, array_bytes=45_000, array_format="txt-legacy")

JOBS: dict[tuple[str, str], LucidJob] = {
    (j.model, j.dataset): j
    for j in (
        LucidJob("ResNet18", "CIFAR-10", "resnet", "resnet18_cifar", 32, "sgd", (), True, "workloads/cifar/profile_cifar.py",
                 ("the vendored models/resnet.py is not in our index: kuangliu/pytorch-cifar's ResNet18 (BasicBlock) assumed",
                  "CIFAR-10 images from a DataLoader with 2 workers (host batches)"), _CIFAR_LOADER),
        LucidJob("VGG", "CIFAR-10", "vgg", "vgg11_cifar", 32, "sgd", (), True, "workloads/cifar/profile_cifar.py",
                 ("VGG('VGG11') of kuangliu/pytorch-cifar: conv3x3+BN+ReLU stages, one Linear classifier",
                  "CIFAR-10 images from a DataLoader with 2 workers (host batches)"), _CIFAR_LOADER),
        LucidJob("MobileNetV2", "CIFAR-10", "mobilenet", "mobilenet_v2_cifar", 32, "sgd", (), True,
                 "workloads/cifar/profile_cifar.py",
                 ("the vendored models/mobilenetv2.py is not in our index: kuangliu/pytorch-cifar's CIFAR MobileNetV2 assumed "
                  "(stride-1 stem and second stage, global 4x4 average pool)",
                  "CIFAR-10 images from a DataLoader with 2 workers (host batches)"), _CIFAR_LOADER),
        LucidJob("EfficientNet", "CIFAR-10", "efficientnet", "efficientnet_b0_cifar", 32, "sgd", (), True,
                 "workloads/cifar/profile_cifar.py",
                 ("EfficientNetB0 as vendored upstream (ReLU, SE to out/16 on every block, no head conv): rebuilt as read",
                  "CIFAR-10 images from a DataLoader with 2 workers (host batches)"), _CIFAR_LOADER),
        LucidJob("ResNet50", "ImageNet", "resnet", "resnet50", 224, "sgd", (), False, "workloads/imagenet/profile_imagenet.py",
                 ("torchvision resnet50 on a synthetic device-resident batch, as upstream", _PLAIN_SGD)),
        LucidJob("MobileNetV3", "ImageNet", "mobilenet", "mobilenet_v3_small", 224, "sgd", (), False,
                 "workloads/imagenet/profile_imagenet.py",
                 ("torchvision mobilenet_v3_small (profile/main_single.py's model list) on a synthetic device-resident batch",
                  _PLAIN_SGD)),
        LucidJob("BERT", "SQuAD", "bert", "bert_qa", 384, "adam", (("v", 30522), ("m", 768), ("h", 12), ("l", 12)), True,
                 "workloads/bert/profile_bert.py",
                 ("bert-base-uncased for question answering (HF AutoModelForQuestionAnswering): our post-LN GELU encoder "
                  "with a 2-logit span head; no token-type embedding (2x768), a final LayerNorm in place of the "
                  "embedding LayerNorm, a 384-position table instead of 512; the attention mask is not in the graph",
                  "sequences padded to max_seq_length 384 (SQuAD v1.1 features); AdamW = Adam's state and FLOPs"), _SQUAD_LOADER),
        LucidJob("LSTM", "Wikitext2", "lstm", "lstm", 35, "sgd", (("v", 33278), ("e", 200), ("h", 200), ("l", 2)), False,
                 "workloads/lstm/profile_lstm.py",
                 ("pytorch/examples word LM: 2-layer LSTM, emsize=nhid=200, bptt 35, untied; Wikitext-2 vocabulary 33,278",
                  "dropout 0.2 upstream, 0.1 here (same graph cost); log_softmax + NLL upstream = our cross-entropy",
                  "the corpus tensor is moved to the GPU before the loop (no host copies)", _PLAIN_SGD)),
        LucidJob("Transformer", "Multi30k", "seq2seq", "transformer", 52,
                 "adam", (("v", 3000), ("t", 3000), ("m", 512), ("h", 8), ("l", 6)), True,
                 "workloads/translation/profile_transformer.py",
                 ("attention-is-all-you-need-pytorch: 6+6 post-LN layers, d_model 512, 8 heads, ff 2048, sinusoid positions, "
                  "unshared output projection (no -proj_share_weight); torch's nn.Transformer adds a final LayerNorm to "
                  "encoder and decoder",
                  "vocabularies not pinned (the preprocessed multi30k.atok.low.pt is not published): about 3,000 words "
                  "each at min count 5, taken as 3,000",
                  "batches are padded to their longest sentence (at most 52 tokens after -max_len 50): 52 taken; the "
                  "padding masks are not in the graph"), _MULTI30K_LOADER),
        LucidJob("DCGAN", "LSUN", "dcgan", "dcgan", 64, "adam", (("z", 100), ("g", 64), ("k", 64)), True,
                 "workloads/dcgan/profile_dcgan.py",
                 ("pytorch/examples DCGAN at 64x64 (nz 100, ngf = ndf = 64), FakeData through a 2-worker DataLoader",
                  "the discriminator's final Sigmoid + BCELoss (fp32 runs) is our BCE-with-logits"), _FAKEDATA_LOADER),
        LucidJob("NeuMF", "MovieLens", "neumf", "neumf", 0, "sgd", (("u", 6040), ("i", 3706), ("e", 32), ("l", 3)), True,
                 "workloads/ncf/profile_ncf.py",
                 ("guoyang9/NCF NeuMF on ml-1m (6,040 users, 3,706 items), factor 32, 3 MLP layers: rebuilt exactly",
                  "SGD with momentum 0.9 and weight decay (the script's last optimizer assignment) = our sgd",
                  "user/item/label batches from a 2-worker DataLoader (host batches)"), _NCF_LOADER),
        LucidJob("PointNet", "ShapeNet", "pointnet", "pointnet_cls", 2500, "adam", (("c", 16),), True,
                 "workloads/pointnet/profile_pointnet.py",
                 ("PointNetCls with the input transform net, no feature transform, 16 ShapeNet classes, 2,500 points",
                  "point clouds read from disk by a 2-worker DataLoader (host batches); log_softmax + NLL = cross-entropy"),
                 _POINTNET_LOADER),
    )
}


def store_specs() -> list[WorkloadSpec]:
    """One spec per architecture of every rebuilt job (no imported data needed): what the graph store holds of
    Lucid's (registered with :func:`gpupred.graph.graphstore.register_store_specs` when this module is imported)."""
    return [job.spec(32, 0) for job in JOBS.values()]


register_store_specs("lucid", store_specs)

NOT_REBUILT: dict[tuple[str, str], str] = {
    ("PPO", "LunarLander"): "reinforcement learning: a few tiny MLP updates between CPU gym environment steps; its "
                            "utilization (12-15 %) and memory (the CUDA context) come from the environment loop, "
                            "which no graph describes",
    ("TD3", "BipedalWalker"): "reinforcement learning: as PPO, the GPU work is a small actor-critic update between CPU "
                              "environment steps; nothing in a graph sets its utilization",
}


def job_key(model: str, dataset: str, batch_size: int, amp: int) -> str:
    """The key of one Lucid job, e.g. ``ResNet18/CIFAR-10/bs32/amp0``."""
    return f"{model}/{dataset}/bs{int(batch_size)}/amp{int(amp)}"


def workload_spec(model: str, dataset: str, batch_size: int, amp: int) -> WorkloadSpec | None:
    """The rebuilt spec of a Lucid job, or None for a job that is not rebuilt."""
    job = JOBS.get((model, dataset))
    return job.spec(batch_size, amp) if job is not None else None


def not_rebuilt_reason(model: str, dataset: str) -> str:
    """Why a Lucid job has no spec ('' when it has one)."""
    if (model, dataset) in JOBS:
        return ""
    return NOT_REBUILT.get((model, dataset), f"no rebuild of {model} on {dataset} (not in gpupred.importers.lucid.JOBS)")


def _workload_ids(models: pd.Series, datasets: pd.Series, bss: pd.Series, amps: pd.Series) -> pd.Series:
    """Spec ids, None (an object column, not NaN) for jobs that are not rebuilt."""
    out: list[str | None] = []
    for m, d, b, a in zip(models, datasets, bss, amps):
        spec = workload_spec(m, d, b, a)
        out.append(spec.id if spec is not None else None)
    return pd.Series(out, dtype=object, index=models.index)


def read_solo() -> pd.DataFrame:
    """One row per Lucid solo job (``SOLO_COLUMNS``); MissingInput if Lucid was not imported."""
    raw = read_csv(SOURCE, "single_data.csv", _SOLO_CSV, "Lucid's")
    df = pd.DataFrame({
        "job_key": [job_key(*k) for k in zip(raw["model"], raw["dataset"], raw["batchsize"], raw["amp"])],
        "model": raw["model"].astype(str), "dataset": raw["dataset"].astype(str),
        "batch_size": raw["batchsize"].astype(int), "amp": raw["amp"].astype(int),
        "workload_id": _workload_ids(raw["model"], raw["dataset"], raw["batchsize"], raw["amp"]),
        "speed": raw["speed"].astype(float), "gpu_util": raw["gpu_util"].astype(float),
        "gmem_util": raw["gmem_util"].astype(float), "memory_mib": raw["gmem"].astype(float), "gpu_name": GPU_NAME,
    })
    if df["job_key"].duplicated().any():
        raise GpupredError(f"{SOURCE.folder / 'single_data.csv'}: duplicate solo jobs {sorted(df['job_key'][df['job_key'].duplicated()])[:3]}")
    return df[list(SOLO_COLUMNS)]


def read_pairs() -> pd.DataFrame:
    """Two rows per Lucid pair, one per member (``PAIR_COLUMNS``); MissingInput if Lucid was not imported.

    ``speed_norm`` is the member's co-located speed over its solo speed, as upstream reports it (values a little
    above 1 are measurement noise, kept); ``slowdown = 1 / speed_norm`` (NaN where speed_norm is not positive).
    """
    raw = read_csv(SOURCE, "colocate_info.csv", _PAIR_CSV, "Lucid's", index_col=0)
    members = []
    for m in (0, 1):
        c = {k: raw[f"{k}{m + 1}"] for k in ("model", "dataset", "batchsize", "amp", "speed")}
        speed = c["speed"].astype(float).to_numpy()
        members.append(pd.DataFrame({
            "pair_id": raw.index.astype(int), "member": m,
            "job_key": [job_key(*k) for k in zip(c["model"], c["dataset"], c["batchsize"], c["amp"])],
            "workload_id": _workload_ids(c["model"], c["dataset"], c["batchsize"], c["amp"]).to_numpy(),
            "model": c["model"].astype(str).to_numpy(), "dataset": c["dataset"].astype(str).to_numpy(),
            "batch_size": c["batchsize"].astype(int).to_numpy(), "amp": c["amp"].astype(int).to_numpy(),
            "speed_norm": speed, "slowdown": np.where(speed > 0, 1.0 / np.where(speed > 0, speed, 1.0), np.nan),
            "pair_gpu_util": raw["gpu_util"].astype(float).to_numpy(),
            "pair_gmem_util": raw["gmem_util"].astype(float).to_numpy(),
            "pair_memory_mib": raw["gmem"].astype(float).to_numpy(), "gpu_name": GPU_NAME,
        }))
    out = pd.concat(members, ignore_index=True).sort_values(["pair_id", "member"]).reset_index(drop=True)
    out["workload_id"] = out["workload_id"].astype(object).where(out["workload_id"].notna(), None)
    return out[list(PAIR_COLUMNS)]


def pipeline_json(job: LucidJob) -> str:
    """A job's input pipeline as the dataset's ``pipeline`` column holds it: its options as JSON ('' if resident)."""
    return "" if job.pipeline.resident else json.dumps(job.pipeline.changes(), sort_keys=True)


def dataset_rows() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, exclusions): the rebuilt solo jobs as dataset label rows (see gpupred.dataset), and the rest with why."""
    solo = read_solo()
    keep = solo[solo["workload_id"].notna()]
    skipped = solo[solo["workload_id"].isna()]
    runs = pd.DataFrame({
        "run_id": "lucid:" + keep["job_key"], "sweep_id": f"lucid@{SOURCE.commit[:7]}", "workload_id": keep["workload_id"],
        "gpu_name": GPU_NAME, "source": SOURCE.name, "sampler": SAMPLER, "sync": SYNC,
        "host_batches": [int(JOBS[(m, d)].host_batches) for m, d in zip(keep["model"], keep["dataset"])],
        "pipeline": [pipeline_json(JOBS[(m, d)]) for m, d in zip(keep["model"], keep["dataset"])],
        "gpu_util": keep["gpu_util"], "memory_mib": keep["memory_mib"], "samples_per_s": keep["speed"],
        "iter_time_mean_s": keep["batch_size"] / keep["speed"], "memory_source": MEMORY_SOURCE,
        "gpu_memory_total_mib": GPU_MEMORY_MIB,
    }).reset_index(drop=True)
    exclusions = pd.DataFrame({"run_id": "lucid:" + skipped["job_key"], "workload_id": pd.Series(None, index=skipped.index, dtype=object),
                               "reason": [not_rebuilt_reason(m, d) for m, d in zip(skipped["model"], skipped["dataset"])]})
    return runs, exclusions.reset_index(drop=True)


def specs() -> list[WorkloadSpec]:
    """The specs of every rebuilt solo job (needs the imported data)."""
    return [WorkloadSpec.from_id(w) for w in read_solo()["workload_id"].dropna().unique()]


def job_table() -> pd.DataFrame:
    """Every (model, dataset) upstream measured: its spec template, script and approximations, or why not rebuilt."""
    rows = [{"model": j.model, "dataset": j.dataset, "rebuilt_as": f"{j.family}.{j.arch}", "optimizer": j.optimizer,
             "host_batches": j.host_batches, "pipeline": pipeline_json(j), "script": j.script,
             "approximations": "; ".join((*j.approximations, *_COMMON))} for j in JOBS.values()]
    rows += [{"model": m, "dataset": d, "rebuilt_as": None, "optimizer": None, "host_batches": None, "pipeline": None,
              "script": None, "approximations": f"not rebuilt: {why}"} for (m, d), why in NOT_REBUILT.items()]
    return pd.DataFrame(rows)
