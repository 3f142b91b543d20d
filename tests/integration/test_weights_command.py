"""The weights command (`python -m vlp_jax.weights`, cli/weights_command.py) over the library
(vlp_jax/interchange.py): the command and its flags are checked, a bad request exits 2 with its message on stderr, and
what was written is printed. The conversions themselves are tested through the library (tests/parity/test_weights.py,
test_siglip.py)."""
import json
import os

import jax
import numpy as np
import pytest
from safetensors.numpy import save_file

from vlp_jax import interchange, models
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.cli import weights_command
from vlp_jax.interchange import read_state_dict, save_checkpoint


def test_cli_commands_and_their_flags_are_checked(tmp_path, capsys):
  """absl flags with a command first: an unknown or missing command, and a flag of the other command, exit 2."""
  output = tmp_path / 'x'
  assert weights_command.main(['frobnicate', '--format=open_clip', f'--output={output}']) == 2
  assert "unknown command 'frobnicate'; valid choices: ['import', 'export']" in capsys.readouterr().err
  assert weights_command.main(['--format=open_clip', f'--checkpoint={tmp_path}', f'--output={output}']) == 2
  assert "expected one command (none was given); valid choices: ['import', 'export']" in capsys.readouterr().err
  assert weights_command.main(['export', '--format=open_clip', '--model=ViT-B-32', f'--checkpoint={tmp_path}',
                               f'--output={output}']) == 2
  assert 'export does not take --model' in capsys.readouterr().err
  assert weights_command.main(['import', '--format=open_clip', '--model=ViT-B-32', '--input=x', '--output=y',
                               '--ema']) == 2
  assert 'import does not take --ema' in capsys.readouterr().err
  assert weights_command.main(['import', '--format=open_clip', f'--output={output}']) == 2
  assert 'import needs --input (it takes --format, --input, --output, --model)' in capsys.readouterr().err
  assert weights_command.main(['import', '--format=open_clip', f'--input={tmp_path}', f'--output={output}']) == 2
  assert 'import --format=open_clip needs --model' in capsys.readouterr().err
  assert weights_command.main(['export', '--format=openai', f'--checkpoint={tmp_path}', f'--output={output}']) == 2
  assert ("export --format=openai is not valid; valid choices: ['open_clip', 'hf', 'big_vision']"
          in capsys.readouterr().err)
  assert weights_command.main(['import', '--formats=hf']) == 2  # absl's own flag errors are bad requests too
  assert "Unknown command line flag 'formats'" in capsys.readouterr().err
  assert weights_command.main(['export', '--format=hf', f'--checkpoint={tmp_path / "none"}', f'--output={output}']) == 2
  assert 'no checkpoint at' in capsys.readouterr().err
  assert not output.exists()


def test_an_unknown_model_exits_2_naming_it(tmp_path, capsys):
  source = tmp_path / 'w.safetensors'
  save_file({'logit_scale': np.zeros((), np.float32)}, str(source))
  assert weights_command.main(['import', '--format=open_clip', '--model=ViT-Q-7', f'--input={source}',
                               f'--output={tmp_path / "x"}']) == 2
  assert 'ViT-Q-7' in capsys.readouterr().err
  assert not (tmp_path / 'x').exists()


@pytest.mark.slow
def test_export_then_import_prints_what_it_wrote(micro, tmp_path, capsys, monkeypatch):
  # The micro architecture as a named preset, so that `import --model=micro` can rebuild it.
  spec = micro.model.to_dict()
  monkeypatch.setitem(models.PRESETS, 'micro', {k: spec[k] for k in ('embed_dim', 'vision', 'text', 'act')})
  params, state = models.init_variables(models.build_model(micro.model), jax.random.key(0))
  checkpoint = save_checkpoint(str(tmp_path / 'ckpt'), jax.tree.map(np.asarray, params), state, micro)
  exported, imported = tmp_path / 'micro.safetensors', tmp_path / 'imported'
  assert weights_command.main(['export', '--format=open_clip', f'--checkpoint={checkpoint}',
                               f'--output={exported}']) == 0
  assert capsys.readouterr().out.startswith(f'Wrote {exported}\nWrote {tmp_path / "micro.json"}, its open_clip')
  assert weights_command.main(['import', '--format=open_clip', '--model=micro', f'--input={exported}',
                               f'--output={imported}']) == 0
  assert capsys.readouterr().out == f'Wrote {imported}\n'
  jax.tree.map(np.testing.assert_array_equal, load_variables(str(imported))[0], jax.tree.map(np.asarray, params))
  # A checkpoint trained without an EMA of the weights has none to export: a bad request, nothing written.
  assert weights_command.main(['export', '--format=open_clip', f'--checkpoint={checkpoint}',
                               f'--output={tmp_path / "e.safetensors"}', '--ema']) == 2
  assert 'holds no EMA' in capsys.readouterr().err and not (tmp_path / 'e.safetensors').exists()


