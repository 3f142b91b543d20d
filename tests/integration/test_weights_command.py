"""The weights command (`python -m vlp_jax.weights`, cli/weights.py) over the library (vlp_jax/interchange.py): the
command and its flags are checked, a bad request exits 2 with its message on stderr, and what was written is printed.
The conversions themselves are tested through the library (tests/parity/test_weights.py, test_siglip.py)."""
import jax
import numpy as np
import pytest
from safetensors.numpy import save_file

from vlp_jax import models
from vlp_jax.checkpoint_files import load_variables
from vlp_jax.cli import weights
from vlp_jax.interchange import save_checkpoint


def test_cli_commands_and_their_flags_are_checked(tmp_path, capsys):
  """absl flags with a command first: an unknown or missing command, and a flag of the other command, exit 2."""
  output = tmp_path / 'x'
  assert weights.main(['frobnicate', '--format=open_clip', f'--output={output}']) == 2
  assert "unknown command 'frobnicate'; valid choices: ['import', 'export']" in capsys.readouterr().err
  assert weights.main(['--format=open_clip', f'--checkpoint={tmp_path}', f'--output={output}']) == 2
  assert "expected one command (none was given); valid choices: ['import', 'export']" in capsys.readouterr().err
  assert weights.main(['export', '--format=open_clip', '--model=ViT-B-32', f'--checkpoint={tmp_path}',
                       f'--output={output}']) == 2
  assert 'export does not take --model' in capsys.readouterr().err
  assert weights.main(['import', '--format=open_clip', '--model=ViT-B-32', '--input=x', '--output=y', '--ema']) == 2
  assert 'import does not take --ema' in capsys.readouterr().err
  assert weights.main(['import', '--format=open_clip', f'--output={output}']) == 2
  assert 'import needs --input (it takes --format, --input, --output, --model)' in capsys.readouterr().err
  assert weights.main(['import', '--format=open_clip', f'--input={tmp_path}', f'--output={output}']) == 2
  assert 'import --format=open_clip needs --model' in capsys.readouterr().err
  assert weights.main(['export', '--format=openai', f'--checkpoint={tmp_path}', f'--output={output}']) == 2
  assert "export --format=openai is not valid; valid choices: ['open_clip', 'hf']" in capsys.readouterr().err
  assert weights.main(['import', '--formats=hf']) == 2  # absl's own flag errors are bad requests too
  assert "Unknown command line flag 'formats'" in capsys.readouterr().err
  assert weights.main(['export', '--format=hf', f'--checkpoint={tmp_path / "none"}', f'--output={output}']) == 2
  assert 'no checkpoint at' in capsys.readouterr().err
  assert not output.exists()


def test_an_unknown_model_exits_2_naming_it(tmp_path, capsys):
  source = tmp_path / 'w.safetensors'
  save_file({'logit_scale': np.zeros((), np.float32)}, str(source))
  assert weights.main(['import', '--format=open_clip', '--model=ViT-Q-7', f'--input={source}',
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
  assert weights.main(['export', '--format=open_clip', f'--checkpoint={checkpoint}', f'--output={exported}']) == 0
  assert capsys.readouterr().out == f'Wrote {exported}\n'
  assert weights.main(['import', '--format=open_clip', '--model=micro', f'--input={exported}',
                       f'--output={imported}']) == 0
  assert capsys.readouterr().out == f'Wrote {imported}\n'
  jax.tree.map(np.testing.assert_array_equal, load_variables(str(imported))[0], jax.tree.map(np.asarray, params))
  # A checkpoint trained without an EMA of the weights has none to export: a bad request, nothing written.
  assert weights.main(['export', '--format=open_clip', f'--checkpoint={checkpoint}', f'--output={tmp_path / "e"}',
                       '--ema']) == 2
  assert 'holds no EMA' in capsys.readouterr().err and not (tmp_path / 'e').exists()
