"""The notebook runner: order, skipped notebooks (missing input), failures named, HTML written."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from gpupred.errors import GpupredError
from gpupred.pipeline import notebooks, run_pipeline


def _notebook(path: Path, source: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("n: int = 1  # fixture parameter")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(source)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.mark.notebook
def test_pipeline_runs_in_order_and_skips_missing_input(tmp_path: Path) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    _notebook(folder / "02-second.ipynb", "from gpupred.errors import MissingInput\nraise MissingInput('no runs in data/raw yet')")
    _notebook(folder / "01-first.ipynb", "print(n * 2)")
    _notebook(folder / "scratch.ipynb", "raise SystemExit(1)")  # not numbered: never run
    assert [p.name for p in notebooks(folder)] == ["01-first.ipynb", "02-second.ipynb"]

    out = tmp_path / "reports"
    results = run_pipeline(out_dir=out, folder=folder)
    assert [(r.notebook, r.status) for r in results] == [("01-first.ipynb", "ok"), ("02-second.ipynb", "skipped")]
    assert "no runs in data/raw yet" in results[1].reason
    assert (out / "01-first.html").exists() and (out / "02-second.html").exists()
    assert json.loads((out / "pipeline.json").read_text())[1]["status"] == "skipped"

    # --only reruns one notebook and keeps the others' entries, in notebook order
    _notebook(folder / "02-second.ipynb", "print('now it runs')")
    assert [r.notebook for r in run_pipeline(only=["02"], out_dir=out, folder=folder)] == ["02-second.ipynb"]
    summary = json.loads((out / "pipeline.json").read_text())
    assert [(e["notebook"], e["status"]) for e in summary] == [("01-first.ipynb", "ok"), ("02-second.ipynb", "ok")]


@pytest.mark.notebook
def test_pipeline_failure_names_the_notebook(tmp_path: Path) -> None:
    folder = tmp_path / "nb"
    folder.mkdir()
    _notebook(folder / "01-broken.ipynb", "raise ValueError('bad column')")
    with pytest.raises(GpupredError, match=r"01-broken.ipynb failed: ValueError: bad column"):
        run_pipeline(out_dir=tmp_path / "reports", folder=folder)


def test_a_notebooks_run_rebuilds_its_metrics_and_a_failed_one_keeps_the_old_file(tmp_path: Path) -> None:
    from gpupred.pipeline import fresh_metrics
    from gpupred.reports import MetricsSchema, read_metrics, write_metrics

    schema = MetricsSchema("05-fixture", (("stale|kept|new", "FIXTURE keys"),))
    write_metrics(schema, {"stale": 1, "kept": 1}, tmp_path)
    with fresh_metrics("05-fixture", tmp_path):
        write_metrics(schema, {"kept": 2}, tmp_path)
    assert read_metrics("05-fixture", tmp_path) == {"kept": 2}  # a key the notebook writes no more is gone
    with pytest.raises(RuntimeError), fresh_metrics("05-fixture", tmp_path):
        write_metrics(schema, {"new": 3}, tmp_path)
        raise RuntimeError("notebook 05 failed")
    assert read_metrics("05-fixture", tmp_path) == {"kept": 2}  # the failed run loses nothing of the last good one


def test_metrics_keys_are_a_contract(tmp_path: Path) -> None:
    """A key the writer's schema does not declare, or a key with a ".", is refused in one line."""
    from gpupred.reports import MetricsSchema, write_metrics

    schema = MetricsSchema("07-fixture", ((r"sim_load\w+", "FIXTURE"),))
    assert write_metrics(schema, {"sim_load1p5": 1.0}, tmp_path) == {"sim_load1p5": 1.0}
    with pytest.raises(GpupredError, match="may not contain '.'"):
        write_metrics(schema, {"sim_load1.5": 1.0}, tmp_path)
    with pytest.raises(GpupredError, match="not in its schema"):
        write_metrics(schema, {"other": 1.0}, tmp_path)


