"""A discrete-event GPU cluster simulator: measured truth, predicted knowledge, six policies (slot, reactive, random
pairing, horus, ours, oracle pairing) on two traces (Alibaba's openb on measured pairs; openb's arrivals on Gavel's
matrix).

Each name is imported from its own module: the worlds (:mod:`~gpupred.sim.world`), the cluster and its events
(:mod:`~gpupred.sim.cluster`), the policies (:mod:`~gpupred.sim.policies`), job arrivals (:mod:`~gpupred.sim.arrivals`),
the openb trace (:mod:`~gpupred.sim.openb`), runs and settings (:mod:`~gpupred.sim.experiment`), their metrics
(:mod:`~gpupred.sim.metrics`) and outcomes (:mod:`~gpupred.sim.outcomes`).
"""
