"""Scanned transformer blocks (`model.scan_layers`) and remat policies (`model.remat_policy`): the same values and
gradients as the unrolled stack on the same weights, a program that does not grow with depth, parameter layouts that
convert both ways (optimizer states too), weight decay and FSDP that ignore the layer axis, and checkpoints that
evaluate, export and initialise whichever layout wrote them."""
import copy
import os

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from support import compiled_step, experiment, jit_init, objective_batch, random_batches
from vlp_jax import errors, models, parallel
from vlp_jax import interchange as weights
from vlp_jax.config import ConfigError, base_config, validate
from vlp_jax.models.transformer import BlockStack, REMAT_POLICIES, in_layout, stacked_layout, unstacked_layout
from vlp_jax import accumulation
from vlp_jax.training import optim
from vlp_jax.training.checkpoint import load_pretrained
from vlp_jax.training.loop import check_resume_layout
from vlp_jax.training.flops import program_cost, traced_flops


def _tiny(scan=False, remat=False, policy='nothing_saveable', layers=3):
  """The tiny preset at a quarter width: compiles in a few seconds."""
  config = models.preset('tiny', scan_layers=scan, remat=remat, remat_policy=policy, embed_dim=32)
  config.vision.update(layers=layers, width=32, heads=2)
  config.text.update(layers=layers, width=32, heads=2, context_length=16)
  return config


_HOST_PARAMS = {}  # (model config, seed) -> host parameters: the tests here initialise the same models again and again


def _host_params(config, seed=0):
  """The model's initial parameters on the host (a copy: callers may change them), one jitted init per model."""
  key = (config.to_json_best_effort(sort_keys=True), seed)
  if key not in _HOST_PARAMS:
    model = models.build_model(config)
    params, _ = jit_init(lambda k: models.init_variables(model, k))(jax.random.key(seed))  # eager init is slower
    _HOST_PARAMS[key] = jax.tree.map(np.asarray, params)
  return jax.tree.map(np.copy, _HOST_PARAMS[key])


def _inputs(config, batch=3):
  images = jax.random.normal(jax.random.key(1), (batch, 32, 32, 3))
  tokens = np.array(jax.random.randint(jax.random.key(2), (batch, config.text.context_length), 1, 400))
  tokens[:, 7] = 49407  # an EOT inside the context, as a tokenizer puts it
  return images, tokens


def _towers(model, params, images, tokens, with_tokens):
  variables = {'params': params}
  return (model.apply(variables, images, False, with_tokens, method=model.encode_image),
          model.apply(variables, tokens, with_tokens, method=model.encode_text))


@pytest.mark.slow
def test_scanned_parameters_are_the_unrolled_blocks_stacked():
  params = _host_params(_tiny())
  stacked = stacked_layout(params)
  for tower in (stacked['transformer'], stacked['visual']['transformer']):
    assert sorted(tower) == ['resblocks', 'resblocks_2']  # blocks 0-1 scanned, the last its own
    chex.assert_shape(tower['resblocks']['attn']['in_proj']['kernel'], (2, 32, 96))
  np.testing.assert_array_equal(stacked['transformer']['resblocks']['mlp']['c_fc']['kernel'][1],
                                params['transformer']['resblocks_1']['mlp']['c_fc']['kernel'])
  # The tree a scanned model initialises has exactly this structure and these shapes.
  scanned = _host_params(_tiny(scan=True))
  chex.assert_trees_all_equal_shapes_and_dtypes(scanned, stacked)


@pytest.mark.slow
def test_scanned_towers_equal_the_unrolled_towers(with_tokens=True):
  # (the pooled path, with_tokens=False, is compared in the gradient tests below)
  unrolled_config, scanned_config = _tiny(), _tiny(scan=True)
  params = _host_params(unrolled_config)
  images, tokens = _inputs(unrolled_config)
  want = _towers(models.build_model(unrolled_config), params, images, tokens, with_tokens)
  got = _towers(models.build_model(scanned_config), stacked_layout(params), images, tokens, with_tokens)
  chex.assert_trees_all_close(got, want, rtol=2e-5, atol=2e-5)


