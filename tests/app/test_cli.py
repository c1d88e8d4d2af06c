"""The command line fails like a tool: exit code 2 and one message, no traceback."""

import subprocess
import sys

from typer.testing import CliRunner

from attnkit.app.cli import load_commands
from attnkit.app.demo import attention_core_part

runner = CliRunner()


def test_unknown_command_and_option_exit_2_without_traceback():
    app = load_commands()
    for argv in (["no-such-command"], ["demo", "--no-such-option"]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output


def test_console_script_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "attnkit", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert "demo" in result.stdout


def test_attention_core_demo_writes_a_heatmap(tmp_path, capsys):
    attention_core_part(tmp_path)
    png = tmp_path / "self_attention.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000
    assert "sum to one" in capsys.readouterr().out


WITHOUT_EXTRAS = """
import sys
for name in ("fastapi", "uvicorn", "multipart", "onnx", "onnxscript", "onnxruntime", "transformers"):
    sys.modules[name] = None  # as if the optional extras `serve`, `onnx` and `hf` were not installed
from attnkit.app.cli import main
sys.argv = ["attnkit", *sys.argv[1:]]
main()
"""


def test_the_command_line_runs_without_the_optional_extras_and_says_which_to_install(tmp_path):
    def attnkit(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *argv], capture_output=True, text=True,
                              timeout=120)

    assert attnkit("--help").returncode == 0
    assert attnkit("train", "detection", "--help").returncode == 0
    for argv, extra in ((["serve", str(tmp_path)], "serve"), (["export", "onnx", str(tmp_path)], "onnx"),
                        (["export", "hf", str(tmp_path), "--out", str(tmp_path / "hf")], "hf"),
                        (["detect", str(tmp_path), str(tmp_path), "--out", str(tmp_path / "out"),
                          "--backend", "onnxruntime"], "onnx")):
        result = attnkit(*argv)
        assert result.returncode == 2, (argv, result.stderr)
        assert f"pip install 'attnkit[{extra}]'" in result.stderr and "Traceback" not in result.stderr, result.stderr
