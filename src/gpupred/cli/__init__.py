"""The ``gpupred`` command. Each stage's commands live in a module of this package named for the stage
(``gpupred.cli.profile``: ``gpupred sweep``, ``plan``...), each a ``register(app)``; errors print one line, exit 2.

The stages never import this package: it sits above them all."""

from __future__ import annotations

from gpupred.cliapp import new_app, run_app

app = new_app("gpupred", "Predict a training job's GPU utilization, memory and co-location slowdown from its graph.")


def _register() -> None:
    """Attach every stage's commands (modules whose import stays free of torch), once per process: ``main`` called
    again (tests run the CLI in-process) must not attach them again, each call slower than the last."""
    if app.registered_commands:
        return
    from gpupred.cli import calibrate as calibration_cli
    from gpupred.cli import campaign as campaign_cli
    from gpupred.cli import colocate as colocate_cli
    from gpupred.cli import dataloader as loader_cli
    from gpupred.cli import fusion as fusion_cli
    from gpupred.cli import graph as graph_cli
    from gpupred.cli import importers as importers_cli
    from gpupred.cli import predict as predictor_cli
    from gpupred.cli import profile as profile_cli
    from gpupred.cli import trace as traces_cli
    from gpupred.cli import workloads as workloads_cli
    from gpupred.pipeline import register as pipeline_register

    for register in (
        workloads_cli.register,
        graph_cli.register,
        profile_cli.register,
        importers_cli.register,
        predictor_cli.register,
        colocate_cli.register,
        fusion_cli.register,
        calibration_cli.register,
        loader_cli.register,
        traces_cli.register,
        campaign_cli.register,
        pipeline_register,
    ):
        register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``gpupred`` command."""
    _register()
    run_app(app, argv)


if __name__ == "__main__":  # pragma: no cover
    main()
