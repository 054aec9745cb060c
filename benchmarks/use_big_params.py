"""``orchestrator use`` on a big params.yaml: a switch and its way back, timed, against DVC's own
reading of the same file.

Writes a params.yaml of about ``--mb`` megabytes (blocks of a learning rate spelled ``1e-3``, a
quoted name, a flow list and a flow mapping, each with a comment; CRLF with ``--crlf``), with a
``clusters.testbed`` entry that changes two values, one near the start and one at the end. Then,
each as a cold process: ``orchestrator use testbed``, ``orchestrator use local``, and DVC's reader
of params files (``dvc.utils.serialize.load_yaml``, what ``dvc repro`` does to it once at least).
Checks the way back gives the very bytes.

Bound: each ``use`` in seconds, not minutes (≤ 30 s for 10 MB on the 2-core VM), and the way back
byte for byte.

Usage: python benchmarks/use_big_params.py [--mb 10] [--crlf]; writes benchmarks/out/use_big_params.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLOCK = "block{i}:\n  lr: 1e-3  # tuned\n  name: 'run {i}'\n  seeds: [1, 2, 3]\n  nested: {{a: 1, b: [x, y]}}\n"
TAIL = "orchestrator:\n  cluster: local\nclusters:\n  testbed:\n    block5:\n      lr: 3e-4\n    block{last}:\n      seeds: [4]\n"


def write(path: Path, mb: float, crlf: bool) -> int:
    blocks = int(mb * 1e6 / len(BLOCK.format(i=50_000)))
    text = "# a big params.yaml\n" + "".join(BLOCK.format(i=i) for i in range(blocks)) + TAIL.format(last=blocks - 1)
    if crlf:
        text = text.replace("\n", "\r\n")
    path.write_bytes(text.encode())
    return blocks


def timed(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--crlf", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        blocks = write(root / "params.yaml", args.mb, args.crlf)
        original = (root / "params.yaml").read_bytes()
        use = [sys.executable, "-m", "orchestrator", "use"]
        there = timed([*use, "testbed"], root)
        switched = (root / "params.yaml").read_bytes()
        back = timed([*use, "local"], root)
        identical = (root / "params.yaml").read_bytes() == original
        dvc = timed([sys.executable, "-c", "from dvc.utils.serialize import load_yaml; load_yaml('params.yaml')"], root)
    figures = {
        "bytes": len(original),
        "blocks": blocks,
        "crlf": args.crlf,
        "use_testbed_s": round(there, 2),
        "use_local_s": round(back, 2),
        "dvc_reads_it_s": round(dvc, 2),
        "bytes_changed_by_switch": len(switched) - len(original),
        "way_back_identical": identical,
    }
    print(json.dumps(figures, indent=2))
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "use_big_params.json").write_text(json.dumps(figures, indent=2) + "\n")
    if not identical:
        sys.exit("the way back did not give the very bytes")


if __name__ == "__main__":
    main()
