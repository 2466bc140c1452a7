"""``dlperf data ...``: data helpers (a synthetic ImageFolder of JPEGs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlperf.cli import common
from dlperf.cli.common import guard
from dlperf.errors import ConfigError
from dlperf.outputs import shown_path

data_app = typer.Typer(no_args_is_help=True, help="Data helpers (a synthetic ImageFolder of JPEGs).")


@data_app.command("make-imagefolder")
def make_imagefolder_cmd(
    folder: Annotated[Path, typer.Argument(help="Folder to write (one sub-folder per class).")],
    images: Annotated[int, typer.Option(help="Number of JPEG images.")] = 1000,
    classes: Annotated[int, typer.Option(help="Number of classes (sub-folders).")] = 10,
    size: Annotated[int, typer.Option(help="Image side in pixels (square images; at most 8192, the largest image the ImageFolder reader decodes).")] = 256,
    quality: Annotated[int, typer.Option(help="JPEG quality (Pillow, 1..95).")] = 90,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Write a synthetic ImageFolder of JPEGs (for `--data imagefolder:FOLDER`; no ImageNet needed)."""
    def body() -> None:
        from dlperf.data.imagefolder import make_imagefolder

        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{str(folder)!r} is a file; give a folder for the ImageFolder")
        info = make_imagefolder(folder, images=images, classes=classes, size=size,
                                quality=quality, seed=seed)
        common.out.print(f"wrote {info['images']} JPEGs ({info['bytes'] / 2**20:.1f} MiB) of "
                         f"{size}x{size} in {classes} classes to {shown_path(folder)}; use --data "
                         f"imagefolder:{shown_path(folder)}", highlight=False)

    guard(body)
