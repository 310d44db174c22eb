"""`python -m rembert_t5x.experiments.submission`: see `command`."""

from rembert_t5x.experiments.submission import command

if __name__ == "__main__":
  command.main()
