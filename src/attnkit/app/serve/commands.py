"""Command line: `attnkit serve RUN [RUN ...] --port P`."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from attnkit.app.cli import app
from attnkit.errors import ConfigError, require_extra, user_errors


@app.command()
def serve(
    runs: list[Path] = typer.Argument(..., help="Translation and detection run folders."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (default: this machine only)."),
    weights: str = typer.Option("best", "--weights", help="best, last, average or ema."),
    max_body_mb: float = typer.Option(8.0, "--max-body-mb", help="Largest request body accepted (MB)."),
    max_pixels: int = typer.Option(4096 * 4096, "--max-pixels", help="Largest image accepted (width x height)."),
    max_text_chars: int = typer.Option(2000, "--max-text-chars", help="Longest sentence accepted."),
    max_batch: int = typer.Option(8, "--max-batch", help="Most concurrent requests run as one batch (1: none)."),
    batch_wait_ms: float = typer.Option(5.0, "--batch-wait-ms",
                                        help="How long a request waits for others to batch with (ms)."),
    quantize: str = typer.Option(None, "--quantize", help="int8: the models' matrix multiplications in int8 "
                                 "(dynamic quantization): faster, a little less accurate (BENCHMARKS.md)."),
) -> None:
    """Serve RUNs: a JSON HTTP API (OpenAPI at /docs) and a page at http://HOST:PORT/."""
    with user_errors():
        require_extra("serve", ["fastapi", "uvicorn", "multipart"], "attnkit serve")
        import uvicorn

        from attnkit.app.serve import Limits, create_app, load_models
        from attnkit.app.serve.batcher import Batcher

        if not 0 < port < 65536:
            raise ConfigError(f"--port must be 1..65535, got {port}")
        if max_batch < 1 or batch_wait_ms < 0:
            raise ConfigError(f"--max-batch must be at least 1 and --batch-wait-ms at least 0, got {max_batch} and "
                              f"{batch_wait_ms}")
        limits = Limits(int(max_body_mb * 1024 * 1024), max_pixels, max_text_chars)
        models = load_models(runs, weights, quantize)
        for model in models.values():
            print(f"serving {model.kind} model {model.name}", file=sys.stderr)  # messages: stderr, as uvicorn's
        print(f"page: http://{host}:{port}/  API schema: http://{host}:{port}/docs", file=sys.stderr, flush=True)
        batcher = Batcher(max_batch, batch_wait_ms / 1000)
        uvicorn.run(create_app(models, limits, batcher), host=host, port=port, log_level="warning")
