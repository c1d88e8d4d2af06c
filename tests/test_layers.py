"""The package's layers, top to bottom: attnkit.app -> attnkit.training -> attnkit.detection | attnkit.translation
-> attnkit.baselines -> attnkit.nn | attnkit.storage -> attnkit.errors. Nothing imports upward, `|` separates
siblings that import neither each other. The contracts are `[tool.importlinter]` in pyproject.toml; these tests
run them (as `make check` does) and check at run time what a fresh interpreter loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_IN_NN = ("scipy", "torchvision", "tokenizers", "sacrebleu", "pycocotools", "matplotlib")


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running `statement`."""
    code = f"import sys\n{statement}\nprint('\\n'.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    return set(result.stdout.split())


def test_import_contracts_are_kept():
    """`lint-imports` (import-linter) passes: the layers, nn without scipy & co., storage and errors at the bottom."""
    import importlinter  # noqa: F401  (the dev extra; a missing linter fails here rather than skipping)

    script = Path(sys.executable).with_name("lint-imports")
    command = [str(script)] if script.exists() else [sys.executable, "-c",
                                                     "from importlinter.cli import lint_imports_command as c; c()"]
    result = subprocess.run([*command, "--no-cache", "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_nn_loads_no_task_dependency():
    """`import attnkit.nn` needs torch alone: none of the task libraries' third-party packages get loaded."""
    modules = loaded_after("import attnkit.nn")
    assert "attnkit.nn" in modules
    loaded = sorted({name.split(".")[0] for name in modules} & set(NOT_IN_NN))
    assert loaded == [], f"import attnkit.nn loaded {loaded}"


def test_package_import_loads_no_task_library():
    """`import attnkit` is cheap: attnkit.Detector and attnkit.Translator are imported on first use only."""
    modules = loaded_after("import attnkit")
    above = ("attnkit.detection", "attnkit.translation", "attnkit.training", "attnkit.app")
    loaded = sorted(name for name in modules if name.startswith(above))
    assert loaded == [], f"import attnkit loaded {loaded}"
    assert "torch" not in modules
