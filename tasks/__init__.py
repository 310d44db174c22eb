"""SeqIO task and mixture registration for rembert-t5x (installed as `rembert_tasks`)."""
