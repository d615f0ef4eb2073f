"""GPU hardware features: a small table of vendor specifications keyed by GPU name.

Peak TFLOP/s are dense figures (NVIDIA datasheets quote tensor-core rates "with sparsity", which are
twice the dense rate; we halve those). ``tflops_tf32``/``tflops_bf16`` equal ``tflops_fp32`` on GPUs
without TF32/BF16 tensor cores (V100, T4), where those dtypes run no faster than fp32.
``tflops_fp16`` is the dense FP16 tensor-core rate with FP32 accumulation (what fp16 autocast runs): the
same as BF16 on Ampere and later; V100 and T4 have FP16 tensor cores but no BF16 ones. GeForce cards
(RTX 3090/4090) accumulate in FP32 at half their FP16-accumulate rate; the FP32-accumulate figure is used.
Memory is the vendor's marketed size in GB; bandwidth in GB/s.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Iterable, Iterator


from gpupred.errors import GpupredError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass(frozen=True)
class GpuSpec:
    """Vendor specifications of one GPU model."""

    name: str
    sm_count: int
    memory_gb: float
    mem_bw_gbs: float
    tflops_fp32: float
    tflops_tf32: float
    tflops_bf16: float
    tflops_fp16: float = 0.0  # every table row gives it (the datasheet's); 0 = same as tflops_bf16 (extra GPUs)

    @property
    def fp16(self) -> float:
        """Dense FP16 tensor-core TFLOP/s with FP32 accumulation."""
        return self.tflops_fp16 or self.tflops_bf16


# (pattern on the normalized NVML name, spec). Order matters: the first match wins.
_TABLE: list[tuple[str, GpuSpec]] = [
    # NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, FP32 67 TF,
    # TF32 989 TF / BF16 1,979 TF / FP16 1,979 TF with sparsity. 132 SMs (same GH100 configuration as H100 SXM).
    (r"\bh200\b", GpuSpec("H200", 132, 141, 4800, 67.0, 494.5, 989.5, 989.5)),
    # NVIDIA H100 datasheet, H100 NVL: 94 GB, 3.9 TB/s, FP32 60 TF, TF32 835 / BF16 and FP16 1,671 TF with sparsity.
    (r"\bh100 nvl\b", GpuSpec("H100 NVL", 132, 94, 3900, 60.0, 417.5, 835.5, 835.5)),
    # NVIDIA H100 datasheet, H100 PCIe: 80 GB, 2 TB/s, FP32 51 TF, TF32 756 / BF16 and FP16 1,513 TF with sparsity;
    # 114 SMs (NVIDIA Hopper architecture whitepaper).
    (r"\bh100 pcie\b", GpuSpec("H100 PCIe", 114, 80, 2000, 51.0, 378.0, 756.5, 756.5)),
    # NVIDIA H100 datasheet, H100 SXM: 80 GB, 3.35 TB/s, FP32 67 TF, TF32 989 / BF16 and FP16 1,979 TF with sparsity;
    # 132 SMs (Hopper whitepaper). NVML names it "NVIDIA H100 80GB HBM3".
    (r"\bh100\b", GpuSpec("H100 SXM", 132, 80, 3350, 67.0, 494.5, 989.5, 989.5)),
    # NVIDIA A100 datasheet: 108 SMs; FP32 19.5 TF, TF32 156 TF, BF16 312 TF, FP16 312 TF (dense).
    # 80GB SXM 2,039 GB/s; 80GB PCIe 1,935 GB/s; 40GB 1,555 GB/s.
    (r"\ba100\b.*\b(pcie|pci e)\b.*\b80|\ba100 80gb pcie\b", GpuSpec("A100 PCIe 80GB", 108, 80, 1935, 19.5, 156.0, 312.0, 312.0)),
    (r"\ba100\b.*\b80", GpuSpec("A100 SXM 80GB", 108, 80, 2039, 19.5, 156.0, 312.0, 312.0)),
    (r"\ba100\b", GpuSpec("A100 40GB", 108, 40, 1555, 19.5, 156.0, 312.0, 312.0)),
    # NVIDIA L40S datasheet: 142 SMs, 48 GB, 864 GB/s, FP32 91.6 TF, TF32 366 / BF16 and FP16 733 TF with sparsity.
    (r"\bl40s\b", GpuSpec("L40S", 142, 48, 864, 91.6, 183.0, 366.5, 366.5)),
    # NVIDIA L4 datasheet: 58 SMs, 24 GB, 300 GB/s, FP32 30.3 TF, TF32 120 / BF16 and FP16 242 TF with sparsity.
    (r"\bl4\b", GpuSpec("L4", 58, 24, 300, 30.3, 60.0, 121.0, 121.0)),
    # NVIDIA A10 datasheet: 72 SMs, 24 GB, 600 GB/s, FP32 31.2 TF, TF32 62.5 TF, BF16 and FP16 125 TF (dense).
    (r"\ba10\b", GpuSpec("A10", 72, 24, 600, 31.2, 62.5, 125.0, 125.0)),
    # NVIDIA A10G (AWS EC2 G5's GA102; no public NVIDIA datasheet: the figures AWS and NVIDIA give for G5, as compared
    # in Baseten's "NVIDIA A10 vs A10G"): 80 SMs (10,240 CUDA cores), 24 GB, 600 GB/s, FP32 35 TF, TF32 35 TF,
    # BF16 and FP16 70 TF dense: tensor cores at the GeForce rate (FP32 accumulate at half), where the A10 has more.
    (r"\ba10g\b", GpuSpec("A10G", 80, 24, 600, 35.0, 35.0, 70.0, 70.0)),
    # NVIDIA A40 datasheet: 84 SMs (10,752 CUDA cores), 48 GB, 696 GB/s, FP32 37.4 TF, TF32 74.8 / BF16 and FP16
    # (FP32 accumulate) 149.7 TF dense.
    (r"\ba40\b", GpuSpec("A40", 84, 48, 696, 37.4, 74.8, 149.7, 149.7)),
    # NVIDIA RTX A6000 datasheet: 84 SMs (10,752 CUDA cores), 48 GB, 768 GB/s, FP32 38.7 TF, tensor 309.7 TF with
    # sparsity (FP16): 154.8 dense, TF32 half of it (77.4), as on the A40.
    (r"\b(rtx )?a6000\b", GpuSpec("RTX A6000", 84, 48, 768, 38.7, 77.4, 154.8, 154.8)),
    # NVIDIA L40 datasheet: 142 SMs, 48 GB, 864 GB/s, FP32 90.5 TF, TF32 181 / BF16 and FP16 362 TF with sparsity.
    (r"\bl40\b", GpuSpec("L40", 142, 48, 864, 90.5, 90.5, 181.0, 181.0)),
    # NVIDIA V100 datasheet: 80 SMs, 900 GB/s; FP32 15.7 TF (SXM2) / 14 TF (PCIe); no TF32/BF16 cores;
    # FP16 tensor 125 TF (SXM2) / 112 TF (PCIe).
    # The PCIe card came with 16 or 32 GB ("Tesla V100-PCIE-16GB", "-32GB"): same chip and rates, two capacities.
    (r"\bv100\b.*\bpcie\b.*\b16|\bv100\b.*\b16.*\bpcie\b", GpuSpec("V100 PCIe 16GB", 80, 16, 900, 14.0, 14.0, 14.0, 112.0)),
    (r"\bv100\b.*\bpcie\b", GpuSpec("V100 PCIe", 80, 32, 900, 14.0, 14.0, 14.0, 112.0)),
    (r"\bv100\b.*\b16", GpuSpec("V100 SXM2 16GB", 80, 16, 900, 15.7, 15.7, 15.7, 125.0)),
    (r"\bv100\b", GpuSpec("V100 SXM2 32GB", 80, 32, 900, 15.7, 15.7, 15.7, 125.0)),
    # NVIDIA T4 datasheet: 40 SMs, 16 GB, 320 GB/s, FP32 8.1 TF; no TF32/BF16 cores; FP16 tensor 65 TF.
    (r"\bt4\b", GpuSpec("T4", 40, 16, 320, 8.1, 8.1, 8.1, 65.0)),
    # NVIDIA Tesla P100 PCIe datasheet (16 GB; the cloud variant): 56 SMs, 732 GB/s, FP32 9.3 TF; no tensor cores,
    # no BF16, and FP16 with FP32 accumulation (autocast's) runs at the FP32 rate.
    (r"\bp100\b", GpuSpec("P100", 56, 16, 732, 9.3, 9.3, 9.3, 9.3)),
    # NVIDIA Ada Lovelace architecture whitepaper (RTX 4090): 128 SMs, 24 GB, 1,008 GB/s, FP32 82.6 TF,
    # TF32 82.6 TF dense, BF16 and FP16 (FP32 accumulate) 165.2 TF dense.
    (r"\b(rtx )?4090\b", GpuSpec("RTX 4090", 128, 24, 1008, 82.6, 82.6, 165.2, 165.2)),
    # NVIDIA Ampere GA102 whitepaper (RTX 3090): 82 SMs, 24 GB, 936 GB/s, FP32 35.6 TF, TF32 35.6 TF,
    # BF16 and FP16 (FP32 accumulate) 71 TF dense.
    (r"\b(rtx )?3090\b", GpuSpec("RTX 3090", 82, 24, 936, 35.6, 35.6, 71.0, 71.0)),
]

HARDWARE_COLUMNS: tuple[str, ...] = (
    "gpu_sm_count",
    "gpu_memory_gb",
    "gpu_mem_bw_gbs",
    "gpu_tflops_fp32",
    "gpu_tflops_tf32",
    "gpu_tflops_bf16",
    "gpu_tflops_fp16",
    "gpu_tflops_peak",  # the peak for the run's precision: bf16 -> bf16, fp16 -> fp16, fp32 -> fp32
)


def _normalize(name: str) -> str:
    """Lower case, spaced words, vendor words dropped, and "PCI", "PCI-E" or "PCI E" spelled "pcie": a form factor
    the user names is the one matched ("H100 PCI" is the H100 PCIe, never the SXM card that "h100" alone means)."""
    text = name.lower().replace("-", " ").replace("_", " ")
    text = re.sub(r"\b(nvidia|tesla|geforce)\b", " ", text)
    text = re.sub(r"\bpci ?e?\b", "pcie", text)
    return " ".join(text.split())


# Words an NVML or marketing name may carry beside the model without changing its specs: memory size, memory
# kind, form factor. Anything else left over ("ti", "nvl" on an H200, "a1000") makes the name unknown.
_NOISE = re.compile(r"\d+(gb|g)?|gb|hbm\d?e?|sxm\d?|pcie|pci|e|gpu|tensor|core")


def _leftover_is_noise(norm: str, match: re.Match[str]) -> bool:
    rest = (norm[: match.start()] + " " + norm[match.end():]).split()
    return all(_NOISE.fullmatch(word) for word in rest)


def gpu_spec(name: str) -> GpuSpec:
    """The vendor specifications of the GPU called ``name`` (an NVML name or a short one like 'h100').

    A name matches a table entry only when what is left beside the model is memory size, memory kind or form
    factor: "NVIDIA H100 80GB HBM3" is the H100 SXM, but "RTX 3090 Ti" or "A1000" are not guessed at. A name found
    once is not looked up again under the same extra GPUs (:func:`extra_gpus`): a queue asks for a few kinds often.
    """
    return _lookup(name, _EXTRA.get())


@lru_cache(maxsize=256)
def _lookup(name: str, extras: tuple[tuple[GpuSpec, str], ...]) -> GpuSpec:
    """:func:`gpu_spec` under the extra GPUs ``extras`` (an unknown name raises, and is not kept)."""
    norm = _normalize(name)
    for extra, _arch in extras:
        if _normalize(extra.name) == norm:
            return extra
    for pattern, spec in _TABLE:
        match = re.search(pattern, norm)
        if match and _leftover_is_noise(norm, match):
            return spec
    squashed = {n.lower().replace(" ", ""): spec for n, spec in ((s.name, s) for _, s in _TABLE)}
    if norm.replace(" ", "") in squashed:  # "RTX4090", "h100sxm": the name without its spaces
        return squashed[norm.replace(" ", "")]
    raise GpupredError(f"unknown GPU {name!r}{closest(name, known_gpu_names())}; known: "
                       f"{', '.join(known_gpu_names())} (`gpupred gpus`; a GPU not there: `gpupred calibrate` on it)")


def shown_gpu_name(name: str) -> str:
    """The hardware table's name of the GPU called ``name`` ("NVIDIA H100 80GB HBM3" -> "H100 SXM"), or ``name``
    itself where the table does not know it."""
    try:
        return gpu_spec(name).name
    except GpupredError:
        return name


def closest(name: str, known: Iterable[str], n: int = 3) -> str:
    """' (closest: a, b)': the known names nearest ``name`` (case and spacing aside), or '' when none is near."""
    import difflib

    by_key = {_normalize(k).replace(" ", ""): k for k in known}
    near = difflib.get_close_matches(_normalize(name).replace(" ", ""), list(by_key), n=n, cutoff=0.5)
    return f" (closest: {', '.join(by_key[k] for k in near)})" if near else ""


def known_gpu_names() -> list[str]:
    """The names of every GPU in the table, in table order."""
    return [s.name for _, s in _TABLE]


# The architecture of each GPU in the table (NVIDIA's whitepapers): GPUs of one architecture run the same kernels
# from the same libraries, so they reach similar fractions of their datasheet peaks.
ARCHITECTURES: dict[str, str] = {
    "H200": "hopper", "H100 NVL": "hopper", "H100 PCIe": "hopper", "H100 SXM": "hopper",
    "A100 PCIe 80GB": "ampere", "A100 SXM 80GB": "ampere", "A100 40GB": "ampere", "A10": "ampere", "A10G": "ampere",
    "A40": "ampere", "RTX A6000": "ampere", "RTX 3090": "ampere", "L40S": "ada", "L40": "ada", "L4": "ada",
    "RTX 4090": "ada", "V100 PCIe": "volta", "V100 PCIe 16GB": "volta", "V100 SXM2 16GB": "volta",
    "V100 SXM2 32GB": "volta", "T4": "turing",
    "P100": "pascal",
}
# The compute capability of each architecture (NVIDIA's CUDA GPUs list; GA100 is 8.0 where the other Ampere chips,
# GA10x, are 8.6) and the resident threads an SM of it holds (CUDA C++ Programming Guide, "Features and Technical
# Specifications": maximum number of resident threads per SM)
COMPUTE_CAPABILITIES: dict[str, str] = {"hopper": "9.0", "ada": "8.9", "ampere": "8.6", "turing": "7.5",
                                        "volta": "7.0", "pascal": "6.0"}
GA100: frozenset[str] = frozenset({"A100 PCIe 80GB", "A100 SXM 80GB", "A100 40GB"})  # Ampere at 8.0
MAX_THREADS_PER_SM: dict[str, int] = {"6.0": 2048, "7.0": 2048, "7.5": 1024, "8.0": 2048, "8.6": 1536, "8.9": 1536,
                                      "9.0": 2048}
MAX_THREADS_UNKNOWN = 2048  # a GPU outside the table (a calibrated one): the most any listed architecture holds


def architecture(name: str) -> str:
    """The architecture (``hopper``, ``ampere``, ...) of the GPU called ``name``."""
    spec = gpu_spec(name)
    extra = {s.name: arch for s, arch in _EXTRA.get()}
    return extra[spec.name] if spec.name in extra else ARCHITECTURES[spec.name]


def compute_capability(name: str) -> str:
    """The compute capability ('9.0', '8.6', ...) of the table's GPU called ``name``; '' for a GPU outside the table (a
    calibration's, whose file records its own)."""
    spec = gpu_spec(name)
    if spec.name not in ARCHITECTURES:
        return ""
    return "8.0" if spec.name in GA100 else COMPUTE_CAPABILITIES[ARCHITECTURES[spec.name]]


