"""Models by name (gpupred.workloads.hubmodels, gpupred.graph.named): timm and Hugging Face models from their libraries' own definitions, exported
once without weights and cached by (name, config hash, input shape); a cached graph predicts without torch.

Predictors are FIXTURES (toy-formula training frames, meaningless predictions); the cached graphs of the fast tests
are FIXTURE graphs placed where the cache keeps a model's graph. The slow tests build small configs of real
transformers and timm classes (random weights) with the hub offline (HF_HUB_OFFLINE=1): nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fixtures_learning import fixture_dataset
from gpupred.errors import GpupredError
from gpupred.workloads.hubmodels import NamedModel, hf_model, timm_model
from gpupred.predictor.training import export_predictor, train_predictor
from test_predictor import _tiny_onnx

TINY_LLAMA = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 500}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FIXTURE predictor artifact."""
    df = fixture_dataset(gpus=("NVIDIA H100 80GB HBM3",), n_batch_sizes=1)
    return export_predictor(train_predictor(df, models="ridge", tune=False, n_folds=3), df,
                            tmp_path_factory.mktemp("models") / "predictor.joblib")


def _python(code: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUPRED_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)


def test_cache_key_is_the_request_and_needs_no_torch(tmp_path: Path) -> None:
    cfg = tmp_path / "my-model" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"model_type": "llama", **TINY_LLAMA}))
    result = _python(f"""
        import sys, gpupred
        paths = [gpupred.hf_model("llama", seq_len=64).cache_path(), gpupred.hf_model("llama", seq_len=64).cache_path(),
                 gpupred.hf_model("llama", seq_len=128).cache_path(), gpupred.hf_model("llama", head="seq-cls").cache_path(),
                 gpupred.hf_model({str(cfg)!r}).cache_path(), gpupred.hf_model({str(cfg.parent)!r}).cache_path(),
                 gpupred.timm_model("resnet50").cache_path(), gpupred.timm_model("resnet50", image_size=160).cache_path()]
        heavy = [m for m in ("torch", "timm", "transformers") if m in sys.modules]
        assert not heavy, heavy
        print("\\n".join(map(str, paths)))
    """, tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    paths = result.stdout.split()
    assert paths[0] == paths[1] and paths[4] == paths[5]  # the same request, the same config: one graph
    assert len({paths[0], *paths[2:5], *paths[6:]}) == 6
    assert all(p.startswith(str(tmp_path / "cache" / "onnx" / "named")) for p in paths)
    before = hf_model(str(cfg)).cache_path()
    cfg.write_text(json.dumps({"model_type": "llama", **TINY_LLAMA, "num_hidden_layers": 3}))
    assert hf_model(str(cfg)).cache_path() != before  # the config's content is the key, not its path


def test_cached_graph_predicts_without_torch(tmp_path: Path, artifact: Path) -> None:
    """A scheduler asking again: the graph is in the cache (a FIXTURE graph put there), no torch is imported."""
    cache = tmp_path / "cache"
    code = f"""
        import sys, gpupred
        named = gpupred.hf_model("llama", seq_len=64)
        path = named.cache_path()
        path.parent.mkdir(parents=True)
        import shutil; shutil.copy({str(_tiny_onnx(tmp_path / "tiny.onnx"))!r}, path)
        out = gpupred.load_predictor({str(artifact)!r}).predict(named, batch_size=8)
        assert "torch" not in sys.modules, "torch was imported"
        print(float(out["gpu_util"].iloc[0]))
    """
    result = _python(code, cache)
    assert result.returncode == 0, result.stderr
    cli = subprocess.run([sys.executable, "-m", "gpupred.cli", "predict", "--hf", "llama", "--seq-len", "64", "-b", "8",
                          "--predictor", str(artifact), "--json"], capture_output=True, text=True,
                         env={**os.environ, "GPUPRED_CACHE": str(cache)})
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["figures"]["gpu_util"]["point"] == pytest.approx(float(result.stdout), abs=1e-3)


@pytest.mark.parametrize("args, message", [
    (["predict", "--timm", "resnet50", "--seq-len", "128", "-b", "8"], "--seq-len is for text models"),
    (["predict", "m.onnx", "--hf", "llama", "-b", "8"], "give MODEL"),
    (["predict", "-b", "8"], "give MODEL"),
    (["predict", "m.onnx", "--seq-len", "128", "-b", "8"], "go with --timm or --hf"),
    (["predict", "--hf", "./missing/config.json", "-b", "8"], "./missing/config.json: no such config file"),
    (["predict", "--hf", "llama", "--head", "classify", "-b", "8"], "unknown head 'classify'"),
    (["export", "--timm", "resnet50", "--hf", "llama"], "give MODEL|give one of"),
])
def test_wrong_choices_get_one_line(args: list[str], message: str, tmp_path: Path, artifact: Path,
                                    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from gpupred import config
    from gpupred.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config, "ONNX_CACHE", tmp_path / "cache")
    if args[0] == "predict":
        args = [*args, "--predictor", str(artifact)]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith("gpupred: error: ") and err.count("\n") == 1, err
    assert re.search(message, err), err


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without timm installed (simulated: its import fails), --timm says which package and which extra."""
    pytest.importorskip("torch")
    from gpupred.workloads.hubmodels import build_named

    monkeypatch.setitem(sys.modules, "timm", None)  # import timm now raises ImportError
    with pytest.raises(GpupredError, match=r"--timm resnet50: models by name need timm .*\.\[torch\]"):
        build_named(timm_model("resnet50"))


def test_named_model_checks_its_fields() -> None:
    with pytest.raises(GpupredError, match="timm models are image classifiers"):
        NamedModel("timm", "resnet50", head="causal-lm")
    with pytest.raises(GpupredError, match="seq_len must be positive"):
        hf_model("llama", seq_len=0)


@pytest.mark.slow
def test_models_by_name_export_once_and_count_as_torch_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small configs of six heads (and a local config.json): every graph featurizes whole, its parameters are torch's
    sum(p.numel()) of the same model built with real weights, and asking again reuses the cached file."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from gpupred import config
    from gpupred.graph.features import featurize
    from gpupred.graph.named import named_graph, named_info
    from gpupred.workloads.hubmodels import build_named

    monkeypatch.setattr(config, "ONNX_CACHE", tmp_path / "cache")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", **TINY_LLAMA}))
    models = [
        hf_model(str(cfg), seq_len=32), hf_model("bert", head="masked-lm", seq_len=32, num_hidden_layers=1),
        hf_model("bert", head="seq-cls", seq_len=32, num_hidden_layers=1), hf_model("vit", num_hidden_layers=1),
        hf_model("t5", seq_len=16, num_layers=1, num_decoder_layers=1),
        hf_model("whisper", seq_len=16, encoder_layers=1, decoder_layers=1, max_source_positions=32),
        timm_model("convnext_atto", image_size=64),
    ]
    heads = []
    for named in models:
        path = named_graph(named)
        row = featurize(path, batch_size=3)
        real = build_named(named, weights=True)
        assert row["frac_nodes_unshaped"] == 0 and row["unknown_ops"] == 0, named
        assert row["params"] == real.params == named_info(path)["torch_params"], named
        heads.append(named_info(path)["head"])
        stamp = path.stat().st_mtime_ns
        assert named_graph(named) == path and path.stat().st_mtime_ns == stamp
    assert heads == ["causal-lm", "masked-lm", "seq-cls", "image-cls", "seq2seq-lm", "speech-seq2seq", "image-cls"]


@pytest.mark.slow
def test_an_unknown_name_offline_gets_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from gpupred.workloads.hubmodels import build_named

    with pytest.raises(GpupredError, match="not a transformers model type, .* give a config.json"):
        build_named(hf_model("no-such-org/no-such-model"))
    with pytest.raises(GpupredError, match="timm .* has no such model"):
        build_named(timm_model("resnet5000"))
    with pytest.raises(GpupredError, match="T5Config has no image-cls model in transformers; its heads: .*seq2seq-lm"):
        build_named(hf_model("t5", head="image-cls"))


@pytest.mark.slow
def test_overrides_reach_the_config_constructor() -> None:
    """Fields a config derives at construction follow the overrides: LLaMA-13B's 40 heads give 40 key/value heads
    (set after construction they stayed LlamaConfig's 32, and the export failed to broadcast)."""
    from gpupred.workloads.hubmodels import hf_config

    cfg = hf_config(hf_model("llama", hidden_size=5120, num_attention_heads=40, num_hidden_layers=40))
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads) == (40, 40, 128)


# Learned absolute position tables: tiny configs of real transformers classes, built on the meta device (no weights,
# no download, no export). (overrides, the longest --seq-len the tables hold, the config field named)
TINY_GPT2 = {"n_layer": 1, "n_embd": 32, "n_head": 2}
TINY_ENC = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64}
TINY_SEQ2SEQ = {"d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
                "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}
POSITION_TABLES = [
    pytest.param("gpt2", {**TINY_GPT2, "n_positions": 128}, 128, "n_positions = 128 positions", id="gpt2"),
    # padding_idx 1: positions count from 2, so 66 entries hold 64 tokens (the real job fails at 65)
    pytest.param("roberta", {**TINY_ENC, "max_position_embeddings": 66, "pad_token_id": 1}, 64,
                 "max_position_embeddings = 66 entries, 64 positions", id="roberta"),
    # OPT's and BART's tables carry 2 more entries than the field: the field is what they hold
    pytest.param("opt", {**TINY_ENC, "ffn_dim": 64, "word_embed_proj_dim": 32, "max_position_embeddings": 64}, 64,
                 "max_position_embeddings = 64 positions", id="opt"),
    pytest.param("bart", {**TINY_SEQ2SEQ, "max_position_embeddings": 64}, 64,
                 "max_position_embeddings = 64 positions", id="bart"),
    # --seq-len is Whisper's decoder tokens; its encoder's table (8 entries, fed by log-mel frames) does not count
    pytest.param("whisper", {**TINY_SEQ2SEQ, "max_source_positions": 8, "max_target_positions": 16}, 16,
                 "max_target_positions = 16 positions", id="whisper"),
]


@pytest.mark.parametrize("name, overrides, limit, held", POSITION_TABLES)
def test_a_sequence_longer_than_the_learned_position_table_is_refused(name: str, overrides: dict[str, Any],
                                                                       limit: int, held: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The real training job fails on its position lookup past the table (checked for each of these with real
    weights when this was written); gpupred refuses it in one line that names the field, and takes the limit."""
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from gpupred.workloads.hubmodels import build_named

    field = held.split(" = ")[0]
    with pytest.raises(GpupredError) as refused:
        build_named(hf_model(name, seq_len=limit + 1, **overrides))
    message = str(refused.value)
    assert "\n" not in message
    assert f"--hf {name}: --seq-len {limit + 1} is longer than its learned position table ({held});" in message
    assert f"give --seq-len {limit} or less" in message
    assert f"{field}={int(held.split(' = ')[1].split()[0]) + 1}" in message  # the field's value that holds it
    assert build_named(hf_model(name, seq_len=limit, **overrides)).seq_len == limit
    assert build_named(hf_model(name, **overrides)).seq_len == limit  # the default: what the table holds


def test_rotary_and_relative_positions_take_any_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """LLaMA (rotary) and T5 (relative buckets) have no learned absolute table: a sequence past
    max_position_embeddings is built, as RoPE runs at any length. DeBERTa-v3's relative table has
    max_position_embeddings entries but is read as a weight, not looked up by position (it runs at 128 with 64)."""
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from gpupred.workloads.hubmodels import build_named, position_limit

    llama = build_named(hf_model("llama", seq_len=128, **{**TINY_LLAMA, "max_position_embeddings": 64}))
    assert llama.seq_len == 128 and position_limit(llama.model, llama.model.config) is None
    t5 = build_named(hf_model("t5", seq_len=1024, num_layers=1, num_decoder_layers=1, d_model=32, d_ff=64, num_heads=2))
    assert t5.seq_len == 1024
    deberta = build_named(hf_model("deberta-v2", seq_len=128, **TINY_ENC, relative_attention=True, position_buckets=32,
                                   position_biased_input=False, max_relative_positions=-1, max_position_embeddings=64))
    assert deberta.model.deberta.encoder.rel_embeddings.num_embeddings == 64 and deberta.seq_len == 128


def test_a_too_long_sequence_is_refused_before_any_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BERT at 65 tokens with 64 positions: refused naming max_position_embeddings, before the export (which failed
    after seconds, blaming the weightless trace) and with no graph written; at 64 the export is reached."""
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from gpupred import config
    from gpupred.graph import weightless
    from gpupred.graph.named import named_graph

    def export(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("exported")

    monkeypatch.setattr(config, "ONNX_CACHE", tmp_path / "cache")
    monkeypatch.setattr(weightless, "export_weightless", export)
    too_long = hf_model("bert", seq_len=65, max_position_embeddings=64, **TINY_ENC)
    with pytest.raises(GpupredError, match=r"--seq-len 65 is longer .*\(max_position_embeddings = 64 positions\); "
                                           r"give --seq-len 64 or less"):
        named_graph(too_long)
    assert not too_long.cache_path().exists() and not (tmp_path / "cache").exists()
    with pytest.raises(AssertionError, match="exported"):  # the check is what stopped it, not something earlier
        named_graph(hf_model("bert", seq_len=64, max_position_embeddings=64, **TINY_ENC))
