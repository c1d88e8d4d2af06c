"""Load check of `attnkit serve`: a bounded number of concurrent clients on loopback.

    .venv/bin/python benchmarks/serve_load.py RUN [RUN ...] [--clients 8] [--requests 400] [--max-batch 1 8]
        [--chunks 4] [--quick]

Starts one server per --max-batch value in this process (uvicorn, 127.0.0.1, free ports; 1: no dynamic
batching), sends translate requests (a translation run) and detect requests (a detection run, a 320x240
image) from CLIENTS threads, the servers taking turns chunk by chunk so both see the same machine, and
prints per server requests/s, p50/p99 latency, the mean batch size and the error count, which must be
zero. Without RUN (or with --quick) it builds tiny random-weight runs first, so the script checks itself
in seconds.
"""

from __future__ import annotations

import argparse
import io
import socket
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from PIL import Image


def tiny_runs(folder: Path) -> list[Path]:
    """A random-weight translation run and detection run (the test fixtures' sizes)."""
    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import DetectionConfig, preset
    from attnkit.storage import RunFolder, save_weights
    from attnkit.translation.config import TranslationConfig
    from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
    from attnkit.translation.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.train(["one two three", "four five six"] * 4, ["eins zwei drei", "vier fuenf"] * 4,
                                       vocab_size=60)
    model = Seq2SeqConfig(d_model=32, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=64,
                          source_vocab_size=tokenizer.source_vocab_size, target_vocab_size=tokenizer.target_vocab_size)
    run = RunFolder.create(folder / "translation", "translation",
                           TranslationConfig(preset="tiny", model=model, vocab_size=60, max_length=32).to_dict())
    tokenizer.save(run.path)
    save_weights(run.best_weights, Seq2SeqTransformer(model).state_dict(), {"kind": "translation", "step": 1})
    model_config, train_config = preset("tiny")
    config = DetectionConfig(model=model_config, train=train_config, preset="tiny", data="explicit",
                             class_names=tuple(f"c{i}" for i in range(model_config.num_classes)),
                             category_ids=tuple(range(1, model_config.num_classes + 1)))
    detection = RunFolder.create(folder / "detection", "detection", config.to_dict())
    save_weights(detection.best_weights, build_model(config.model).state_dict(), {"kind": "detection", "step": 1})
    return [run.path, detection.path]


def start_server(runs: list[Path], max_batch: int, wait_ms: float):
    import uvicorn

    from attnkit.app.serve import create_app, load_models
    from attnkit.app.serve.batcher import Batcher

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_app(load_models(runs), batcher=Batcher(max_batch, wait_ms / 1000))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{port}"


def one_request(client, url: str, kinds: list[str], index: int, image: bytes) -> tuple[float, bool]:
    kind = kinds[index % len(kinds)]
    started = time.perf_counter()
    if kind == "translation":
        response = client.post(f"{url}/api/translate", json={"text": f"one two three {index % 7}"})
    else:
        response = client.post(f"{url}/api/detect", files={"image": ("p.png", image, "image/png")})
    return time.perf_counter() - started, response.status_code == 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=400, help="per server")
    parser.add_argument("--max-batch", type=int, nargs="+", default=[1, 8], help="one server per value")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0)
    parser.add_argument("--chunks", type=int, default=4, help="turns per server")
    parser.add_argument("--quick", action="store_true", help="tiny runs, 4 clients, 40 requests")
    args = parser.parse_args()
    import httpx

    with tempfile.TemporaryDirectory() as scratch:
        runs = args.runs if args.runs and not args.quick else tiny_runs(Path(scratch))
        clients, requests = (4, 40) if args.quick else (args.clients, args.requests)
        servers = [start_server(runs, size, args.batch_wait_ms) for size in args.max_batch]
        buffer = io.BytesIO()
        Image.fromarray((torch.rand(240, 320, 3) * 255).to(torch.uint8).numpy()).save(buffer, format="PNG")
        kinds = [m["kind"] for m in httpx.get(f"{servers[0][1]}/api/models").json()]
        results: dict[int, list[tuple[float, bool]]] = {size: [] for size in args.max_batch}
        seconds = dict.fromkeys(args.max_batch, 0.0)
        with httpx.Client(timeout=300) as client, ThreadPoolExecutor(clients) as pool:
            for _, url in servers:
                one_request(client, url, kinds, 0, buffer.getvalue())  # warm up
            for chunk in range(args.chunks):
                indices = range(chunk * requests // args.chunks, (chunk + 1) * requests // args.chunks)
                turns = list(zip(args.max_batch, servers))
                for size, (_, url) in turns[chunk % len(turns):] + turns[:chunk % len(turns)]:
                    started = time.perf_counter()
                    results[size] += pool.map(lambda i, u=url: one_request(client, u, kinds, i, buffer.getvalue()),
                                              indices)
                    seconds[size] += time.perf_counter() - started
            batches = {size: httpx.get(f"{url}/api/batches").json() for size, (_, url) in zip(args.max_batch, servers)}
        for server, _ in servers:
            server.should_exit = True
    print("| --max-batch | clients | requests | requests/s | p50 ms | p99 ms | mean batch | errors |\n"
          "|---|---|---|---|---|---|---|---|")
    errors = 0
    for size in args.max_batch:
        latencies = sorted(r[0] for r in results[size])
        errors += sum(not ok for _, ok in results[size])
        p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        mean_batch = batches[size]["requests"] / max(batches[size]["batches"], 1)
        print(f"| {size} | {clients} | {requests} ({', '.join(kinds)}) | {requests / seconds[size]:.1f} | "
              f"{statistics.median(latencies) * 1000:.0f} | {p99 * 1000:.0f} | {mean_batch:.2f} | "
              f"{sum(not ok for _, ok in results[size])} |")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
