"""Generate (or check) liftbridge_client/_proto from proto/api.proto.

protoc writes absolute imports (``import api_pb2``); compiling the file from a
temporary tree shaped like the package makes it write package imports instead.
``--check`` regenerates into a temporary directory and fails if the committed
output differs, so a stale checkout is caught by the test suite.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "proto" / "api.proto"
TARGET = ROOT / "liftbridge_client" / "_proto"
PACKAGE_DIR = Path("liftbridge_client") / "_proto"
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")


def generate(out_root: Path) -> Path:
    """Run protoc into ``out_root`` and return the directory holding the modules."""
    # The mypy plugins are console scripts beside this interpreter.
    bindir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as src_root:
        staged = Path(src_root) / PACKAGE_DIR / "api.proto"
        staged.parent.mkdir(parents=True)
        shutil.copyfile(SOURCE, staged)
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{src_root}",
            f"--plugin=protoc-gen-mypy={bindir / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={bindir / 'protoc-gen-mypy_grpc'}",
            f"--python_out={out_root}",
            f"--grpc_python_out={out_root}",
            f"--mypy_out={out_root}",
            f"--mypy_grpc_out={out_root}",
            str(PACKAGE_DIR / "api.proto"),
        ]
        subprocess.run(cmd, check=True, cwd=src_root)
    return out_root / PACKAGE_DIR


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed code is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        produced = generate(Path(tmp))
        if args.check:
            stale = [
                name
                for name in OUTPUTS
                if not (TARGET / name).exists()
                or not filecmp.cmp(produced / name, TARGET / name, shallow=False)
            ]
            if stale:
                print(f"stale generated code: {', '.join(stale)}; run `make proto`")
                return 1
            return 0
        TARGET.mkdir(parents=True, exist_ok=True)
        for name in OUTPUTS:
            shutil.copyfile(produced / name, TARGET / name)
        (TARGET / "__init__.py").write_text('"""Generated protobuf and gRPC modules."""\n')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
