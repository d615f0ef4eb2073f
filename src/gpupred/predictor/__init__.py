"""The exported predictor: load it (checked), predict utilization, SM activity and memory with intervals.

Importing this package imports nothing (the CLI imports it to register ``gpupred predict``); the artifact module
(:mod:`gpupred.predictor.artifact`: ``load_predictor``, ``Predictor``, ``train_predictor``, ``export_predictor``),
with pandas and scikit-learn behind it, is imported where it is used.
"""
