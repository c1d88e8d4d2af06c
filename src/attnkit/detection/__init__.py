"""Object detection as set prediction: DETR (Carion et al. 2020) on any COCO-format dataset.

One paper concept per module: `data` (COCO reader), `shapes` (built-in dataset), `transforms`,
`backbone`, `detr`, `hungarian_matcher`, `set_criterion`, `postprocess`, `evaluate` (COCO AP),
`task` (training), `detector` (`Detector.from_run`), `commands` (CLI); `architectures` lists the
models `--arch` can name.
"""
