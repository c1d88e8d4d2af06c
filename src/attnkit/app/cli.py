"""The `attnkit` command line. Each subsystem adds its commands to the groups defined here.

Command modules are imported by `main()` (see COMMAND_MODULES), so that a subsystem adds one
line here and keeps its commands in its own package.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(name="attnkit", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Attention models end to end: the Transformer for translation, DETR for detection.")
train_app = typer.Typer(no_args_is_help=True, help="Train a model; writes a run folder.")
eval_app = typer.Typer(no_args_is_help=True, help="Evaluate a run folder on a dataset.")
data_app = typer.Typer(no_args_is_help=True, help="Write a built-in dataset to a folder.")
app.add_typer(train_app, name="train")
app.add_typer(eval_app, name="eval")
app.add_typer(data_app, name="data")

COMMAND_MODULES = [
    "attnkit.app.demo",
    "attnkit.app.translation.commands",
    "attnkit.app.detection.commands",
    "attnkit.app.visualize.commands",
    "attnkit.app.interop.commands",
    "attnkit.app.serve.commands",
    "attnkit.app.export.commands",
]


def load_commands() -> typer.Typer:
    for module in COMMAND_MODULES:
        importlib.import_module(module)
    return app


def main() -> None:
    load_commands()(prog_name="attnkit")


if __name__ == "__main__":
    main()
