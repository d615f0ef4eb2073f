"""Graph features: export a workload to ONNX (structure only) and featurize any ONNX graph for a batch size.

``featurize`` and ``FEATURE_KEYS`` (:mod:`gpupred.graph.features`) and ``check_complete`` (the predictor's refusal of
a graph it could not see whole, :mod:`gpupred.graph.coverage`) need only onnx and numpy; ``export_model`` /
``export_onnx`` (:mod:`gpupred.graph.export`, torch) and ``build_feature_table`` (:mod:`gpupred.graph.table`, pandas)
are imported from their modules. Importing this package imports nothing. Every graph is featurized in the canonical
form of :mod:`gpupred.graph.canonical`, so a model's features do not depend on how it was exported.
"""