def test_metrics_files_keep_figures_at_the_precision_they_mean(tmp_path: Path) -> None:
    """Floats are written at METRIC_DIGITS significant digits, nested ones too: last-bit noise never reaches a file."""
    from gpupred.reports import METRIC_DIGITS, MetricsSchema, read_metrics, write_metrics

    schema = MetricsSchema("03-fixture", ((r"fig_\w+", "FIXTURE"),))
    noisy = 0.18284999999999996
    write_metrics(schema, {"fig_a": noisy, "fig_b": {"x": [noisy * 1e-5, 3]}, "fig_c": 24}, tmp_path)
    assert METRIC_DIGITS == 6
    assert read_metrics("03-fixture", tmp_path) == {"fig_a": 0.18285, "fig_b": {"x": [1.8285e-06, 3]}, "fig_c": 24}
    before = (tmp_path / "03-fixture.json").read_bytes()
    write_metrics(schema, {"fig_a": noisy * (1 + 1e-15)}, tmp_path)  # the same figure with other last bits
    assert (tmp_path / "03-fixture.json").read_bytes() == before


@pytest.mark.skipif(__import__("platform").machine().lower() not in ("x86_64", "amd64"), reason="x86-64 pins only")
def test_notebook_kernels_run_the_same_numeric_code_on_every_x86_machine() -> None:
    """Under KERNEL_ENV a kernel's numpy runs its AVX2 kernels and OpenBLAS its Haswell ones, whether or not the CPU
    has AVX-512 (whose np.log and dot products differ in the last bit, and which the constants fit amplified into
    0.6% moves of headline figures between machines)."""
    import os
    import subprocess
    import sys

    from gpupred.pipeline import KERNEL_ENV

    probe = ("import threadpoolctl, numpy, scipy.linalg; from numpy._core import _multiarray_umath as m; "
             "f = m.__cpu_features__; print(f['X86_V4'], f['AVX512_ICL'], f['AVX2'], sorted({i.get('architecture') "
             "for i in threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'}))")
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_ENV} | KERNEL_ENV
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "True", "['Haswell']"], out


def test_every_notebook_declares_what_it_reads_and_writes() -> None:
    """Every numbered notebook has a stage; each input is a raw input or written by an earlier notebook."""
    from gpupred import config
    from gpupred.pipeline import STAGES, notebooks, producers

    names = [p.stem for p in notebooks()]
    assert sorted(STAGES) == names
    made_by = producers()
    for name, stage in STAGES.items():
        for key in (*stage.inputs, *stage.outputs):
            assert isinstance(getattr(config, key), Path), key
        for key in (*stage.inputs, *stage.optional):
            assert key not in made_by or made_by[key] < name, (name, key)
        assert isinstance(getattr(config, key), Path) and stage.seconds > 0, key


def _fixture_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: bool = True) -> Path:
    """FIXTURE notebooks: 01-make writes a file (skipped without input unless ``made``), 02-use reads it."""
    from gpupred import config, pipeline

    folder = tmp_path / "nb"
    folder.mkdir()
    target = tmp_path / "made.txt"
    monkeypatch.setattr(config, "FIXTURE_MADE", target, raising=False)
    monkeypatch.setattr(pipeline, "STAGES", {"01-make": pipeline.Stage((), ("FIXTURE_MADE",)),
                                             "02-use": pipeline.Stage(("FIXTURE_MADE",))})
    make = f"open({str(target)!r}, 'w').write('x')" if made else \
        "from gpupred.errors import MissingInput\nraise MissingInput('no FIXTURE input')"
    _notebook(folder / "01-make.ipynb", make)
    _notebook(folder / "02-use.ipynb", f"print(open({str(target)!r}).read())")
    return folder


