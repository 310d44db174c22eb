r"""Where `gin_configs/` lives: the directory to pass as --gin_search_paths.

  python -m t5x.train --gin_search_paths=$(python -m rembert_t5x.gin_path) \
    --gin_file=gin_configs/models/tiny.gin \
    --gin_file=gin_configs/runs/pretrain_mlm.gin ...

Our gin files include each other by paths relative to a search root
('gin_configs/architectures/rembert.gin'), T5X's convention. In a checkout
(or an editable install) that root is the repository root, so
`--gin_search_paths=.` works from there; a regular `pip install .` ships a
copy of gin_configs/ inside the package (pyproject.toml maps it to
`rembert_t5x/gin_configs`), and the root is the installed package directory.
This module prints whichever of the two holds the gin files. It imports
nothing heavy, so `$(python -m rembert_t5x.gin_path)` costs ~50 ms.
"""

import pathlib
from rembert_t5x.common import cli
from typing import Optional

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
# A file every complete gin_configs/ has (every model file includes it).
_MARKER = pathlib.Path("gin_configs", "architectures", "rembert.gin")


def find_search_root() -> Optional[pathlib.Path]:
  """The directory holding gin_configs/, or None if there is none.

  The installed copy is looked for first: inside site-packages the parent
  directory is shared with every other package.
  """
  for root in (_PACKAGE_DIR, _PACKAGE_DIR.parent):
    if (root / _MARKER).is_file():
      return root
  return None


def search_root() -> pathlib.Path:
  """Like `find_search_root`, but a missing gin_configs/ is an error."""
  root = find_search_root()
  if root is None:
    raise FileNotFoundError(
        f"no gin_configs/ in {_PACKAGE_DIR} (installed copy) or in "
        f"{_PACKAGE_DIR.parent} (checkout): reinstall rembert-t5x with "
        "pip >= 21.3 from a checkout that has gin_configs/")
  return root


def main(argv=None) -> None:
  # No flags of its own; absl's parser still answers --help and refuses
  # anything else with one line (exit 2), as every entry point does.
  cli.run_main(lambda _: print(search_root()), argv, define=lambda fv: None,
               doc=__doc__, also=(FileNotFoundError,))


if __name__ == "__main__":
  main()
