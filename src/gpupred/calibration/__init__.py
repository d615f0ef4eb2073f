"""Calibrate a GPU in a minute: micro-benchmarks measure the constants the step model and the memory footprint
borrow for a GPU without training runs; predictions on that GPU then use them (``gpupred calibrate``).

- :mod:`.bench`: what is measured (the cases, each benchmark's meaning), run on a :class:`.backend.Backend`;
- :mod:`.torch_backend` (torch CUDA events, NVML) and :mod:`.fake` (replays a recorded file);
- :mod:`.file`: the calibration file (schema, checksum, writer and reader);
- :mod:`.derive`: raw results -> the step model's constants and the footprint's fixed terms;
- :mod:`.use`: what a prediction takes from a calibration, and the cache of this user's calibrations;
- :mod:`.heldout`: a calibrated GPU's interval width, measured on the project's own GPUs.

torch and pynvml are imported only by the torch backend, when one is made. Each name is imported from its own module
(``calibrate``: :mod:`.run`; ``read_calibration``, ``Calibration``: :mod:`.file`); this package imports nothing.
"""