@pytest.mark.notebook
def test_only_runs_what_a_notebook_needs_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _fixture_stages(tmp_path, monkeypatch)
    out = tmp_path / "reports"
    assert [r.notebook for r in run_pipeline(only=["02"], out_dir=out, folder=folder)] == ["01-make.ipynb", "02-use.ipynb"]
    assert [r.notebook for r in run_pipeline(only=["02"], out_dir=out, folder=folder)] == ["02-use.ipynb"]  # made


@pytest.mark.notebook
def test_only_refuses_in_one_line_when_an_input_cannot_be_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _fixture_stages(tmp_path, monkeypatch, made=False)
    with pytest.raises(GpupredError, match=r"02-use needs .*made.txt, which 01-make writes and has not"):
        run_pipeline(only=["02"], out_dir=tmp_path / "reports", folder=folder)


def test_the_summary_gathers_the_headline_figures(tmp_path: Path) -> None:
    """At most 30 figures named <target>_<metric>_<split>, each from its notebook's file (None where not written)."""
    import re

    from gpupred.contracts import ESTIMATOR_METRICS
    from gpupred.digest import HEADLINES
    from gpupred.pipeline import write_summary
    from gpupred.reports import write_metrics

    write_metrics(ESTIMATOR_METRICS, {"gpu_util_rmsle_lofo": 0.2, "memory_mre_within": 0.05}, tmp_path)
    summary = write_summary(tmp_path, tmp_path / "summary.json")
    assert len(HEADLINES) <= 30 and summary["gpu_util_rmsle_lofo"]["value"] == 0.2
    assert summary["iter_time_mre_lofo"]["value"] is None
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    for key, entry in summary.items():
        assert "." not in key and re.fullmatch(r"[a-z]+(_[a-z0-9]+){2,}", key), key
        assert set(entry) == {"value", "meaning", "unit", "split"} and all(entry[k] for k in ("meaning", "unit", "split"))
    assert "leave one family out" in summary["gpu_util_rmsle_lofo"]["split"]
    assert "baseline" in summary["gpu_util_rmsle_lofo_baseline"]["meaning"]


def test_the_summary_rounds_for_people(tmp_path: Path) -> None:
    """summary.json keeps four significant digits (the metrics files keep every digit)."""
    from gpupred.contracts import ESTIMATOR_METRICS
    from gpupred.pipeline import write_summary
    from gpupred.reports import write_metrics

    write_metrics(ESTIMATOR_METRICS, {"gpu_util_rmsle_lofo": 0.1759133506447282}, tmp_path)
    assert write_summary(tmp_path, tmp_path / "s.json")["gpu_util_rmsle_lofo"]["value"] == 0.1759


def test_every_notebook_opens_with_its_results_and_its_title(tmp_path: Path) -> None:
    """The Results block follows the first heading, renders the run's figures rounded, and the HTML is titled by it."""
    import nbformat

    from gpupred.contracts import ESTIMATOR_METRICS
    from gpupred.pipeline import to_html, add_results, notebook_title
    from gpupred.reports import write_metrics

    write_metrics(ESTIMATOR_METRICS, {"gpu_util_rmsle_lofo": 0.1759133506447282, "memory_coverage_lofo": 0.875},
                  tmp_path)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 03 · Which regressor\nprose"),
                                         nbformat.v4.new_code_cell("1")])
    path = tmp_path / "03-physics-first.ipynb"
    nbformat.write(nb, path)
    add_results(path, tmp_path)
    cells = nbformat.read(path, as_version=4).cells
    assert cells[1].cell_type == "markdown" and "| `gpu_util_rmsle_lofo` | 0.176 |" in cells[1].source
    assert "leave one family out" in cells[1].source and "memory_coverage_lofo` | 0.875 |" in cells[1].source
    assert notebook_title(nbformat.read(path, as_version=4), "x") == "03 · Which regressor"
    to_html(path)
    assert "<title>03 · Which regressor</title>" in path.with_suffix(".html").read_text()
    add_results(path, tmp_path, skipped="no runs in data/raw")
    assert "skipped (no runs in data/raw)" in nbformat.read(path, as_version=4).cells[1].source


