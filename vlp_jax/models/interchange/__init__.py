"""Weight interchange rules: other libraries' state dicts and config.json files <-> our parameter trees and model
configs, as pure functions of arrays and configs (writing checkpoints is vlp_jax/interchange.py's job, the command
is cli/weights_command.py). One job per module:

  files.py             a weight file -> a flat {name: float32 array}, never unpickled; WeightsError
  openai.py            OpenAI / open_clip names <-> (params, model_state), by rule; the preset for a format
  hf.py                transformers' CLIPModel / SiglipModel / Siglip2Model names <-> OpenAI names
  clip_config.py       transformers' CLIPConfig <-> our model config, and every field where a file and a preset differ
  siglip_config.py     transformers' SiglipConfig / Siglip2Config <-> our model config
  open_clip_siglip.py  open_clip's SigLIP names (timm image trunk) <-> OpenAI names
  big_vision.py        big_vision's two-tower `.npz` names (SigLIP, SigLIP 2) <-> OpenAI names
  loader_files.py      the tokenizer, preprocessor and model config files other libraries' loaders read
"""
from vlp_jax.models.interchange.big_vision import (  # noqa: F401
    big_vision_problem, big_vision_stacked, big_vision_to_openai, openai_to_big_vision)
from vlp_jax.models.interchange.clip_config import (  # noqa: F401
    HF_CLIP_DEFAULTS, HF_CONFIG_FIELDS, check_hf_config, hf_config, hf_config_mismatches, hf_input_files,
    hf_matching_presets, read_hf_config)
from vlp_jax.models.interchange.files import WeightsError, read_state_dict  # noqa: F401
from vlp_jax.models.interchange.hf import hf_to_openai, openai_to_hf  # noqa: F401
from vlp_jax.models.interchange.loader_files import (  # noqa: F401
    clip_tokenizer_files, open_clip_config_problem, open_clip_model_config, open_clip_preprocess_arguments,
    naflex_preprocessing_from_hf, preprocessing_from_hf, preprocessor_config, siglip_tokenizer_files)
from vlp_jax.models.interchange.open_clip_siglip import (  # noqa: F401
    open_clip_siglip_to_openai, openai_to_open_clip_siglip)
from vlp_jax.models.interchange.openai import (  # noqa: F401
    expected_variables, model_config_for, openai_to_variables, path_to_torch_key, torch_key_to_path,
    variables_to_openai)
from vlp_jax.models.interchange.siglip_config import (  # noqa: F401
    HF_SIGLIP_DEFAULTS, hf_siglip2_config, hf_siglip_config, siglip2_model_config, siglip2_tokenizer_files,
    siglip_mismatches, siglip_model_config, siglip_tokenizer)
