"""FIXTURES for the importer tests: made-up files shaped like the published ones (never their data).

Every number here is invented; the files only share the published files' column names so the parsers
have something to read. Sources built here pin the sha256 of these fixture bytes, not of upstream files.
"""

from __future__ import annotations

import dataclasses
import functools
import http.server
import threading
from pathlib import Path
from typing import Iterator

from gpupred.importers.source import Source, UpstreamFile, sha256_bytes

FIXTURE_LUCID_SOLO = """model,dataset,batchsize,amp,speed,gpu_util,gmem_util,gmem,label
ResNet18,CIFAR-10,32,0,1000.0,50.0,20.0,2000.0,1
ResNet18,CIFAR-10,64,1,1500.0,40.0,15.0,2100.0,1
BERT,SQuAD,32,1,100.0,90.0,60.0,15000.0,2
PPO,LunarLander,32,0,5.0,10.0,0.0,2000.0,0
"""
FIXTURE_LUCID_PAIRS = """,model1,dataset1,gpu_num1,batchsize1,amp1,speed1,model2,dataset2,gpu_num2,batchsize2,amp2,speed2,gpu_util,gmem_util,gmem
0,ResNet18,CIFAR-10,1,32,0,0.5,BERT,SQuAD,1,32,1,0.8,95.0,70.0,17000
7,PPO,LunarLander,1,32,0,1.02,ResNet18,CIFAR-10,1,64,1,0.0,60.0,20.0,4000
"""
_HEADER = ("Filename,Depth,Activations-Params,Activation Function,Total Activations,Total Parameters,Batch Size,"
           "Max GPU Memory (MiB),Avg GPUTL,Avg GRACT,Avg SMACT,Avg SMOCC,Avg FP32A\n")
# a valid pyramid net (8 -> 4 -> 2 -> 2), one whose widths break its rule, one with a Tanh layer
FIXTURE_GPUMEMNET = _HEADER + (
    'input:8_output:2_depth:2_arch:pyramid_batch:16.out,3,"[(\'linear\', 4, 36), (\'ReLU\', 4, 0), (\'linear\', 2, 10), '
    '(\'ReLU\', 2, 0), (\'linear\', 2, 6)]",ReLU,14,52,16,1500,30.0,0.3,0.2,0.05,0.1\n'
    'input:8_output:2_depth:2_arch:pyramid_batch:32.out,3,"[(\'linear\', 5, 45), (\'ReLU\', 5, 0), (\'linear\', 2, 12), '
    '(\'ReLU\', 2, 0), (\'linear\', 2, 6)]",ReLU,16,63,32,1510,31.0,0.3,0.2,0.05,0.1\n'
    'input:8_output:2_depth:2_arch:uniform_batch:8.out,3,"[(\'linear\', 8, 72), (\'Tanh\', 8, 0), (\'linear\', 8, 72), '
    '(\'Tanh\', 8, 0), (\'linear\', 2, 18)]",Tanh,34,162,8,1490,29.0,0.3,0.2,0.05,0.1\n'
)
FIXTURE_LICENSE = "FIXTURE licence text, not the upstream one\n"


def fixture_source(name: str, files: dict[str, str], repo: str = "fixture-owner/fixture-repo",
                   commit: str = "0" * 40) -> Source:
    """A FIXTURE source pinning the sha256 of the given made-up file contents (name -> text)."""
    return Source(
        name=name, repo=repo, commit=commit,
        files=tuple(UpstreamFile(n, f"data/{n}", sha256_bytes(t.encode())) for n, t in files.items()),
        licence="FIXTURE licence", gpu_name="NVIDIA GeForce RTX 3090", measured="FIXTURE", citation="FIXTURE",
    )


def repin(source: Source, files: dict[str, str]) -> Source:
    """A real source with its sha256 pins replaced by those of FIXTURE contents (same names and paths)."""
    return dataclasses.replace(source, files=tuple(
        dataclasses.replace(f, sha256=sha256_bytes(files[f.name].encode())) for f in source.files))


def write_tree(root: Path, source: Source, files: dict[str, str]) -> Path:
    """Lay the files out as the raw host serves them: ``root/<repo>/<commit>/<path>``."""
    for f in source.files:
        path = root / source.repo / source.commit / f.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[f.name])
    return root


def write_local_copy(folder: Path, source: Source, files: dict[str, str]) -> Path:
    """Lay the files out as a local copy: ``folder/<source>/<name>``."""
    for f in source.files:
        path = folder / source.name / f.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[f.name])
    return folder


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # keep test output clean
        pass


def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` over HTTP on 127.0.0.1 (a free port) in a thread; yield the base URL."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
