"""The exported predictor is the same bytes whatever the thread settings: two fresh processes, different
OMP/BLAS thread counts and hash seeds, one FIXTURE dataset (a toy formula, never data)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

EXPORT = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from fixtures_learning import fixture_dataset
    from gpupred.predictor.training import export_predictor, train_predictor
    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090"), n_batch_sizes=2,
                         sources={{"NVIDIA GeForce RTX 3090": "lucid"}})
    models = {{"gpu_util": "lightgbm", "memory_mib": "mlp", "sm_active": "xgboost"}}
    export_predictor(train_predictor(df, models=models, n_folds=3, tune=False), df, Path(sys.argv[1]))
""")


def _export(out: Path, threads: int, hash_seed: int) -> tuple[bytes, dict[str, object]]:
    """Train and export the FIXTURE predictor in a fresh process; (artifact bytes, card without its creation time)."""
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed),
           **{k: str(threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    code = EXPORT.format(tests=str(TESTS))
    p = subprocess.run([sys.executable, "-c", code, str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    card = json.loads(out.with_suffix(".json").read_text())
    card.pop("created_at")
    return out.read_bytes(), card


@pytest.mark.slow
def test_export_is_byte_identical_across_thread_settings(tmp_path: Path) -> None:
    one, card_one = _export(tmp_path / "one" / "predictor.joblib", threads=1, hash_seed=1)
    two, card_two = _export(tmp_path / "two" / "predictor.joblib", threads=2, hash_seed=2)
    assert one == two, "the artifact's bytes depend on the thread settings or the hash seed"
    assert card_one == card_two
