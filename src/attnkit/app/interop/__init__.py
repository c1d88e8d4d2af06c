"""Interoperability with the models the world already trained: facebookresearch/detr checkpoints,
Hugging Face DETR and MarianMT folders in, Hugging Face folders out. Nothing here downloads.

  detr_import.py    official DETR `.pth` or a DetrForObjectDetection folder -> a detection run folder
  marian_import.py  a MarianMTModel folder (opus-mt) -> a translation run folder
  hf_export.py      an attnkit run folder -> a folder `transformers` loads
  weights_files.py  reading weights safely (never unpickling) and loading them all or nothing
"""
