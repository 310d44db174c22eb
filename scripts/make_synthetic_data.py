"""`rembert-make-synthetic-data` from a checkout: runs `rembert_t5x.tools.make_synthetic_data`.

After `pip install` the same tool is the console script `rembert-make-synthetic-data`
(and `python -m rembert_t5x.tools.make_synthetic_data`); see its module docstring for the flags.
"""

from rembert_t5x.tools import make_synthetic_data

if __name__ == "__main__":
  make_synthetic_data.main()
