"""Paper experiments on top of the runner: sweeps, analyses, the demo, baselines, tables and figures, reference numbers, the XTREME road, XTREME submission folders (`submission/`)."""