def _text_grads(config, params, tokens):
  """The gradient of a sum of sin of the text tower's pooled embeddings, on the host."""
  model = models.build_model(config)
  loss = lambda q: jnp.sum(jnp.sin(model.apply({'params': q}, tokens, False, method=model.encode_text)['embed']))
  return jax.tree.map(np.asarray, jax.jit(jax.grad(loss))(params))


@pytest.fixture(scope='module')
def unrolled_text_grads():
  """(unrolled parameters, tokens, their text gradient in the scanned layout): one reference for every policy."""
  unrolled_config = _tiny()
  params = _host_params(unrolled_config)
  _, tokens = _inputs(unrolled_config)
  return params, tokens, stacked_layout(_text_grads(unrolled_config, params, tokens))


@pytest.mark.slow
@pytest.mark.parametrize('policy', [p for p in REMAT_POLICIES.names() if p != 'nothing_saveable'])  # that one:
def test_every_remat_policy_keeps_the_gradients(policy, unrolled_text_grads):  # the FSDP test below
  """Whatever a policy saves, the backward pass recomputes the rest to the same gradient (the text tower's pooled
  path: scanned blocks, then the last block's single row)."""
  params, tokens, want = unrolled_text_grads
  got = _text_grads(_tiny(scan=True, remat=True, policy=policy), stacked_layout(params), tokens)
  _close_at_scale(got, want, rtol=1e-5)


def _close_at_scale(got, want, rtol):
  """Each leaf within rtol of its largest entry (entries near zero round differently between programs)."""
  for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
    scale = max(float(np.abs(w).max()), 1e-30)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=jax.tree_util.keystr(path))


@pytest.mark.slow
def test_scanned_training_gradients_equal_the_unrolled_ones_on_an_fsdp_mesh(micro):
  micro.model.vision.layers = micro.model.text.layers = 3
  micro.mesh.fsdp = 2
  micro.mesh.fsdp_min_size = 1  # shard even the micro model's matrices, so the layer axis could be picked
  unrolled = experiment(micro).objective
  params, state = unrolled.init_variables(jax.random.key(0))
  micro.model.update(scan_layers=True, remat=True)
  scanned = experiment(micro).objective
  batch, mesh = objective_batch(micro, size=16), parallel.make_mesh(fsdp=2)
  grad_fn = accumulation.loss_and_grad_fn('none', 1)
  results = []
  for objective, p in ((unrolled, params), (scanned, stacked_layout(jax.tree.map(np.asarray, params)))):
    shardings = parallel.tree_shardings(p, mesh, min_size=1)
    with jax.set_mesh(mesh):
      p = jax.device_put(p, shardings)
      results.append(parallel.to_host(jax.jit(lambda q, s, b: grad_fn(objective, q, s, b, jax.random.key(3),
                                                                       jnp.int32(4)))(
          p, state, parallel.global_batch(batch, mesh))))
  (loss, _, _, grads), (s_loss, _, _, s_grads) = results
  np.testing.assert_allclose(s_loss, loss, rtol=1e-6)
  _close_at_scale(s_grads, stacked_layout(grads), rtol=1e-5)


def _equation_count(config):
  model = models.build_model(config)
  params = jax.eval_shape(lambda: models.init_variables(model, jax.random.key(0))[0])
  tokens = jnp.zeros((2, config.text.context_length), jnp.int32)
  return len(jax.make_jaxpr(lambda p: model.apply({'params': p}, tokens, method=model.encode_text))(params).eqns)


def test_the_scanned_program_does_not_grow_with_depth():
  assert _equation_count(_tiny(scan=True, layers=3)) == _equation_count(_tiny(scan=True, layers=8))
  assert _equation_count(_tiny(layers=3)) < _equation_count(_tiny(layers=8))  # unrolled: it does (the test can fail)


