"""Task lookup and the checks run before a job reads any data."""

import pytest
import seqio

from rembert_t5x.common import errors
from rembert_t5x.data import inputs


def test_an_unprepared_tfds_dataset_is_one_error_not_a_download(tmp_path):
  name = "inputs_test_unprepared_xnli"
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(
      name, seqio.TfdsDataSource(tfds_name="xnli:1.1.0",
                                 tfds_data_dir=str(tmp_path)),
      output_features={})
  try:
    with pytest.raises(errors.UserError) as e:
      inputs.check_tfds_prepared(name)
  finally:
    seqio.TaskRegistry.remove(name)
  message = str(e.value)
  assert message.startswith(
      f"task {name}: TFDS dataset xnli:1.1.0 is not prepared in {tmp_path}")
  assert "REMBERT_XTREME_DIR" in message


def test_unknown_task_lists_registered_names():
  with pytest.raises(errors.UserError, match="unknown task or mixture 'nope'"):
    inputs.get_task_or_mixture("nope")
