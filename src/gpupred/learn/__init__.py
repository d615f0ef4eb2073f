"""Learning: regressors compared by RMSLE under grouped splits, nested model selection, feature importance,
conformal intervals, and the out-of-fold predictions downstream stages read.

Each name is imported from its own module and this package imports nothing, so importing one module (the intervals an
exported predictor unpickles) does not import scikit-learn's model selection with the rest.
"""
