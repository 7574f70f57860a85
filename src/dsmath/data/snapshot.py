"""Write the pinned snapshot of the standard library the corpus stage reads, from the running interpreter.

    .venv/bin/python -m dsmath.data.snapshot data/raw/code

The committed snapshot (`data/raw/code/`, named by the Python version it was taken from) is what every machine builds
its code corpus and the math classifier's non-math text from: re-running this on another interpreter writes files
of another name and changes the corpus on purpose (point `corpus.code_snapshot` / `corpus.prose_snapshot` at them).
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

from dsmath.data.corpus import pydoc_topics, stdlib_sources, write_snapshot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    args = ap.parse_args()
    version = platform.python_version()
    code = write_snapshot(stdlib_sources(), args.out_dir / f"python-{version}-stdlib.jsonl.xz", "path")
    prose = write_snapshot(pydoc_topics(), args.out_dir / f"python-{version}-pydoc-topics.jsonl.xz", "topic")
    for path in (code, prose):
        print(f"{path} {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