def test_every_summary_key_and_schema_is_described() -> None:
    """Each headline has a meaning, unit and split; each notebook's schema reference resolves to its schema."""
    import re

    from gpupred.digest import RESULT_KEYS, SCHEMAS, describe, schema_of
    from gpupred.digest import HEADLINES

    for key, _, _ in HEADLINES:
        assert all(describe(key)), key
    for notebook in SCHEMAS:
        schema = schema_of(notebook)
        assert schema is not None and schema.notebook == notebook
        for key in RESULT_KEYS.get(notebook, ()):
            assert any(re.fullmatch(p, key) for p, _ in schema.keys), (notebook, key)


def test_every_headline_names_a_figure_its_notebook_declares() -> None:
    """Each headline reads a key its notebook's metrics schema declares (a renamed metric fails here, not silently)."""
    import re

    from gpupred.contracts import COLOCATION_METRICS, ESTIMATOR_METRICS, LEARNING_METRICS
    from gpupred.digest import HEADLINES
    from gpupred.sim.metrics import SIM_METRICS

    schemas = {s.notebook: s for s in (LEARNING_METRICS, ESTIMATOR_METRICS, COLOCATION_METRICS, SIM_METRICS)}
    assert {notebook for _, notebook, _ in HEADLINES} <= set(schemas)
    for _, notebook, metric in HEADLINES:
        assert any(re.fullmatch(p, metric) for p, _ in schemas[notebook].keys), (notebook, metric)


def test_the_report_figures_draw_one_plot_each_with_units(tmp_path: Path) -> None:
    """FIXTURE frames: 05's axes span the measured range (a far miss sits on the edge, counted), 07's are in hours."""
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    from gpupred.memory.evaluate import plot_estimates
    from gpupred.sim.outcomes import plot_policies

    errors = pd.DataFrame({"scheme": "lofo", "method": ["horus", "horus", "footprint", "footprint"],
                           "source": "fixture", "measured_mib": [1000.0, 8000.0, 1000.0, 8000.0],
                           "estimate_mib": [1.0, 7000.0, 1100.0, 7500.0]})
    fig = plot_estimates(errors, "lofo")
    ax = fig.axes[0]
    assert ax.get_xlim()[0] == 500 and "1 estimates below 500 MiB" in ax.get_title()
    assert "leave one family out" in fig._suptitle.get_text()
    summary = pd.DataFrame({"load": 1.0, "policy": ["horus", "ours"], "mean_jct_s": [7200.0, 3600.0],
                            "mean_jct_s_ci": [360.0, 0.0], "seeds": 3})
    fig = plot_policies({"fixture": summary})
    bars = [p.get_height() for p in fig.axes[0].patches]
    assert bars == [2.0, 1.0] and "(h)" in fig.axes[0].get_ylabel()


def test_a_contract_refuses_a_key_two_modules_declare() -> None:
    """Assembling a notebook's contract from its owners' key groups refuses a pattern two groups declare."""
    from gpupred.reports import MetricsSchema

    a, b = ((r"fig_\w+", "FIXTURE: one owner"),), ((r"fig_\w+", "FIXTURE: another"),)
    assert MetricsSchema.assemble("03-fixture", a).keys == a
    with pytest.raises(GpupredError, match="more than one key group"):
        MetricsSchema.assemble("03-fixture", a, b)


