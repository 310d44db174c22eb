"""Paper experiments on top of the runner: sweeps, analyses, the demo, baselines, uncertainty, reference numbers, the XTREME road, XTREME submission folders (`submission/`)."""
