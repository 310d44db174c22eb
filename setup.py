"""Package layout; the metadata is in pyproject.toml.

The layout needs code: gin_configs/ stays at the top level (T5X-style include
paths such as 'gin_configs/models/tiny.gin' are relative to the repository
root) and ships inside the package as `rembert_t5x/gin_configs`, so a regular
`pip install .` carries the gin files (`python -m rembert_t5x.gin_path` finds
them). setuptools wants every folder of package data listed as a package;
listing them here from the tree means a new gin folder cannot be left out
(and `find_packages`, a new Python subpackage).
"""

import pathlib

import setuptools

GIN_DIR = pathlib.Path(__file__).resolve().parent / "gin_configs"
GIN_PACKAGES = ["rembert_t5x.gin_configs"] + [
    "rembert_t5x.gin_configs." + ".".join(d.relative_to(GIN_DIR).parts)
    for d in sorted(GIN_DIR.rglob("*")) if d.is_dir()
    and d.name != "__pycache__"]

setuptools.setup(
    # Every package under rembert_t5x/, found: a new subpackage cannot be
    # left out of a regular install.
    packages=(setuptools.find_packages(include=["rembert_t5x",
                                                "rembert_t5x.*"])
              + ["rembert_tasks"] + GIN_PACKAGES),
    # `tasks/` installs under a unique import name so it cannot collide with
    # other packages called `tasks`; subpackages of rembert_t5x.gin_configs
    # follow their parent's mapping.
    package_dir={"rembert_t5x": "rembert_t5x", "rembert_tasks": "tasks",
                 "rembert_t5x.gin_configs": "gin_configs"},
    # The paper's reference numbers (rembert_t5x/experiments/paper_reference.py).
    package_data={**{p: ["*.gin"] for p in GIN_PACKAGES},
                  "rembert_t5x.experiments": ["paper_results/*.json"]},
)