def test_layouts_convert_both_ways_in_parameters_and_optimizer_states():
  params = _host_params(_tiny())
  tx = optim.make_optimizer(base_config().optim, total_steps=10)
  opt_state = jax.tree.map(np.asarray, tx.init(params))
  tree = {'params': params, 'opt_state': opt_state}
  stacked = stacked_layout(tree)
  chex.assert_trees_all_equal(unstacked_layout(stacked), tree)
  chex.assert_trees_all_equal(stacked_layout(stacked), stacked)  # already stacked: unchanged
  adam = next(s for s in jax.tree.leaves(stacked['opt_state'], is_leaf=lambda s: hasattr(s, 'mu')) if hasattr(s, 'mu'))
  assert 'resblocks' in adam.mu['transformer']  # the moments follow the parameters' layout
  chex.assert_trees_all_equal(in_layout(params, BlockStack(scan=True)), stacked_layout(params))
  chex.assert_trees_all_equal(in_layout(stacked_layout(params), BlockStack()), params)


def test_weight_decay_and_fsdp_ignore_the_layer_axis():
  params = _host_params(_tiny())
  stacked = stacked_layout(params)
  # LayerNorm gains stacked to [layers, w] are still not decayed; kernels stacked to 3 dims still are.
  chex.assert_trees_all_equal(optim.weight_decay_mask(stacked), stacked_layout(optim.weight_decay_mask(params)))
  assert not optim.weight_decay_mask(stacked)['transformer']['resblocks']['ln_1']['scale']
  # The layer axis is never the sharded one, even where it is the largest axis the fsdp size divides.
  assert parallel.param_spec((3, 128, 384), 3, 1, layer_axes=1) == jax.sharding.PartitionSpec(None, None, 'fsdp')
  assert parallel.param_spec((3, 7, 5), 3, 1) == jax.sharding.PartitionSpec('fsdp', None, None)
  assert parallel.param_spec((3, 7, 5), 3, 1, layer_axes=1) == jax.sharding.PartitionSpec()
  mesh = parallel.make_mesh(fsdp=8)
  specs = parallel.tree_shardings(stacked, mesh, min_size=1)
  for path, sharding in jax.tree_util.tree_leaves_with_path(specs['transformer']['resblocks']):
    assert sharding.spec[:1] in ((), (None,)), jax.tree_util.keystr(path)


def test_an_unknown_remat_policy_names_the_key_and_the_choices():
  config = base_config()
  config.model.remat_policy = 'dots'
  with pytest.raises(ConfigError, match=r"model\.remat_policy.*dots_saveable"):
    validate(config)


def _write(path, params, model_config):
  config = base_config()
  config.model = model_config
  return weights.save_checkpoint(path, params, {}, config)


@pytest.mark.slow
def test_checkpoints_of_either_layout_export_initialise_and_refuse_a_mismatched_resume(tmp_path):
  unrolled_config, scanned_config = _tiny(), _tiny(scan=True)
  params = _host_params(unrolled_config, seed=5)
  unrolled_dir = _write(str(tmp_path / 'unrolled'), params, unrolled_config)
  scanned_dir = _write(str(tmp_path / 'scanned'), stacked_layout(params), scanned_config)
  # Export names every block as OpenAI does, whichever layout the checkpoint holds.
  a = weights.export_weights('open_clip', unrolled_dir, str(tmp_path / 'a.safetensors'))
  b = weights.export_weights('open_clip', scanned_dir, str(tmp_path / 'b.safetensors'))
  want, got = weights.read_state_dict(a), weights.read_state_dict(b)
  assert sorted(got) == sorted(want) and 'transformer.resblocks.2.attn.in_proj_weight' in got
  chex.assert_trees_all_equal(got, want)
  # init.checkpoint (continue pre-training) converts to the configured layout, both ways.
  fresh = _host_params(scanned_config, seed=9)
  loaded, _, missing = load_pretrained(unrolled_dir, fresh, {}, scanned_config)
  assert not missing
  chex.assert_trees_all_equal(loaded, stacked_layout(params))
  loaded, _, _ = load_pretrained(scanned_dir, _host_params(unrolled_config, seed=9), {}, unrolled_config)
  chex.assert_trees_all_equal(loaded, params)
  # Resuming restores the optimizer state as saved: a changed layout is refused by name, not mis-restored.
  check_resume_layout(scanned_dir, scanned_config)
  with pytest.raises(errors.ConfigError, match=r'scan_layers=True'):
    check_resume_layout(scanned_dir, unrolled_config)
  assert os.path.isdir(scanned_dir)


