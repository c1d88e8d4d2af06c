"""The command line fails like a tool: exit code 2 and one message, no traceback."""

import subprocess
import sys

from typer.testing import CliRunner

from attnkit.cli import load_commands
from attnkit.demo import attention_core_part

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
