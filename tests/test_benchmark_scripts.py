"""The GPU check script runs its code on the CPU at tiny sizes, so that it works when a GPU is at hand."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cuda_check_runs_every_part_on_the_cpu_without_a_failure(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cuda_check.py"), "--device", "cpu",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("## ")] == [
        "## 1. attention: attnkit vs torch, SDPA backends", "## 2. attention kernels of a translation training step",
        "## 3. detection under mixed precision", "## 4. multi-worker data loading",
        "## 5. detector inference, fast / DETR", "## 6. detector training step",
        "## 7. translation training step, MFU"]
    assert "FAIL" not in done.stdout, done.stdout
    assert "4 workers give the same tensors: True" in done.stdout and "| math | fp32 | ok" in done.stdout
