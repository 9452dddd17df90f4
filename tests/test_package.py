"""The package's shape: every module imports on its own (no import cycle hides behind an import order),
and the wheel installs nothing at the top level but ``selfverify``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[1]


def modules() -> list[str]:
    names = []
    for path in sorted((ROOT / "selfverify").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# Run in a fresh interpreter: each module imported first, with none of selfverify loaded before it (the
# third-party libraries stay loaded: they are not what an import order can break).
IMPORT_EACH = """
import importlib, sys, traceback
failed = {}
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "selfverify" or m.startswith("selfverify.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failed[name] = traceback.format_exc().strip().splitlines()[-1]
print(failed)
"""


def test_every_module_imports_first_on_its_own() -> None:
    names = modules()
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, *names], capture_output=True, text=True, check=True
    )
    assert len(names) > 40 and done.stdout.strip() == "{}"


def test_the_wheel_installs_only_selfverify(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(tmp_path),
    ]
    # Built from a copy of the sources: setuptools leaves its build/ beside the sources it builds.
    source = tmp_path / "source"
    source.mkdir()
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    for part in ("selfverify", "configs", "data"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([*cmd, str(source)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("selfverify-*.whl")
    top = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in top if not t.endswith(".dist-info")} == {"selfverify"}
    # The configs and data the package reads ship inside it.
    names = zipfile.ZipFile(wheel).namelist()
    assert "selfverify/configs/default.yaml" in names and any(n.startswith("selfverify/data/") for n in names)
