"""The exported predictor: load it (checked), predict utilization, SM activity and memory with intervals.

Importing this package imports nothing (the CLI imports it to register ``gpupred predict``); its modules
(:mod:`gpupred.predictor.loading`: ``load_predictor``; :mod:`gpupred.predictor.predictor`: ``Predictor``;
:mod:`gpupred.predictor.training`: ``train_predictor``, ``export_predictor``), with pandas and scikit-learn behind
them, are imported where they are used.
"""
