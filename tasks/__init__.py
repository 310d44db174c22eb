"""SeqIO task and mixture registration for rembert-t5x (installed as `rembert_tasks`).

Importing this package registers every task family (one module each):
MLM pre-training (`pretraining`), XNLI, PAWS-X, PAN-X, UD-POS, the QA tasks
(XQuAD, MLQA, TyDiQA-GoldP) and retrieval (Tatoeba, BUCC). T5X runs use
`--gin.MIXTURE_OR_TASK_MODULE=rembert_tasks`. The synthetic tasks of the
offline demo live in `rembert_tasks.synthetic` and are imported on demand
(importing it registers them; their data is made when a task is first read).
"""

from rembert_tasks import panx  # pylint: disable=unused-import
from rembert_tasks import pawsx  # pylint: disable=unused-import
from rembert_tasks import pretraining  # pylint: disable=unused-import
from rembert_tasks import qa  # pylint: disable=unused-import
from rembert_tasks import retrieval  # pylint: disable=unused-import
from rembert_tasks import udpos  # pylint: disable=unused-import
from rembert_tasks import xnli  # pylint: disable=unused-import
