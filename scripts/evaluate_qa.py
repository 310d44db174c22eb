"""`rembert-evaluate-qa` from a checkout: runs `rembert_t5x.tools.evaluate_qa`.

After `pip install` the same tool is the console script `rembert-evaluate-qa`
(and `python -m rembert_t5x.tools.evaluate_qa`); see its module docstring for the flags.
"""

from rembert_t5x.tools import evaluate_qa

if __name__ == "__main__":
  evaluate_qa.main()
