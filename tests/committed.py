"""Where the committed results live, for the tests that predict from them (imported as
``from committed import ROOT, H200, R50``: pytest puts this folder on ``sys.path``).

``ROOT`` is ``benchmarks/results``; ``H200`` its two H200 folders (one GPU and two GPUs), what
docs/perfmodel.md's validation reads; ``R50`` the resnet50 configuration most prediction tests
ask about (torch eager bf16 on CUDA, synthetic data, the default layout), as ``predict``'s
keyword arguments.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "benchmarks/results"
H200 = [ROOT / "h200", ROOT / "h200x2"]
R50 = dict(model="resnet50", framework="torch", mode="eager", precision="bf16", device="cuda",
           data="synthetic", layout="auto")