def bf16_native(name: str) -> bool:
    """Whether the GPU called ``name`` runs bfloat16 natively: compute capability 8.0 and later (Ampere, Ada, Hopper).
    Before it (Volta, Turing, Pascal) torch only emulates bf16 on the CUDA cores, cuDNN has no bf16 convolutions and
    FlashAttention-2 does not run. A GPU outside the table (a calibration's, measured running the job; or a name the
    table does not know, refused where the GPU is read) is taken to."""
    if shown_gpu_name(name) not in ARCHITECTURES:
        return True
    return float(compute_capability(name)) >= 8.0


def max_threads_per_sm(name: str) -> int:
    """The resident threads one SM of the GPU called ``name`` holds (``MAX_THREADS_UNKNOWN`` outside the table)."""
    return MAX_THREADS_PER_SM.get(compute_capability(name), MAX_THREADS_UNKNOWN)


# GPUs outside the table that a block of code may name (a calibration's GPU with its measured peaks): see extra_gpus
_EXTRA: ContextVar[tuple[tuple[GpuSpec, str], ...]] = ContextVar("gpupred_extra_gpus", default=())


@contextmanager
def extra_gpus(specs: Iterable[tuple[GpuSpec, str]]) -> Iterator[None]:
    """Inside the block, :func:`gpu_spec` also knows these (spec, architecture) pairs by their exact names."""
    token = _EXTRA.set((*_EXTRA.get(), *specs))
    try:
        yield
    finally:
        _EXTRA.reset(token)


def known_gpus() -> pd.DataFrame:
    """The whole table, one row per GPU model, with its architecture."""
    import pandas as pd

    return pd.DataFrame([{**asdict(s), "architecture": ARCHITECTURES[s.name]} for _, s in _TABLE])


def hardware_features(name: str, precision: str = "fp32") -> dict[str, float]:
    """The hardware feature columns (``HARDWARE_COLUMNS``) for one GPU and precision."""
    s = gpu_spec(name)
    return {
        "gpu_sm_count": float(s.sm_count),
        "gpu_memory_gb": float(s.memory_gb),
        "gpu_mem_bw_gbs": float(s.mem_bw_gbs),
        "gpu_tflops_fp32": s.tflops_fp32,
        "gpu_tflops_tf32": s.tflops_tf32,
        "gpu_tflops_bf16": s.tflops_bf16,
        "gpu_tflops_fp16": s.fp16,
        "gpu_tflops_peak": {"bf16": s.tflops_bf16, "fp16": s.fp16}.get(precision, s.tflops_fp32),
    }
