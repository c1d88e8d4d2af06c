"""The `attnkit` command line. Each subsystem adds its commands to the groups defined here.

Command modules are imported by `main()`: the commands that work on runs of any kind (COMMAND_MODULES),
and each registered task's own (`TaskKind.commands`, `attnkit.app.tasks`).
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(name="attnkit", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Attention models end to end: the Transformer for translation, DETR for detection.")
train_app = typer.Typer(no_args_is_help=True, help="Train a model; writes a run folder.")
eval_app = typer.Typer(no_args_is_help=True, help="Evaluate a run folder on a dataset.")
data_app = typer.Typer(no_args_is_help=True, help="Write a built-in dataset; check or convert a dataset folder.")
app.add_typer(train_app, name="train")
app.add_typer(eval_app, name="eval")
app.add_typer(data_app, name="data")

COMMAND_MODULES = [
    "attnkit.app.demo",
    "attnkit.app.visualize.commands",
    "attnkit.app.interop.commands",
    "attnkit.app.serve.commands",
    "attnkit.app.export.commands",
    "attnkit.app.export.ctranslate2_commands",
    "attnkit.app.detection.data_commands",
    "attnkit.app.translation.data_commands",
]


def load_commands() -> typer.Typer:
    """The app with every command added (importing a command module adds its commands)."""
    from attnkit.app.tasks import kinds

    for module in [kind.commands for kind in kinds().values()] + COMMAND_MODULES:
        importlib.import_module(module)
    return app


def main() -> None:
    load_commands()(prog_name="attnkit")


if __name__ == "__main__":
    main()
