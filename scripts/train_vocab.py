"""`rembert-train-vocab` from a checkout: runs `rembert_t5x.data.train_vocab`.

After `pip install` the same tool is the console script `rembert-train-vocab`
(and `python -m rembert_t5x.data.train_vocab`); see its module docstring for the flags.
"""

from rembert_t5x.data import train_vocab

if __name__ == "__main__":
  train_vocab.main()
