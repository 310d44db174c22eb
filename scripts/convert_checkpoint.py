"""`rembert-convert` from a checkout: runs `rembert_t5x.convert.convert_checkpoint`.

After `pip install` the same tool is the console script `rembert-convert`
(and `python -m rembert_t5x.convert.convert_checkpoint`); see its module docstring for the flags.
"""

from rembert_t5x.convert import convert_checkpoint

if __name__ == "__main__":
  convert_checkpoint.main()
