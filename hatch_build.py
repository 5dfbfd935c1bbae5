"""Build hook: compile the optional C accelerator, liftbridge_client/_speedups.c.

The package works without it (each of its functions has a pure-Python twin); with it, the
NATS ack path costs less CPU (docs/benchmarks.md). So a build without a C compiler, or with
``LIFTBRIDGE_CLIENT_PURE=1``, makes a pure-Python wheel and says why;
``LIFTBRIDGE_CLIENT_REQUIRE_SPEEDUPS=1`` (CI) makes a failed compile an error instead.

A wheel carries the compiled module (and so a platform tag); an editable install gets it
built in place, beside the source (git-ignored), where the editable package imports it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # imported for compile_speedups alone (bench/compare.py), not building
    BuildHookInterface = object

SOURCE = Path("liftbridge_client") / "_speedups.c"


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def compile_speedups(source: Path, out: Path) -> None:
    """Compile ``source`` into the extension module ``out`` with the interpreter's compiler."""
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    argv = [*cc, "-O2", "-fPIC", "-shared", "-Wall", f"-I{include}", str(source), "-o", str(out)]
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=300)


class SpeedupsHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        name = "_speedups" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
        source = Path(self.root) / SOURCE
        if _flag("LIFTBRIDGE_CLIENT_PURE"):
            self.app.display_info("liftbridge-client: LIFTBRIDGE_CLIENT_PURE is set: pure Python")
            return
        # Compiled outside the output directory; `finalize` removes it once the wheel holds it.
        self._work = work = Path(tempfile.mkdtemp(prefix="lbc-speedups-"))
        built = work / name
        try:
            compile_speedups(source, built)
        except (OSError, subprocess.SubprocessError) as exc:
            said = getattr(exc, "stderr", "") or exc
            if _flag("LIFTBRIDGE_CLIENT_REQUIRE_SPEEDUPS"):
                raise RuntimeError(f"compiling {SOURCE} failed: {said}") from exc
            self.app.display_warning(
                f"liftbridge-client: compiling {SOURCE} failed, building pure Python "
                f"(slower NATS acks): {said}"
            )
            return
        if version == "editable":
            shutil.copy2(built, source.parent / name)
            return
        build_data["force_include"][str(built)] = f"liftbridge_client/{name}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        work = getattr(self, "_work", None)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
