"""Kernel traces of training steps (issue 38): per-step summaries of torch.profiler traces, the runner that records
them beside a sweep's runs, and the step model's errors against them.

- :mod:`.table`: trace -> per-step rows (kernel count, GPU-busy and host time, per op class); schema, writer, reader;
- :mod:`.runner`: profile catalog specs on the GPU (torch imported inside its functions);
- :mod:`.compare`: the step model's kernel count, busy and host time against the tables, per family and op class.
"""
