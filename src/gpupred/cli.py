"""The ``gpupred`` command. Each stage registers its own commands; errors print one line, exit 2."""

from __future__ import annotations

from gpupred.cliapp import new_app, run_app  # run_app re-exported: tests and other entry points run typer apps through it

app = new_app("gpupred", "Predict a training job's GPU utilization, memory and co-location slowdown from its graph.")


def _register() -> None:
    """Attach every stage's commands (modules whose import stays free of torch)."""
    from gpupred.calibration import cli as calibration_cli
    from gpupred.fusion import cli as fusion_cli
    from gpupred.graph import cli as graph_cli
    from gpupred.importers import cli as importers_cli
    from gpupred.pipeline import register as pipeline_register
    from gpupred.predictor import cli as predictor_cli
    from gpupred.profile import cli as profile_cli
    from gpupred.traces import cli as traces_cli
    from gpupred.workloads import cli as workloads_cli

    for register in (
        workloads_cli.register,
        graph_cli.register,
        profile_cli.register,
        importers_cli.register,
        predictor_cli.register,
        fusion_cli.register,
        calibration_cli.register,
        traces_cli.register,
        pipeline_register,
    ):
        register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``gpupred`` command."""
    _register()
    run_app(app, argv)


if __name__ == "__main__":  # pragma: no cover
    main()
