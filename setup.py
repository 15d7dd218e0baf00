"""A wheel of the project carries what the library's standalone page is made of (pyproject.toml holds
everything else): the templates, the page's styles and scripts, and d3-zoom's files from
node_modules (`npm ci` first, as scripts/setup does), copied into the wheel as app/_assets/, where
app/templating.py finds them when there is no source tree beside the package."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# (folder of the source tree, the files of it the page uses)
ASSETS = (
    ("templates", ("*.html",)),
    ("static", ("*.css", "*.js", "*.svg")),
    ("node_modules", ("d3-*/dist/d3-*.min.js", "d3-*/LICENSE")),
)


class BuildWithAssets(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the source tree itself
            return
        target = Path(self.build_lib) / "app" / "_assets"
        for folder, patterns in ASSETS:
            for pattern in patterns:
                for source in sorted((ROOT / folder).glob(pattern)):
                    copy = target / folder / source.relative_to(ROOT / folder)
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, copy)


setup(cmdclass={"build_py": BuildWithAssets})
