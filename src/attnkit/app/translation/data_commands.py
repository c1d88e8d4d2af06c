"""Command line: `attnkit data prepare translation DIR`: the corpus prepared once, before training.

What `attnkit train translation --data DIR` would do at its first start (`translation/prepared_corpus.py`):
the BPE tokenizer trained on a bounded sample and every split's token ids and lengths written to
DIR/.attnkit-cache (or $ATTNKIT_DATA_CACHE), with progress on stderr. The tokenizer follows the same
preset and --set options as training, so that the training run finds the cache. Prints the cache
folder and each split's pair count on stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from attnkit.app.cli import data_app
from attnkit.errors import user_errors

prepare_app = typer.Typer(no_args_is_help=True, help="Prepare a dataset once (tokenized, cached) for training.")
data_app.add_typer(prepare_app, name="prepare")


@prepare_app.command("translation")
def prepare_translation(
    data: Path = typer.Argument(..., help="A folder with train.*, valid.* (and test.*): .tsv, .jsonl or SRC/TGT "
                                "files."),
    preset: str = typer.Option(None, "--preset", help="The training run's preset (its vocabulary size; default: "
                               "tiny on a CPU, base on a GPU, as training)."),
    set_: list[str] = typer.Option([], "--set", help="The training run's overrides that concern the tokenizer: "
                                   "--set vocab_size=8000 --set joint_vocab=false."),
    source_lang: str = typer.Option(None, "--source-lang", help="Source language code (JSON lines, aligned files)."),
    target_lang: str = typer.Option(None, "--target-lang", help="Target language code."),
    skip_bad_lines: bool = typer.Option(False, "--skip-bad-lines", help="Skip malformed data lines, as training "
                                        "with --skip-bad-lines would."),
) -> None:
    """Train the tokenizer and write every split's token ids to the cache that training then maps."""
    with user_errors():
        import json

        import torch

        from attnkit.translation.config import default_preset_name, override, preset as named_preset
        from attnkit.translation.data import split_paths
        from attnkit.translation.prepared_corpus import CorpusFiles, TokenizerSettings, prepare_corpus

        languages = [f"source_lang={json.dumps(source_lang)}"] if source_lang else []
        languages += [f"target_lang={json.dumps(target_lang)}"] if target_lang else []
        config = override(named_preset(preset or default_preset_name(torch.cuda.is_available())),
                          languages + list(set_))
        files = CorpusFiles(split_paths(data), config.source_lang, config.target_lang, skip_bad=skip_bad_lines)
        corpus = prepare_corpus(files, TokenizerSettings(config.vocab_size, config.joint_vocab),
                                say=lambda message: print(message, file=sys.stderr, flush=True))
        print(f"prepared: {corpus.folder}")
        for split in corpus.splits:
            print(f"{split}: {corpus.manifest['splits'][split]['pairs']} pairs")