def _zero_checkpoint(path, config):
  """A checkpoint of `config`'s model with every weight 0: no model init to compile, for tests of files only."""
  shapes = jax.eval_shape(lambda: models.init_variables(models.build_model(config.model), jax.random.key(0)))
  params, state = jax.tree.map(lambda leaf: np.zeros(leaf.shape, np.float32), shapes)
  return save_checkpoint(str(path), params, state, config)


def test_export_replaces_an_output_only_with_overwrite_and_loses_nothing_on_failure(micro, tmp_path, capsys,
                                                                                   monkeypatch):
  checkpoint = _zero_checkpoint(tmp_path / 'ckpt', micro)
  folder, weights_file = tmp_path / 'hf', tmp_path / 'oc.safetensors'
  for fmt, output in (('hf', folder), ('open_clip', weights_file)):
    assert weights_command.main(['export', f'--format={fmt}', f'--checkpoint={checkpoint}', f'--output={output}']) == 0
  (folder / 'mine.txt').write_text('kept')
  weights_file.write_bytes(b'kept')
  for fmt, output in (('hf', folder), ('open_clip', weights_file)):
    assert weights_command.main(['export', f'--format={fmt}', f'--checkpoint={checkpoint}', f'--output={output}']) == 2
    assert f'{output} exists; pass --overwrite to replace it' in capsys.readouterr().err
  # A failure while writing (here the weights) leaves the old export as it was, and no temporary files.
  monkeypatch.setattr(interchange, 'save_file', _fail_to_write)
  for fmt, output in (('hf', folder), ('open_clip', weights_file)):
    with pytest.raises(OSError, match='No space left'):
      weights_command.main(['export', f'--format={fmt}', f'--checkpoint={checkpoint}', f'--output={output}',
                            '--overwrite'])
  assert (folder / 'mine.txt').read_text() == 'kept' and weights_file.read_bytes() == b'kept'
  assert sorted(os.listdir(tmp_path)) == ['ckpt', 'hf', 'oc.json', 'oc.safetensors']
  monkeypatch.undo()
  for fmt, output in (('hf', folder), ('open_clip', weights_file)):
    assert weights_command.main(['export', f'--format={fmt}', f'--checkpoint={checkpoint}', f'--output={output}',
                                 '--overwrite']) == 0
  assert not (folder / 'mine.txt').exists() and (folder / 'model.safetensors').is_file()
  assert read_state_dict(str(weights_file))  # the weights again
  assert sorted(os.listdir(tmp_path)) == ['ckpt', 'hf', 'oc.json', 'oc.safetensors']


def _fail_to_write(*args, **kwargs):
  raise OSError('No space left on device')


def test_open_clip_export_prints_its_model_config_and_needs_a_safetensors_name(micro, tmp_path, capsys):
  checkpoint = _zero_checkpoint(tmp_path / 'ckpt', micro)
  assert weights_command.main(['export', '--format=open_clip', f'--checkpoint={checkpoint}',
                               f'--output={tmp_path / "micro.pt"}']) == 2
  assert 'must end in .safetensors' in capsys.readouterr().err
  output = tmp_path / 'micro.safetensors'
  assert weights_command.main(['export', '--format=open_clip', f'--checkpoint={checkpoint}', f'--output={output}']) == 0
  config = json.loads((tmp_path / 'micro.json').read_text())
  assert config['embed_dim'] == micro.model.embed_dim
  assert config['vision_cfg']['patch_size'] == micro.model.vision.patch_size
  out = capsys.readouterr().out
  assert f'Wrote {output}\n' in out and f"create_model_and_transforms('micro', pretrained='{output}')" in out