@pytest.mark.parametrize("notebook", ["03-compare-regressors", "03-physics-first", "06-colocation"])
def test_every_committed_figure_has_exactly_one_owner(notebook: str) -> None:
    """Each key of the committed metrics of notebooks 03 and 06 is declared by exactly one module's key group: a
    reader asking where a figure is computed (and where to add one) gets one answer."""
    from gpupred import contracts
    from gpupred.colocation.memfit import MEMFIT_METRIC_KEYS
    from gpupred.learn.summary import CHOICE_METRIC_KEYS, REGRESSOR_METRIC_KEYS
    from gpupred.memory.evaluate import MEMORY_METRIC_KEYS
    from gpupred.predictor.realworld_report import REALWORLD_METRIC_KEYS
    from gpupred.reports import read_metrics
    from gpupred.slowdown.evaluate import SLOWDOWN_METRIC_KEYS
    from gpupred.step.evaluate import STEP_METRIC_KEYS
    import re

    owners = {"03-compare-regressors": {"learn.summary": REGRESSOR_METRIC_KEYS},
              "03-physics-first": {"step.evaluate": STEP_METRIC_KEYS, "memory.evaluate": MEMORY_METRIC_KEYS,
                                   "realworld": REALWORLD_METRIC_KEYS, "learn.summary (choice)": CHOICE_METRIC_KEYS},
              "06-colocation": {"slowdown.evaluate": SLOWDOWN_METRIC_KEYS, "colocation.memfit": MEMFIT_METRIC_KEYS}}
    schema = {s.notebook: s for s in (contracts.LEARNING_METRICS, contracts.ESTIMATOR_METRICS,
                                      contracts.COLOCATION_METRICS)}[notebook]
    assert [k for group in owners[notebook].values() for k in group] == list(schema.keys)
    written = read_metrics(notebook)
    assert len(written) > 10
    claims = {key: [o for o, group in owners[notebook].items() if any(re.fullmatch(p, key) for p, _ in group)]
              for key in written}
    assert {k: v for k, v in claims.items() if len(v) != 1} == {}


def test_each_notebook_waits_for_what_writes_its_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """FIXTURE stages: required and optional inputs order the run; a notebook without a stage is a barrier; the
    longest chain ranks first."""
    from gpupred import pipeline

    monkeypatch.setattr(pipeline, "STAGES", {
        "01-a": pipeline.Stage((), ("X",), seconds=5), "02-b": pipeline.Stage(("X",), seconds=10),
        "03-c": pipeline.Stage(("X",), ("Y",), seconds=20), "04-d": pipeline.Stage((), optional=("Y",), seconds=1)})
    after = pipeline.waits_for(["01-a", "02-b", "03-c", "04-d"])
    assert after == {"01-a": set(), "02-b": {"01-a"}, "03-c": {"01-a"}, "04-d": {"03-c"}}
    assert pipeline.critical_seconds(["01-a", "02-b", "03-c", "04-d"], after) == {"01-a": 26, "02-b": 10, "03-c": 21,
                                                                                   "04-d": 1}
    assert pipeline.waits_for(["02-b", "04-d"]) == {"02-b": set(), "04-d": set()}  # their writers not chosen
    assert pipeline.waits_for(["01-a", "02-x", "03-c"]) == {"01-a": set(), "02-x": {"01-a"}, "03-c": {"01-a", "02-x"}}


def _waiting(mine: Path, other: Path) -> str:
    """A FIXTURE notebook's code that writes ``mine``, then waits up to 60 s for ``other``: two of them finish only if
    they run at the same time."""
    return (f"import time\nfrom pathlib import Path\nPath({str(mine)!r}).write_text('x')\n"
            f"for _ in range(600):\n    if Path({str(other)!r}).exists(): break\n    time.sleep(0.1)\n"
            f"else:\n    raise TimeoutError('the other notebook never ran beside this one')")


def _fixture_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stages: dict[str, tuple[tuple[str, ...], ...]],
                      sources: dict[str, str], paths: dict[str, Path]) -> Path:
    """FIXTURE notebooks (stem -> code) under FIXTURE stages (stem -> (inputs, outputs)), ``paths`` set as config
    names; the notebooks' folder."""
    from gpupred import config, pipeline

    folder = tmp_path / "nb"
    folder.mkdir()
    for name, path in paths.items():
        monkeypatch.setattr(config, name, path, raising=False)
    monkeypatch.setattr(pipeline, "STAGES", {stem: pipeline.Stage(*io) for stem, io in stages.items()})
    for stem, source in sources.items():
        _notebook(folder / f"{stem}.ipynb", source)
    return folder


