"""`rembert-count-params` from a checkout: runs `rembert_t5x.tools.count_params`.

After `pip install` the same tool is the console script `rembert-count-params`
(and `python -m rembert_t5x.tools.count_params`); see its module docstring for the flags.
"""

from rembert_t5x.tools import count_params

if __name__ == "__main__":
  count_params.main()
