"""Text on the host: the tokenizers, one file each (clip_bpe.py, siglip_sentencepiece.py, gemma_sentencepiece.py,
what they share in tokenizer_common.py, the choice by config in tokenizer_factory.py), ZeroVL's text augmentation
(text_augment.py), COSMOS's text crops (text_crops.py) and LocCa's decoder tasks for SigLIP 2 (locca_tasks.py)."""