def _two_and_a_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, a: Path, b: Path, code_a: str, code_b: str,
                      code_read: str) -> Path:
    """:func:`_fixture_pipeline` of two independent FIXTURE notebooks (01-a writes ``a``, 02-b writes ``b``) and one
    that reads both (03-read); the notebooks' folder."""
    return _fixture_pipeline(
        tmp_path, monkeypatch, {"01-a": ((), ("FIXTURE_A",)), "02-b": ((), ("FIXTURE_B",)),
                                "03-read": (("FIXTURE_A", "FIXTURE_B"),)},
        {"01-a": code_a, "02-b": code_b, "03-read": code_read}, {"FIXTURE_A": a, "FIXTURE_B": b})


@pytest.mark.notebook
def test_independent_notebooks_run_at_once_and_a_reader_after_both(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    folder = _two_and_a_reader(tmp_path, monkeypatch, a, b, _waiting(a, b), _waiting(b, a),
                               f"assert open({str(a)!r}).read() + open({str(b)!r}).read() == 'xx'")
    results = run_pipeline(out_dir=tmp_path / "reports", folder=folder, jobs=2)
    assert [(r.notebook, r.status) for r in results] == [("01-a.ipynb", "ok"), ("02-b.ipynb", "ok"),
                                                         ("03-read.ipynb", "ok")]


def _cores_seen(mine: Path, other: Path) -> str:
    """A FIXTURE notebook's code that writes the cores its kernel was given (GPUPRED_CORES) to ``mine``, then waits
    for the other one to start (:func:`_waiting`, on marker files beside them)."""
    return (f"import os\nopen({str(mine)!r}, 'w').write(os.environ['GPUPRED_CORES'])\n"
            + _waiting(mine.with_suffix(".started"), other.with_suffix(".started")))


@pytest.mark.notebook
def test_notebooks_running_at_once_share_the_cores_and_one_alone_gets_them_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two FIXTURE notebooks started together on a 4-core machine are given 2 cores each (their kernels' own
    environments: the pipeline's process is left as it was); the one that reads both, started alone, all 4."""
    import os

    from gpupred import pipeline
    from gpupred.learn.parallel import CORES_ENV

    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    folder = _two_and_a_reader(tmp_path, monkeypatch, a, b, _cores_seen(a, b), _cores_seen(b, a),
                               f"import os\nopen({str(c)!r}, 'w').write(os.environ['GPUPRED_CORES'])")
    monkeypatch.setattr(pipeline, "machine_cores", lambda: 4)
    monkeypatch.delenv(CORES_ENV, raising=False)
    run_pipeline(out_dir=tmp_path / "reports", folder=folder, jobs=2)
    assert (a.read_text(), b.read_text(), c.read_text()) == ("2", "2", "4")
    assert CORES_ENV not in os.environ
    assert [pipeline.core_share(2, n) for n in (1, 2, 3)] == [2, 1, 1]


@pytest.mark.notebook
def test_a_failure_lets_the_running_notebook_finish_and_starts_nothing_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow, late = tmp_path / "slow.txt", tmp_path / "late.txt"
    folder = _fixture_pipeline(
        tmp_path, monkeypatch,
        {"01-broken": ((),), "02-slow": ((), ("FIXTURE_SLOW",)), "03-late": (("FIXTURE_SLOW",),)},
        {"01-broken": "raise ValueError('bad column')",
         "02-slow": f"import time\ntime.sleep(3)\nopen({str(slow)!r}, 'w').write('x')",
         "03-late": f"open({str(late)!r}, 'w').write('x')"},
        {"FIXTURE_SLOW": slow})
    with pytest.raises(GpupredError, match=r"01-broken.ipynb failed: ValueError: bad column"):
        run_pipeline(out_dir=tmp_path / "reports", folder=folder, jobs=2)
    assert slow.exists() and not late.exists()