def _zero_state(config):
  """The config's initial train state of zeros on the host: a FLOP count needs the shapes, not the weights (and a
  jitted init of 3-layer towers compiles for 5 CPU s)."""
  return jax.tree.map(lambda leaf: np.zeros(leaf.shape, leaf.dtype), experiment(config).state_shapes)


@pytest.mark.slow
def test_the_flops_of_a_scanned_step_count_every_block(micro):
  """XLA counts a loop body once: the trainer's FLOPs (perf/step_flops, perf/mfu, the methods table's compute) add
  the blocks the layer loop hides, so a scanned step counts what the unrolled one does, on the CPU (XLA's count of
  the compiled programs) and on a GPU (the jaxpr's matmuls, every loop in full)."""
  # 3 layers: the loop (blocks 0-1) hides one block per tower. At batch 16 that is 10% of a device's count, most of
  # which is the AdamW update of the 49k-token embedding (replicated, batch-free); at 128 about 30%.
  micro.model.vision.layers = micro.model.text.layers = 3
  micro.batch_size = 128
  mesh, rng = parallel.make_mesh(), jax.random.key(0)
  batch = parallel.global_batch(random_batches(micro, 1)[0], mesh)
  unrolled_step, state = compiled_step(micro, mesh, _zero_state(micro))
  with jax.set_mesh(mesh):
    unrolled_matmuls = traced_flops(unrolled_step.jitted.trace(state, batch, rng))
  unrolled_step(state, batch, rng)  # compiles (XLA's count of the unrolled program) and donates `state`
  micro.model.scan_layers = True
  scanned = experiment(micro, mesh)
  counted = scanned.compiled_step()  # the trainer's: counts the blocks the layer loop hides (unrolled_flops)
  scanned_state = jax.device_put(_zero_state(micro), scanned.state_shardings)
  with jax.set_mesh(mesh):
    scanned_matmuls = traced_flops(counted.jitted.trace(scanned_state, batch, rng))
  counted(scanned_state, batch, rng)
  # XLA's own count of the program just compiled (what a step without `unrolled_flops` reports)
  (program,) = counted.compiled.values()
  uncounted = program_cost(program)['flops']
  assert uncounted < 0.8 * unrolled_step.flops  # the loop hides blocks (so the check below can fail)
  np.testing.assert_allclose(counted.flops, unrolled_step.flops, rtol=0.03)
  assert scanned_matmuls == unrolled_matmuls  # the GPU's count (flops.device_flops)


def test_init_checkpoint_with_other_preprocessing_is_refused_naming_the_settings(tmp_path):
  # Issue 61 item 8: weights continue training on the pixels they were trained or imported with; a config whose
  # preprocessing differs (an OpenAI import's torchvision crop against a preset's, SigLIP's square resize) is refused.
  config = _tiny()
  params = _host_params(config)
  imported = copy.deepcopy(config)
  imported.preprocess.update(crop_offset='round', resize='squash')
  checkpoint_dir = _write(str(tmp_path / 'imported'), params, imported)
  with pytest.raises(ValueError, match=r"resize: checkpoint 'squash', config 'shorter_side_crop'; crop_offset: "
                                       r"checkpoint 'round', config 'floor'.*--config.model.preprocess.resize='squash'"):
    load_pretrained(checkpoint_dir, _host_params(config, seed=9), {}, config)
  loaded, _, _ = load_pretrained(checkpoint_dir, _host_params(imported, seed=9), {}, imported)
  chex.assert_trees_all_equal(loaded, params)
